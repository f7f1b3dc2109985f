// The real GPU through CudaDevice, and XLA's BFC over it. Without a GPU (or without the CUDA toolkit at
// build time) every test here is skipped, saying why.
#include "memfit/device/cuda_device.h"

#include <gtest/gtest.h>

#include <chrono>

#include "memfit/alloc/async_allocator.h"
#include "memfit/alloc/xla_allocator.h"
#include "memfit/core/xla_env.h"

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

TEST(CudaDevice, XlaBfcOverTheGpu) {
  std::string reason;
  auto gpu = gpu_or_skip_reason(reason);
  if (!gpu) GTEST_SKIP() << "no GPU: " << reason;
  XlaAllocatorConfig config;
  config.preallocate = false;
  auto bfc = make_xla_allocator(config, *gpu, std::chrono::milliseconds(0));
  ASSERT_TRUE(bfc.ok()) << bfc.error().message();
  auto a = (*bfc)->allocate(1 << 20, "a");
  auto b = (*bfc)->allocate(3 << 20, "b");
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ((*bfc)->stats().bytes_in_use, (1u << 20) + (3u << 20));
  EXPECT_TRUE((*bfc)->deallocate(*a).ok());
  EXPECT_TRUE((*bfc)->deallocate(*b).ok());
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

TEST(AsyncAllocator, SaysWhyWithoutAGpu) {
  auto gpu = CudaDevice::create(0);
  if (gpu.ok()) GTEST_SKIP() << "a GPU is present: the refusal is for machines without one";
  EXPECT_EQ(gpu.error().code(), ErrorCode::kUnavailable);
  EXPECT_FALSE(gpu.error().message().empty());
}

}  // namespace
}  // namespace memfit
