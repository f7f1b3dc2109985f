// memfit/alloc/bfc_allocator.h - XLA's best-fit-with-coalescing pool (xla/tsl/framework/bfc_allocator.cc).
//
// Glossary: a *region* is one range reserved from the device; a region is cut into *chunks*, each free or
// in use; free chunks sit in one of 21 *bins* by size (bin b holds chunks of 256<<b bytes up to twice that;
// bin 20 holds every chunk of 256 MiB and more).
// The rules, as XLA applies them (../shared/FACTS.md §1):
//   - requests are rounded up to 256 B; the chunk handed out is counted whole in bytes_in_use;
//   - best fit: the smallest free chunk (lowest address on ties) in the first non-empty bin walking up;
//   - a chunk is split when it is >= 2x the rounded request or the excess is >= 128 MiB;
//   - a freed chunk coalesces with free neighbours in its region;
//   - without growth the whole limit is reserved at the first allocation; with growth, regions start at
//     2 MiB and double; if the device refuses a region, XLA retries at 0.9x until it falls below the request;
//   - on failure it waits up to `retry_wait` for other threads to free memory, then reports OOM.
// Cost: a pool hit is a bitmask scan and at most one tree lookup (the split-off remainder keeps the free
// chunk's tree node), under one spin lock, no malloc; the same size allocated again right after its free
// replays the last split without searching (exact: see Resplit in the .cc).
// No lock is held across a device call.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "memfit/alloc/allocator.h"
#include "memfit/alloc/oom_report.h"
#include "memfit/device/device_memory.h"

namespace memfit {

struct BfcOptions {
  std::string name = "GPU_0_bfc";
  uint64_t memory_limit_bytes = 0;  // bytes_limit (required, > 0)
  bool allow_growth = false;        // false: reserve the whole limit at the first allocation
  bool garbage_collection = false;  // on failure, return fully free regions to the device and retry
  // > 0: regions of at most this many bytes (a request larger than it gets a region of its own size), and a
  // preallocated pool reserved as such regions. A pool shared through a lease group can give memory back
  // only as whole free regions; one region of the whole limit could never be given back.
  uint64_t region_cap_bytes = 0;
  std::chrono::milliseconds retry_wait{10000};  // XLA waits 10 s for frees before an OOM
  uint64_t max_internal_fragmentation_bytes = 128ull << 20;
  double memory_fraction = 0.75;  // what the limit came from; used to word OOM advice
};

class BfcAllocator final : public Allocator {
 public:
  static constexpr int kNumBins = 21;

  BfcAllocator(DeviceMemory& device, BfcOptions options);
  ~BfcAllocator() override;  // returns every region to the device
  BfcAllocator(const BfcAllocator&) = delete;
  BfcAllocator& operator=(const BfcAllocator&) = delete;

  Expected<void*> allocate(uint64_t size_bytes, std::string_view tag = {}) override;
  Status deallocate(void* ptr) override;
  AllocatorStats stats() const override;
  void reset_peak() override;
  std::string name() const override;
  // Gives fully free regions back to the device, in address order, until `wanted_bytes` are given back.
  uint64_t release_free_memory(uint64_t wanted_bytes) override;

  // The bin a chunk of `size_bytes` lives in (XLA's BinNumForSize).
  static int bin_for_size(uint64_t size_bytes);
  // Every chunk of every region, in address order, offsets counted across regions (for reports and tests).
  std::vector<ChunkExtent> chunks() const;
  uint64_t region_count() const;
  // The OOM report for a hypothetical request of `size_bytes` now (what a failure would say).
  OomReport oom_report(uint64_t size_bytes) const;

 private:
  [[gnu::noinline]] Expected<void*> allocate_slow(uint64_t size_bytes, uint64_t rounded, uint32_t tag_id);
  [[gnu::noinline]] Status deallocate_locked(void* ptr);

  struct State;
  std::unique_ptr<State> state_;
};

static_assert(DeviceAllocator<BfcAllocator>);

}  // namespace memfit
