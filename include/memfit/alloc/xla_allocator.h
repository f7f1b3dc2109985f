// memfit/alloc/xla_allocator.h - the allocator the XLA variables in force would give a process.
//
// The same variables give the same allocator and limit as JAX: default/bfc -> BfcAllocator named GPU_0_bfc
// with bytes_limit = fraction x total rounded up to 2 MiB, preallocated unless
// XLA_PYTHON_CLIENT_PREALLOCATE=false (then it grows); platform/address -> PlatformAllocator; vmm -> the
// page-mapped pool capped at the fraction. cuda_async is cudaMallocAsync's own pool (memfit/alloc/
// async_allocator.h on a GPU) and kUnavailable here.
#pragma once

#include <chrono>
#include <memory>
#include <utility>

#include "memfit/alloc/allocator.h"
#include "memfit/alloc/allocator_factory.h"
#include "memfit/core/xla_env.h"
#include "memfit/device/device_memory.h"

namespace memfit {

// The kind and settings for a device of `total_bytes` (kUnavailable for cuda_async).
Expected<std::pair<AllocatorKind, AllocatorSettings>> xla_allocator_settings(
    const XlaAllocatorConfig& config, uint64_t total_bytes,
    std::chrono::milliseconds retry_wait = std::chrono::seconds(10));

Expected<std::unique_ptr<Allocator>> make_xla_allocator(
    const XlaAllocatorConfig& config, DeviceMemory& device,
    std::chrono::milliseconds retry_wait = std::chrono::seconds(10));

}  // namespace memfit
