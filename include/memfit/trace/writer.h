// memfit/trace/writer.h - memfit's own trace format, and a recorder that writes it for any allocator.
//
// Format: `# memfit-trace v1`, the header `event,buffer,size_bytes,stream,time_us,tag`, then one line per
// event (`alloc` or `free`); the tag is the last field and may contain commas. Read by parse_memfit_trace.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "memfit/alloc/allocator.h"
#include "memfit/trace/timeline.h"

namespace memfit {

std::string to_memfit_trace(const Timeline& timeline);

// An allocator adaptor that forwards to another allocator and records every successful alloc and free.
class TracingAllocator final : public Allocator {
 public:
  explicit TracingAllocator(Allocator& inner);

  Expected<void*> allocate(uint64_t size_bytes, std::string_view tag = {}) override;
  Status deallocate(void* ptr) override;
  AllocatorStats stats() const override { return inner_.stats(); }
  void reset_peak() override { inner_.reset_peak(); }
  std::string name() const override { return inner_.name(); }

  // What was recorded so far.
  Timeline timeline() const;

 private:
  Allocator& inner_;
  mutable std::mutex mu_;
  Timeline timeline_;
  std::unordered_map<uintptr_t, std::pair<uint64_t, uint64_t>> live_;  // address -> (buffer, size)
  std::unordered_map<std::string, uint32_t> tag_ids_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

static_assert(DeviceAllocator<TracingAllocator>);

}  // namespace memfit
