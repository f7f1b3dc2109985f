#include "memfit/alloc/async_allocator.h"

#include <fmt/format.h>

#include <mutex>
#include <unordered_map>

#include "memfit/core/bytes.h"

#if MEMFIT_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace memfit {

struct AsyncAllocator::State {
  CudaDevice* device = nullptr;
  AsyncOptions options;
  mutable std::mutex mutex;
  std::unordered_map<void*, uint64_t> sizes;
  AllocatorStats stats;
#if MEMFIT_HAVE_CUDA
  cudaMemPool_t pool = nullptr;
#endif
};

AsyncAllocator::AsyncAllocator(std::unique_ptr<State> state) : state_(std::move(state)) {}
AsyncAllocator::~AsyncAllocator() = default;

std::string AsyncAllocator::name() const { return state_->options.name; }

void AsyncAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(state_->mutex);
  state_->stats.peak_bytes_in_use = state_->stats.bytes_in_use;
}

#if MEMFIT_HAVE_CUDA
Expected<std::unique_ptr<AsyncAllocator>> AsyncAllocator::create(CudaDevice& device, AsyncOptions options) {
  auto state = std::make_unique<State>();
  state->device = &device;
  if (options.name.empty()) options.name = fmt::format("GPU_{}_cuda_async", device.ordinal());
  if (options.limit_bytes == 0) options.limit_bytes = device.total_bytes();
  if (cudaError_t err = cudaSetDevice(device.ordinal()); err != cudaSuccess)
    return unavailable(fmt::format("cudaSetDevice({}): {}", device.ordinal(), cudaGetErrorString(err)));
  if (cudaError_t err = cudaDeviceGetDefaultMemPool(&state->pool, device.ordinal()); err != cudaSuccess)
    return unavailable(
        fmt::format("{} has no stream-ordered pool: {}", device.name(), cudaGetErrorString(err)));
  uint64_t threshold = options.release_threshold_bytes;
  if (cudaError_t err = cudaMemPoolSetAttribute(state->pool, cudaMemPoolAttrReleaseThreshold, &threshold);
      err != cudaSuccess)
    return unavailable(fmt::format("setting the pool's release threshold: {}", cudaGetErrorString(err)));
  state->stats.bytes_limit = options.limit_bytes;
  state->options = std::move(options);
  return std::unique_ptr<AsyncAllocator>(new AsyncAllocator(std::move(state)));
}

Expected<void*> AsyncAllocator::allocate(uint64_t size_bytes, std::string_view tag) {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.stats.bytes_in_use + size_bytes > s.options.limit_bytes) {
    return resource_exhausted(
        fmt::format("{} ran out of memory trying to allocate {}{}: {} in use of a {} limit (the limit is "
                    "enforced, unlike JAX's "
                    "cuda_async mode); raise XLA_CLIENT_MEM_FRACTION or make the peak smaller",
                    s.options.name, format_bytes(size_bytes), tag.empty() ? "" : fmt::format(" for {}", tag),
                    format_bytes(s.stats.bytes_in_use), format_bytes(s.options.limit_bytes)));
  }
  if (size_bytes == 0) size_bytes = 1;
  void* ptr = nullptr;
  (void)cudaSetDevice(s.device->ordinal());
  if (cudaError_t err = cudaMallocAsync(&ptr, size_bytes, cudaStreamPerThread); err != cudaSuccess) {
    (void)cudaGetLastError();
    return resource_exhausted(
        fmt::format("cudaMallocAsync({}) on {}: {}", size_bytes, s.device->name(), cudaGetErrorString(err)));
  }
  s.sizes.emplace(ptr, size_bytes);
  ++s.stats.num_allocs;
  s.stats.bytes_in_use += size_bytes;
  s.stats.peak_bytes_in_use = std::max(s.stats.peak_bytes_in_use, s.stats.bytes_in_use);
  s.stats.largest_alloc_size = std::max(s.stats.largest_alloc_size, size_bytes);
  return ptr;
}

Status AsyncAllocator::deallocate(void* ptr) {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mutex);
  auto it = s.sizes.find(ptr);
  if (it == s.sizes.end())
    return failed_precondition(fmt::format(
        "{}: deallocate({}) of a pointer it did not allocate or already freed", s.options.name, ptr));
  (void)cudaSetDevice(s.device->ordinal());
  if (cudaError_t err = cudaFreeAsync(ptr, cudaStreamPerThread); err != cudaSuccess)
    return invalid_argument(fmt::format("cudaFreeAsync({}): {}", ptr, cudaGetErrorString(err)));
  s.stats.bytes_in_use -= it->second;
  s.sizes.erase(it);
  return Status();
}

AllocatorStats AsyncAllocator::stats() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  AllocatorStats out = state_->stats;
  uint64_t reserved = 0, high = 0;
  if (cudaMemPoolGetAttribute(state_->pool, cudaMemPoolAttrReservedMemCurrent, &reserved) == cudaSuccess) {
    out.pool_bytes = reserved;
    out.bytes_reserved = reserved;
  }
  if (cudaMemPoolGetAttribute(state_->pool, cudaMemPoolAttrReservedMemHigh, &high) == cudaSuccess) {
    out.peak_pool_bytes = high;
    out.peak_bytes_reserved = high;
  }
  return out;
}
#else
Expected<std::unique_ptr<AsyncAllocator>> AsyncAllocator::create(CudaDevice&, AsyncOptions) {
  return unavailable("memfit was built without the CUDA toolkit: no cudaMallocAsync");
}
Expected<void*> AsyncAllocator::allocate(uint64_t, std::string_view) {
  return unavailable("built without CUDA");
}
Status AsyncAllocator::deallocate(void*) { return unavailable("built without CUDA"); }
AllocatorStats AsyncAllocator::stats() const { return state_->stats; }
#endif

}  // namespace memfit
