#include "memfit/plan/heap_simulator.h"

#include <algorithm>
#include <tuple>

namespace memfit {
namespace {

uint64_t align_up(uint64_t v, uint64_t alignment) { return (v + alignment - 1) / alignment * alignment; }

// Disjoint offset runs [begin, end) - the union of the chunks added - in a treap over one shared node pool,
// each node also holding its subtree's offset range and the largest (aligned) hole its runs leave inside it.
// Listing the runs for a chunk of `fits_bytes` passes over holes it could not use: a subtree whose holes are
// all smaller is one range, so a dense union costs O(log n) per big hole, not a walk of every run.
class RunSets {
 public:
  static constexpr uint32_t kNil = std::numeric_limits<uint32_t>::max();

  explicit RunSets(uint64_t alignment) : alignment_(alignment) {}

  // Adds [begin, end) to the set rooted at `root`, merging the runs it overlaps or touches.
  void add(uint32_t& root, uint64_t begin, uint64_t end) {
    uint32_t before = kNil, rest = kNil, merged = kNil, after = kNil;
    split(
        root, [&](const Node& n) { return n.end < begin; }, before, rest);
    split(
        rest, [&](const Node& n) { return n.begin <= end; }, merged, after);
    if (merged != kNil) {
      begin = std::min(begin, nodes_[merged].lo);
      end = std::max(end, nodes_[merged].hi);
      release(merged);
    }
    root = join(join(before, make(begin, end)), after);
  }

  // Calls f(begin, end) for the runs that meet [from, to), in offset order; runs with holes of less than
  // `fits_bytes` between them (and runs with no aligned hole between them) may come as one range, which may
  // reach outside [from, to).
  template <typename F>
  void runs_in(uint32_t root, uint64_t from, uint64_t to, uint64_t fits_bytes, F& f) const {
    if (root == kNil) return;
    const Node& n = nodes_[root];
    if (n.hi <= from || n.lo >= to) return;
    if (n.max_hole == 0 || n.max_hole < fits_bytes) {
      f(n.lo, n.hi);
      return;
    }
    runs_in(n.left, from, to, fits_bytes, f);
    if (n.end > from && n.begin < to) f(n.begin, n.end);
    runs_in(n.right, from, to, fits_bytes, f);
  }

  // The bytes the set's runs cover.
  uint64_t covered_bytes(uint32_t root) const { return root == kNil ? 0 : nodes_[root].covered; }

 private:
  struct Node {
    uint64_t begin = 0, end = 0;  // the run
    uint64_t lo = 0, hi = 0;      // the subtree's offset range
    uint64_t max_hole = 0;        // the largest aligned hole between the subtree's runs
    uint64_t covered = 0;         // the bytes the subtree's runs cover
    uint32_t left = kNil, right = kNil, prio = 0;
  };

  uint32_t make(uint64_t begin, uint64_t end) {
    uint32_t id;
    if (!free_.empty()) {
      id = free_.back();
      free_.pop_back();
    } else {
      id = static_cast<uint32_t>(nodes_.size());
      nodes_.emplace_back();
    }
    Node& n = nodes_[id];
    n = Node{};
    n.begin = begin;
    n.end = end;
    rng_ = rng_ * 6364136223846793005ull + 1442695040888963407ull;  // Knuth's LCG: priorities only
    n.prio = static_cast<uint32_t>(rng_ >> 33);
    pull(id);
    return id;
  }

  void release(uint32_t t) {
    if (t == kNil) return;
    release(nodes_[t].left);
    release(nodes_[t].right);
    free_.push_back(t);
  }

  uint64_t hole(uint64_t top, uint64_t off) const {
    const uint64_t from = align_up(top, alignment_);
    return off > from ? off - from : 0;
  }

  void pull(uint32_t t) {
    Node& n = nodes_[t];
    n.lo = n.begin;
    n.hi = n.end;
    n.max_hole = 0;
    n.covered = n.end - n.begin;
    if (n.left != kNil) {
      const Node& l = nodes_[n.left];
      n.lo = l.lo;
      n.max_hole = std::max(l.max_hole, hole(l.hi, n.begin));
      n.covered += l.covered;
    }
    if (n.right != kNil) {
      const Node& r = nodes_[n.right];
      n.max_hole = std::max({n.max_hole, r.max_hole, hole(n.end, r.lo)});
      n.hi = r.hi;
      n.covered += r.covered;
    }
  }

  // left: the leading runs for which `in_left` holds (a prefix, as runs are disjoint and sorted), right: the
  // rest.
  template <typename P>
  void split(uint32_t t, const P& in_left, uint32_t& left, uint32_t& right) {
    if (t == kNil) {
      left = right = kNil;
      return;
    }
    if (in_left(nodes_[t])) {
      split(nodes_[t].right, in_left, nodes_[t].right, right);
      left = t;
    } else {
      split(nodes_[t].left, in_left, left, nodes_[t].left);
      right = t;
    }
    pull(t);
  }

  uint32_t join(uint32_t a, uint32_t b) {
    if (a == kNil) return b;
    if (b == kNil) return a;
    if (nodes_[a].prio > nodes_[b].prio) {
      nodes_[a].right = join(nodes_[a].right, b);
      pull(a);
      return a;
    }
    nodes_[b].left = join(a, nodes_[b].left);
    pull(b);
    return b;
  }

  uint64_t alignment_;
  std::vector<Node> nodes_;
  std::vector<uint32_t> free_;
  uint64_t rng_ = 0x9E3779B97F4A7C15ull;
};

// The space placed chunks occupy over time: a segment tree over the clock (its points: every interval's start
// and end), where a chunk is added to the O(log n) nodes whose time ranges tile its live range ("own": chunks
// live through all of the node's range) and to the union of every node above them ("below": chunks live
// somewhere in the node's range). The chunks live somewhere in a window are then the "below" unions of the
// nodes tiling the window and the "own" unions of the nodes above those: O(log n) unions, each listed with
// its holes too small for the chunk being placed passed over.
//
// Where thousands of buffers are live at once (activations saved for the backward pass, outputs gathered at
// the end), a query then costs O(log n) per hole the chunk fits in, in each of the unions, whatever else
// lives there: an index over offsets alone walked past every short-lived temporary sitting in the slot of an
// activation not yet made (a 2048-layer unrolled step: 15.7 s, now 7.3 s). What is left is best fit's own
// cost: a buffer of a few bytes fits in every hole of a fragmented heap, and all of them are looked at - so
// the unions are cut from the free space one by one, the densest first, each asked only about what is still
// free (free_space: the 300-layer flax encoder's thousands of adafactor scalars, 7.4 s -> 3.3 s a plan).
// Unions give the same free space as the chunks one by one, but for holes smaller than the chunk, which best
// fit never takes: the placement is the same, chunk for chunk (tests/plan/heap_simulator_test.cc checks it
// against the plain walk).
class TimeOffsetIndex {
 public:
  TimeOffsetIndex(const std::vector<HeapInterval>& intervals, uint64_t alignment)
      : sets_(alignment), alignment_(alignment) {
    for (const HeapInterval& iv : intervals) {
      times_.push_back(iv.start);
      times_.push_back(iv.end);
    }
    std::sort(times_.begin(), times_.end());
    times_.erase(std::unique(times_.begin(), times_.end()), times_.end());
    leaves_ = std::max<size_t>(times_.size(), 1);
    own_.assign(4 * leaves_, RunSets::kNil);
    below_.assign(4 * leaves_, RunSets::kNil);
  }

  void insert(uint64_t offset, uint64_t end_offset, uint64_t start, uint64_t end) {
    add(1, 0, leaves_ - 1, point(start), point(end), offset, end_offset);
  }

  // Into `free`, in offset order: the offset ranges that no chunk live somewhere in `windows` (each [start,
  // end], clock points of intervals) occupies and where a chunk of `fits_bytes` fits once its start is
  // aligned; the last range unbounded (kUnbounded), from the top of every chunk there. The unions are cut
  // from the free space one after another, those covering the most bytes first, each asked only about the
  // space still free: a tiny chunk fits in every hole of each union, and listing every run of every union
  // for it (thousands of optax.adafactor's per-parameter scalars live through a step) was most of a deep
  // plan's time. `sets` and `scratch` are the caller's, reused.
  void free_space(const std::vector<std::pair<uint64_t, uint64_t>>& windows, uint64_t fits_bytes,
                  std::vector<uint32_t>& sets, std::vector<std::pair<uint64_t, uint64_t>>& free,
                  std::vector<std::pair<uint64_t, uint64_t>>& scratch) const {
    sets.clear();
    auto keep_set = [&](uint32_t set) {
      if (set != RunSets::kNil) sets.push_back(set);
    };
    for (const auto& [start, end] : windows) collect(1, 0, leaves_ - 1, point(start), point(end), keep_set);
    // The densest first; a union met from two windows comes once (equal ids sort side by side).
    std::sort(sets.begin(), sets.end(), [&](uint32_t a, uint32_t b) {
      const uint64_t x = sets_.covered_bytes(a), y = sets_.covered_bytes(b);
      return x != y ? x > y : a < b;
    });
    sets.erase(std::unique(sets.begin(), sets.end()), sets.end());
    free.assign(1, {0, kUnbounded});
    for (uint32_t set : sets) {
      scratch.clear();
      for (const auto& [from, to] : free) {
        uint64_t cursor = from;
        auto keep = [&](uint64_t b, uint64_t e) {
          // A range no chunk of fits_bytes goes in is left out: it changes no choice.
          if (e == kUnbounded || (e > align_up(b, alignment_) && e - align_up(b, alignment_) >= fits_bytes))
            scratch.emplace_back(b, e);
        };
        auto cut = [&](uint64_t b, uint64_t e) {
          if (b > cursor) keep(cursor, b);
          cursor = std::max(cursor, e);
        };
        sets_.runs_in(set, from, to, fits_bytes, cut);
        if (cursor < to) keep(cursor, to);
      }
      free.swap(scratch);
    }
  }

  static constexpr uint64_t kUnbounded = std::numeric_limits<uint64_t>::max();

 private:
  size_t point(uint64_t t) const {
    return static_cast<size_t>(std::lower_bound(times_.begin(), times_.end(), t) - times_.begin());
  }

  void add(size_t node, size_t lo, size_t hi, size_t l, size_t r, uint64_t b, uint64_t e) {
    if (r < lo || hi < l) return;
    sets_.add(below_[node], b, e);
    if (l <= lo && hi <= r) {
      sets_.add(own_[node], b, e);
      return;
    }
    const size_t mid = (lo + hi) / 2;
    add(2 * node, lo, mid, l, r, b, e);
    add(2 * node + 1, mid + 1, hi, l, r, b, e);
  }

  template <typename F>
  void collect(size_t node, size_t lo, size_t hi, size_t l, size_t r, F& list) const {
    if (r < lo || hi < l || below_[node] == RunSets::kNil) return;
    if (l <= lo && hi <= r) {
      list(below_[node]);
      return;
    }
    list(own_[node]);
    const size_t mid = (lo + hi) / 2;
    collect(2 * node, lo, mid, l, r, list);
    collect(2 * node + 1, mid + 1, hi, l, r, list);
  }

  RunSets sets_;
  uint64_t alignment_;
  std::vector<uint64_t> times_;
  size_t leaves_ = 1;
  std::vector<uint32_t> own_, below_;  // per segment-tree node: the roots of its two unions
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
                             HeapPacking packing, uint64_t give_up_at_bytes) {
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
  TimeOffsetIndex placed_space(intervals, alignment);
  std::vector<std::pair<uint64_t, uint64_t>> free;     // [offset, end) free through a group's live ranges
  std::vector<std::pair<uint64_t, uint64_t>> windows;  // a group's live ranges, merged
  std::vector<std::pair<uint64_t, uint64_t>> scratch;
  std::vector<uint32_t> sets;
  for (uint32_t l : leaders) {
    const uint64_t size = keys[l].size;
    // Best fit: the smallest gap that holds the chunk, lowest offset on ties; else above everything.
    uint64_t best_offset = 0;
    uint64_t best_gap = std::numeric_limits<uint64_t>::max();
    const std::vector<uint32_t>& group = members[l];
    // The group's live ranges, merged where they meet (the clock is whole numbers, so [a, b] and [b + 1, c]
    // are [a, c]), asked of the time-offset index: unions of the chunks live in them - the same free space
    // as the chunks one by one, for any hole the group fits in.
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
    placed_space.free_space(windows, size, sets, free, scratch);
    for (const auto& [from, to] : free) {  // in offset order: the lowest offset wins a tie
      const uint64_t gap_start = align_up(from, alignment);
      if (to == TimeOffsetIndex::kUnbounded) {
        if (best_gap == std::numeric_limits<uint64_t>::max()) best_offset = gap_start;  // above everything
      } else if (to > gap_start && to - gap_start >= size && to - gap_start < best_gap) {
        best_gap = to - gap_start;
        best_offset = gap_start;
      }
    }
    for (uint32_t m : group) {
      result.offsets[m] = best_offset;
      placed_space.insert(best_offset, best_offset + intervals[m].size_bytes, intervals[m].start,
                          intervals[m].end);
      result.heap_bytes = std::max(result.heap_bytes, best_offset + intervals[m].size_bytes);
    }
    if (result.heap_bytes >= give_up_at_bytes) return result;
  }
  return result;
}

HeapAssignment best_heap(const std::vector<HeapInterval>& intervals, uint64_t alignment) {
  // The smaller of the two packings, spatial on a tie. Spatial first: when it is as small as the most bytes
  // live at once, no packing is smaller, and the temporal one (as slow again or slower) is not run. That is
  // the common case: 17 of the 24 heaps of `fit --model gpt --layers 300`, the others 0.001-0.4% above it.
  HeapAssignment spatial = best_fit_heap(intervals, alignment, HeapPacking::kSpatial);
  if (spatial.heap_bytes <= live_bytes_peak(intervals).bytes) return spatial;
  // The temporal packing wins only if it ends smaller, ties going to the spatial one: it is given up as soon
  // as it reaches the spatial heap's size (the 300-layer flax encoder's: 1.26 s of its 3.45 s plan).
  HeapAssignment temporal =
      best_fit_heap(intervals, alignment, HeapPacking::kTemporal, /*give_up_at_bytes=*/spatial.heap_bytes);
  return temporal.heap_bytes < spatial.heap_bytes ? temporal : spatial;
}

namespace {

// Events of the chunks' live ranges, in time order: (time, 0, +size) at a start, (time, 1, size) after an
// end; at equal times additions first (inclusive ranges). A chunk is live while any of the intervals
// sharing it is: each group's ranges are merged, at its largest size.
std::vector<std::tuple<uint64_t, int, uint64_t>> live_events(const std::vector<HeapInterval>& intervals) {
  const uint32_t n = static_cast<uint32_t>(intervals.size());
  std::vector<std::vector<std::pair<uint64_t, uint64_t>>> ranges(n);
  std::vector<uint64_t> size(n, 0);
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t l = leader_of(intervals, i);
    ranges[l].emplace_back(intervals[i].start, intervals[i].end);
    size[l] = std::max(size[l], intervals[i].size_bytes);
  }
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
  return events;
}

}  // namespace

LiveBytesPeak live_bytes_peak(const std::vector<HeapInterval>& intervals) {
  LiveBytesPeak peak;
  uint64_t live = 0;
  for (const auto& [t, kind, bytes] : live_events(intervals)) {
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

std::vector<uint64_t> live_bytes_peaks_by_phase(const std::vector<HeapInterval>& intervals,
                                                const std::vector<uint8_t>& phase_at_time, size_t phases) {
  std::vector<uint64_t> peaks(phases, 0);
  if (phases == 0) return peaks;
  uint64_t live = 0;
  for (const auto& [t, kind, bytes] : live_events(intervals)) {
    if (kind != 0) {
      live -= bytes;
      continue;
    }
    live += bytes;
    const size_t p = t < phase_at_time.size() && phase_at_time[t] < phases ? phase_at_time[t] : 0;
    peaks[p] = std::max(peaks[p], live);
  }
  return peaks;
}

}  // namespace memfit
