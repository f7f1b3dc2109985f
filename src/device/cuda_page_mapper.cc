#include "memfit/device/cuda_page_mapper.h"

#include <fmt/format.h>

#include "memfit/device/cuda_probe.h"

#if MEMFIT_HAVE_CUDA
#include <cuda.h>
#include <cuda_runtime_api.h>
#endif

namespace memfit {

#if MEMFIT_HAVE_CUDA
struct CudaPageMapper::Driver {
  decltype(&::cuMemAddressReserve) address_reserve = nullptr;
  decltype(&::cuMemAddressFree) address_free = nullptr;
  decltype(&::cuMemCreate) create = nullptr;
  decltype(&::cuMemRelease) release = nullptr;
  decltype(&::cuMemMap) map = nullptr;
  decltype(&::cuMemUnmap) unmap = nullptr;
  decltype(&::cuMemSetAccess) set_access = nullptr;
  decltype(&::cuMemGetAllocationGranularity) granularity = nullptr;
  decltype(&::cuGetErrorString) error_string = nullptr;
  CUmemAllocationProp prop{};  // pinned device memory on the mapper's GPU
  CUmemAccessDesc access{};    // read-write for that GPU

  std::string say(const char* call, CUresult r) const {
    const char* text = nullptr;
    if (error_string == nullptr || error_string(r, &text) != CUDA_SUCCESS || text == nullptr)
      text = "unknown";
    return fmt::format("{}: {} (CUresult {})", call, text, static_cast<int>(r));
  }
  Error fail(const char* call, CUresult r) const {
    return r == CUDA_ERROR_OUT_OF_MEMORY ? resource_exhausted(say(call, r)) : unavailable(say(call, r));
  }
};

namespace {
// Resolved through cudart, which finds the driver at run time: no link-time dependency on libcuda.
template <typename F>
Status load(const char* symbol, F& fn) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult found{};
  const cudaError_t err = cudaGetDriverEntryPointByVersion(symbol, &p, 12000, cudaEnableDefault, &found);
  if (err != cudaSuccess || found != cudaDriverEntryPointSuccess || p == nullptr)
    return unavailable(
        fmt::format("the CUDA driver does not provide {} ({})", symbol, cudaGetErrorString(err)));
  fn = reinterpret_cast<F>(p);
  return ok_status();
}
}  // namespace

Expected<std::unique_ptr<CudaPageMapper>> CudaPageMapper::create(int ordinal) {
  MEMFIT_ASSIGN_OR_RETURN(CudaDeviceInfo info, query_cuda_device(ordinal));
  MEMFIT_RETURN_IF_ERROR(use_cuda_device(ordinal));
  auto d = std::make_unique<Driver>();
  MEMFIT_RETURN_IF_ERROR(load("cuMemAddressReserve", d->address_reserve));
  MEMFIT_RETURN_IF_ERROR(load("cuMemAddressFree", d->address_free));
  MEMFIT_RETURN_IF_ERROR(load("cuMemCreate", d->create));
  MEMFIT_RETURN_IF_ERROR(load("cuMemRelease", d->release));
  MEMFIT_RETURN_IF_ERROR(load("cuMemMap", d->map));
  MEMFIT_RETURN_IF_ERROR(load("cuMemUnmap", d->unmap));
  MEMFIT_RETURN_IF_ERROR(load("cuMemSetAccess", d->set_access));
  MEMFIT_RETURN_IF_ERROR(load("cuMemGetAllocationGranularity", d->granularity));
  MEMFIT_RETURN_IF_ERROR(load("cuGetErrorString", d->error_string));
  d->prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  d->prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  d->prop.location.id = ordinal;
  d->access.location = d->prop.location;
  d->access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  size_t granularity = 0;
  if (CUresult r = d->granularity(&granularity, &d->prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
      r != CUDA_SUCCESS)
    return d->fail("cuMemGetAllocationGranularity", r);
  return std::unique_ptr<CudaPageMapper>(
      new CudaPageMapper(ordinal, fmt::format("GPU {} ({}) VMM", ordinal, info.name), info.total_bytes,
                         granularity, std::move(d)));
}

Expected<uintptr_t> CudaPageMapper::reserve_range(uint64_t size_bytes) {
  MEMFIT_RETURN_IF_ERROR(use_cuda_device(ordinal_));
  CUdeviceptr base = 0;
  if (CUresult r = driver_->address_reserve(&base, size_bytes, granularity_bytes_, 0, 0); r != CUDA_SUCCESS)
    return driver_->fail("cuMemAddressReserve", r);
  return static_cast<uintptr_t>(base);
}

Status CudaPageMapper::free_range(uintptr_t base, uint64_t size_bytes) {
  MEMFIT_RETURN_IF_ERROR(use_cuda_device(ordinal_));
  if (CUresult r = driver_->address_free(static_cast<CUdeviceptr>(base), size_bytes); r != CUDA_SUCCESS)
    return driver_->fail("cuMemAddressFree", r);
  return ok_status();
}

Status CudaPageMapper::map(uintptr_t address, uint64_t size_bytes) {
  MEMFIT_RETURN_IF_ERROR(use_cuda_device(ordinal_));
  const auto ptr = static_cast<CUdeviceptr>(address);
  CUmemGenericAllocationHandle handle{};
  if (CUresult r = driver_->create(&handle, size_bytes, &driver_->prop, 0); r != CUDA_SUCCESS)
    return driver_->fail("cuMemCreate", r);
  if (CUresult r = driver_->map(ptr, size_bytes, 0, handle, 0); r != CUDA_SUCCESS) {
    (void)driver_->release(handle);
    return driver_->fail("cuMemMap", r);
  }
  if (CUresult r = driver_->set_access(ptr, size_bytes, &driver_->access, 1); r != CUDA_SUCCESS) {
    (void)driver_->unmap(ptr, size_bytes);
    (void)driver_->release(handle);
    return driver_->fail("cuMemSetAccess", r);
  }
  // The mapping keeps the memory alive; releasing the handle now means cuMemUnmap alone returns it.
  if (CUresult r = driver_->release(handle); r != CUDA_SUCCESS) return driver_->fail("cuMemRelease", r);
  return ok_status();
}

Status CudaPageMapper::unmap(uintptr_t address, uint64_t size_bytes) {
  MEMFIT_RETURN_IF_ERROR(use_cuda_device(ordinal_));
  // A framework frees a buffer when its last host reference goes, while kernels queued on it may still run
  // (PyTorch's CUDAPluggableAllocator calls free at once). cudaFree waits for the device; cuMemUnmap does
  // not, and unmapping under a running kernel is an illegal address that kills the context (seen on an H200:
  // the GPT-2 loop on the vmm allocator). So wait for the device first, as cudaFree does and as PyTorch's
  // expandable segments do before unmapping (c10/cuda/CUDACachingAllocator.cpp,
  // ExpandableSegment::unmapHandles).
  if (cudaError_t err = cudaDeviceSynchronize(); err != cudaSuccess)
    return unavailable(fmt::format("cudaDeviceSynchronize before cuMemUnmap: {}", cudaGetErrorString(err)));
  if (CUresult r = driver_->unmap(static_cast<CUdeviceptr>(address), size_bytes); r != CUDA_SUCCESS)
    return driver_->fail("cuMemUnmap", r);
  return ok_status();
}

#else
struct CudaPageMapper::Driver {};

Expected<std::unique_ptr<CudaPageMapper>> CudaPageMapper::create(int) {
  return unavailable("memfit was built without the CUDA toolkit");
}
Expected<uintptr_t> CudaPageMapper::reserve_range(uint64_t) {
  return unavailable("memfit was built without the CUDA toolkit");
}
Status CudaPageMapper::free_range(uintptr_t, uint64_t) {
  return unavailable("memfit was built without the CUDA toolkit");
}
Status CudaPageMapper::map(uintptr_t, uint64_t) {
  return unavailable("memfit was built without the CUDA toolkit");
}
Status CudaPageMapper::unmap(uintptr_t, uint64_t) {
  return unavailable("memfit was built without the CUDA toolkit");
}
#endif

CudaPageMapper::CudaPageMapper(int ordinal, std::string name, uint64_t total_bytes,
                               uint64_t granularity_bytes, std::unique_ptr<Driver> driver)
    : ordinal_(ordinal),
      name_(std::move(name)),
      total_bytes_(total_bytes),
      granularity_bytes_(granularity_bytes),
      driver_(std::move(driver)) {}

CudaPageMapper::~CudaPageMapper() = default;

uint64_t CudaPageMapper::granularity_bytes() const { return granularity_bytes_; }
uint64_t CudaPageMapper::total_bytes() const { return total_bytes_; }
uint64_t CudaPageMapper::free_bytes() const { return cuda_free_bytes(ordinal_); }
std::string CudaPageMapper::name() const { return name_; }

}  // namespace memfit
