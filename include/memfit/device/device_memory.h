// memfit/device/device_memory.h - the platform layer: raw device memory ranges.
//
// A `DeviceMemory` is what cudaMalloc/cudaFree are to XLA's BFC allocator: it reserves and releases whole
// ranges and knows the device's total and free bytes. Allocators (memfit/alloc) sit on top of it.
// Implementations: SimulatedDevice (no GPU needed), CudaDevice (built with the CUDA toolkit).
// Implementations are thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "memfit/core/status.h"

namespace memfit {

class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;

  // Reserves `size_bytes` (> 0) of device memory, like cudaMalloc. Out of device memory is
  // kResourceExhausted with the driver's words.
  virtual Expected<void*> reserve(uint64_t size_bytes) = 0;
  // Releases a range returned by reserve(); `size_bytes` must be the size it was reserved with.
  virtual Status release(void* ptr, uint64_t size_bytes) = 0;

  virtual uint64_t total_bytes() const = 0;
  virtual uint64_t free_bytes() const = 0;
  virtual std::string name() const = 0;
  // True when the host may read and write the returned addresses (host-backed simulation, host memory).
  virtual bool is_host_accessible() const { return false; }
};

}  // namespace memfit
