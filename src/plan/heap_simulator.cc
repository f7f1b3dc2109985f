#include "memfit/plan/heap_simulator.h"

#include <algorithm>
#include <numeric>
#include <tuple>

namespace memfit {
namespace {

uint64_t align_up(uint64_t v, uint64_t alignment) { return (v + alignment - 1) / alignment * alignment; }

// Placed intervals, queried by time overlap. The intervals are all known up front (only the order of
// placement varies), so a static tree over them sorted by start holds, per node, the latest end among the
// placed intervals below it: a query walks only into subtrees that can overlap, O((k + 1) log n).
class PlacedIndex {
 public:
  explicit PlacedIndex(const std::vector<HeapInterval>& intervals) : intervals_(intervals) {
    by_start_.resize(intervals.size());
    std::iota(by_start_.begin(), by_start_.end(), 0u);
    std::sort(by_start_.begin(), by_start_.end(), [&](uint32_t a, uint32_t b) {
      return std::tie(intervals[a].start, a) < std::tie(intervals[b].start, b);
    });
    rank_.resize(intervals.size());
    for (uint32_t r = 0; r < by_start_.size(); ++r) rank_[by_start_[r]] = r;
    leaves_ = 1;
    while (leaves_ < by_start_.size()) leaves_ *= 2;
    max_end_.assign(2 * leaves_, kNone);
  }

  void place(uint32_t id) {
    size_t node = leaves_ + rank_[id];
    max_end_[node] = intervals_[id].end;
    for (node /= 2; node >= 1; node /= 2)
      max_end_[node] = combine(max_end_[2 * node], max_end_[2 * node + 1]);
  }

  // Calls f(id) for every placed interval overlapping [start, end].
  template <typename F>
  void overlapping(uint64_t start, uint64_t end, F&& f) const {
    // Leaves with interval.start <= end form a prefix of the sorted order.
    const size_t limit = static_cast<size_t>(
        std::upper_bound(by_start_.begin(), by_start_.end(), end,
                         [&](uint64_t t, uint32_t id) { return t < intervals_[id].start; }) -
        by_start_.begin());
    if (limit == 0) return;
    visit(1, 0, leaves_, limit, start, f);
  }

 private:
  static constexpr uint64_t kNone = std::numeric_limits<uint64_t>::max();
  static uint64_t combine(uint64_t a, uint64_t b) {
    if (a == kNone) return b;
    if (b == kNone) return a;
    return std::max(a, b);
  }

  template <typename F>
  void visit(size_t node, size_t lo, size_t hi, size_t limit, uint64_t start, F& f) const {
    if (lo >= limit || max_end_[node] == kNone || max_end_[node] < start) return;
    if (hi - lo == 1) {
      f(by_start_[lo]);
      return;
    }
    const size_t mid = (lo + hi) / 2;
    visit(2 * node, lo, mid, limit, start, f);
    visit(2 * node + 1, mid, hi, limit, start, f);
  }

  const std::vector<HeapInterval>& intervals_;
  std::vector<uint32_t> by_start_;
  std::vector<uint32_t> rank_;
  size_t leaves_ = 1;
  std::vector<uint64_t> max_end_;
};

uint32_t leader_of(const std::vector<HeapInterval>& intervals, uint32_t id) {
  while (intervals[id].colocated_with != kNotColocated) id = intervals[id].colocated_with;
  return id;
}

}  // namespace

uint32_t colocation_leader(const std::vector<HeapInterval>& intervals, uint32_t id) {
  return leader_of(intervals, id);
}

HeapAssignment best_fit_heap(const std::vector<HeapInterval>& intervals, uint64_t alignment,
                             HeapPacking packing) {
  if (alignment == 0) alignment = 1;
  const uint32_t n = static_cast<uint32_t>(intervals.size());
  // Groups: a leader and every interval colocated with it (transitively).
  std::vector<std::vector<uint32_t>> members(n);
  std::vector<uint32_t> leaders;
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t l = leader_of(intervals, i);
    members[l].push_back(i);
    if (l == i) leaders.push_back(i);
  }
  struct Key {
    uint64_t size;
    uint64_t span;
    uint32_t id;
  };
  std::vector<Key> keys(n);
  for (uint32_t l : leaders) {
    uint64_t size = 0;
    uint64_t end = 0;
    for (uint32_t m : members[l]) {
      size = std::max(size, intervals[m].size_bytes);
      end = std::max(end, intervals[m].end);
    }
    // XLA's spatial order weighs the leader's own live range; its temporal order the whole group's.
    const uint64_t own_end = packing == HeapPacking::kSpatial ? intervals[l].end : end;
    keys[l] = Key{size, own_end - intervals[l].start, l};
  }
  std::sort(leaders.begin(), leaders.end(), [&](uint32_t a, uint32_t b) {
    const Key& x = keys[a];
    const Key& y = keys[b];
    if (packing == HeapPacking::kSpatial) {
      return std::make_tuple(-static_cast<int64_t>(x.size), -static_cast<int64_t>(x.span), x.id) <
             std::make_tuple(-static_cast<int64_t>(y.size), -static_cast<int64_t>(y.span), y.id);
    }
    return std::make_tuple(-static_cast<int64_t>(x.span), -static_cast<int64_t>(x.size), x.id) <
           std::make_tuple(-static_cast<int64_t>(y.span), -static_cast<int64_t>(y.size), y.id);
  });

  HeapAssignment result;
  result.packing = packing;
  result.offsets.assign(n, 0);
  PlacedIndex placed(intervals);
  std::vector<std::pair<uint64_t, uint64_t>> used;  // [offset, end) of chunks overlapping in time
  for (uint32_t l : leaders) {
    const uint64_t size = keys[l].size;
    used.clear();
    for (uint32_t m : members[l]) {
      placed.overlapping(intervals[m].start, intervals[m].end, [&](uint32_t other) {
        const uint64_t off = result.offsets[other];
        used.emplace_back(off, off + intervals[other].size_bytes);
      });
    }
    std::sort(used.begin(), used.end());
    // Best fit: the smallest gap that holds the chunk, lowest offset on ties; else above everything.
    uint64_t best_offset = 0;
    uint64_t best_gap = std::numeric_limits<uint64_t>::max();
    uint64_t top = 0;
    for (const auto& [off, end] : used) {
      const uint64_t gap_start = align_up(top, alignment);
      if (off > gap_start) {
        const uint64_t gap = off - gap_start;
        if (gap >= size && gap < best_gap) {
          best_gap = gap;
          best_offset = gap_start;
        }
      }
      top = std::max(top, end);
    }
    if (best_gap == std::numeric_limits<uint64_t>::max()) best_offset = align_up(top, alignment);
    for (uint32_t m : members[l]) {
      result.offsets[m] = best_offset;
      placed.place(m);
      result.heap_bytes = std::max(result.heap_bytes, best_offset + intervals[m].size_bytes);
    }
  }
  return result;
}

HeapAssignment best_heap(const std::vector<HeapInterval>& intervals, uint64_t alignment) {
  HeapAssignment spatial = best_fit_heap(intervals, alignment, HeapPacking::kSpatial);
  HeapAssignment temporal = best_fit_heap(intervals, alignment, HeapPacking::kTemporal);
  return temporal.heap_bytes < spatial.heap_bytes ? temporal : spatial;
}

LiveBytesPeak live_bytes_peak(const std::vector<HeapInterval>& intervals) {
  // A chunk is live while any of the intervals sharing it is: merge each group's ranges, at its largest size.
  const uint32_t n = static_cast<uint32_t>(intervals.size());
  std::vector<std::vector<std::pair<uint64_t, uint64_t>>> ranges(n);
  std::vector<uint64_t> size(n, 0);
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t l = leader_of(intervals, i);
    ranges[l].emplace_back(intervals[i].start, intervals[i].end);
    size[l] = std::max(size[l], intervals[i].size_bytes);
  }
  // Events: +size at a start, -size after an end; at equal times additions first (inclusive ranges).
  std::vector<std::tuple<uint64_t, int, uint64_t>> events;
  for (uint32_t l = 0; l < n; ++l) {
    auto& r = ranges[l];
    if (r.empty()) continue;
    std::sort(r.begin(), r.end());
    uint64_t s = r[0].first, e = r[0].second;
    for (size_t k = 1; k <= r.size(); ++k) {
      if (k < r.size() && r[k].first <= e) {
        e = std::max(e, r[k].second);
        continue;
      }
      events.emplace_back(s, 0, size[l]);
      events.emplace_back(e, 1, size[l]);
      if (k < r.size()) std::tie(s, e) = r[k];
    }
  }
  std::sort(events.begin(), events.end());
  LiveBytesPeak peak;
  uint64_t live = 0;
  for (const auto& [t, kind, bytes] : events) {
    if (kind == 0) {
      live += bytes;
      if (live > peak.bytes) {
        peak.bytes = live;
        peak.time = t;
      }
    } else {
      live -= bytes;
    }
  }
  return peak;
}

}  // namespace memfit
