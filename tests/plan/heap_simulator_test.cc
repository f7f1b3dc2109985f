// The heap algorithms on intervals whose best packing is known.
#include "memfit/plan/heap_simulator.h"

#include <gtest/gtest.h>

#include <random>

namespace memfit {
namespace {

// No two intervals that overlap in time may overlap in memory; colocated ones share an offset.
void expect_valid(const std::vector<HeapInterval>& iv, const HeapAssignment& h, uint64_t alignment) {
  for (size_t a = 0; a < iv.size(); ++a) {
    EXPECT_EQ(h.offsets[a] % alignment, 0u);
    EXPECT_LE(h.offsets[a] + iv[a].size_bytes, h.heap_bytes);
    if (iv[a].colocated_with != kNotColocated) {
      EXPECT_EQ(h.offsets[a], h.offsets[iv[a].colocated_with]);
    }
    for (size_t b = a + 1; b < iv.size(); ++b) {
      if (colocation_leader(iv, static_cast<uint32_t>(a)) == colocation_leader(iv, static_cast<uint32_t>(b)))
        continue;
      const bool in_time = iv[a].start <= iv[b].end && iv[b].start <= iv[a].end;
      const bool in_space =
          h.offsets[a] < h.offsets[b] + iv[b].size_bytes && h.offsets[b] < h.offsets[a] + iv[a].size_bytes;
      EXPECT_FALSE(in_time && in_space) << a << " and " << b;
    }
  }
}

TEST(HeapSimulator, DisjointLifetimesShareMemory) {
  const std::vector<HeapInterval> iv = {{0, 1, 1000}, {2, 3, 1000}, {4, 5, 500}};
  const HeapAssignment h = best_heap(iv, 256);
  expect_valid(iv, h, 256);
  EXPECT_EQ(h.heap_bytes, 1000u);
  EXPECT_EQ(live_bytes_peak(iv).bytes, 1000u);
}

TEST(HeapSimulator, BestFitFillsTheSmallestHole) {
  // 0: [0,10] 1 KiB at 0; 1: [0,4] 4 KiB; 2: [0,10] 1 KiB; then 3 (2 KiB, [5,10]) fits where 1 was.
  const std::vector<HeapInterval> iv = {{0, 10, 1024}, {0, 4, 4096}, {0, 10, 1024}, {5, 10, 2048}};
  const HeapAssignment h = best_fit_heap(iv, 256, HeapPacking::kSpatial);
  expect_valid(iv, h, 256);
  EXPECT_EQ(h.heap_bytes, 6144u);
  EXPECT_EQ(h.offsets[1], 0u);  // the largest goes first, at the bottom
  EXPECT_EQ(h.offsets[3], 0u);  // and the 2 KiB buffer reuses its hole later
}

TEST(HeapSimulator, ColocatedIntervalsShareOneChunk) {
  std::vector<HeapInterval> iv = {{0, 3, 4096}, {3, 6, 4096}, {2, 5, 4096}};
  iv[1].colocated_with = 0;  // 1 took over 0's chunk when 0 died
  const HeapAssignment h = best_heap(iv, 256);
  expect_valid(iv, h, 256);
  EXPECT_EQ(h.offsets[0], h.offsets[1]);
  EXPECT_EQ(h.heap_bytes, 8192u);
  EXPECT_EQ(live_bytes_peak(iv).bytes, 8192u);
}

TEST(HeapSimulator, RandomIntervalsPackValidlyAndNeverBelowTheBound) {
  std::mt19937_64 rng(7);
  for (int round = 0; round < 20; ++round) {
    std::vector<HeapInterval> iv;
    for (int i = 0; i < 200; ++i) {
      const uint64_t s = rng() % 500;
      iv.push_back({s, s + rng() % 60, 1 + rng() % (1 << 20)});
      if (i > 0 && rng() % 8 == 0) {  // shares a chunk, so the same size (as XLA's operand reuse requires)
        iv.back().colocated_with = static_cast<uint32_t>(rng() % i);
        iv.back().size_bytes = iv[colocation_leader(iv, iv.back().colocated_with)].size_bytes;
      }
    }
    for (HeapPacking p : {HeapPacking::kSpatial, HeapPacking::kTemporal}) {
      const HeapAssignment h = best_fit_heap(iv, 64, p);
      expect_valid(iv, h, 64);
      EXPECT_GE(h.heap_bytes, live_bytes_peak(iv).bytes);
    }
  }
}

}  // namespace
}  // namespace memfit
