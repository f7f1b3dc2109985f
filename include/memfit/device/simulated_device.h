// memfit/device/simulated_device.h - a fake device of any capacity, for tests, replay and planning.
//
// Hands out addresses from a fake address space and fails like cudaMalloc when the capacity is used up.
// By default nothing is backed by host memory, so a "140 GiB" device costs a few bytes per live range.
// With `host_backed`, addresses point into one lazily-committed host mapping (MAP_NORESERVE), so tests
// can write and verify patterns through an allocator; released ranges are given back with madvise.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "memfit/device/device_memory.h"

namespace memfit {

struct SimulatedDeviceOptions {
  uint64_t capacity_bytes = 0;
  // Reservations are rounded up to this, like the driver's page size (cudaMalloc rounds to 2 MiB pages
  // for large allocations and sub-allocates small ones; 512 B models the small case).
  uint64_t granularity_bytes = 512;
  bool host_backed = false;
  std::string name = "simulated";
};

class SimulatedDevice final : public DeviceMemory {
 public:
  // Fails (kInvalidArgument) for a zero capacity or a host-backed mapping the host refuses.
  static Expected<std::unique_ptr<SimulatedDevice>> create(SimulatedDeviceOptions options);
  ~SimulatedDevice() override;
  SimulatedDevice(const SimulatedDevice&) = delete;
  SimulatedDevice& operator=(const SimulatedDevice&) = delete;

  Expected<void*> reserve(uint64_t size_bytes) override;
  Status release(void* ptr, uint64_t size_bytes) override;
  uint64_t total_bytes() const override { return options_.capacity_bytes; }
  uint64_t free_bytes() const override;
  std::string name() const override { return options_.name; }
  bool is_host_accessible() const override { return options_.host_backed; }

  // Simulated streams (CI has no GPU, the ordering rules are tested here): work queued on a stream over an
  // address range, finished in queue order when a test says so or when an event on it is waited for.
  Expected<Event> record_event(uintptr_t stream) override;
  bool event_done(Event event) override;
  Status wait_event(Event event) override;
  void release_event(Event event) override;
  bool work_pending_on(uintptr_t address, uint64_t size_bytes) override;
  // Queues work touching [address, +size_bytes) on `stream`; returns its number on that stream (from 1).
  uint64_t enqueue_work(uintptr_t stream, uintptr_t address, uint64_t size_bytes);
  // Finishes the work on `stream` up to number `upto`; finish_all_work() finishes everything.
  void finish_work(uintptr_t stream, uint64_t upto);
  void finish_all_work();
  // wait_event calls that found the event's work unfinished (what a real device would block on).
  uint64_t blocking_waits() const;
  // work_pending_on calls that found pending work: an unmap the allocator should never have tried.
  uint64_t unsafe_unmap_attempts() const;
  uint64_t live_events() const;

  uint64_t live_ranges() const;
  // Bytes reserved now and at most since creation (granularity-rounded): what nvidia-smi would show.
  uint64_t used_bytes() const;
  uint64_t peak_used_bytes() const;
  uint64_t reserve_calls() const;

 private:
  SimulatedDevice(SimulatedDeviceOptions options, uintptr_t base);
  void insert_free_range(uint64_t offset, uint64_t size);  // coalescing
  void flush_quick_lists();

  SimulatedDeviceOptions options_;
  uintptr_t base_;
  mutable std::mutex mu_;
  uint64_t used_bytes_ = 0;
  uint64_t peak_used_bytes_ = 0;
  uint64_t reserve_calls_ = 0;
  std::map<uint64_t, uint64_t> free_by_offset_;           // offset -> size
  std::set<std::pair<uint64_t, uint64_t>> free_by_size_;  // (size, offset): best fit, lowest address
  std::unordered_map<uint64_t, uint64_t> live_;           // offset -> rounded size
  // Released ranges wait on a LIFO per size ("quick list") instead of being coalesced at once, so the
  // sizes a training loop asks for again and again are O(1). Used/free accounting is exact; only placement
  // differs, and a reserve that finds no fitting range flushes the quick lists back first.
  std::unordered_map<uint64_t, std::vector<uint64_t>> quick_;
  uint64_t quick_ranges_ = 0;

  struct Work {
    uint64_t number;
    uintptr_t address;
    uint64_t size_bytes;
  };
  struct Stream {
    uint64_t queued = 0;     // numbers handed out
    uint64_t finished = 0;   // all work up to this number has finished
    std::vector<Work> work;  // queued and not finished, in order
  };
  void finish_locked(Stream& stream, uint64_t upto);
  std::unordered_map<uintptr_t, Stream> streams_;
  std::unordered_map<Event, std::pair<uintptr_t, uint64_t>> events_;  // event -> (stream, number)
  Event next_event_ = 1;
  uint64_t blocking_waits_ = 0;
  uint64_t unsafe_unmaps_ = 0;
};

}  // namespace memfit
