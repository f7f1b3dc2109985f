// The real GPU through CudaDevice and CudaPageMapper, and every allocator over it. Without a GPU (or
// without the CUDA toolkit at build time) every test here is skipped, saying why.
#include "memfit/device/cuda_device.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <vector>

#include "memfit/alloc/async_allocator.h"
#include "memfit/alloc/bfc_allocator.h"
#include "memfit/alloc/platform_allocator.h"
#include "memfit/alloc/vmm_allocator.h"
#include "memfit/alloc/xla_allocator.h"
#include "memfit/core/xla_env.h"
#include "memfit/device/cuda_page_mapper.h"
#include "memfit/device/simulated_device.h"

#if MEMFIT_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace memfit {
namespace {

std::unique_ptr<CudaDevice> gpu_or_skip_reason(std::string& reason) {
  auto gpu = CudaDevice::create(0);
  if (!gpu.ok()) {
    reason = gpu.error().message();
    return nullptr;
  }
  return std::move(*gpu);
}

TEST(CudaDevice, ReservesAndReleasesRealMemory) {
  std::string reason;
  auto gpu = gpu_or_skip_reason(reason);
  if (!gpu) GTEST_SKIP() << "no GPU: " << reason;
  const uint64_t before = gpu->free_bytes();
  auto p = gpu->reserve(256ull << 20);
  ASSERT_TRUE(p.ok()) << p.error().message();
  EXPECT_LE(gpu->free_bytes(), before - (256ull << 20) + (64ull << 20));  // the driver's bookkeeping aside
  EXPECT_TRUE(gpu->release(*p, 256ull << 20).ok());
  auto too_much = gpu->reserve(gpu->total_bytes() * 2);
  ASSERT_FALSE(too_much.ok());
  EXPECT_EQ(too_much.error().code(), ErrorCode::kResourceExhausted);
  EXPECT_NE(too_much.error().message().find("cudaMalloc"), std::string::npos);
}

// XLA's growing pool over `device`: 1 MiB takes half of the first 2 MiB region (split: the chunk is >= 2x
// the request); 3 MiB takes the whole next region, 4 MiB, unsplit (4 < 2 x 3 and the 1 MiB excess is under
// 128 MiB), and XLA counts the whole chunk in bytes_in_use. The same figures on the simulated device and the
// GPU: the rules do not depend on where the memory is.
void expect_xla_growth_over(DeviceMemory& device) {
  XlaAllocatorConfig config;
  config.preallocate = false;
  auto bfc = make_xla_allocator(config, device, std::chrono::milliseconds(0));
  ASSERT_TRUE(bfc.ok()) << bfc.error().message();
  auto a = (*bfc)->allocate(1 << 20, "a");
  auto b = (*bfc)->allocate(3 << 20, "b");
  ASSERT_TRUE(a.ok() && b.ok());
  const AllocatorStats s = (*bfc)->stats();
  EXPECT_EQ(s.bytes_in_use, (1u << 20) + (4u << 20));
  EXPECT_EQ(s.pool_bytes, (2u << 20) + (4u << 20));
  EXPECT_EQ(s.largest_free_block_bytes, 1u << 20);
  EXPECT_TRUE((*bfc)->deallocate(*a).ok());
  EXPECT_TRUE((*bfc)->deallocate(*b).ok());
  EXPECT_EQ((*bfc)->stats().bytes_in_use, 0u);
}

TEST(XlaBfcGrowth, SameFiguresOnTheSimulatedDevice) {
  auto device = SimulatedDevice::create(SimulatedDeviceOptions{.capacity_bytes = 16ull << 30});
  ASSERT_TRUE(device.ok()) << device.error().message();
  expect_xla_growth_over(**device);
}

TEST(CudaDevice, XlaBfcOverTheGpu) {
  std::string reason;
  auto gpu = gpu_or_skip_reason(reason);
  if (!gpu) GTEST_SKIP() << "no GPU: " << reason;
  expect_xla_growth_over(*gpu);
}

TEST(AsyncAllocator, EnforcesItsLimitAndKeepsItsPool) {
  std::string reason;
  auto gpu = gpu_or_skip_reason(reason);
  if (!gpu) GTEST_SKIP() << "no GPU: " << reason;
  AsyncOptions o;
  o.limit_bytes = 1ull << 30;
  auto pool = AsyncAllocator::create(*gpu, o);
  ASSERT_TRUE(pool.ok()) << pool.error().message();
  auto a = (*pool)->allocate(512ull << 20, "a");
  ASSERT_TRUE(a.ok()) << a.error().message();
  auto over = (*pool)->allocate(768ull << 20, "b");  // fits the GPU, not the limit
  ASSERT_FALSE(over.ok());
  EXPECT_NE(over.error().message().find("limit is enforced"), std::string::npos);
  EXPECT_TRUE((*pool)->deallocate(*a).ok());
  const AllocatorStats s = (*pool)->stats();
  EXPECT_EQ(s.bytes_in_use, 0u);
  EXPECT_EQ(s.peak_bytes_in_use, 512ull << 20);
  EXPECT_EQ(s.bytes_limit, 1ull << 30);
  EXPECT_FALSE((*pool)->deallocate(*a).ok());  // a double free is an error, not a crash
}

#if MEMFIT_HAVE_CUDA
// Writes `byte` over [p, p + n) on the GPU and reads back the first and last bytes.
::testing::AssertionResult round_trips(void* p, uint64_t n, unsigned char byte) {
  if (cudaMemset(p, byte, n) != cudaSuccess) return ::testing::AssertionFailure() << "cudaMemset failed";
  unsigned char first = 0, last = 0;
  auto* bytes = static_cast<unsigned char*>(p);
  if (cudaMemcpy(&first, bytes, 1, cudaMemcpyDeviceToHost) != cudaSuccess ||
      cudaMemcpy(&last, bytes + n - 1, 1, cudaMemcpyDeviceToHost) != cudaSuccess)
    return ::testing::AssertionFailure() << "cudaMemcpy failed";
  if (first != byte || last != byte) return ::testing::AssertionFailure() << "read back other bytes";
  return ::testing::AssertionSuccess();
}

TEST(CudaPageMapper, MapsPagesTheGpuCanUse) {
  auto mapper = CudaPageMapper::create(0);
  if (!mapper.ok()) GTEST_SKIP() << "no GPU: " << mapper.error().message();
  const uint64_t page = (*mapper)->granularity_bytes();
  ASSERT_GT(page, 0u);
  auto range = (*mapper)->reserve_range(64 * page);
  ASSERT_TRUE(range.ok()) << range.error().message();
  const uint64_t free_before = (*mapper)->free_bytes();
  ASSERT_TRUE((*mapper)->map(*range + 5 * page, 3 * page).ok());
  EXPECT_LE((*mapper)->free_bytes(), free_before - 3 * page);
  EXPECT_TRUE(round_trips(reinterpret_cast<void*>(*range + 5 * page), 3 * page, 0x5a));
  ASSERT_TRUE((*mapper)->unmap(*range + 5 * page, 3 * page).ok());
  EXPECT_GE((*mapper)->free_bytes() + page, free_before);  // the driver's own bookkeeping aside
  EXPECT_TRUE((*mapper)->free_range(*range, 64 * page).ok());
}

// A buffer freed while the GPU still writes it (what PyTorch does: free when the host drops the tensor,
// kernels still queued): the pages must stay mapped until the work is done. Unmapping at once was an
// illegal address on an H200 that killed the context (the GPT-2 loop on the vmm allocator).
TEST(CudaPageMapper, FreeWhileTheGpuStillWritesIsSafe) {
  auto mapper = CudaPageMapper::create(0);
  if (!mapper.ok()) GTEST_SKIP() << "no GPU: " << mapper.error().message();
  VmmOptions o;
  o.limit_bytes = 4ull << 30;
  VmmAllocator vmm(std::move(*mapper), o);
  constexpr uint64_t kBytes = 1ull << 30;
  auto p = vmm.allocate(kBytes, "busy");
  ASSERT_TRUE(p.ok()) << p.error().message();
  for (int i = 0; i < 20; ++i)  // ~10 ms of writes queued (1 GiB each at ~2-4 TB/s)
    ASSERT_EQ(cudaMemsetAsync(*p, i, kBytes, nullptr), cudaSuccess);
  ASSERT_TRUE(vmm.deallocate(*p).ok());  // the pages go to the cache with an event on the stream
  ASSERT_TRUE(vmm.trim_cache(0).ok());   // unmaps them - only once the memsets are done
  EXPECT_EQ(vmm.stats().pool_bytes, 0u);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess) << cudaGetErrorString(cudaGetLastError());
  auto again = vmm.allocate(64 << 20, "after");
  ASSERT_TRUE(again.ok()) << again.error().message();
  EXPECT_TRUE(round_trips(*again, 64 << 20, 0x3c));
  EXPECT_TRUE(vmm.deallocate(*again).ok());
}

// The allocator contract (tests/alloc/conformance_test.cc) on the real GPU, for every allocator: aligned,
// non-overlapping, usable memory; stats that add up; reuse after free; the limit; double and foreign frees
// refused.
TEST(GpuConformance, EveryAllocatorOnTheGpu) {
  std::string reason;
  auto gpu = gpu_or_skip_reason(reason);
  if (!gpu) GTEST_SKIP() << "no GPU: " << reason;
  constexpr uint64_t kLimit = 1ull << 30;
  struct Kind {
    const char* name;
    std::function<Expected<std::unique_ptr<Allocator>>()> make;
  };
  auto bfc = [&](bool growth) -> Expected<std::unique_ptr<Allocator>> {
    BfcOptions o;
    o.memory_limit_bytes = kLimit;
    o.allow_growth = growth;
    o.retry_wait = std::chrono::milliseconds(0);
    return std::unique_ptr<Allocator>(std::make_unique<BfcAllocator>(*gpu, o));
  };
  const std::vector<Kind> kinds = {
      {"bfc", [&] { return bfc(false); }},
      {"bfc-growth", [&] { return bfc(true); }},
      {"platform",
       [&]() -> Expected<std::unique_ptr<Allocator>> {
         PlatformOptions o;
         o.limit_bytes = kLimit;
         return std::unique_ptr<Allocator>(std::make_unique<PlatformAllocator>(*gpu, o));
       }},
      {"cuda_async",
       [&]() -> Expected<std::unique_ptr<Allocator>> {
         AsyncOptions o;
         o.limit_bytes = kLimit;
         MEMFIT_ASSIGN_OR_RETURN(auto a, AsyncAllocator::create(*gpu, o));
         return std::unique_ptr<Allocator>(std::move(a));
       }},
      {"vmm",
       [&]() -> Expected<std::unique_ptr<Allocator>> {
         MEMFIT_ASSIGN_OR_RETURN(auto mapper, CudaPageMapper::create(0));
         VmmOptions o;
         o.limit_bytes = kLimit;
         return std::unique_ptr<Allocator>(std::make_unique<VmmAllocator>(std::move(mapper), o));
       }},
  };
  for (const Kind& kind : kinds) {
    SCOPED_TRACE(kind.name);
    auto made = kind.make();
    ASSERT_TRUE(made.ok()) << made.error().message();
    Allocator& a = **made;
    const std::vector<uint64_t> sizes = {1, 256, 1000, 1 << 20, (3 << 20) + 17, 64 << 20};
    std::vector<std::pair<char*, uint64_t>> live;
    for (uint64_t size : sizes) {
      auto p = a.allocate(size, "test");
      ASSERT_TRUE(p.ok()) << p.error().message();
      EXPECT_EQ(reinterpret_cast<uintptr_t>(*p) % kAllocationAlignment, 0u);
      EXPECT_TRUE(round_trips(*p, size, static_cast<unsigned char>(live.size() + 1)));
      live.emplace_back(static_cast<char*>(*p), size);
    }
    std::vector<std::pair<char*, uint64_t>> sorted = live;
    std::sort(sorted.begin(), sorted.end());
    for (size_t i = 1; i < sorted.size(); ++i)
      EXPECT_LE(sorted[i - 1].first + sorted[i - 1].second, sorted[i].first) << "overlap";
    AllocatorStats s = a.stats();
    EXPECT_EQ(s.num_allocs, sizes.size());
    EXPECT_GE(s.bytes_in_use, (64u << 20) + (3u << 20) + (1u << 20));
    EXPECT_LE(s.bytes_in_use, s.peak_bytes_in_use);
    auto over = a.allocate(kLimit + 1, "too big");
    ASSERT_FALSE(over.ok());
    EXPECT_EQ(over.error().code(), ErrorCode::kResourceExhausted);
    for (const auto& [p, size] : live) EXPECT_TRUE(a.deallocate(p).ok());
    EXPECT_EQ(a.stats().bytes_in_use, 0u);
    EXPECT_EQ(a.deallocate(live.front().first).error().code(), ErrorCode::kFailedPrecondition);
    auto again = a.allocate(64 << 20, "reuse");
    ASSERT_TRUE(again.ok()) << again.error().message();
    EXPECT_TRUE(round_trips(*again, 64 << 20, 0x77));
    EXPECT_TRUE(a.deallocate(*again).ok());
  }
}
#endif

TEST(AsyncAllocator, SaysWhyWithoutAGpu) {
  auto gpu = CudaDevice::create(0);
  if (gpu.ok()) GTEST_SKIP() << "a GPU is present: the refusal is for machines without one";
  EXPECT_EQ(gpu.error().code(), ErrorCode::kUnavailable);
  EXPECT_FALSE(gpu.error().message().empty());
}

}  // namespace
}  // namespace memfit
