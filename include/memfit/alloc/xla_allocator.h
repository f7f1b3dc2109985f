// memfit/alloc/xla_allocator.h - the allocator the XLA variables in force would give a process.
//
// The same variables give the same allocator and limit as JAX: default/bfc -> BfcAllocator named GPU_0_bfc
// with bytes_limit = fraction x total rounded up to 2 MiB, preallocated unless
// XLA_PYTHON_CLIENT_PREALLOCATE=false (then it grows); platform/address -> PlatformAllocator.
// cuda_async and vmm need the CUDA backend's allocators and are kUnavailable here.
#pragma once

#include <chrono>
#include <memory>

#include "memfit/alloc/allocator.h"
#include "memfit/core/xla_env.h"
#include "memfit/device/device_memory.h"

namespace memfit {

Expected<std::unique_ptr<Allocator>> make_xla_allocator(
    const XlaAllocatorConfig& config, DeviceMemory& device,
    std::chrono::milliseconds retry_wait = std::chrono::seconds(10));

}  // namespace memfit
