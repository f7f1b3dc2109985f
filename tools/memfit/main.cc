// memfit: a thin main over the CLI library (tools/memfit/cli.h).
#include <unistd.h>

#if defined(__GLIBC__)
#include <cstdlib>
#include <fstream>
#include <string>
#endif

#include <iostream>

#include "cli.h"
#include "memfit/core/process_memory.h"

namespace {

#if defined(__GLIBC__)
constexpr const char* kRestarted = "MEMFIT_RESTARTED_WITH_HUGE_PAGES";
constexpr const char* kCallersTunables = "MEMFIT_CALLERS_GLIBC_TUNABLES";

// The environment as the caller gave it: GLIBC_TUNABLES as it was (saved under kCallersTunables when
// there was one), and no marker of the restart.
void restore_callers_environment() {
  unsetenv(kRestarted);
  if (const char* callers = std::getenv(kCallersTunables)) {
    setenv("GLIBC_TUNABLES", callers, 1);
    unsetenv(kCallersTunables);
  } else {
    unsetenv("GLIBC_TUNABLES");
  }
}

// A plan moves its program's instruction arrays (tens to hundreds of MB for a deep model) from pass to pass,
// and the time goes to the kernel's page faults on memory touched for the first time. Where transparent
// huge pages are given on request (the kernel's "madvise" mode, Debian's default), glibc asks for them when
// its tunable glibc.malloc.hugetlb=1 is set at start-up, and tunables are read only then: so memfit starts
// itself again once with it set (a 300-layer ViT plan: 2.5 s -> 1.2 s), then puts the caller's environment
// back, so that nothing memfit runs inherits the setting. If the restart cannot happen, memfit just runs.
void restart_with_huge_pages(char** argv) {
  if (std::getenv(kRestarted) != nullptr) {
    restore_callers_environment();
    return;
  }
  std::ifstream mode_file("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string mode;
  std::getline(mode_file, mode);
  if (mode.find("[madvise]") == std::string::npos) return;  // "always" has them already; "never" gives none
  const char* callers = std::getenv("GLIBC_TUNABLES");
  const std::string existing = callers != nullptr ? callers : "";
  if (existing.find("glibc.malloc.hugetlb") != std::string::npos) return;  // the caller chose
  if (callers != nullptr) setenv(kCallersTunables, existing.c_str(), 1);
  setenv("GLIBC_TUNABLES", (existing.empty() ? "" : existing + ":").append("glibc.malloc.hugetlb=1").c_str(),
         1);
  setenv(kRestarted, "1", 1);
  execv("/proc/self/exe", argv);
  restore_callers_environment();  // not restarted (no /proc): memfit runs as it is
}
#endif

}  // namespace

int main(int argc, char** argv) {
#if defined(__GLIBC__)
  restart_with_huge_pages(argv);
#endif
  memfit::keep_freed_memory_in_heap();
  std::ios::sync_with_stdio(false);
  const memfit::Environment env = memfit::Environment::from_process();
  std::vector<std::string> args(argv + 1, argv + argc);
  memfit::cli::Io io{std::cout, std::cerr, env, ::isatty(STDERR_FILENO) == 1};
  const int code = memfit::cli::run(args, io);
  std::cout.flush();
  return code;
}
