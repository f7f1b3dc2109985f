// The heap algorithms on intervals whose best packing is known.
#include "memfit/plan/heap_simulator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <tuple>

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

// best_heap skips the temporal packing when the spatial one is as small as the most bytes live at once: it
// must still give what comparing both packings gives (the smaller, spatial on a tie). Random heaps where
// either wins, and the nested lifetimes of a training step (2300 layers) - both branches are exercised.
TEST(HeapSimulator, BestHeapIsTheSmallerPacking) {
  auto check = [](const std::vector<HeapInterval>& iv, int& temporal_won, int& spatial_tight) {
    const HeapAssignment spatial = best_fit_heap(iv, 64, HeapPacking::kSpatial);
    const HeapAssignment temporal = best_fit_heap(iv, 64, HeapPacking::kTemporal);
    const HeapAssignment& smaller = temporal.heap_bytes < spatial.heap_bytes ? temporal : spatial;
    temporal_won += temporal.heap_bytes < spatial.heap_bytes;
    spatial_tight += spatial.heap_bytes == live_bytes_peak(iv).bytes;
    const HeapAssignment best = best_heap(iv, 64);
    EXPECT_EQ(best.packing, smaller.packing);
    EXPECT_EQ(best.heap_bytes, smaller.heap_bytes);
    EXPECT_EQ(best.offsets, smaller.offsets);
    EXPECT_GE(best.heap_bytes, live_bytes_peak(iv).bytes);
  };
  int temporal_won = 0, spatial_tight = 0;
  std::mt19937_64 rng(11);
  for (int round = 0; round < 200; ++round) {
    std::vector<HeapInterval> iv;
    const int n = 2 + static_cast<int>(rng() % 12);
    for (int i = 0; i < n; ++i) {
      const uint64_t s = rng() % 20;
      iv.push_back({s, s + rng() % 8, 64 * (1 + rng() % 16)});
    }
    check(iv, temporal_won, spatial_tight);
  }
  std::vector<HeapInterval> iv;
  const uint64_t layers = 2300;
  for (uint64_t l = 0; l < layers; ++l) {
    iv.push_back({10 * l, 20 * layers - 10 * l, 4096 * (1 + rng() % 8)});
    for (int k = 0; k < 4; ++k) {
      const uint64_t s = 10 * l + static_cast<uint64_t>(k);
      iv.push_back({s, s + 2, 1 + rng() % 100000});
      iv.push_back({20 * layers - s, 20 * layers - s + 1, 1 + rng() % 100000});
    }
  }
  for (size_t i = 0; i < iv.size(); ++i) iv[i].tie_break = i;
  check(iv, temporal_won, spatial_tight);
  EXPECT_GT(temporal_won, 0) << "no heap where the temporal packing is smaller: the test lost its reach";
  EXPECT_GT(spatial_tight, 0) << "no heap where the spatial packing meets the bound";
}

}  // namespace
}  // namespace memfit

namespace memfit {
namespace {

// The best fit written the plain way, as XLA writes it: list every placed chunk that overlaps in time any
// interval of the group being placed, sort them by offset, take the smallest gap. O(n^2 log n); the heap's
// time-offset index must choose the same offsets.
std::vector<uint64_t> plain_best_fit(const std::vector<HeapInterval>& iv, uint64_t alignment) {
  std::vector<std::vector<uint32_t>> members(iv.size());
  std::vector<uint32_t> order;
  for (uint32_t i = 0; i < iv.size(); ++i) {
    uint32_t l = i;
    while (iv[l].colocated_with != kNotColocated) l = iv[l].colocated_with;
    members[l].push_back(i);
    if (l == i) order.push_back(i);
  }
  auto size_of = [&](uint32_t l) {
    uint64_t size = 0;
    for (uint32_t m : members[l]) size = std::max(size, iv[m].size_bytes);
    return static_cast<int64_t>(size);
  };
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    const auto sa = static_cast<int64_t>(iv[a].end - iv[a].start),
               sb = static_cast<int64_t>(iv[b].end - iv[b].start);
    return std::make_tuple(-size_of(a), -sa, a) < std::make_tuple(-size_of(b), -sb, b);
  });
  std::vector<uint64_t> offsets(iv.size(), 0);
  std::vector<uint32_t> placed;
  for (uint32_t l : order) {
    std::vector<std::pair<uint64_t, uint64_t>> used;
    for (uint32_t p : placed) {
      for (uint32_t m : members[l]) {
        if (iv[p].start <= iv[m].end && iv[m].start <= iv[p].end) {
          used.emplace_back(offsets[p], offsets[p] + iv[p].size_bytes);
          break;
        }
      }
    }
    std::sort(used.begin(), used.end());
    uint64_t top = 0, best = 0, best_gap = UINT64_MAX;
    for (const auto& [off, end] : used) {
      const uint64_t gap_start = (top + alignment - 1) / alignment * alignment;
      if (off > gap_start && off - gap_start >= static_cast<uint64_t>(size_of(l)) &&
          off - gap_start < best_gap) {
        best_gap = off - gap_start;
        best = gap_start;
      }
      top = std::max(top, end);
    }
    for (uint32_t m : members[l]) {
      offsets[m] = best_gap == UINT64_MAX ? (top + alignment - 1) / alignment * alignment : best;
      placed.push_back(m);
    }
  }
  return offsets;
}

TEST(HeapSimulator, TimeOffsetIndexChoosesWhatThePlainBestFitChooses) {
  std::mt19937_64 rng(7);
  for (int round = 0; round < 40; ++round) {
    // Dense rounds: hundreds of buffers live at once (unions of many runs); sparse rounds: short lives.
    const bool dense = round % 2 == 0;
    const uint64_t alignment = round % 3 == 0 ? 1 : 64;
    std::vector<HeapInterval> iv(600);
    for (HeapInterval& h : iv) {
      h.start = rng() % 1000;
      h.end = dense ? h.start + 300 + rng() % 700 : h.start + rng() % 30;
      h.size_bytes = round % 4 == 0 ? 4096 * (1 + rng() % 4) : 1 + rng() % 100000;
    }
    const HeapAssignment h = best_fit_heap(iv, alignment, HeapPacking::kSpatial);
    EXPECT_EQ(h.offsets, plain_best_fit(iv, alignment)) << "round " << round;
  }
}

TEST(HeapSimulator, TimeOffsetIndexChoosesWhatThePlainBestFitChoosesForColocatedGroups) {
  // Groups as a scan's stacked buffer or an in-place update chain make them: members one after another
  // (windows that meet or leave gaps), among hundreds of dense single chunks - a group's windows are merged
  // and each asked of the index.
  std::mt19937_64 rng(11);
  for (int round = 0; round < 30; ++round) {
    const uint64_t alignment = round % 3 == 0 ? 1 : 64;
    std::vector<HeapInterval> iv;
    for (int i = 0; i < 400; ++i) {
      HeapInterval h;
      h.start = rng() % 1000;
      h.end = h.start + (i % 2 == 0 ? 200 + rng() % 600 : rng() % 10);  // dense, and short lives in the gaps
      h.size_bytes = round % 4 == 0 ? 4096 * (1 + rng() % 4) : 1 + rng() % 100000;
      iv.push_back(h);
    }
    for (int g = 0; g < 40; ++g) {
      const auto leader = static_cast<uint32_t>(iv.size());
      uint64_t t = rng() % 800;
      const uint64_t size = 1 + rng() % 200000;
      const int n = 2 + static_cast<int>(rng() % 6);
      for (int k = 0; k < n; ++k) {
        HeapInterval h;
        h.start = t;
        h.end = t + rng() % 50;
        h.size_bytes = k == 0 ? size : 1 + rng() % size;
        h.colocated_with = k == 0 ? kNotColocated : leader;
        iv.push_back(h);
        t = h.end + (rng() % 3 == 0 ? 5 + rng() % 40 : 1);  // mostly meeting, sometimes a gap
      }
    }
    const HeapAssignment h = best_fit_heap(iv, alignment, HeapPacking::kSpatial);
    EXPECT_EQ(h.offsets, plain_best_fit(iv, alignment)) << "round " << round;
  }
}

}  // namespace
}  // namespace memfit
