// memfit/alloc/allocator.h - the allocator contract every memfit allocator meets.
//
// An allocator hands out device memory from a `DeviceMemory` (memfit/device). The contract, checked for
// every implementation by one conformance suite (tests/alloc/conformance_test.cc):
//   - allocate(0) succeeds with nullptr; deallocate(nullptr) is a no-op;
//   - pointers are aligned to kAllocationAlignment and live allocations never overlap;
//   - a request the allocator cannot serve is kResourceExhausted carrying an OomReport (alloc/oom_report.h);
//   - freeing a pointer twice, or one it never returned, is kFailedPrecondition and changes nothing;
//   - stats() follows JAX's memory_stats() (alloc/allocator_stats.h);
//   - all methods are thread-safe.
#pragma once

#include <concepts>
#include <cstdint>
#include <string>
#include <string_view>

#include "memfit/alloc/allocator_stats.h"
#include "memfit/core/status.h"

namespace memfit {

inline constexpr uint64_t kAllocationAlignment = 256;  // XLA's kMinAllocationSize; cudaMalloc gives >= 256

class Allocator {
 public:
  virtual ~Allocator() = default;

  // `tag` names who asked (a JAX op, "params", ...): it is copied, and shows in OOM reports.
  virtual Expected<void*> allocate(uint64_t size_bytes, std::string_view tag = {}) = 0;
  virtual Status deallocate(void* ptr) = 0;

  virtual AllocatorStats stats() const = 0;
  // Sets peak_bytes_in_use to bytes_in_use now (what users ask JAX for in jax#8096).
  virtual void reset_peak() = 0;
  // Gives free pool memory back to the device (what a lease group asks of a member above its fair share):
  // at least `wanted_bytes` when it can, never memory in use. Returns the bytes given back; an allocator
  // that keeps no pool apart from live memory gives back nothing.
  virtual uint64_t release_free_memory(uint64_t wanted_bytes) {
    (void)wanted_bytes;
    return 0;
  }
  // As XLA names it in logs: "GPU_0_bfc", "SE_0_space_0".
  virtual std::string name() const = 0;
};

// The same contract as a concept, so each implementation states it at compile time.
template <typename A>
concept DeviceAllocator = std::derived_from<A, Allocator> &&
    requires(A& a, const A& ca, uint64_t n, void* p, std::string_view tag) {
  { a.allocate(n, tag) } -> std::same_as<Expected<void*>>;
  { a.deallocate(p) } -> std::same_as<Status>;
  { ca.stats() } -> std::same_as<AllocatorStats>;
  { a.reset_peak() } -> std::same_as<void>;
  { ca.name() } -> std::same_as<std::string>;
};

}  // namespace memfit
