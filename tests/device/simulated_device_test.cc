#include "memfit/device/simulated_device.h"

#include <gtest/gtest.h>

#include <cstring>

namespace memfit {
namespace {

std::unique_ptr<SimulatedDevice> make(uint64_t capacity, bool host_backed = false,
                                      uint64_t granularity = 512) {
  auto d = SimulatedDevice::create({capacity, granularity, host_backed, "sim"});
  EXPECT_TRUE(d.ok());
  return std::move(d).value();
}

TEST(SimulatedDevice, HandsOutDisjointRangesAndFailsLikeCudaMallocWhenFull) {
  auto d = make(1 << 20);
  auto a = d->reserve(300 << 10);
  auto b = d->reserve(300 << 10);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_GE(reinterpret_cast<uintptr_t>(*b), reinterpret_cast<uintptr_t>(*a) + (300 << 10));
  EXPECT_EQ(d->free_bytes(), (1u << 20) - (600u << 10));
  auto c = d->reserve(500 << 10);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().code(), ErrorCode::kResourceExhausted);
  EXPECT_NE(c.error().message().find("CUDA_ERROR_OUT_OF_MEMORY"), std::string::npos);
  EXPECT_TRUE(d->release(*a, 300 << 10).ok());
  EXPECT_TRUE(d->release(*b, 300 << 10).ok());
  EXPECT_EQ(d->free_bytes(), 1u << 20);
  // Freed ranges coalesce: the whole capacity is one range again.
  auto all = d->reserve(1 << 20);
  ASSERT_TRUE(all.ok());
  EXPECT_TRUE(d->release(*all, 1 << 20).ok());
}

TEST(SimulatedDevice, HugeCapacityCostsNothingAndRoundsToGranularity) {
  auto d = make(150109880320ull, false, 2 << 20);
  auto a = d->reserve(1);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(d->free_bytes(), 150109880320ull - (2 << 20));
  auto big = d->reserve(112583507968ull);
  ASSERT_TRUE(big.ok());
  EXPECT_FALSE(d->reserve(112583507968ull).ok());
  EXPECT_FALSE(d->reserve(~uint64_t{0}).ok());
}

TEST(SimulatedDevice, BadReleasesAreRejected) {
  auto d = make(1 << 20);
  auto a = d->reserve(4096);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(d->release(static_cast<char*>(*a) + 512, 4096).error().code(), ErrorCode::kFailedPrecondition);
  EXPECT_EQ(d->release(*a, 8192).error().code(), ErrorCode::kFailedPrecondition);
  EXPECT_TRUE(d->release(*a, 4096).ok());
  EXPECT_FALSE(d->release(*a, 4096).ok());  // twice
  EXPECT_FALSE(d->reserve(0).ok());
}

TEST(SimulatedDevice, HostBackedMemoryIsWritable) {
  auto d = make(64 << 20, true);
  ASSERT_TRUE(d->is_host_accessible());
  auto a = d->reserve(1 << 20);
  ASSERT_TRUE(a.ok());
  std::memset(*a, 0xab, 1 << 20);
  EXPECT_EQ(static_cast<unsigned char*>(*a)[12345], 0xab);
  EXPECT_TRUE(d->release(*a, 1 << 20).ok());
}

TEST(SimulatedDevice, ZeroCapacityIsAnError) {
  EXPECT_FALSE(SimulatedDevice::create({0, 512, false, "x"}).ok());
}

}  // namespace
}  // namespace memfit
