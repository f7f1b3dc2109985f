#include "memfit/device/cuda_device.h"

#include <fmt/format.h>

#include "memfit/device/cuda_probe.h"

#if MEMFIT_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace memfit {

Expected<std::unique_ptr<CudaDevice>> CudaDevice::create(int ordinal) {
  MEMFIT_ASSIGN_OR_RETURN(CudaDeviceInfo info, query_cuda_device(ordinal));
  return std::unique_ptr<CudaDevice>(
      new CudaDevice(ordinal, fmt::format("GPU {} ({})", ordinal, info.name), info.total_bytes));
}

uint64_t CudaDevice::free_bytes() const { return cuda_free_bytes(ordinal_); }

#if MEMFIT_HAVE_CUDA
Expected<void*> CudaDevice::reserve(uint64_t size_bytes) {
  if (size_bytes == 0) return invalid_argument("a device reservation of 0 bytes");
  MEMFIT_RETURN_IF_ERROR(use_cuda_device(ordinal_));
  void* ptr = nullptr;
  if (cudaError_t err = cudaMalloc(&ptr, size_bytes); err != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky error state of a failed allocation
    const std::string what =
        fmt::format("cudaMalloc({}) on {}: {}", size_bytes, name_, cudaGetErrorString(err));
    return err == cudaErrorMemoryAllocation ? resource_exhausted(what) : unavailable(what);
  }
  return ptr;
}

Status CudaDevice::release(void* ptr, uint64_t /*size_bytes*/) {
  MEMFIT_RETURN_IF_ERROR(use_cuda_device(ordinal_));
  if (cudaError_t err = cudaFree(ptr); err != cudaSuccess)
    return invalid_argument(fmt::format("cudaFree({}) on {}: {}", ptr, name_, cudaGetErrorString(err)));
  return Status();
}
#else
Expected<void*> CudaDevice::reserve(uint64_t) {
  return unavailable("memfit was built without the CUDA toolkit");
}
Status CudaDevice::release(void*, uint64_t) {
  return unavailable("memfit was built without the CUDA toolkit");
}
#endif

uint64_t CudaDevice::total_bytes() const { return total_bytes_; }
std::string CudaDevice::name() const { return name_; }

}  // namespace memfit
