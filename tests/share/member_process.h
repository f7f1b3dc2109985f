// A member process for the share-group tests (share_member_process: libmemfit_alloc.so on a simulated
// device, configured by the environment given), with a pipe each way.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

extern char** environ;

namespace memfit::testing {

constexpr uint64_t kGiB = 1ull << 30;
using Clock = std::chrono::steady_clock;

// A member process with a pipe each way.
class Process {
 public:
  explicit Process(const std::map<std::string, std::string>& vars) {
    int in[2];
    int out[2];
    if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0) std::abort();
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string var = *e;
      if (var.rfind("MEMFIT_", 0) == 0 || var.rfind("XLA_", 0) == 0 || var.rfind("TF_", 0) == 0) continue;
      env.push_back(var);
    }
    for (const auto& [k, v] : vars) env.push_back(k + "=" + v);
    // Under a sanitizer, a report stops the member at once: the test sees it stop answering and fails.
    if (std::getenv("TSAN_OPTIONS") == nullptr) env.push_back("TSAN_OPTIONS=halt_on_error=1");
    std::vector<char*> envp;
    for (std::string& s : env) envp.push_back(s.data());
    envp.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, in[0], 0);
    posix_spawn_file_actions_adddup2(&actions, out[1], 1);
    char* argv[] = {const_cast<char*>(MEMFIT_SHARE_MEMBER), nullptr};
    if (::posix_spawn(&pid_, MEMFIT_SHARE_MEMBER, &actions, nullptr, argv, envp.data()) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&actions);
    ::close(in[0]);
    ::close(out[1]);
    to_ = in[1];
    from_ = out[0];
  }
  ~Process() {
    if (pid_ > 0 && !reaped_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    ::close(to_);
    ::close(from_);
  }
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  pid_t pid() const { return pid_; }

  // Sends one command; the answer line, or nullopt when none came within `timeout` (a hang).
  std::optional<std::string> ask(const std::string& command,
                                 std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
    const std::string line = command + "\n";
    if (::write(to_, line.data(), line.size()) != static_cast<ssize_t>(line.size())) return std::nullopt;
    const auto deadline = Clock::now() + timeout;
    while (true) {
      if (const size_t nl = buffer_.find('\n'); nl != std::string::npos) {
        std::string answer = buffer_.substr(0, nl);
        buffer_.erase(0, nl + 1);
        return answer;
      }
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) return std::nullopt;
      pollfd p{from_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left)) <= 0) continue;
      char chunk[4096];
      const ssize_t n = ::read(from_, chunk, sizeof(chunk));
      if (n <= 0) return std::nullopt;
      buffer_.append(chunk, static_cast<size_t>(n));
    }
  }

  nlohmann::json stats() {
    auto line = ask("stats");
    return line ? nlohmann::json::parse(*line, nullptr, false) : nlohmann::json();
  }

  void kill9() {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    reaped_ = true;
  }

  // Sends "exit" and waits for the process to end on its own; false when it has not within `timeout` (a
  // member stuck in its lease, or one that crashed on the way out).
  bool exit_cleanly(std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
    const std::string line = "exit\n";
    if (::write(to_, line.data(), line.size()) != static_cast<ssize_t>(line.size())) return false;
    const auto deadline = Clock::now() + timeout;
    int status = 0;
    while (Clock::now() < deadline) {
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        reaped_ = true;
        return WIFEXITED(status) && WEXITSTATUS(status) == 0;
      }
      ::usleep(1000);
    }
    return false;
  }

 private:
  pid_t pid_ = -1;
  int to_ = -1;
  int from_ = -1;
  bool reaped_ = false;
  std::string buffer_;
};

std::map<std::string, std::string> member_env(const std::string& group, bool preallocate) {
  std::map<std::string, std::string> vars = {{"MEMFIT_SHARE", group}, {"MEMFIT_SIMULATED_BYTES", "80GiB"}};
  if (!preallocate) {
    vars["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false";
    vars["XLA_CLIENT_MEM_FRACTION"] = "1.0";
  }
  return vars;
}

}  // namespace memfit::testing
