#include "memfit/device/simulated_device.h"

#include <fmt/format.h>
#include <sys/mman.h>

#include <algorithm>

#include "memfit/core/bytes.h"
#include "memfit/core/checked.h"

namespace memfit {
namespace {
// Fake addresses start here (never dereferenced): far from null, 2 MiB aligned, clearly not a heap pointer.
constexpr uintptr_t kFakeBase = uintptr_t{0x7a0000000000};
}  // namespace

Expected<std::unique_ptr<SimulatedDevice>> SimulatedDevice::create(SimulatedDeviceOptions options) {
  if (options.capacity_bytes == 0)
    return invalid_argument("a simulated device needs a capacity above 0 bytes");
  if (options.granularity_bytes == 0) options.granularity_bytes = 1;
  uintptr_t base = kFakeBase;
  if (options.host_backed) {
    void* p = ::mmap(nullptr, options.capacity_bytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
      return invalid_argument(fmt::format("cannot map {} of host memory for a host-backed device",
                                          format_bytes(options.capacity_bytes)));
    }
    base = reinterpret_cast<uintptr_t>(p);
  }
  return std::unique_ptr<SimulatedDevice>(new SimulatedDevice(std::move(options), base));
}

SimulatedDevice::SimulatedDevice(SimulatedDeviceOptions options, uintptr_t base)
    : options_(std::move(options)), base_(base) {
  free_by_offset_.emplace(0, options_.capacity_bytes);
  free_by_size_.emplace(options_.capacity_bytes, 0);
}

SimulatedDevice::~SimulatedDevice() {
  if (options_.host_backed) ::munmap(reinterpret_cast<void*>(base_), options_.capacity_bytes);
}

Expected<void*> SimulatedDevice::reserve(uint64_t size_bytes) {
  if (size_bytes == 0) return invalid_argument("cannot reserve 0 bytes");
  auto rounded = checked_round_up(size_bytes, options_.granularity_bytes);
  std::lock_guard<std::mutex> lock(mu_);
  ++reserve_calls_;
  auto oom = [&] {
    return resource_exhausted(
        fmt::format("CUDA_ERROR_OUT_OF_MEMORY: out of memory ({}: {} requested, {} free)", options_.name,
                    format_bytes(size_bytes), format_bytes(options_.capacity_bytes - used_bytes_)));
  };
  if (!rounded || *rounded > options_.capacity_bytes - used_bytes_) return oom();
  if (auto q = quick_.find(*rounded); q != quick_.end() && !q->second.empty()) {
    const uint64_t offset = q->second.back();
    q->second.pop_back();
    --quick_ranges_;
    live_.emplace(offset, *rounded);
    used_bytes_ += *rounded;
    peak_used_bytes_ = std::max(peak_used_bytes_, used_bytes_);
    return reinterpret_cast<void*>(base_ + offset);
  }
  auto fit = free_by_size_.lower_bound({*rounded, 0});
  if (fit == free_by_size_.end() && quick_ranges_ > 0) {
    flush_quick_lists();
    fit = free_by_size_.lower_bound({*rounded, 0});
  }
  if (fit == free_by_size_.end()) return oom();  // enough bytes free, but not in one range
  const auto [range_size, offset] = *fit;
  free_by_size_.erase(fit);
  free_by_offset_.erase(offset);
  if (range_size > *rounded) {
    free_by_offset_.emplace(offset + *rounded, range_size - *rounded);
    free_by_size_.emplace(range_size - *rounded, offset + *rounded);
  }
  live_.emplace(offset, *rounded);
  used_bytes_ += *rounded;
  peak_used_bytes_ = std::max(peak_used_bytes_, used_bytes_);
  return reinterpret_cast<void*>(base_ + offset);
}

Status SimulatedDevice::release(void* ptr, uint64_t size_bytes) {
  const auto address = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard<std::mutex> lock(mu_);
  if (address < base_)
    return failed_precondition(fmt::format("{}: release of {} which it never reserved", options_.name, ptr));
  uint64_t offset = address - base_;
  auto it = live_.find(offset);
  if (it == live_.end()) {
    return failed_precondition(
        fmt::format("{}: release of {} which is not a reserved range", options_.name, ptr));
  }
  uint64_t size = it->second;
  if (round_up(size_bytes, options_.granularity_bytes) != size) {
    return failed_precondition(fmt::format("{}: release of {} with size {} but it was reserved with {}",
                                           options_.name, ptr, size_bytes, size));
  }
  live_.erase(it);
  used_bytes_ -= size;
  constexpr uint64_t kQuickMaxRanges = 1 << 16;
  if (quick_ranges_ < kQuickMaxRanges) {
    quick_[size].push_back(offset);
    ++quick_ranges_;
    if (options_.host_backed) {
      constexpr uint64_t kPage = 4096;
      const uint64_t begin = round_up(base_ + offset, kPage);
      const uint64_t end = (base_ + offset + size) / kPage * kPage;
      if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
    }
    return ok_status();
  }
  insert_free_range(offset, size);
  return ok_status();
}

void SimulatedDevice::flush_quick_lists() {
  for (auto& [size, offsets] : quick_) {
    for (uint64_t offset : offsets) insert_free_range(offset, size);
    offsets.clear();
  }
  quick_ranges_ = 0;
}

void SimulatedDevice::insert_free_range(uint64_t offset, uint64_t size) {
  // Coalesce with free neighbours on both sides.
  auto next = free_by_offset_.lower_bound(offset);
  if (next != free_by_offset_.end() && next->first == offset + size) {
    free_by_size_.erase({next->second, next->first});
    size += next->second;
    next = free_by_offset_.erase(next);
  }
  if (next != free_by_offset_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {
      free_by_size_.erase({prev->second, prev->first});
      offset = prev->first;
      size += prev->second;
      free_by_offset_.erase(prev);
    }
  }
  free_by_offset_.emplace(offset, size);
  free_by_size_.emplace(size, offset);
  if (options_.host_backed) {
    // Give whole host pages of the (coalesced) free range back; a page shared with a live range stays.
    constexpr uint64_t kPage = 4096;
    const uint64_t begin = round_up(base_ + offset, kPage);
    const uint64_t end = (base_ + offset + size) / kPage * kPage;
    if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
  }
}

uint64_t SimulatedDevice::free_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return options_.capacity_bytes - used_bytes_;
}

uint64_t SimulatedDevice::used_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return used_bytes_;
}

uint64_t SimulatedDevice::peak_used_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return peak_used_bytes_;
}

uint64_t SimulatedDevice::live_ranges() const {
  std::lock_guard<std::mutex> lock(mu_);
  return live_.size();
}

uint64_t SimulatedDevice::reserve_calls() const {
  std::lock_guard<std::mutex> lock(mu_);
  return reserve_calls_;
}

void SimulatedDevice::finish_locked(Stream& stream, uint64_t upto) {
  upto = std::min(upto, stream.queued);
  if (upto <= stream.finished) return;
  stream.finished = upto;
  std::erase_if(stream.work, [&](const Work& w) { return w.number <= upto; });
}

Expected<DeviceMemory::Event> SimulatedDevice::record_event(uintptr_t stream) {
  std::lock_guard<std::mutex> lock(mu_);
  const Event e = next_event_++;
  events_[e] = {stream, streams_[stream].queued};
  return e;
}

bool SimulatedDevice::event_done(Event event) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = events_.find(event);
  if (it == events_.end()) return true;
  return streams_[it->second.first].finished >= it->second.second;
}

Status SimulatedDevice::wait_event(Event event) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = events_.find(event);
  if (it == events_.end())
    return failed_precondition(fmt::format("wait on event {}, which is not recorded", event));
  Stream& stream = streams_[it->second.first];
  if (stream.finished < it->second.second) {
    ++blocking_waits_;  // a real device would block here until the stream's work got this far
    finish_locked(stream, it->second.second);
  }
  return ok_status();
}

void SimulatedDevice::release_event(Event event) {
  std::lock_guard<std::mutex> lock(mu_);
  events_.erase(event);
}

bool SimulatedDevice::work_pending_on(uintptr_t address, uint64_t size_bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [id, stream] : streams_) {
    for (const Work& w : stream.work) {
      if (w.address < address + size_bytes && address < w.address + w.size_bytes) {
        ++unsafe_unmaps_;
        return true;
      }
    }
  }
  return false;
}

uint64_t SimulatedDevice::enqueue_work(uintptr_t stream, uintptr_t address, uint64_t size_bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  Stream& s = streams_[stream];
  s.work.push_back({++s.queued, address, size_bytes});
  return s.queued;
}

void SimulatedDevice::finish_work(uintptr_t stream, uint64_t upto) {
  std::lock_guard<std::mutex> lock(mu_);
  finish_locked(streams_[stream], upto);
}

void SimulatedDevice::finish_all_work() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [id, stream] : streams_) finish_locked(stream, stream.queued);
}

uint64_t SimulatedDevice::blocking_waits() const {
  std::lock_guard<std::mutex> lock(mu_);
  return blocking_waits_;
}

uint64_t SimulatedDevice::unsafe_unmap_attempts() const {
  std::lock_guard<std::mutex> lock(mu_);
  return unsafe_unmaps_;
}

uint64_t SimulatedDevice::live_events() const {
  std::lock_guard<std::mutex> lock(mu_);
  return events_.size();
}

}  // namespace memfit
