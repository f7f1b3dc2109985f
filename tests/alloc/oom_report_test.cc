// The OOM report for the failure observed on the H200 (FACTS.md §1): a default pool of 112583507968 bytes
// holding one 62.91GiB array, and a second 62.91GiB request.
#include "memfit/alloc/oom_report.h"

#include <gtest/gtest.h>

#include "../cli/golden.h"
#include "memfit/alloc/xla_allocator.h"
#include "memfit/core/json.h"
#include "memfit/device/simulated_device.h"

namespace memfit {
namespace {

constexpr uint64_t kH200 = 150109880320ull;
constexpr uint64_t kRequest = 67550089216ull;  // "62.91GiB (rounded to 67550089216)" in the log

OomReport report_of(const Expected<void*>& failed) {  // a copy: `failed` is often a temporary
  EXPECT_FALSE(failed.ok());
  const auto* r = dynamic_cast<const OomReport*>(failed.error().detail());
  EXPECT_NE(r, nullptr);
  return r != nullptr ? *r : OomReport{};
}

TEST(OomReport, TheObservedH200FailureWithEveryFigure) {
  auto d = std::move(SimulatedDevice::create({kH200, 2 << 20, false, "H200"})).value();
  auto config = parse_xla_allocator_env(Environment());
  auto a = std::move(make_xla_allocator(*config, *d, std::chrono::milliseconds(0))).value();
  ASSERT_TRUE(a->allocate(kRequest, "jit_f/x").ok());
  auto failed = a->allocate(kRequest, "jit_f/y");
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.error().code(), ErrorCode::kResourceExhausted);
  EXPECT_EQ(
      failed.error().message(),
      "Out of memory while trying to allocate 62.91GiB (rounded to 67550089216) with allocator GPU_0_bfc: "
      "in use 62.91GiB, pool 104.85GiB of limit 104.85GiB, largest free chunk 41.94GiB");
  const OomReport r = report_of(failed);
  EXPECT_EQ(r.rounded_bytes, kRequest);
  EXPECT_EQ(r.bytes_in_use, kRequest);
  EXPECT_EQ(r.pool_bytes, 112583507968u);
  EXPECT_EQ(r.bytes_limit, 112583507968u);
  EXPECT_EQ(r.free_in_pool_bytes, 112583507968u - kRequest);
  EXPECT_EQ(r.largest_free_bytes, 112583507968u - kRequest);
  EXPECT_DOUBLE_EQ(r.fragmentation(), 0.0);
  EXPECT_EQ(r.occupancy_bar, std::string(60, '*') + std::string(40, '_'));
  EXPECT_NE(r.cause.find("exceed the limit of 104.85GiB"), std::string::npos);
  // 2 x 62.91GiB = 125.82GiB fits on the device with a fraction of 0.91.
  EXPECT_NE(r.suggestions[0].find("XLA_CLIENT_MEM_FRACTION=0.91"), std::string::npos) << r.suggestions[0];
  testing::expect_golden("oom_h200_default.txt", r.to_text());
  testing::expect_golden("oom_h200_default.json", r.to_json().dump(2) + "\n");
}

TEST(OomReport, FragmentationIsNamedWithItsFigure) {
  auto d = std::move(SimulatedDevice::create({1ull << 30, 512, false, "sim"})).value();
  auto config = parse_xla_allocator_env(Environment());
  auto a = std::move(make_xla_allocator(*config, *d, std::chrono::milliseconds(0))).value();
  // Checkerboard of 64 MiB buffers, every other one freed: half the pool free, in 64 MiB holes.
  std::vector<void*> ptrs;
  for (int i = 0; i < 12; ++i) ptrs.push_back(*a->allocate(64 << 20, "activations"));
  for (size_t i = 0; i < ptrs.size(); i += 2) ASSERT_TRUE(a->deallocate(ptrs[i]).ok());
  const OomReport r = report_of(a->allocate(128 << 20));
  EXPECT_GT(r.fragmentation(), 0.5) << r.to_text();
  EXPECT_NE(r.cause.find("fragmentation"), std::string::npos);
  EXPECT_NE(r.suggestions[0].find("XLA_PYTHON_CLIENT_ALLOCATOR=platform"), std::string::npos);
  EXPECT_NE(r.occupancy_bar.find("*________*"), std::string::npos) << r.occupancy_bar;
}

TEST(OomReport, LargerThanTheDeviceAsksForShardingAndASmallerPeak) {
  auto d = std::move(SimulatedDevice::create({kH200, 2 << 20, false, "H200"})).value();
  auto config = parse_xla_allocator_env(Environment());
  auto a = std::move(make_xla_allocator(*config, *d, std::chrono::milliseconds(0))).value();
  const OomReport r = report_of(a->allocate(200ull << 30));
  EXPECT_NE(r.cause.find("larger than the whole device"), std::string::npos);
  bool shard = false;
  for (const auto& s : r.suggestions) shard = shard || s.find("at least 2 devices") != std::string::npos;
  EXPECT_TRUE(shard);
}

TEST(OccupancyBar, PaintsRequestedWasteAndFree) {
  const std::vector<ChunkExtent> chunks = {{0, 500, 250, true}, {500, 500, 0, false}};
  EXPECT_EQ(occupancy_bar(chunks, 1000), std::string(25, '*') + std::string(25, 'x') + std::string(50, '_'));
  EXPECT_EQ(occupancy_bar({{0, 1, 1, true}}, 1ull << 40), std::string(1, '*').append(99, '_'));
  EXPECT_EQ(occupancy_bar({}, 0), "");
}

}  // namespace
}  // namespace memfit
