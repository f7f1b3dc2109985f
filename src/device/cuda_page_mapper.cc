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
  const bool one_page = size_bytes == granularity_bytes_;
  CUmemGenericAllocationHandle handle{};
  {
    // One page - the pool's growth step - takes a handle made earlier: cuMemCreate is the slow call, so
    // handles are made kHandleBatch at a time and kept, and a growth is one cuMemMap + cuMemSetAccess.
    std::lock_guard<std::mutex> lock(mu_);
    if (one_page && spare_handles_.empty()) {
      for (int k = 0; k < kHandleBatch; ++k) {
        CUmemGenericAllocationHandle h{};
        if (CUresult r = driver_->create(&h, granularity_bytes_, &driver_->prop, 0); r != CUDA_SUCCESS) {
          if (k == 0) return driver_->fail("cuMemCreate", r);
          break;  // the device is nearly full: use the handles made so far
        }
        spare_handles_.push_back(h);
      }
    }
    if (one_page) {
      handle = spare_handles_.back();
      spare_handles_.pop_back();
    }
  }
  if (!one_page) {
    if (CUresult r = driver_->create(&handle, size_bytes, &driver_->prop, 0); r != CUDA_SUCCESS)
      return driver_->fail("cuMemCreate", r);
  }
  auto give_back = [&] {
    if (!one_page) {
      (void)driver_->release(handle);
      return;
    }
    std::lock_guard<std::mutex> lock(mu_);
    spare_handles_.push_back(handle);
  };
  if (CUresult r = driver_->map(ptr, size_bytes, 0, handle, 0); r != CUDA_SUCCESS) {
    give_back();
    return driver_->fail("cuMemMap", r);
  }
  if (CUresult r = driver_->set_access(ptr, size_bytes, &driver_->access, 1); r != CUDA_SUCCESS) {
    (void)driver_->unmap(ptr, size_bytes);
    give_back();
    return driver_->fail("cuMemSetAccess", r);
  }
  if (one_page) {
    std::lock_guard<std::mutex> lock(mu_);
    page_handles_[address] = handle;  // kept: on unmap it goes back to the spares
    return ok_status();
  }
  // The mapping keeps the memory alive; releasing the handle now means cuMemUnmap alone returns it.
  if (CUresult r = driver_->release(handle); r != CUDA_SUCCESS) return driver_->fail("cuMemRelease", r);
  return ok_status();
}

Status CudaPageMapper::unmap(uintptr_t address, uint64_t size_bytes) {
  MEMFIT_RETURN_IF_ERROR(use_cuda_device(ordinal_));
  // No device-wide wait here (the first version called cudaDeviceSynchronize before every cuMemUnmap, as
  // cudaFree does: 0.30-0.34 s GPT-2 steps against 0.178 s). The pool unmaps a range only after the event
  // it recorded on the freeing stream is done (VmmAllocator), which is what makes cuMemUnmap safe under
  // queued kernels (an unmap under a running kernel is an illegal address that kills the context).
  if (CUresult r = driver_->unmap(static_cast<CUdeviceptr>(address), size_bytes); r != CUDA_SUCCESS)
    return driver_->fail("cuMemUnmap", r);
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = page_handles_.find(address); it != page_handles_.end()) {
    if (spare_handles_.size() < kMaxSpareHandles) {
      spare_handles_.push_back(it->second);
    } else if (CUresult r = driver_->release(it->second); r != CUDA_SUCCESS) {
      page_handles_.erase(it);
      return driver_->fail("cuMemRelease", r);
    }
    page_handles_.erase(it);
  }
  return ok_status();
}

Expected<PageMapper::Event> CudaPageMapper::record_event(uintptr_t stream) {
  MEMFIT_RETURN_IF_ERROR(use_cuda_device(ordinal_));
  cudaEvent_t event = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!spare_events_.empty()) {
      event = static_cast<cudaEvent_t>(spare_events_.back());
      spare_events_.pop_back();
    }
  }
  if (event == nullptr) {
    if (cudaError_t err = cudaEventCreateWithFlags(&event, cudaEventDisableTiming); err != cudaSuccess)
      return unavailable(fmt::format("cudaEventCreateWithFlags: {}", cudaGetErrorString(err)));
  }
  if (cudaError_t err = cudaEventRecord(event, reinterpret_cast<cudaStream_t>(stream)); err != cudaSuccess) {
    (void)cudaEventDestroy(event);
    return unavailable(fmt::format("cudaEventRecord: {}", cudaGetErrorString(err)));
  }
  return reinterpret_cast<Event>(event);
}

bool CudaPageMapper::event_done(Event event) {
  return cudaEventQuery(reinterpret_cast<cudaEvent_t>(event)) == cudaSuccess;
}

Status CudaPageMapper::wait_event(Event event) {
  if (cudaError_t err = cudaEventSynchronize(reinterpret_cast<cudaEvent_t>(event)); err != cudaSuccess)
    return unavailable(fmt::format("cudaEventSynchronize: {}", cudaGetErrorString(err)));
  return ok_status();
}

void CudaPageMapper::release_event(Event event) {
  std::lock_guard<std::mutex> lock(mu_);
  spare_events_.push_back(reinterpret_cast<void*>(event));
}

CudaPageMapper::~CudaPageMapper() {
  (void)use_cuda_device(ordinal_);
  for (void* e : spare_events_) (void)cudaEventDestroy(static_cast<cudaEvent_t>(e));
  for (CUmemGenericAllocationHandle h : spare_handles_) (void)driver_->release(h);
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
Expected<PageMapper::Event> CudaPageMapper::record_event(uintptr_t) {
  return unavailable("memfit was built without the CUDA toolkit");
}
bool CudaPageMapper::event_done(Event) { return true; }
Status CudaPageMapper::wait_event(Event) { return unavailable("memfit was built without the CUDA toolkit"); }
void CudaPageMapper::release_event(Event) {}
CudaPageMapper::~CudaPageMapper() = default;
#endif

CudaPageMapper::CudaPageMapper(int ordinal, std::string name, uint64_t total_bytes,
                               uint64_t granularity_bytes, std::unique_ptr<Driver> driver)
    : ordinal_(ordinal),
      name_(std::move(name)),
      total_bytes_(total_bytes),
      granularity_bytes_(granularity_bytes),
      driver_(std::move(driver)) {}

uint64_t CudaPageMapper::granularity_bytes() const { return granularity_bytes_; }
uint64_t CudaPageMapper::total_bytes() const { return total_bytes_; }
uint64_t CudaPageMapper::free_bytes() const { return cuda_free_bytes(ordinal_); }
std::string CudaPageMapper::name() const { return name_; }

}  // namespace memfit
