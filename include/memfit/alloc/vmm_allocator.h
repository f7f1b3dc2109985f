// memfit/alloc/vmm_allocator.h - a page-mapped pool: a large virtual range, physical pages mapped on demand.
//
// Design (as CUDA's cuMemAddressReserve + cuMemCreate/cuMemMap, 2 MiB granularity, or PyTorch's expandable
// segments): buffers are placed best-fit in a virtual range much larger than the device, so a free hole
// anywhere can serve a new buffer; a physical page is mapped while at least one live buffer touches it and
// unmapped when none does. Reserved memory (pool_bytes) is mapped pages only, so it stays within a page
// or two per hole of the bytes in use: the policy for traces that fragment other pools.
// Pages come from a `PageMapper` (memfit/device/page_mapper.h): CUDA's cuMemCreate/cuMemMap on a GPU
// (CudaPageMapper), or reservations of any DeviceMemory, so it runs on the simulated device too.
//
// Stream-ordered release: a frameworks frees a buffer while kernels queued on it may still run. Pages no live
// buffer touches stay mapped in a cache; an event recorded on each stream that used them marks that work.
// New allocations reuse cached pages first (no device call; another stream's pages only once its event is
// done), and cached pages are unmapped - after their events are done, never under queued work - when the
// cache passes `cache_bytes`, when mapping would pass the limit or the device is full, or on trim_cache().
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
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
  // Freed pages kept mapped for reuse, at most this many bytes (MEMFIT_VMM_CACHE in libmemfit_alloc.so);
  // absent = default_vmm_cache_bytes(device). 0 gives pages back as soon as their work has finished.
  std::optional<uint64_t> cache_bytes;
};

// The cache's default bound: 2% of the device (2.8 GiB on an H200).
uint64_t default_vmm_cache_bytes(uint64_t device_bytes);

class VmmAllocator final : public Allocator {
 public:
  // Pages from `mapper` (a CudaPageMapper on a GPU).
  VmmAllocator(std::unique_ptr<PageMapper> mapper, VmmOptions options = {});
  // Pages as reservations of `device` (which must outlive the allocator): the simulated device's way.
  VmmAllocator(DeviceMemory& device, VmmOptions options = {});
  ~VmmAllocator() override;
  VmmAllocator(const VmmAllocator&) = delete;
  VmmAllocator& operator=(const VmmAllocator&) = delete;

  // On the default stream (0).
  Expected<void*> allocate(uint64_t size_bytes, std::string_view tag = {}) override;
  // Frees on the stream the buffer was allocated on.
  Status deallocate(void* ptr) override;
  // On `stream` (a cudaStream_t as an integer): the buffer's work is ordered on that stream.
  Expected<void*> allocate_on(uint64_t size_bytes, uintptr_t stream);
  Status deallocate_on(void* ptr, std::optional<uintptr_t> stream);
  // Unmaps cached pages, oldest first, until at most `keep_bytes` are cached, waiting for the work queued on
  // them (memfit_empty_cache; a share group whose lease shrinks).
  Status trim_cache(uint64_t keep_bytes = 0);
  uint64_t cached_bytes() const;
  // The whole cache goes back (pages in use are never unmapped; the rest already went back when freed).
  uint64_t release_free_memory(uint64_t wanted_bytes) override;
  AllocatorStats stats() const override;
  void reset_peak() override;
  std::string name() const override;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

static_assert(DeviceAllocator<VmmAllocator>);

}  // namespace memfit
