// memfit: a thin main over the CLI library (tools/memfit/cli.h).
#include <unistd.h>

#include <iostream>

#include "cli.h"

int main(int argc, char** argv) {
  std::ios::sync_with_stdio(false);
  const memfit::Environment env = memfit::Environment::from_process();
  std::vector<std::string> args(argv + 1, argv + argc);
  memfit::cli::Io io{std::cout, std::cerr, env, ::isatty(STDERR_FILENO) == 1};
  const int code = memfit::cli::run(args, io);
  std::cout.flush();
  return code;
}
