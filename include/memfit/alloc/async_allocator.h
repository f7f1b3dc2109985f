// memfit/alloc/async_allocator.h - cudaMallocAsync's stream-ordered pool with the two things JAX's cuda_async
// mode lacks (../shared/FACTS.md §2): a release threshold, so a synchronize does not hand the pool back to
// the driver (left at 0, a 1 GiB alloc+free costs ~3 ms), and the limit enforced (JAX let a 135 GB array
// through a 112.6 GB limit). Needs the CUDA toolkit and a GPU; create() says why not otherwise.
#pragma once

#include <memory>
#include <string>

#include "memfit/alloc/allocator.h"
#include "memfit/device/cuda_device.h"

namespace memfit {

struct AsyncOptions {
  std::string name;                          // default "GPU_<n>_cuda_async"
  uint64_t limit_bytes = 0;                  // 0 = the device's total
  uint64_t release_threshold_bytes = ~0ull;  // keep everything the pool has mapped
};

class AsyncAllocator final : public Allocator {
 public:
  static Expected<std::unique_ptr<AsyncAllocator>> create(CudaDevice& device, AsyncOptions options = {});
  ~AsyncAllocator() override;

  Expected<void*> allocate(uint64_t size_bytes, std::string_view tag = {}) override;
  Status deallocate(void* ptr) override;
  AllocatorStats stats() const override;
  void reset_peak() override;
  std::string name() const override;

 private:
  struct State;
  explicit AsyncAllocator(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

static_assert(DeviceAllocator<AsyncAllocator>);

}  // namespace memfit
