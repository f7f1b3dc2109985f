// memfit/alloc/vmm_allocator.h - a page-mapped pool: a large virtual range, physical pages mapped on demand.
//
// Design (as CUDA's cuMemAddressReserve + cuMemCreate/cuMemMap, 2 MiB granularity, or PyTorch's expandable
// segments): buffers are placed best-fit in a virtual range much larger than the device, so a free hole
// anywhere can serve a new buffer; a physical page is mapped while at least one live buffer touches it and
// unmapped when none does. Reserved memory (pool_bytes) is mapped pages only, so it stays within a page
// or two per hole of the bytes in use: the policy for traces that fragment other pools.
// Pages come from a `PageMapper` (memfit/device/page_mapper.h): CUDA's cuMemCreate/cuMemMap on a GPU
// (CudaPageMapper), or reservations of any DeviceMemory, so it runs on the simulated device too.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "memfit/alloc/allocator.h"
#include "memfit/device/device_memory.h"
#include "memfit/device/page_mapper.h"

namespace memfit {

struct VmmOptions {
  std::string name = "GPU_0_vmm";
  uint64_t page_bytes = 2ull << 20;  // rounded up to a multiple of the mapper's granularity
  uint64_t limit_bytes = 0;          // most physical bytes mapped at once; 0 = the device's capacity
  uint64_t virtual_bytes = 0;        // virtual range; 0 = four times the device's capacity
};

class VmmAllocator final : public Allocator {
 public:
  // Pages from `mapper` (a CudaPageMapper on a GPU).
  VmmAllocator(std::unique_ptr<PageMapper> mapper, VmmOptions options = {});
  // Pages as reservations of `device` (which must outlive the allocator): the simulated device's way.
  VmmAllocator(DeviceMemory& device, VmmOptions options = {});
  ~VmmAllocator() override;
  VmmAllocator(const VmmAllocator&) = delete;
  VmmAllocator& operator=(const VmmAllocator&) = delete;

  Expected<void*> allocate(uint64_t size_bytes, std::string_view tag = {}) override;
  Status deallocate(void* ptr) override;
  AllocatorStats stats() const override;
  void reset_peak() override;
  std::string name() const override;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

static_assert(DeviceAllocator<VmmAllocator>);

}  // namespace memfit
