// Runs the memfit CLI in-process, as main does, and captures its exit code, stdout and stderr.
#pragma once

#include <sstream>
#include <string>
#include <vector>

#include "cli.h"

namespace memfit::testing {

struct CliRun {
  int code;
  std::string out;
  std::string err;
};

inline CliRun run_cli(const std::vector<std::string>& args, const Environment& env = Environment()) {
  std::ostringstream out;
  std::ostringstream err;
  const int code = cli::run(args, cli::Io{out, err, env});
  return {code, out.str(), err.str()};
}

}  // namespace memfit::testing
