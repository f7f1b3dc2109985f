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

// Placed chunks in offset order (a treap), each node also summing up its subtree: the offset range it
// covers, the largest hole its chunks leave inside that range, and the extremes of their live ranges.
// Walking it in offset order gives the occupied ranges for a time window, and a subtree whose chunks are all
// live in the window and leave no hole the new chunk fits in is one occupied range, not a walk: where
// thousands of buffers are live at once (activations saved for the backward pass, outputs gathered at the
// end) they stack with holes too small to matter, and a query costs O(log n) instead of visiting every one
// of them (the quadratic cost that made a 30000-buffer module take most of a minute). Chunks placed above
// in the same walk can only narrow a hole, so the largest hole is a bound, and passing over holes smaller
// than the chunk is what best fit would do with them: the placement is the walk's, chunk for chunk.
class OffsetIndex {
 public:
  // A hole below `alignment` bytes is no hole: a chunk never starts inside it.
  OffsetIndex(size_t capacity, uint64_t alignment) : alignment_(alignment) { nodes_.reserve(capacity); }

  void insert(uint64_t offset, uint64_t end_offset, uint64_t start, uint64_t end) {
    const auto id = static_cast<uint32_t>(nodes_.size());
    Node n;
    n.off = offset;
    n.end = end_offset;
    n.t0 = start;
    n.t1 = end;
    rng_ = rng_ * 6364136223846793005ull + 1442695040888963407ull;  // Knuth's LCG: priorities only
    n.prio = static_cast<uint32_t>(rng_ >> 33);
    nodes_.push_back(n);
    pull(id);
    uint32_t left = kNil, right = kNil;
    split(root_, offset, left, right);
    root_ = merge(merge(left, id), right);
  }

  // Calls f(begin, end) for the occupied offset ranges of chunks live somewhere in [start, end], in offset
  // order; touching or overlapping ranges may come merged, and so may ranges with holes of less than
  // `fits_bytes` between them (0: only where there is no hole at all).
  template <typename F>
  void occupied(uint64_t start, uint64_t end, uint64_t fits_bytes, F&& f) const {
    visit(root_, start, end, fits_bytes, f);
  }

 private:
  static constexpr uint32_t kNil = std::numeric_limits<uint32_t>::max();
  struct Node {
    uint64_t off = 0, end = 0, t0 = 0, t1 = 0;  // the chunk and its live range
    uint32_t left = kNil, right = kNil, prio = 0;
    uint64_t max_hole = 0;    // the largest hole the subtree's chunks leave in [lo, hi), aligned
    uint64_t lo = 0, hi = 0;  // the subtree's offset range
    uint64_t min_t0 = 0, max_t0 = 0, min_t1 = 0, max_t1 = 0;  // its live ranges' extremes
  };

  void pull(uint32_t t) {
    Node& n = nodes_[t];
    n.lo = n.off;
    n.hi = n.end;
    n.max_hole = 0;
    n.min_t0 = n.max_t0 = n.t0;
    n.min_t1 = n.max_t1 = n.t1;
    auto take_times = [&](const Node& c) {
      n.min_t0 = std::min(n.min_t0, c.min_t0);
      n.max_t0 = std::max(n.max_t0, c.max_t0);
      n.min_t1 = std::min(n.min_t1, c.min_t1);
      n.max_t1 = std::max(n.max_t1, c.max_t1);
    };
    if (n.left != kNil) {
      const Node& l = nodes_[n.left];
      n.lo = l.lo;
      n.max_hole = std::max(l.max_hole, hole(l.hi, n.off));
      n.hi = std::max(l.hi, n.end);
      take_times(l);
    }
    if (n.right != kNil) {
      const Node& r = nodes_[n.right];
      n.max_hole = std::max({n.max_hole, r.max_hole, hole(n.hi, r.lo)});
      n.hi = std::max(n.hi, r.hi);
      take_times(r);
    }
  }

  // left: the chunks at offsets <= `offset` (older first on ties), right: the rest.
  void split(uint32_t t, uint64_t offset, uint32_t& left, uint32_t& right) {
    if (t == kNil) {
      left = right = kNil;
      return;
    }
    if (nodes_[t].off <= offset) {
      split(nodes_[t].right, offset, nodes_[t].right, right);
      left = t;
    } else {
      split(nodes_[t].left, offset, left, nodes_[t].left);
      right = t;
    }
    pull(t);
  }

  uint32_t merge(uint32_t a, uint32_t b) {
    if (a == kNil) return b;
    if (b == kNil) return a;
    if (nodes_[a].prio > nodes_[b].prio) {
      nodes_[a].right = merge(nodes_[a].right, b);
      pull(a);
      return a;
    }
    nodes_[b].left = merge(a, nodes_[b].left);
    pull(b);
    return b;
  }

  // The hole between chunks ending at `top` and one starting at `off` (none below the alignment).
  uint64_t hole(uint64_t top, uint64_t off) const {
    const uint64_t from = align_up(top, alignment_);
    return off > from ? off - from : 0;
  }

  template <typename F>
  void visit(uint32_t t, uint64_t start, uint64_t end, uint64_t fits_bytes, F& f) const {
    if (t == kNil) return;
    const Node& n = nodes_[t];
    if (n.min_t0 > end || n.max_t1 < start) return;  // nothing below is live in the window
    if ((n.max_hole == 0 || n.max_hole < fits_bytes) && n.max_t0 <= end && n.min_t1 >= start) {
      f(n.lo, n.hi);  // everything below is live in the window, and covers [lo, hi) but for small holes
      return;
    }
    visit(n.left, start, end, fits_bytes, f);
    if (n.t0 <= end && n.t1 >= start) f(n.off, n.end);
    visit(n.right, start, end, fits_bytes, f);
  }

  uint64_t alignment_;
  std::vector<Node> nodes_;
  uint32_t root_ = kNil;
  uint64_t rng_ = 0x9E3779B97F4A7C15ull;
};

// How many placed intervals overlap a window, in O(log n): those that start by its end, less those that
// ended before its start (Fenwick trees over the ranks of starts and of ends).
class OverlapCounter {
 public:
  explicit OverlapCounter(const std::vector<HeapInterval>& intervals) {
    for (const HeapInterval& iv : intervals) {
      starts_.push_back(iv.start);
      ends_.push_back(iv.end);
    }
    std::sort(starts_.begin(), starts_.end());
    std::sort(ends_.begin(), ends_.end());
    by_start_.assign(starts_.size() + 1, 0);
    by_end_.assign(ends_.size() + 1, 0);
  }
  void add(const HeapInterval& iv) {
    bump(by_start_, rank(starts_, iv.start));
    bump(by_end_, rank(ends_, iv.end));
  }
  uint64_t overlapping(uint64_t start, uint64_t end) const {
    const size_t started =
        static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), end) - starts_.begin());
    const size_t ended =
        static_cast<size_t>(std::lower_bound(ends_.begin(), ends_.end(), start) - ends_.begin());
    return prefix(by_start_, started) - prefix(by_end_, ended);
  }

 private:
  static size_t rank(const std::vector<uint64_t>& sorted, uint64_t v) {
    return static_cast<size_t>(std::lower_bound(sorted.begin(), sorted.end(), v) - sorted.begin()) + 1;
  }
  static void bump(std::vector<uint64_t>& tree, size_t i) {
    for (; i < tree.size(); i += i & (~i + 1)) ++tree[i];
  }
  static uint64_t prefix(const std::vector<uint64_t>& tree, size_t i) {
    uint64_t sum = 0;
    for (; i > 0; i -= i & (~i + 1)) sum += tree[i];
    return sum;
  }
  std::vector<uint64_t> starts_, ends_;
  std::vector<uint64_t> by_start_, by_end_;
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
    uint64_t tie_break;
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
    keys[l] = Key{size, own_end - intervals[l].start, intervals[l].tie_break, l};
  }
  std::sort(leaders.begin(), leaders.end(), [&](uint32_t a, uint32_t b) {
    const Key& x = keys[a];
    const Key& y = keys[b];
    if (packing == HeapPacking::kSpatial) {
      return std::make_tuple(-static_cast<int64_t>(x.size), -static_cast<int64_t>(x.span), x.tie_break,
                             x.id) <
             std::make_tuple(-static_cast<int64_t>(y.size), -static_cast<int64_t>(y.span), y.tie_break, y.id);
    }
    return std::make_tuple(-static_cast<int64_t>(x.span), -static_cast<int64_t>(x.size), x.tie_break, x.id) <
           std::make_tuple(-static_cast<int64_t>(y.span), -static_cast<int64_t>(y.size), y.tie_break, y.id);
  });

  HeapAssignment result;
  result.packing = packing;
  result.offsets.assign(n, 0);
  PlacedIndex placed(intervals);
  OffsetIndex by_offset(n, alignment);
  OverlapCounter counter(intervals);
  // Below this many overlapping chunks, listing and sorting them is cheaper than walking the offset tree.
  constexpr uint64_t kListAtMost = 64;
  std::vector<std::pair<uint64_t, uint64_t>> used;     // [offset, end) of chunks overlapping in time
  std::vector<std::pair<uint64_t, uint64_t>> windows;  // a group's live ranges, merged
  for (uint32_t l : leaders) {
    const uint64_t size = keys[l].size;
    // Best fit: the smallest gap that holds the chunk, lowest offset on ties; else above everything.
    uint64_t best_offset = 0;
    uint64_t best_gap = std::numeric_limits<uint64_t>::max();
    uint64_t top = 0;
    auto occupied = [&](uint64_t off, uint64_t end) {  // called in offset order
      const uint64_t gap_start = align_up(top, alignment);
      if (off > gap_start) {
        const uint64_t gap = off - gap_start;
        if (gap >= size && gap < best_gap) {
          best_gap = gap;
          best_offset = gap_start;
        }
      }
      top = std::max(top, end);
    };
    const std::vector<uint32_t>& group = members[l];
    uint64_t overlaps = 0;
    for (uint32_t m : group) overlaps += counter.overlapping(intervals[m].start, intervals[m].end);
    if (overlaps > kListAtMost) {
      // Thousands of chunks overlap (activations saved for the backward pass; for a group, a buffer written
      // in place across the step or a stack a scan writes layer by layer): the group's live ranges, merged
      // where they meet (the clock is whole numbers, so [a, b] and [b + 1, c] are [a, c]), are asked of the
      // offset tree, which answers each in offset order with runs of chunks merged - the same occupied
      // space as the chunks one by one. One window is walked as it comes; several are merged first.
      windows.clear();
      for (uint32_t m : group) windows.emplace_back(intervals[m].start, intervals[m].end);
      std::sort(windows.begin(), windows.end());
      size_t merged = 0;
      for (size_t w = 1; w < windows.size(); ++w) {
        if (windows[w].first <= windows[merged].second + 1) {
          windows[merged].second = std::max(windows[merged].second, windows[w].second);
        } else {
          windows[++merged] = windows[w];
        }
      }
      windows.resize(merged + 1);
      if (windows.size() == 1) {
        by_offset.occupied(windows[0].first, windows[0].second, size, occupied);
      } else {
        used.clear();
        for (const auto& [start, end] : windows) {
          const auto middle = static_cast<std::ptrdiff_t>(used.size());
          by_offset.occupied(start, end, size,
                             [&](uint64_t off, uint64_t off_end) { used.emplace_back(off, off_end); });
          std::inplace_merge(used.begin(), used.begin() + middle, used.end());
        }
        for (const auto& [off, end] : used) occupied(off, end);
      }
    } else {
      used.clear();
      for (uint32_t m : group) {
        placed.overlapping(intervals[m].start, intervals[m].end, [&](uint32_t other) {
          const uint64_t off = result.offsets[other];
          used.emplace_back(off, off + intervals[other].size_bytes);
        });
      }
      std::sort(used.begin(), used.end());
      for (const auto& [off, end] : used) occupied(off, end);
    }
    if (best_gap == std::numeric_limits<uint64_t>::max()) best_offset = align_up(top, alignment);
    for (uint32_t m : group) {
      result.offsets[m] = best_offset;
      placed.place(m);
      by_offset.insert(best_offset, best_offset + intervals[m].size_bytes, intervals[m].start,
                       intervals[m].end);
      counter.add(intervals[m]);
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
