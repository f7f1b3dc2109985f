// tools/memfit/progress.h - a progress line on stderr for work that takes more than a second, only when
// stderr is a terminal (so logs and pipes stay clean).
#pragma once

#include <chrono>
#include <ostream>
#include <string>

namespace memfit::cli {

class Progress {
 public:
  Progress(std::ostream& err, bool enabled) : err_(err), enabled_(enabled) {}
  ~Progress() { done(); }

  void update(const std::string& what) {
    if (!enabled_) return;
    const auto now = std::chrono::steady_clock::now();
    if (now - start_ < std::chrono::seconds(1) || now - last_ < std::chrono::milliseconds(100)) return;
    last_ = now;
    err_ << "\r\033[K" << what << std::flush;
    shown_ = true;
  }
  void done() {
    if (shown_) err_ << "\r\033[K" << std::flush;
    shown_ = false;
  }

 private:
  std::ostream& err_;
  bool enabled_;
  bool shown_ = false;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point last_{};
};

}  // namespace memfit::cli
