// memfit: a thin main over the CLI library (tools/memfit/cli.h).
#include <unistd.h>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <iostream>

#include "cli.h"

int main(int argc, char** argv) {
#if defined(__GLIBC__)
  // A plan rebuilds its program's instruction arrays in every pass (tens to hundreds of MB for a deep
  // model). glibc serves each such block with a fresh mmap and unmaps it on free, so every pass pays a page
  // fault per 4 KiB it touches - a third of a 256-layer ViT plan's time. A short-lived CLI keeps its freed
  // memory in the heap instead (glibc still falls back to mmap if the heap cannot grow).
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, -1);
#endif
  std::ios::sync_with_stdio(false);
  const memfit::Environment env = memfit::Environment::from_process();
  std::vector<std::string> args(argv + 1, argv + argc);
  memfit::cli::Io io{std::cout, std::cerr, env, ::isatty(STDERR_FILENO) == 1};
  const int code = memfit::cli::run(args, io);
  std::cout.flush();
  return code;
}
