// memfit/device/cuda_page_mapper.h - CUDA's virtual memory management as a PageMapper: cuMemAddressReserve,
// cuMemCreate + cuMemMap + cuMemSetAccess, cuMemUnmap, cuMemAddressFree, at the device's allocation
// granularity (2 MiB on NVIDIA datacenter GPUs).
//
// One-page maps (the pool's growth step) use physical handles made in batches and kept (cuMemCreate is the
// slow call); events come from a pool of cudaEvents (cudaEventDisableTiming). unmap does not wait for the
// device: the caller unmaps only what its events say is finished (VmmAllocator does).
//
// The driver functions come from cudart's cudaGetDriverEntryPointByVersion, so nothing links libcuda and the
// binary still starts on machines without a driver; create() says why it cannot be used there.
#pragma once

#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "memfit/core/status.h"
#include "memfit/device/page_mapper.h"

namespace memfit {

class CudaPageMapper final : public PageMapper {
 public:
  // kUnavailable without the CUDA toolkit at build time, without a GPU `ordinal`, or when the driver lacks
  // virtual memory management.
  static Expected<std::unique_ptr<CudaPageMapper>> create(int ordinal = 0);
  ~CudaPageMapper() override;

  uint64_t granularity_bytes() const override;
  Expected<uintptr_t> reserve_range(uint64_t size_bytes) override;
  Status free_range(uintptr_t base, uint64_t size_bytes) override;
  Status map(uintptr_t address, uint64_t size_bytes) override;
  Status unmap(uintptr_t address, uint64_t size_bytes) override;
  uint64_t total_bytes() const override;
  uint64_t free_bytes() const override;
  std::string name() const override;
  Expected<Event> record_event(uintptr_t stream) override;
  bool event_done(Event event) override;
  Status wait_event(Event event) override;
  void release_event(Event event) override;

  struct Driver;  // the driver entry points (defined where CUDA is built)

 private:
  CudaPageMapper(int ordinal, std::string name, uint64_t total_bytes, uint64_t granularity_bytes,
                 std::unique_ptr<Driver> driver);
  int ordinal_;
  std::string name_;
  uint64_t total_bytes_;
  uint64_t granularity_bytes_;
  std::unique_ptr<Driver> driver_;

  static constexpr int kHandleBatch = 8;           // cuMemCreate calls per refill of the spares
  static constexpr size_t kMaxSpareHandles = 16;   // 32 MiB of 2 MiB pages kept beyond the mapped ones
  std::mutex mu_;                                  // guards the pools below
  std::vector<unsigned long long> spare_handles_;  // CUmemGenericAllocationHandle, not mapped
  std::unordered_map<uintptr_t, unsigned long long> page_handles_;  // one-page mappings and their handles
  std::vector<void*> spare_events_;                                 // cudaEvent_t, recorded and released
};

}  // namespace memfit
