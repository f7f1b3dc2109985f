#include "memfit/core/environment.h"

extern char** environ;  // POSIX

namespace memfit {
namespace {

void add_record(std::map<std::string, std::string, std::less<>>& vars, std::string_view record) {
  const size_t eq = record.find('=');
  if (eq == std::string_view::npos || eq == 0) return;
  vars.emplace(std::string(record.substr(0, eq)), std::string(record.substr(eq + 1)));
}

}  // namespace

Environment Environment::from_process() {
  std::map<std::string, std::string, std::less<>> vars;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) add_record(vars, *e);
  return Environment(std::move(vars));
}

Environment Environment::from_environ_block(std::string_view block) {
  std::map<std::string, std::string, std::less<>> vars;
  while (!block.empty()) {
    const size_t end = block.find('\0');
    add_record(vars, block.substr(0, end));
    if (end == std::string_view::npos) break;
    block.remove_prefix(end + 1);
  }
  return Environment(std::move(vars));
}

std::optional<std::string_view> Environment::get(std::string_view name) const {
  auto it = vars_.find(name);
  if (it == vars_.end()) return std::nullopt;
  return std::string_view(it->second);
}

}  // namespace memfit
