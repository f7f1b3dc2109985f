// memfit/device/page_mapper.h - the platform layer for page-mapped pools: address ranges and the physical
// pages behind them.
//
// What CUDA's virtual memory management is to a VMM pool (and to PyTorch's expandable segments):
//   reserve_range  = cuMemAddressReserve   (address space only, no memory)
//   map            = cuMemCreate + cuMemMap + cuMemSetAccess (new physical memory behind an address range)
//   unmap          = cuMemUnmap            (the memory goes back to the device)
//   free_range     = cuMemAddressFree
// Addresses and sizes given to map/unmap are multiples of granularity_bytes(); a range is unmapped exactly
// as it was mapped. Implementations: make_device_page_mapper (pages from any DeviceMemory, so it runs on
// the simulated device) and CudaPageMapper (memfit/device/cuda_page_mapper.h). Thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "memfit/core/status.h"
#include "memfit/device/device_memory.h"

namespace memfit {

class PageMapper {
 public:
  virtual ~PageMapper() = default;

  virtual uint64_t granularity_bytes() const = 0;
  virtual Expected<uintptr_t> reserve_range(uint64_t size_bytes) = 0;
  virtual Status free_range(uintptr_t base, uint64_t size_bytes) = 0;
  // Out of device memory is kResourceExhausted with the driver's words.
  virtual Status map(uintptr_t address, uint64_t size_bytes) = 0;
  virtual Status unmap(uintptr_t address, uint64_t size_bytes) = 0;

  virtual uint64_t total_bytes() const = 0;
  virtual uint64_t free_bytes() const = 0;
  virtual std::string name() const = 0;

  // Stream order (see DeviceMemory::record_event): a pool that frees while work is queued records an event
  // and unmaps only once it is done. The default is a device with no asynchronous work.
  using Event = DeviceMemory::Event;
  virtual Expected<Event> record_event(uintptr_t stream) {
    (void)stream;
    return Event{0};
  }
  virtual bool event_done(Event event) {
    (void)event;
    return true;
  }
  virtual Status wait_event(Event event) {
    (void)event;
    return ok_status();
  }
  virtual void release_event(Event event) { (void)event; }
};

// Pages as reservations of `device` (one per map call; `device` must outlive the mapper). The address
// range is host memory (mmap'd, pages dropped on unmap) when the device is host-accessible, so tests can
// write through it; otherwise it is address space no one dereferences. Events are the device's; an unmap
// of memory that queued work still touches is refused (the simulated device counts such attempts).
std::unique_ptr<PageMapper> make_device_page_mapper(DeviceMemory& device, uint64_t granularity_bytes);

}  // namespace memfit
