// memfit: a thin main over the CLI library (tools/memfit/cli.h).
#include <unistd.h>

#include <iostream>

#include "cli.h"
#include "memfit/core/process_memory.h"

int main(int argc, char** argv) {
  // Freed memory stays in the heap (no page faults on reuse between passes). memfit once restarted itself
  // with glibc.malloc.hugetlb=1 as well; on the 2-core CI-like machine that later cost more than it gave:
  // 2-MB pages are slow to fault in there (fit on 300 layers 25-27 s with them, 19 s without; the same user
  // time).
  memfit::keep_freed_memory_in_heap();
  std::ios::sync_with_stdio(false);
  const memfit::Environment env = memfit::Environment::from_process();
  std::vector<std::string> args(argv + 1, argv + argc);
  memfit::cli::Io io{std::cout, std::cerr, env, ::isatty(STDERR_FILENO) == 1};
  const int code = memfit::cli::run(args, io);
  std::cout.flush();
  return code;
}
