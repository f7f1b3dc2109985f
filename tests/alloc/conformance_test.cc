// One conformance suite, run against every allocator (STYLE.md 7): the contract of memfit/alloc/allocator.h.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "allocator_kinds.h"
#include "memfit/alloc/oom_report.h"
#include "memfit/core/json.h"

namespace memfit::testing {
namespace {

constexpr uint64_t kDeviceBytes = 256ull << 20;
constexpr uint64_t kLimitBytes = 64ull << 20;

template <typename Kind>
class AllocatorConformance : public ::testing::Test {
 protected:
  void SetUp() override {
    device_ = host_backed_device(kDeviceBytes);
    allocator_ = Kind::make(*device_, kLimitBytes);
  }
  Allocator& a() { return *allocator_; }
  void* must_allocate(uint64_t size, std::string_view tag = {}) {
    auto p = allocator_->allocate(size, tag);
    EXPECT_TRUE(p.ok()) << size << ": " << (p.ok() ? "" : p.error().message());
    return p.ok() ? *p : nullptr;
  }

  std::unique_ptr<SimulatedDevice> device_;
  std::unique_ptr<Allocator> allocator_;
};

using Kinds = ::testing::Types<BfcPreallocated, BfcGrowth, BfcGrowthGc, Platform, Vmm>;
TYPED_TEST_SUITE(AllocatorConformance, Kinds);

TYPED_TEST(AllocatorConformance, ZeroSizeIsNullAndFreeingNullIsANoOp) {
  auto p = this->a().allocate(0);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(*p, nullptr);
  EXPECT_TRUE(this->a().deallocate(nullptr).ok());
  EXPECT_EQ(this->a().stats().num_allocs, 0u);
}

TYPED_TEST(AllocatorConformance, PointersAreAlignedAndNeverOverlap) {
  std::mt19937_64 rng(7);
  std::vector<std::pair<uintptr_t, uint64_t>> live;
  for (int i = 0; i < 400; ++i) {
    const uint64_t size = 1 + rng() % (64 << 10);
    void* p = this->must_allocate(size);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % kAllocationAlignment, 0u);
    std::memset(p, static_cast<int>(i & 0xff), size);
    live.emplace_back(reinterpret_cast<uintptr_t>(p), size);
  }
  std::sort(live.begin(), live.end());
  for (size_t i = 1; i < live.size(); ++i) {
    EXPECT_GE(live[i].first, live[i - 1].first + live[i - 1].second)
        << "allocations " << i - 1 << " and " << i;
  }
  for (auto [p, size] : live) EXPECT_TRUE(this->a().deallocate(reinterpret_cast<void*>(p)).ok());
}

TYPED_TEST(AllocatorConformance, StatsAreConsistent) {
  std::vector<void*> ptrs;
  uint64_t requested = 0;
  for (uint64_t size : {1ull, 255ull, 256ull, 1000ull, 1ull << 20, 3ull << 20}) {
    ptrs.push_back(this->must_allocate(size));
    requested += size;
  }
  AllocatorStats s = this->a().stats();
  EXPECT_EQ(s.num_allocs, 6u);
  EXPECT_GE(s.bytes_in_use, requested);
  EXPECT_LE(s.bytes_in_use, requested + 6 * kAllocationAlignment + (3ull << 20));  // rounding, bounded
  EXPECT_EQ(s.peak_bytes_in_use, s.bytes_in_use);
  EXPECT_GE(s.largest_alloc_size, 3ull << 20);
  if (s.pool_bytes) {
    EXPECT_GE(*s.pool_bytes, s.bytes_in_use);
  }
  if (s.bytes_limit) {
    EXPECT_EQ(*s.bytes_limit, kLimitBytes);
  }
  const uint64_t peak = s.bytes_in_use;
  for (void* p : ptrs) ASSERT_TRUE(this->a().deallocate(p).ok());
  s = this->a().stats();
  EXPECT_EQ(s.bytes_in_use, 0u);
  EXPECT_EQ(s.peak_bytes_in_use, peak);
  this->a().reset_peak();
  EXPECT_EQ(this->a().stats().peak_bytes_in_use, 0u);
  void* p = this->must_allocate(4096);
  EXPECT_EQ(this->a().stats().peak_bytes_in_use, this->a().stats().bytes_in_use);
  EXPECT_TRUE(this->a().deallocate(p).ok());
  const Json j = this->a().stats().to_json();
  EXPECT_TRUE(j.contains("num_allocs") && j.contains("bytes_in_use") && j.contains("peak_bytes_in_use") &&
              j.contains("largest_alloc_size") && j.contains("largest_free_block_bytes"));
}

TYPED_TEST(AllocatorConformance, MemoryIsReusedAfterFree) {
  void* first = this->must_allocate(8 << 20);
  ASSERT_TRUE(this->a().deallocate(first).ok());
  const uint64_t device_free = this->device_->free_bytes();
  for (int i = 0; i < 100; ++i) {
    void* p = this->must_allocate(8 << 20);
    ASSERT_NE(p, nullptr);
    ASSERT_TRUE(this->a().deallocate(p).ok());
  }
  EXPECT_EQ(this->device_->free_bytes(), device_free);  // no device memory leaked or newly held
}

TYPED_TEST(AllocatorConformance, TheLimitIsEnforced) {
  auto over = this->a().allocate(kLimitBytes + 1, "too_big");
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.error().code(), ErrorCode::kResourceExhausted);
  ASSERT_NE(over.error().detail(), nullptr);
  const auto* report = dynamic_cast<const OomReport*>(over.error().detail());
  ASSERT_NE(report, nullptr);
  EXPECT_EQ(report->requested_bytes, kLimitBytes + 1);
  EXPECT_FALSE(report->suggestions.empty());
  // Fill up to the limit with 1 MiB buffers; the total never passes the limit.
  std::vector<void*> ptrs;
  while (true) {
    auto p = this->a().allocate(1 << 20, "fill");
    if (!p.ok()) {
      EXPECT_EQ(p.error().code(), ErrorCode::kResourceExhausted);
      break;
    }
    ptrs.push_back(*p);
    ASSERT_LE(ptrs.size(), kLimitBytes >> 20);
  }
  EXPECT_GE(ptrs.size(), (kLimitBytes >> 20) - 2);
  EXPECT_LE(this->a().stats().bytes_in_use, kLimitBytes);
  ASSERT_TRUE(this->a().deallocate(ptrs.back()).ok());
  ptrs.pop_back();
  EXPECT_NE(this->must_allocate(1 << 20), nullptr);  // freed space serves again
}

TYPED_TEST(AllocatorConformance, HugeRequestsFailCleanly) {
  for (uint64_t size : {kDeviceBytes + 1, uint64_t{1} << 62, (uint64_t{1} << 63) + 1, ~uint64_t{0}}) {
    auto p = this->a().allocate(size);
    ASSERT_FALSE(p.ok()) << size;
    EXPECT_EQ(p.error().code(), ErrorCode::kResourceExhausted);
  }
  EXPECT_EQ(this->a().stats().bytes_in_use, 0u);
  EXPECT_NE(this->must_allocate(1024), nullptr);
}

TYPED_TEST(AllocatorConformance, DoubleFreeAndForeignPointersAreDetected) {
  void* p = this->must_allocate(4096);
  void* q = this->must_allocate(4096);
  std::memset(q, 0x5a, 4096);
  ASSERT_TRUE(this->a().deallocate(p).ok());
  const AllocatorStats before = this->a().stats();
  Status twice = this->a().deallocate(p);
  ASSERT_FALSE(twice.ok());
  EXPECT_EQ(twice.error().code(), ErrorCode::kFailedPrecondition);
  int on_stack = 0;
  EXPECT_EQ(this->a().deallocate(&on_stack).error().code(), ErrorCode::kFailedPrecondition);
  EXPECT_EQ(this->a().deallocate(static_cast<char*>(q) + 256).error().code(), ErrorCode::kFailedPrecondition);
  const AllocatorStats after = this->a().stats();
  EXPECT_EQ(after.bytes_in_use, before.bytes_in_use);
  EXPECT_EQ(after.num_allocs, before.num_allocs);
  // Nothing was corrupted: q keeps its contents and everything still works.
  EXPECT_EQ(static_cast<unsigned char*>(q)[4095], 0x5a);
  ASSERT_TRUE(this->a().deallocate(q).ok());
  EXPECT_EQ(this->a().stats().bytes_in_use, 0u);
}

}  // namespace
}  // namespace memfit::testing
