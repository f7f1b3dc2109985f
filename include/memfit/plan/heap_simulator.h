// memfit/plan/heap_simulator.h - XLA's heap algorithms for a fixed schedule: place buffers with known live
// ranges at offsets in one block so that no two buffers live at the same time overlap.
//
// This is GlobalDecreasingSizeBestFitHeap of xla/service/heap_simulator/heap_simulator.cc (notes in
// ../shared/reference/planner.md §1): every interval is gathered first, sorted (spatial: larger first;
// temporal: longer-lived first), and each is put in the smallest free gap among the chunks of intervals that
// overlap it in time (ties: lowest offset). Intervals that share a buffer (donation, in-place ops, operand
// reuse) are colocated: one chunk, free over all their live ranges. XLA keeps the smaller of the spatial and
// temporal heaps; so does best_heap().
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

namespace memfit {

inline constexpr uint32_t kNotColocated = std::numeric_limits<uint32_t>::max();

struct HeapInterval {
  uint64_t start = 0;  // logical clock, inclusive
  uint64_t end = 0;    // inclusive; end >= start
  uint64_t size_bytes = 0;
  // The interval whose chunk this one shares (placed with it); kNotColocated for a leader. Leaders come
  // before the intervals colocated with them.
  uint32_t colocated_with = kNotColocated;
  // Orders intervals of equal size and span (lower first); XLA breaks such ties by HloValue id.
  uint64_t tie_break = 0;
};

enum class HeapPacking { kSpatial, kTemporal };

struct HeapAssignment {
  uint64_t heap_bytes = 0;        // the largest chunk end
  std::vector<uint64_t> offsets;  // per interval
  HeapPacking packing = HeapPacking::kSpatial;
};

// One packing. Offsets are multiples of alignment (a power of two, or 1). With `give_up_at_bytes`, the
// packing stops as soon as its heap reaches that size (it can only grow), its offsets then incomplete:
// best_heap's way not to finish a packing that cannot be the smaller.
HeapAssignment best_fit_heap(const std::vector<HeapInterval>& intervals, uint64_t alignment,
                             HeapPacking packing,
                             uint64_t give_up_at_bytes = std::numeric_limits<uint64_t>::max());

// The smaller of the spatial and temporal packings, as XLA's ChooseBestHeapAlgorithm.
HeapAssignment best_heap(const std::vector<HeapInterval>& intervals, uint64_t alignment);

struct LiveBytesPeak {
  uint64_t bytes = 0;  // the most bytes live at once, colocated intervals counted once
  uint64_t time = 0;   // the first clock at which it is reached
};

// The interval whose chunk `id` shares (itself when not colocated).
uint32_t colocation_leader(const std::vector<HeapInterval>& intervals, uint32_t id);

// The no-fragmentation lower bound: no placement of these intervals needs less than this.
LiveBytesPeak live_bytes_peak(const std::vector<HeapInterval>& intervals);

// The same bound within each of `phases` parts of the clock: entry p is the most bytes live at a time t
// with phase_at_time[t] == p, taken at the times an interval starts (live bytes only grow then). Times
// past the end of phase_at_time count in phase 0.
std::vector<uint64_t> live_bytes_peaks_by_phase(const std::vector<HeapInterval>& intervals,
                                                const std::vector<uint8_t>& phase_at_time, size_t phases);

}  // namespace memfit
