// memfit/core/environment.h - a read-only view of environment variables.
//
// Library code never calls getenv directly: it takes an `Environment`, so tests (and `memfit doctor
// --pid`, which reads another process's /proc/PID/environ) can supply their own.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace memfit {

class Environment {
 public:
  // A snapshot of this process's environment.
  static Environment from_process();
  // Parses NUL-separated `KEY=VALUE` records, as in /proc/PID/environ.
  static Environment from_environ_block(std::string_view block);

  Environment() = default;
  explicit Environment(std::map<std::string, std::string, std::less<>> vars) : vars_(std::move(vars)) {}

  std::optional<std::string_view> get(std::string_view name) const;
  void set(std::string name, std::string value) { vars_[std::move(name)] = std::move(value); }

 private:
  std::map<std::string, std::string, std::less<>> vars_;
};

}  // namespace memfit
