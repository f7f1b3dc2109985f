// memfit/alloc/allocator_factory.h - every allocator over a DeviceMemory, made one way.
//
// The replay, the microbenchmarks, `bench/`, the XLA-variable allocator and the C ABI all make their
// allocators here, so a kind means the same allocator everywhere.
#pragma once

#include <array>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "memfit/alloc/allocator.h"
#include "memfit/core/xla_env.h"
#include "memfit/device/device_memory.h"

namespace memfit {

enum class AllocatorKind {
  kBfc,        // XLA's BFC, the whole limit reserved at the first allocation
  kBfcGrowth,  // XLA's BFC growing by doubling regions (XLA_PYTHON_CLIENT_PREALLOCATE=false)
  kPlatform,   // cudaMalloc/cudaFree per request (XLA_PYTHON_CLIENT_ALLOCATOR=platform)
  kVmm,        // the page-mapped pool
};
inline constexpr std::array<AllocatorKind, 4> kAllocatorKinds = {
    AllocatorKind::kBfc, AllocatorKind::kBfcGrowth, AllocatorKind::kPlatform, AllocatorKind::kVmm};

// "bfc", "bfc-growth", "platform", "vmm".
std::string_view allocator_kind_name(AllocatorKind kind);
// kInvalidArgument naming the kinds for any other name.
Expected<AllocatorKind> parse_allocator_kind(std::string_view name);

struct AllocatorSettings {
  // bfc: bytes_limit (0 = XLA's 75% of the device); platform and vmm: a cap (0 = the device).
  uint64_t limit_bytes = 0;
  std::string name;  // empty: the name XLA gives the kind ("GPU_0_bfc", ...)
  std::chrono::milliseconds retry_wait{0};
  double memory_fraction = kXlaDefaultMemoryFraction;  // what the limit came from (OOM advice)
  bool garbage_collection = false;                     // bfc: see BfcOptions
  uint64_t region_cap_bytes = 0;                       // bfc: see BfcOptions
  std::optional<uint64_t> vmm_cache_bytes;             // vmm: see VmmOptions (default 2% of the device)
};

Expected<std::unique_ptr<Allocator>> make_allocator(AllocatorKind kind, DeviceMemory& device,
                                                    const AllocatorSettings& settings = {});

}  // namespace memfit
