// A member process for the share-group tests: libmemfit_alloc.so configured by its environment
// (MEMFIT_SHARE, MEMFIT_SIMULATED_BYTES, the XLA variables), driven one command per line on stdin:
//   alloc SIZE   -> "ok INDEX" or "oom <the error, one line>"
//   free INDEX   -> "ok"
//   stats        -> memfit_stats_json(0), one line
//   exit
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "memfit/c/memfit_alloc.h"
#include "memfit/core/bytes.h"
#include "memfit/core/text.h"

int main() {
  std::vector<void*> ptrs;
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    std::string command;
    std::string arg;
    in >> command >> arg;
    if (command == "alloc") {
      const auto bytes = memfit::parse_bytes(arg);
      void* p = bytes.ok() ? memfit_alloc(static_cast<ssize_t>(*bytes), 0, nullptr) : nullptr;
      if (p != nullptr) {
        ptrs.push_back(p);
        std::cout << "ok " << ptrs.size() - 1 << std::endl;
      } else {
        std::string error(16384, '\0');
        const int n = memfit_last_error(error.data(), error.size());
        error.resize(static_cast<size_t>(std::max(0, std::min<int>(n, 16383))));
        std::cout << "oom " << memfit::one_line(error, 4000) << std::endl;
      }
    } else if (command == "free") {
      const size_t i = std::stoul(arg);
      if (i < ptrs.size()) {
        memfit_free(ptrs[i], 0, 0, nullptr);
        ptrs[i] = nullptr;
      }
      std::cout << "ok" << std::endl;
    } else if (command == "stats") {
      std::string text(8192, '\0');
      const int n = memfit_stats_json(0, text.data(), text.size());
      text.resize(static_cast<size_t>(std::max(0, std::min<int>(n, 8191))));
      std::cout << (n < 0 ? "{}" : text) << std::endl;
    } else if (command == "exit") {
      return 0;
    } else {
      std::cout << "unknown " << command << std::endl;
    }
  }
  return 0;
}
