// tools/memfit/cli.h - the memfit command line as a function, so tests and fuzzers share main's path.
//
// Exit codes (ARCHITECTURE.md): 0 done; 1 done, and the answer is "does not fit" / "found a failure";
// 2 bad input or usage, with a one-line reason on stderr and nothing on stdout.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

#include "memfit/core/environment.h"

namespace memfit::cli {

struct Io {
  std::ostream& out;
  std::ostream& err;
  const Environment& env;
  bool stderr_is_terminal = false;  // progress lines only go to a terminal
};

inline constexpr int kExitOk = 0;
inline constexpr int kExitFinding = 1;
inline constexpr int kExitBadInput = 2;

// An error line is cut to this many characters (the reason is always in its first ones).
inline constexpr size_t kMaxErrorChars = 600;

// `args` excludes the program name.
int run(const std::vector<std::string>& args, Io io);

}  // namespace memfit::cli
