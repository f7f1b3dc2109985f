// memfit/device/cuda_probe.h - what the real GPU says, when memfit was built with CUDA and one is present.
#pragma once

#include <cstdint>
#include <string>

#include "memfit/core/status.h"

namespace memfit {

struct CudaDeviceInfo {
  int ordinal = 0;
  std::string name;
  uint64_t total_bytes = 0;
  uint64_t free_bytes = 0;
};

// kUnavailable when memfit was built without the CUDA toolkit or no GPU is visible.
Expected<CudaDeviceInfo> query_cuda_device(int ordinal = 0);

// Whether this binary contains the CUDA backend.
bool built_with_cuda();

}  // namespace memfit
