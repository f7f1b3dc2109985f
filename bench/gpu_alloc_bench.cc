// GPU allocator benchmarks, side by side in one run on a real GPU (built when the CUDA toolkit is found):
//   - pool hit: XLA's BFC over the GPU vs a warm cudaMallocAsync pool vs cudaMalloc, per alloc+free pair
//     (issue target: the BFC hit >= 10x faster than warm cudaMallocAsync);
//   - growth: the VMM allocator mapping fresh pages (cuMemCreate + cuMemMap) for each buffer vs cudaMalloc,
//     per mapped MiB (target: no slower than cudaMalloc).
// Without a GPU every benchmark reports "no GPU: <why>" as its error and the summary says so.
#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>

#include <memory>
#include <string>

#include "memfit/alloc/bfc_allocator.h"
#include "memfit/alloc/vmm_allocator.h"
#include "memfit/device/cuda_device.h"
#include "memfit/device/cuda_page_mapper.h"
#include "timing_reporter.h"

namespace memfit {
namespace {

struct Gpu {
  std::unique_ptr<CudaDevice> device;
  std::unique_ptr<BfcAllocator> bfc;
  std::unique_ptr<VmmAllocator> vmm;         // no cache: every pair maps and unmaps (growth)
  std::unique_ptr<VmmAllocator> vmm_cached;  // the default cache: a pair reuses mapped pages
  cudaMemPool_t pool = nullptr;
  std::string missing;  // why there is no GPU to measure

  Gpu() {
    auto d = CudaDevice::create(0);
    if (!d.ok()) {
      missing = d.error().message();
      return;
    }
    device = std::move(*d);
    BfcOptions o;
    o.memory_limit_bytes = 8ull << 30;
    o.retry_wait = std::chrono::milliseconds(0);
    bfc = std::make_unique<BfcAllocator>(*device, o);
    auto mapper = CudaPageMapper::create(0);
    if (!mapper.ok()) {
      missing = mapper.error().message();
      return;
    }
    VmmOptions v;
    v.limit_bytes = 8ull << 30;
    v.cache_bytes = 0;
    vmm = std::make_unique<VmmAllocator>(std::move(*mapper), v);
    auto mapper2 = CudaPageMapper::create(0);
    if (!mapper2.ok()) {
      missing = mapper2.error().message();
      return;
    }
    v.cache_bytes.reset();
    vmm_cached = std::make_unique<VmmAllocator>(std::move(*mapper2), v);
    // The warm cudaMallocAsync pool: everything it maps stays mapped (FACTS.md §2: left at 0, each
    // synchronize returns memory and the next allocation pays to map it again).
    cudaDeviceGetDefaultMemPool(&pool, 0);
    uint64_t keep = ~0ull;
    cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
  }
};

Gpu& gpu() {
  static Gpu g;
  return g;
}

bool skip_without_gpu(benchmark::State& state) {
  if (!gpu().missing.empty()) {
    state.SkipWithError(("no GPU: " + gpu().missing).c_str());
    return true;
  }
  return false;
}

void pair_loop(benchmark::State& state, Allocator& a) {
  const auto size = static_cast<uint64_t>(state.range(0));
  for (auto _ : state) {
    auto p = a.allocate(size);
    benchmark::DoNotOptimize(p);
    if (!p.ok() || !a.deallocate(*p).ok()) state.SkipWithError("allocation failed");
  }
}

void BM_GpuBfcHit(benchmark::State& state) {
  if (!skip_without_gpu(state)) pair_loop(state, *gpu().bfc);
}

void BM_GpuVmmGrowth(benchmark::State& state) {
  // Every pair maps (a one-page map takes a kept handle: cuMemMap + cuMemSetAccess) and, its event done,
  // unmaps its pages.
  if (!skip_without_gpu(state)) pair_loop(state, *gpu().vmm);
}

void BM_GpuVmmCacheHit(benchmark::State& state) {
  if (!skip_without_gpu(state)) pair_loop(state, *gpu().vmm_cached);  // the pages stay mapped between pairs
}

void BM_GpuCudaMallocAsyncWarm(benchmark::State& state) {
  if (skip_without_gpu(state)) return;
  const auto size = static_cast<size_t>(state.range(0));
  void* p = nullptr;
  cudaMallocAsync(&p, size, nullptr);  // warm the pool at this size
  cudaFreeAsync(p, nullptr);
  cudaStreamSynchronize(nullptr);
  for (auto _ : state) {
    if (cudaMallocAsync(&p, size, nullptr) != cudaSuccess || cudaFreeAsync(p, nullptr) != cudaSuccess)
      state.SkipWithError("cudaMallocAsync failed");
  }
  cudaStreamSynchronize(nullptr);
}

void BM_GpuCudaMalloc(benchmark::State& state) {
  if (skip_without_gpu(state)) return;
  const auto size = static_cast<size_t>(state.range(0));
  for (auto _ : state) {
    void* p = nullptr;
    if (cudaMalloc(&p, size) != cudaSuccess || cudaFree(p) != cudaSuccess)
      state.SkipWithError("cudaMalloc failed");
  }
}

BENCHMARK(BM_GpuBfcHit)->Arg(256)->Arg(1 << 20)->Arg(64 << 20);
BENCHMARK(BM_GpuCudaMallocAsyncWarm)->Arg(256)->Arg(1 << 20)->Arg(64 << 20);
BENCHMARK(BM_GpuCudaMalloc)->Arg(256)->Arg(1 << 20)->Arg(2 << 20)->Arg(64 << 20)->Arg(1 << 30);
BENCHMARK(BM_GpuVmmGrowth)->Arg(2 << 20)->Arg(64 << 20)->Arg(1 << 30);
BENCHMARK(BM_GpuVmmCacheHit)->Arg(2 << 20)->Arg(64 << 20);

// The two targets as ratios of medians from this run.
class GpuReporter : public TimingReporter {
  void summarize(std::ostream& out, const std::map<std::string, double>& times) override {
    if (!gpu().missing.empty()) {
      out << "\nno GPU: " << gpu().missing << " - nothing was measured\n";
      return;
    }
    auto ratio = [&](const std::string& a, const std::string& b) -> double {
      auto x = times.find(a), y = times.find(b);
      return x == times.end() || y == times.end() || x->second <= 0 ? 0 : y->second / x->second;
    };
    out << "\nBFC pool hit vs warm cudaMallocAsync (times faster; target >= 10):\n";
    for (const char* size : {"256", "1048576", "67108864"})
      out << "  " << size << " B: "
          << ratio(std::string("BM_GpuBfcHit/") + size, std::string("BM_GpuCudaMallocAsyncWarm/") + size)
          << "x\n";
    out << "VMM growth vs cudaMalloc per mapped MiB (cudaMalloc time / VMM time; target >= 1):\n";
    for (const char* size : {"2097152", "67108864", "1073741824"})
      out << "  " << size
          << " B: " << ratio(std::string("BM_GpuVmmGrowth/") + size, std::string("BM_GpuCudaMalloc/") + size)
          << "x\n";
    out << "VMM pair on cached pages vs its growth pair (times faster):\n";
    for (const char* size : {"2097152", "67108864"})
      out << "  " << size
          << " B: " << ratio(std::string("BM_GpuVmmCacheHit/") + size, std::string("BM_GpuVmmGrowth/") + size)
          << "x\n";
  }
};

}  // namespace
}  // namespace memfit

int main(int argc, char** argv) {
  return memfit::run_benchmarks<memfit::GpuReporter>(argc, argv,
                                                     memfit::Repetitions::kMedianOfFiveInterleaved);
}
