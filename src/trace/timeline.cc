#include "memfit/trace/timeline.h"

#include <fmt/format.h>

#include <algorithm>

#include "memfit/core/checked.h"

namespace memfit {

uint64_t peak_live_bytes(const Timeline& timeline) {
  uint64_t live = 0;
  uint64_t peak = 0;
  for (const TraceEvent& e : timeline.events) {
    if (e.kind == EventKind::kAlloc) {
      live += e.size_bytes;
      peak = std::max(peak, live);
    } else {
      live -= e.size_bytes;
    }
  }
  return peak;
}

TimelineBuilder::TimelineBuilder(std::string source) { timeline_.source = std::move(source); }

Status TimelineBuilder::alloc(uint64_t address, uint64_t size_bytes, uint32_t stream, uint64_t time_us,
                              uint64_t line, std::string_view tag) {
  if (size_bytes == 0) return ok_status();  // nothing to place; PyTorch never records these
  if (auto it = live_.find(address); it != live_.end()) {
    return invalid_argument(
        fmt::format("line {}: allocation at {:#x}, which is still live (allocated at line {})", line, address,
                    it->second.line));
  }
  if (size_bytes > kMaxTraceLiveBytes - live_bytes_) {
    return invalid_argument(
        fmt::format("line {}: {} bytes live at once is more than any device holds (1 PiB)", line,
                    static_cast<double>(live_bytes_) + static_cast<double>(size_bytes)));
  }
  live_bytes_ += size_bytes;
  uint32_t tag_id = 0;
  if (!tag.empty()) {
    auto [it, inserted] = tag_ids_.emplace(std::string(tag), static_cast<uint32_t>(timeline_.tags.size()));
    if (inserted) timeline_.tags.emplace_back(tag);
    tag_id = it->second;
  }
  const uint64_t buffer = timeline_.buffer_count++;
  live_.emplace(address, Live{buffer, size_bytes, line});
  freed_at_.erase(address);
  timeline_.events.push_back({EventKind::kAlloc, tag_id, stream, buffer, size_bytes, time_us});
  return ok_status();
}

Status TimelineBuilder::free(uint64_t address, uint64_t time_us, uint64_t line) {
  auto it = live_.find(address);
  if (it == live_.end()) {
    if (auto f = freed_at_.find(address); f != freed_at_.end()) {
      return invalid_argument(fmt::format("line {}: free of {:#x}, which was already freed at line {}", line,
                                          address, f->second));
    }
    ++timeline_.frees_before_recording;
    freed_at_.emplace(address, line);
    return ok_status();
  }
  timeline_.events.push_back({EventKind::kFree, 0, 0, it->second.buffer, it->second.size_bytes, time_us});
  live_bytes_ -= it->second.size_bytes;
  live_.erase(it);
  freed_at_[address] = line;
  return ok_status();
}

Status TimelineBuilder::reserve(uint64_t size_bytes, uint64_t line) {
  auto total = checked_add(reserved_bytes_, size_bytes);
  if (!total) return invalid_argument(fmt::format("line {}: reserved bytes overflow 64 bits", line));
  saw_segments_ = true;
  reserved_bytes_ = *total;
  peak_reserved_bytes_ = std::max(peak_reserved_bytes_, reserved_bytes_);
  return ok_status();
}

Status TimelineBuilder::unreserve(uint64_t size_bytes, uint64_t line) {
  saw_segments_ = true;
  // A ring-buffered trace may release segments reserved before it started: clamp instead of failing.
  (void)line;
  reserved_bytes_ -= std::min(reserved_bytes_, size_bytes);
  return ok_status();
}

Timeline TimelineBuilder::finish() && {
  if (saw_segments_) timeline_.recorded_peak_reserved_bytes = peak_reserved_bytes_;
  return std::move(timeline_);
}

}  // namespace memfit
