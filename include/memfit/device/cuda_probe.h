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

// Makes GPU `ordinal` (its primary context) current on the calling thread: the runtime's cudaMalloc and the
// driver's cuMem* calls act there. kUnavailable with CUDA's words when it cannot.
Status use_cuda_device(int ordinal);
// The driver's free bytes on GPU `ordinal`; 0 when it cannot say.
uint64_t cuda_free_bytes(int ordinal);

}  // namespace memfit
