// memfit/device/cuda_device.h - a real GPU as a DeviceMemory: cudaMalloc/cudaFree ranges, total and free
// from the driver, errors with CUDA's own words. Built when the CUDA toolkit is found; create() says why it
// cannot be used otherwise (no toolkit at build time, no GPU visible now).
#pragma once

#include <memory>

#include "memfit/core/status.h"
#include "memfit/device/device_memory.h"

namespace memfit {

class CudaDevice final : public DeviceMemory {
 public:
  // kUnavailable when memfit was built without CUDA or GPU `ordinal` is not visible.
  static Expected<std::unique_ptr<CudaDevice>> create(int ordinal = 0);

  Expected<void*> reserve(uint64_t size_bytes) override;
  Status release(void* ptr, uint64_t size_bytes) override;
  uint64_t total_bytes() const override;
  uint64_t free_bytes() const override;
  std::string name() const override;

  int ordinal() const { return ordinal_; }

 private:
  CudaDevice(int ordinal, std::string name, uint64_t total_bytes)
      : ordinal_(ordinal), name_(std::move(name)), total_bytes_(total_bytes) {}
  int ordinal_;
  std::string name_;
  uint64_t total_bytes_;
};

}  // namespace memfit
