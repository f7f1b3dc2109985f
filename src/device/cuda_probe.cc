#include "memfit/device/cuda_probe.h"

#include <fmt/format.h>

#if MEMFIT_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace memfit {

bool built_with_cuda() { return MEMFIT_HAVE_CUDA != 0; }

Expected<CudaDeviceInfo> query_cuda_device(int ordinal) {
#if MEMFIT_HAVE_CUDA
  int count = 0;
  if (cudaError_t err = cudaGetDeviceCount(&count); err != cudaSuccess || count == 0) {
    return unavailable(fmt::format("no CUDA GPU is visible ({})",
                                   err != cudaSuccess ? cudaGetErrorString(err) : "0 devices"));
  }
  if (ordinal < 0 || ordinal >= count) {
    return unavailable(fmt::format("GPU {} does not exist ({} visible)", ordinal, count));
  }
  cudaDeviceProp prop{};
  if (cudaError_t err = cudaGetDeviceProperties(&prop, ordinal); err != cudaSuccess) {
    return unavailable(fmt::format("cannot query GPU {}: {}", ordinal, cudaGetErrorString(err)));
  }
  MEMFIT_RETURN_IF_ERROR(use_cuda_device(ordinal));
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  if (cudaError_t err = cudaMemGetInfo(&free_bytes, &total_bytes); err != cudaSuccess) {
    return unavailable(fmt::format("cudaMemGetInfo on GPU {}: {}", ordinal, cudaGetErrorString(err)));
  }
  return CudaDeviceInfo{ordinal, prop.name, total_bytes, free_bytes};
#else
  (void)ordinal;
  return unavailable("memfit was built without the CUDA toolkit");
#endif
}

Status use_cuda_device(int ordinal) {
#if MEMFIT_HAVE_CUDA
  if (cudaError_t err = cudaSetDevice(ordinal); err != cudaSuccess)
    return unavailable(fmt::format("cudaSetDevice({}): {}", ordinal, cudaGetErrorString(err)));
  return ok_status();
#else
  (void)ordinal;
  return unavailable("memfit was built without the CUDA toolkit");
#endif
}

uint64_t cuda_free_bytes(int ordinal) {
#if MEMFIT_HAVE_CUDA
  if (!use_cuda_device(ordinal).ok()) return 0;
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) return 0;
  return free_b;
#else
  (void)ordinal;
  return 0;
#endif
}

}  // namespace memfit
