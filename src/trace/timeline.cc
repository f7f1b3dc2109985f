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
  note_reserved_against_live();
  return ok_status();
}

Status TimelineBuilder::free(uint64_t address, uint64_t time_us, uint64_t line, uint64_t size_bytes) {
  auto it = live_.find(address);
  if (it == live_.end()) {
    if (auto f = freed_at_.find(address); f != freed_at_.end()) {
      return invalid_argument(fmt::format("line {}: free of {:#x}, which was already freed at line {}", line,
                                          address, f->second));
    }
    ++timeline_.frees_before_recording;
    freed_at_.emplace(address, line);
    if (size_bytes == 0) return ok_status();
    // Allocated before the recording: live from its start until here (a trace begun mid-run would
    // otherwise hold less than the run did - the weights and optimizer state of a training loop).
    if (size_bytes > kMaxTraceLiveBytes - live_before_recording_bytes_) {
      return invalid_argument(fmt::format(
          "line {}: {} bytes live before the recording is more than any device holds (1 PiB)", line,
          static_cast<double>(live_before_recording_bytes_) + static_cast<double>(size_bytes)));
    }
    live_before_recording_bytes_ += size_bytes;
    const uint64_t buffer = timeline_.buffer_count++;
    live_before_recording_.push_back({EventKind::kAlloc, 0, 0, buffer, size_bytes, 0});
    timeline_.events.push_back({EventKind::kFree, 0, 0, buffer, size_bytes, time_us});
    return ok_status();
  }
  timeline_.events.push_back({EventKind::kFree, 0, 0, it->second.buffer, it->second.size_bytes, time_us});
  live_bytes_ -= it->second.size_bytes;
  live_.erase(it);
  freed_at_[address] = line;
  return ok_status();
}

void TimelineBuilder::note_reserved_against_live() {
  if (!saw_segments_) return;
  // In use beyond what the trace saw reserved: segments from before the recording hold it.
  if (live_bytes_ > reserved_bytes_) reserved_complete_ = false;
  peak_reserved_at_least_bytes_ =
      std::max(peak_reserved_at_least_bytes_, std::max(reserved_bytes_, live_bytes_));
}

Status TimelineBuilder::reserve(Reservation kind, uint64_t address, uint64_t size_bytes, uint64_t line) {
  if (kind == Reservation::kSegment) {
    auto [it, inserted] = segments_.try_emplace(address, size_bytes, line);
    if (!inserted) {
      return invalid_argument(
          fmt::format("line {}: segment at {:#x}, which is still reserved (since line {})", line, address,
                      it->second.second));
    }
  }
  auto total = checked_add(reserved_bytes_, size_bytes);
  if (!total) return invalid_argument(fmt::format("line {}: reserved bytes overflow 64 bits", line));
  saw_segments_ = true;
  reserved_bytes_ = *total;
  peak_reserved_bytes_ = std::max(peak_reserved_bytes_, reserved_bytes_);
  note_reserved_against_live();
  return ok_status();
}

Status TimelineBuilder::unreserve(Reservation kind, uint64_t address, uint64_t size_bytes, uint64_t line) {
  (void)line;
  saw_segments_ = true;
  if (kind == Reservation::kSegment) {
    auto it = segments_.find(address);
    if (it == segments_.end()) {
      // Reserved before the recording started (a ring-buffered trace, or recording begun mid-run).
      ++timeline_.segment_frees_before_recording;
      reserved_complete_ = false;
      return ok_status();
    }
    size_bytes = it->second.first;  // what was reserved is what goes back
    segments_.erase(it);
  } else if (size_bytes > reserved_bytes_) {
    reserved_complete_ = false;  // unmapping more than the trace saw mapped
  }
  reserved_bytes_ -= std::min(reserved_bytes_, size_bytes);
  note_reserved_against_live();
  return ok_status();
}

Timeline TimelineBuilder::finish() && {
  if (!live_before_recording_.empty()) {
    // Their allocations come first, at the trace's first time.
    const uint64_t start_us = timeline_.events.empty() ? 0 : timeline_.events.front().time_us;
    for (TraceEvent& e : live_before_recording_) e.time_us = start_us;
    live_before_recording_.insert(live_before_recording_.end(), timeline_.events.begin(),
                                  timeline_.events.end());
    timeline_.events = std::move(live_before_recording_);
    // They lived in segments reserved before the recording, which the trace does not hold.
    reserved_complete_ = false;
  }
  if (saw_segments_) {
    timeline_.recorded_reserved_complete = reserved_complete_;
    timeline_.recorded_peak_reserved_bytes =
        reserved_complete_ ? peak_reserved_bytes_
                           : std::max(peak_reserved_at_least_bytes_, peak_live_bytes(timeline_));
  }
  return std::move(timeline_);
}

}  // namespace memfit
