// memfit/device/device_memory.h - the platform layer: raw device memory ranges.
//
// A `DeviceMemory` is what cudaMalloc/cudaFree are to XLA's BFC allocator: it reserves and releases whole
// ranges and knows the device's total and free bytes. Allocators (memfit/alloc) sit on top of it.
// Implementations: SimulatedDevice (no GPU needed), CudaDevice (built with the CUDA toolkit).
// Implementations are thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "memfit/core/status.h"

namespace memfit {

class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;

  // Reserves `size_bytes` (> 0) of device memory, like cudaMalloc. Out of device memory is
  // kResourceExhausted with the driver's words.
  virtual Expected<void*> reserve(uint64_t size_bytes) = 0;
  // Releases a range returned by reserve(); `size_bytes` must be the size it was reserved with.
  virtual Status release(void* ptr, uint64_t size_bytes) = 0;

  virtual uint64_t total_bytes() const = 0;
  virtual uint64_t free_bytes() const = 0;
  virtual std::string name() const = 0;
  // True when the host may read and write the returned addresses (host-backed simulation, host memory).
  virtual bool is_host_accessible() const { return false; }

  // Streams and events, for allocators that take memory back before the device has finished with it (CUDA's
  // cudaEventRecord, cudaEventQuery, cudaEventSynchronize). An event recorded on `stream` (a cudaStream_t
  // as an integer; 0 = the default stream) marks the work queued there so far, and is done when that work
  // has finished. A device without asynchronous work (this default) finishes everything at once.
  using Event = uint64_t;
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
  // Whether work queued and not finished touches [address, +size_bytes): memory that may not be unmapped.
  virtual bool work_pending_on(uintptr_t address, uint64_t size_bytes) {
    (void)address;
    (void)size_bytes;
    return false;
  }
};

}  // namespace memfit
