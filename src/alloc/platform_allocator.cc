#include "memfit/alloc/platform_allocator.h"

#include <fmt/format.h>

#include <algorithm>
#include <mutex>
#include <unordered_map>

#include "memfit/alloc/oom_report.h"
#include "memfit/core/bytes.h"

namespace memfit {

struct PlatformAllocator::State {
  State(DeviceMemory& d, PlatformOptions o) : device(d), options(std::move(o)) {}
  DeviceMemory& device;
  const PlatformOptions options;
  mutable std::mutex mu;
  std::unordered_map<uintptr_t, uint64_t> live;  // address -> requested bytes
  AllocatorStats stats;

  OomReport report(uint64_t requested, const std::string& device_error) const {
    OomReport r;
    r.allocator_name = options.name;
    r.requested_bytes = requested;
    r.rounded_bytes = requested;
    r.bytes_in_use = stats.bytes_in_use;
    r.live_allocations = live.size();
    r.bytes_limit = options.limit_bytes;
    r.device_total_bytes = device.total_bytes();
    r.device_free_bytes = device.free_bytes();
    explain_oom(r);
    if (!device_error.empty()) r.cause += " (device: " + device_error + ")";
    return r;
  }
};

PlatformAllocator::PlatformAllocator(DeviceMemory& device, PlatformOptions options)
    : state_(std::make_unique<State>(device, std::move(options))) {}

PlatformAllocator::~PlatformAllocator() {
  for (const auto& [address, size] : state_->live) {
    (void)state_->device.release(reinterpret_cast<void*>(address), size);
  }
}

std::string PlatformAllocator::name() const { return state_->options.name; }

Expected<void*> PlatformAllocator::allocate(uint64_t size_bytes, std::string_view /*tag*/) {
  if (size_bytes == 0) return static_cast<void*>(nullptr);
  State& s = *state_;
  auto oom = [&](const std::string& device_error) -> Error {
    auto report = std::make_shared<OomReport>(s.report(size_bytes, device_error));
    std::string message = report->summary();
    return resource_exhausted(std::move(message), std::move(report));
  };
  {
    // Take the bytes from the limit before the device call, so concurrent callers cannot overshoot it.
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.options.limit_bytes && size_bytes > *s.options.limit_bytes - s.stats.bytes_in_use) return oom("");
    s.stats.bytes_in_use += size_bytes;
  }
  Expected<void*> ptr = s.device.reserve(size_bytes);
  std::lock_guard<std::mutex> lock(s.mu);
  if (!ptr.ok()) {
    s.stats.bytes_in_use -= size_bytes;
    return oom(ptr.error().message());
  }
  s.live.emplace(reinterpret_cast<uintptr_t>(*ptr), size_bytes);
  ++s.stats.num_allocs;
  s.stats.peak_bytes_in_use = std::max(s.stats.peak_bytes_in_use, s.stats.bytes_in_use);
  s.stats.largest_alloc_size = std::max(s.stats.largest_alloc_size, size_bytes);
  return *ptr;
}

Status PlatformAllocator::deallocate(void* ptr) {
  if (ptr == nullptr) return ok_status();
  State& s = *state_;
  uint64_t size = 0;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    auto it = s.live.find(reinterpret_cast<uintptr_t>(ptr));
    if (it == s.live.end()) {
      return failed_precondition(fmt::format(
          "{}: deallocate({}) of a pointer it did not allocate or already freed", s.options.name, ptr));
    }
    size = it->second;
    s.live.erase(it);
    s.stats.bytes_in_use -= size;
  }
  return s.device.release(ptr, size);
}

AllocatorStats PlatformAllocator::stats() const {
  const State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mu);
  AllocatorStats out = s.stats;
  out.bytes_limit = s.options.limit_bytes;
  out.largest_free_block_bytes = s.device.free_bytes();
  return out;
}

void PlatformAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->stats.peak_bytes_in_use = state_->stats.bytes_in_use;
}

}  // namespace memfit
