// Allocations and heap intervals (xla/service/buffer_assignment.cc, HeapSimulator::RunComputation).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <functional>
#include <numeric>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include "buffer_model_builder.h"
#include "memfit/core/checked.h"

namespace memfit::buffer_model_internal {
namespace {

// A time range a value occupies in an allocation, inclusive.
struct Span {
  uint64_t start = 0;
  uint64_t end = 0;
};

// The allocations a temporary may move into, as a tree over the order they were made in, so that the
// search for the latest-made one that can take it skips whole runs of allocations that cannot. Each node
// knows its largest allocation; for the first and the last value placed in each (a parameter and its new
// value, an output), the extremes of their ranges; and, over time cut into kBuckets equal buckets, the
// buckets every allocation below holds one value across from before the bucket to after it. A run whose
// allocations are all too small, all occupied over the temporary's range by their first (or all by their
// last) value, or all holding a value across the bucket the temporary starts in, is passed over; each is the
// verdict the value-by-value check would reach, so the result is exactly the linear scan's, without its
// cost: a 512-layer step made 2e8 such checks, and with the first two tests alone a 1024-layer one still
// made 2e7 (small temporaries passing hundreds of allocations held by a long-lived activation each).
class ReuseIndex {
 public:
  ReuseIndex(size_t capacity, uint64_t time_end) : bucket_width_(time_end / kBuckets + 1) {
    while (leaves_ < capacity) leaves_ *= 2;
    nodes_.assign(2 * leaves_, Node{});
  }

  // The allocation in `slot`: its size, its first and last value's ranges, and the values it now also
  // holds.
  void set(uint32_t slot, uint64_t size_bytes, Span first, Span last, const std::vector<Span>& added) {
    size_t n = leaves_ + slot;
    Node& leaf = nodes_[n];
    const Buckets held = leaf.held;
    leaf = Node{true, size_bytes, first.end, first.start, last.end, last.start, held};
    // Buckets b with span.start < b's first time and span.end >= the next bucket's first: held across.
    for (const Span& span : added) {
      const uint64_t lo = span.start / bucket_width_ + 1;
      const uint64_t hi = std::min<uint64_t>(span.end / bucket_width_, kBuckets);  // exclusive
      for (uint64_t b = lo; b < hi; ++b) leaf.held[b / 64] |= uint64_t{1} << (b % 64);
    }
    for (n /= 2; n >= 1; n /= 2) nodes_[n] = combine(nodes_[2 * n], nodes_[2 * n + 1]);
  }

  // Calls f(slot) on the slots that may take a value of `size_bytes` live over [start, end], last made
  // first, until f returns true; returns whether one did.
  template <typename F>
  bool find_latest(uint64_t size_bytes, Span range, F&& f) const {
    const uint64_t b = range.start / bucket_width_;  // < kBuckets: every time is below time_end + 1
    return visit(1, 0, leaves_, size_bytes, range, b / 64, uint64_t{1} << (b % 64), f);
  }

 private:
  static constexpr uint64_t kBuckets = 256;
  using Buckets = std::array<uint64_t, kBuckets / 64>;
  struct Node {
    bool any = false;
    uint64_t max_size = 0;
    uint64_t first_min_end = 0, first_max_start = 0;  // over the first values placed
    uint64_t last_min_end = 0, last_max_start = 0;    // over the last values placed
    Buckets held{};                                   // buckets every allocation below holds a value across
  };
  static Node combine(const Node& a, const Node& b) {
    if (!a.any) return b;
    if (!b.any) return a;
    Node n{true,
           std::max(a.max_size, b.max_size),
           std::min(a.first_min_end, b.first_min_end),
           std::max(a.first_max_start, b.first_max_start),
           std::min(a.last_min_end, b.last_min_end),
           std::max(a.last_max_start, b.last_max_start),
           {}};
    for (size_t w = 0; w < n.held.size(); ++w) n.held[w] = a.held[w] & b.held[w];
    return n;
  }
  // Every allocation below holds a value x with x.end > start and x.start < end: live across part of the
  // range and not ending or starting at its edge, so it meets the new value whatever may share. A value held
  // across the start's bucket starts before the range and ends after its start: the same.
  static bool all_blocked(const Node& n, Span r, size_t word, uint64_t bit) {
    return (n.first_min_end > r.start && n.first_max_start < r.end) ||
           (n.last_min_end > r.start && n.last_max_start < r.end) || (n.held[word] & bit) != 0;
  }
  template <typename F>
  bool visit(size_t node, size_t lo, size_t hi, uint64_t size_bytes, Span range, size_t word, uint64_t bit,
             F& f) const {
    const Node& n = nodes_[node];
    if (!n.any || n.max_size < size_bytes || all_blocked(n, range, word, bit)) return false;
    if (hi - lo == 1) return f(static_cast<uint32_t>(lo));
    const size_t mid = (lo + hi) / 2;
    return visit(2 * node + 1, mid, hi, size_bytes, range, word, bit, f) ||
           visit(2 * node, lo, mid, size_bytes, range, word, bit, f);
  }

  uint64_t bucket_width_;
  size_t leaves_ = 1;
  std::vector<Node> nodes_;
};

}  // namespace

// BufferAssigner::AssignBuffersForComputations: buffers go largest first (live-out first on ties). Before a
// temporary is left to the heap it tries the allocation of an operand it may share, then every allocation
// made so far, smallest first, where it fits and meets nothing already there. Outputs get allocations of
// their own, so a temporary that dies before an output is written lives in the output's memory.
void Builder::assign_allocations() {
  struct Allocation {
    uint64_t size = 0;
    bool writable = false;
    std::vector<uint32_t> buffers;
    // (start, value) of every value placed here, by start. They never interfere, so their ranges follow
    // one another and a query looks at the few around its own range.
    std::vector<std::pair<uint64_t, uint32_t>> spans;
    uint32_t reuse_slot = UINT32_MAX;  // its place in `reusable` (and the reuse index), once there
    void add(const BufferModel& model, uint32_t b) {
      buffers.push_back(b);
      for (uint32_t v : model.buffers[b].values) {
        const std::pair<uint64_t, uint32_t> span(model.values[v].start, v);
        spans.insert(std::upper_bound(spans.begin(), spans.end(), span), span);
      }
    }
  };
  std::vector<Allocation> allocs;
  std::vector<uint32_t> alloc_of(model_.buffers.size(), UINT32_MAX);
  std::vector<uint32_t> reusable;  // candidate allocations in creation order
  uint64_t time_end = 0;
  for (const HloValue& value : model_.values) time_end = std::max(time_end, value.end);
  // Only parameters, constants and buffers that are not temporaries get allocations of their own (a
  // temporary goes to the heap or into another's): the index needs a leaf for each of those alone.
  const auto own_allocations =
      static_cast<size_t>(std::count_if(model_.buffers.begin(), model_.buffers.end(),
                                        [](const HloBuffer& b) { return b.kind != BufferKind::kTemp; }));
  ReuseIndex reuse_index(own_allocations, time_end);  // the same allocations, searchable
  auto span_of = [&](uint32_t v) { return Span{model_.values[v].start, model_.values[v].end}; };
  std::vector<Span> added;
  // Tells the index of allocation a, which now also holds the values of `buffers`.
  auto index_slot = [&](uint32_t a, const std::vector<uint32_t>& buffers) {
    const Allocation& alloc = allocs[a];
    added.clear();
    for (uint32_t b : buffers)
      for (uint32_t v : model_.buffers[b].values) added.push_back(span_of(v));
    reuse_index.set(alloc.reuse_slot, alloc.size, span_of(alloc.spans.front().second),
                    span_of(alloc.spans.back().second), added);
  };
  auto make_reusable = [&](uint32_t a) {
    allocs[a].reuse_slot = static_cast<uint32_t>(reusable.size());
    reusable.push_back(a);
    index_slot(a, allocs[a].buffers);
  };
  std::vector<uint32_t> order(model_.buffers.size());
  std::iota(order.begin(), order.end(), 0u);
  auto live_out = [&](uint32_t b) {
    for (uint32_t v : model_.buffers[b].values)
      if (live_out_[v]) return true;
    return false;
  };
  std::vector<bool> is_live_out(model_.buffers.size());
  for (uint32_t b = 0; b < model_.buffers.size(); ++b) is_live_out[b] = live_out(b);
  // Ties go to the buffer whose first defining instruction comes first in post order (a depth-first walk
  // from each computation's results, operands in order): XLA's MakeInstructionPostOrder, not the schedule.
  const auto& post_order = post_order_positions();
  std::vector<uint64_t> first_post_order(model_.buffers.size(), UINT64_MAX);
  for (uint32_t b = 0; b < model_.buffers.size(); ++b) {
    for (uint32_t v : model_.buffers[b].values) {
      const HloValue& value = model_.values[v];
      first_post_order[b] = std::min(first_post_order[b], post_order[value.computation][value.instruction]);
    }
  }
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    const HloBuffer& x = model_.buffers[a];
    const HloBuffer& y = model_.buffers[b];
    if (x.size_bytes != y.size_bytes) return x.size_bytes > y.size_bytes;
    if (is_live_out[a] != is_live_out[b]) return static_cast<bool>(is_live_out[a]);
    return std::tie(first_post_order[a], a) < std::tie(first_post_order[b], b);
  });
  auto strictly_before = [&](uint32_t a, uint32_t b) {
    const HloValue& x = model_.values[a];
    const HloValue& y = model_.values[b];
    if (x.end < y.start) return true;
    if (x.end > y.start || live_out_[a]) return false;
    // a dies where b is defined: fine when b may take over a's memory.
    const auto& ops = operands_[y.computation][y.instruction];
    for (size_t k = 0; k < ops.size(); ++k) {
      const Positions& p = positions_[y.computation][ops[k]];
      if (!p.empty() && p[0] == a) return can_share(a, y.computation, y.instruction, y.index, k);
    }
    return false;
  };
  auto try_assign = [&](uint32_t a, uint32_t b) {
    Allocation& alloc = allocs[a];
    const HloBuffer& buffer = model_.buffers[b];
    // Pointer tables never move into another allocation (XLA keeps tuples out of reuse).
    if (!alloc.writable || buffer.size_bytes > alloc.size || shape_of_[buffer.values.front()]->is_tuple())
      return false;
    if (is_live_out[b] && buffer.size_bytes != alloc.size) return false;
    // Allocations are per memory space (XLA's buffer colors): a host value never lands in a device
    // allocation, nor a device value in a host one.
    const HloBuffer& holder = model_.buffers[alloc.buffers.front()];
    if (shape_of_[holder.values.front()]->memory_space != shape_of_[buffer.values.front()]->memory_space)
      return false;
    for (uint32_t y : buffer.values) {
      const HloValue& value = model_.values[y];
      auto it = std::upper_bound(alloc.spans.begin(), alloc.spans.end(),
                                 std::pair<uint64_t, uint32_t>(value.end, UINT32_MAX));
      while (it != alloc.spans.begin()) {
        const uint32_t x = (--it)->second;
        if (model_.values[x].end < value.start && !live_out_[x]) break;  // this and all before end earlier
        if (!strictly_before(x, y) && !strictly_before(y, x)) return false;
      }
    }
    alloc.add(model_, b);
    alloc_of[b] = a;
    if (alloc.reuse_slot != UINT32_MAX) index_slot(a, {b});
    return true;
  };
  for (uint32_t b : order) {
    HloBuffer& buffer = model_.buffers[b];
    const bool tuple = shape_of_[buffer.values.front()]->is_tuple();
    if (buffer.kind == BufferKind::kParameter || buffer.kind == BufferKind::kConstant) {
      // Arguments are read-only unless donated; constants always.
      const bool writable = buffer.kind == BufferKind::kParameter && is_live_out[b] && !tuple;
      allocs.push_back({buffer.size_bytes, writable, {}, {}, UINT32_MAX});
      allocs.back().add(model_, b);
      alloc_of[b] = static_cast<uint32_t>(allocs.size() - 1);
      // A donated argument's memory is free between its last read and the write of its new value;
      // XLA's dump of gpt_fp32_donate shows small temporaries placed there.
      if (writable) make_reusable(alloc_of[b]);
      continue;
    }
    bool placed = false;
    for (uint32_t v : buffer.values) {
      const HloValue& value = model_.values[v];
      const auto& ops = operands_[value.computation][value.instruction];
      for (size_t k = 0; k < ops.size() && !placed; ++k) {
        const Positions& p = positions_[value.computation][ops[k]];
        if (p.empty()) continue;
        const uint32_t ob = model_.values[p[0]].buffer;
        if (alloc_of[ob] == UINT32_MAX || ob == b) continue;
        if (can_share(p[0], value.computation, value.instruction, value.index, k))
          placed = try_assign(alloc_of[ob], b);
      }
      if (placed) break;
    }
    // Then the allocations made so far, the last made (so the smallest) first.
    if (!placed && !tuple) {
      placed = reuse_index.find_latest(buffer.size_bytes, span_of(buffer.values.front()),
                                       [&](uint32_t slot) { return try_assign(reusable[slot], b); });
    }
    if (placed) {
      if (buffer.kind == BufferKind::kTemp) {
        buffer.kind = BufferKind::kReusesAllocation;
        buffer.allocation_of = allocs[alloc_of[b]].buffers.front();
      }
      continue;
    }
    if (buffer.kind == BufferKind::kTemp) continue;  // to the heap
    allocs.push_back({buffer.size_bytes, !tuple, {}, {}, UINT32_MAX});
    allocs.back().add(model_, b);
    alloc_of[b] = static_cast<uint32_t>(allocs.size() - 1);
    make_reusable(alloc_of[b]);
  }
}

// Does the fusion/op read operand k in the order it writes the result at user_index? Then the result
// may take over the operand's memory (GPU's FusionCanShareBufferHint, dataflow's elementwise rule).
bool Builder::can_share(uint32_t operand_value, uint32_t c, uint32_t i,
                        const std::vector<uint64_t>& user_index, size_t k) {
  const HloInstruction& user = m_.computations[c].instructions[i];
  const Shape* us = user.shape.at(user_index);
  const Shape* os = shape_of_[operand_value];
  if (us == nullptr || us->is_tuple() || os->is_tuple()) return false;
  const bool same_dims = us->type == os->type && us->dims == os->dims;
  const bool same_layout =
      us->minor_to_major.empty() || os->minor_to_major.empty() || us->minor_to_major == os->minor_to_major;
  const bool equal = same_dims && same_layout;  // ShapeUtil::Equal
  if (user.opcode != HloOpcode::kFusion) {
    if (!equal) return false;
    if ((user.opcode == HloOpcode::kDynamicUpdateSlice || user.opcode == HloOpcode::kScatter) && k == 0)
      return true;
    return is_elementwise(user.opcode) && user.opcode != HloOpcode::kCopy;
  }
  if (m_.platform == HloPlatform::kCpu) {
    // HloDataflowAnalysis's default: the same shape and layout, and every transitive use of the fused
    // parameter elementwise (or a tuple).
    return equal && fused_uses_elementwise(user, k);
  }
  // XLA:GPU's FusionCanShareBufferHint: the same element count and width will do.
  if (!equal && (us->own_bytes() != os->own_bytes() ||
                 element_storage_bits(us->type) != element_storage_bits(os->type)))
    return false;
  if (user.called.empty()) return false;
  auto fc = comp_index_.find(user.called[0]);
  if (fc == comp_index_.end()) return false;
  const uint32_t f = fc->second;
  const HloComputation& body = m_.computations[f];
  const HloInstruction* param = nullptr;
  for (const HloInstruction& x : body.instructions) {
    if (x.opcode == HloOpcode::kParameter && x.parameter_number == static_cast<int64_t>(k)) param = &x;
  }
  const HloInstruction* output = body.root();
  if (param == nullptr || output == nullptr) return false;
  for (uint64_t idx : user_index) {
    if (output->opcode != HloOpcode::kTuple || idx >= output->operands.size()) return false;
    output = lookup(f, output->operands[idx]);
    if (output == nullptr) return false;
  }
  const HloInstruction* non_bitcast_root = output;
  while (non_bitcast_root->opcode == HloOpcode::kBitcast && !non_bitcast_root->operands.empty()) {
    const HloInstruction* next = lookup(f, non_bitcast_root->operands[0]);
    if (next == nullptr) break;
    non_bitcast_root = next;
  }
  // The reduction emitter computes its reduction before it writes any other output, so a path through
  // the reduction does not stop the sharing ("allow multiple output users, if they end in reductions").
  // The emitter is taken to be the reduction emitter for every kInput fusion with a hero.
  const HloInstruction* hero = user.fusion_kind() == "kInput" ? reduction_hero_of(f) : nullptr;
  // Every op on a path from the parameter, the output's other users included, must read it in the order
  // the output is written: elementwise (no copy), a bitcast, the result tuple, the hero, or the first
  // operand of a dynamic-update-slice (elementwise on it). Reaching another output through the tuple is
  // fine when this output is elementwise (the dump of mlp_fp32 shows Adam's multi-output update fusion
  // writing a parameter's new value over the gradient it reads). Not modeled: XLA's exception for a
  // dynamic-slice of the very slice a dynamic-update-slice root writes (refused here).
  const auto& users = users_of(f);
  std::vector<const HloInstruction*> queue{param};
  std::unordered_set<const HloInstruction*> visited{param};
  bool found = false;
  for (size_t q = 0; q < queue.size(); ++q) {
    const HloInstruction* x = queue[q];
    if (x == output) found = true;  // its other users are walked too
    if (x == hero) continue;
    auto it = users.find(x->name);
    if (it == users.end()) continue;
    for (uint32_t ui : it->second) {
      const HloInstruction* u = &body.instructions[ui];
      if (visited.insert(u).second) queue.push_back(u);
      const bool dus_on_first =
          u->opcode == HloOpcode::kDynamicUpdateSlice && !u->operands.empty() && u->operands[0] == x->name;
      const bool in_order = (is_elementwise(u->opcode) && u->opcode != HloOpcode::kCopy) || dus_on_first ||
                            u->opcode == HloOpcode::kBitcast || u->opcode == HloOpcode::kTuple || u == hero;
      if (!in_order) return false;
    }
  }
  // A multi-output fusion whose output is not elementwise (a dynamic-update-slice) may write it in
  // another order than its other outputs read the parameter: no sharing if another output was reached.
  if (body.root()->opcode == HloOpcode::kTuple && !is_elementwise(non_bitcast_root->opcode)) {
    for (const std::string& o : body.root()->operands) {
      const HloInstruction* other = lookup(f, o);
      if (other != output && visited.contains(other)) return false;
    }
  }
  return found;
}

bool Builder::fused_uses_elementwise(const HloInstruction& fusion, size_t k) {
  if (fusion.called.empty()) return false;
  auto fc = comp_index_.find(fusion.called[0]);
  if (fc == comp_index_.end()) return false;
  const HloComputation& body = m_.computations[fc->second];
  const HloInstruction* param = nullptr;
  for (const HloInstruction& x : body.instructions) {
    if (x.opcode == HloOpcode::kParameter && x.parameter_number == static_cast<int64_t>(k)) param = &x;
  }
  if (param == nullptr) return false;
  const auto& users = users_of(fc->second);
  std::vector<const HloInstruction*> stack{param};
  std::unordered_set<const HloInstruction*> visited{param};
  while (!stack.empty()) {
    const HloInstruction* x = stack.back();
    stack.pop_back();
    auto it = users.find(x->name);
    if (it == users.end()) continue;
    for (uint32_t ui : it->second) {
      const HloInstruction* u = &body.instructions[ui];
      if (u->opcode != HloOpcode::kTuple && !(is_elementwise(u->opcode) && u->opcode != HloOpcode::kCopy))
        return false;
      if (visited.insert(u).second) stack.push_back(u);
    }
  }
  return true;
}

// The hero is the reduce a root reads through bitcasts and unary elementwise ops (XLA's FindNonTrivialHero,
// approximated), the first root's that has one.
const HloInstruction* Builder::reduction_hero_of(uint32_t c) {
  if (heroes_built_[c]) return heroes_[c];
  heroes_built_[c] = true;
  const HloInstruction* root = m_.computations[c].root();
  if (root == nullptr) return nullptr;
  std::vector<const HloInstruction*> roots{root};
  if (root->opcode == HloOpcode::kTuple) {
    roots.clear();
    for (const std::string& o : root->operands) roots.push_back(lookup(c, o));
  }
  for (const HloInstruction* r : roots) {
    while (r != nullptr && r->operands.size() == 1 &&
           (r->opcode == HloOpcode::kBitcast || (is_elementwise(r->opcode) && r->opcode != HloOpcode::kCopy)))
      r = lookup(c, r->operands[0]);
    if (r != nullptr && r->opcode == HloOpcode::kReduce) return heroes_[c] = r;
  }
  return nullptr;
}

const std::unordered_map<std::string_view, std::vector<uint32_t>>& Builder::users_of(uint32_t c) {
  auto& u = users_[c];
  if (!users_built_[c]) {  // built once per computation, on first need
    users_built_[c] = true;
    const auto& insts = m_.computations[c].instructions;
    for (uint32_t i = 0; i < insts.size(); ++i) {
      for (const std::string& o : insts[i].operands) {
        auto& list = u[o];
        if (list.empty() || list.back() != i) list.push_back(i);
      }
    }
  }
  return u;
}

// HeapSimulator::RunComputation: per time step, the values defined then are allocated (sharing their
// buffer's chunk, or a dying operand's), then the values that die then are freed; every event ticks.
void Builder::simulate_heap() {
  simulate_heap_of(/*host=*/false, model_.heap_intervals, model_.heap_values);
  simulate_heap_of(/*host=*/true, model_.host_heap_intervals, model_.host_heap_values);
}

// One heap per memory space: device temps, or host temps (S(5)).
void Builder::simulate_heap_of(bool host, std::vector<HeapInterval>& intervals,
                               std::vector<uint32_t>& heap_values) {
  const size_t nv = model_.values.size();
  std::vector<uint32_t> temps;
  for (uint32_t v = 0; v < nv; ++v) {
    if (model_.buffers[model_.values[v].buffer].kind != BufferKind::kTemp) continue;
    if ((shape_of_[v]->memory_space == kHostMemorySpace) != host) continue;
    temps.push_back(v);
  }
  // XLA numbers HloValues as its dataflow analysis defines them: instructions in post order, each one's
  // values in shape-index order. Values of equal live range are handed to the heap, and chunks of equal
  // size and span placed, in that order (HeapSimulator::RunComputation's values_to_assign sort, the heap's
  // BufferIntervalCompare); a tie broken otherwise moves chunks and can cost a buffer's worth of temp.
  const auto& post_order = post_order_positions();
  auto xla_value_id = [&](uint32_t v) {
    const HloValue& x = model_.values[v];
    return std::make_pair(post_order[x.computation][x.instruction], v);
  };
  std::sort(temps.begin(), temps.end(), [&](uint32_t a, uint32_t b) {
    const HloValue& x = model_.values[a];
    const HloValue& y = model_.values[b];
    return std::make_tuple(x.start, x.end, xla_value_id(a)) <
           std::make_tuple(y.start, y.end, xla_value_id(b));
  });
  std::vector<uint32_t> rank_of(nv, 0);  // the XLA value id order among temps, as a dense tie-break
  {
    std::vector<uint32_t> by_id = temps;
    std::sort(by_id.begin(), by_id.end(),
              [&](uint32_t a, uint32_t b) { return xla_value_id(a) < xla_value_id(b); });
    for (uint32_t r = 0; r < by_id.size(); ++r) rank_of[by_id[r]] = r;
  }
  std::vector<uint32_t> by_end = temps;
  std::stable_sort(by_end.begin(), by_end.end(),
                   [&](uint32_t a, uint32_t b) { return model_.values[a].end < model_.values[b].end; });
  std::vector<uint32_t> interval_of(nv, UINT32_MAX);
  std::vector<uint32_t> first_of_buffer(model_.buffers.size(), UINT32_MAX);
  std::vector<bool> reused(nv, false);
  uint64_t clock = 0;
  size_t a = 0, f = 0;
  for (uint64_t t = 0; t < clock_time_; ++t) {
    for (; a < temps.size() && model_.values[temps[a]].start == t; ++a) {
      const uint32_t v = temps[a];
      const HloValue& value = model_.values[v];
      HeapInterval iv;
      iv.start = clock++;
      iv.size_bytes = value.size_bytes;
      iv.tie_break = rank_of[v];
      const uint32_t first = first_of_buffer[value.buffer];
      if (first != UINT32_MAX) {
        iv.colocated_with = first;
      } else {
        iv.colocated_with = reuse_operand(v, t, interval_of, reused);
        first_of_buffer[value.buffer] = static_cast<uint32_t>(intervals.size());
      }
      interval_of[v] = static_cast<uint32_t>(intervals.size());
      intervals.push_back(iv);
      heap_values.push_back(v);
    }
    for (; f < by_end.size() && model_.values[by_end[f]].end == t; ++f) {
      const uint32_t iv = interval_of[by_end[f]];
      if (iv != UINT32_MAX) intervals[iv].end = clock++;
    }
  }
}

// The dying operand whose chunk a new value takes over, by XLA's HeapSimulator::RunComputation rules.
uint32_t Builder::reuse_operand(uint32_t v, uint64_t t, const std::vector<uint32_t>& interval_of,
                                std::vector<bool>& reused) {
  const HloValue& value = model_.values[v];
  const HloInstruction& user = m_.computations[value.computation].instructions[value.instruction];
  if (user.opcode == HloOpcode::kCopy || user.opcode == HloOpcode::kParameter) return kNotColocated;
  // XLA's HeapSimulator::RunComputation shares only a buffer of one value: one that an in-place user
  // (a scatter-add, a dynamic-update-slice) later writes over is allocated afresh. flax_encoder's logits
  // gradient, scattered into by take_along_axis's transpose, does not take the logits' memory.
  if (model_.buffers[value.buffer].values.size() != 1) return kNotColocated;
  std::vector<std::pair<uint32_t, size_t>> candidates;  // (operand value, operand number)
  const auto& ops = operands_[value.computation][value.instruction];
  for (size_t k = 0; k < ops.size(); ++k) {
    const Positions& p = positions_[value.computation][ops[k]];
    if (p.empty()) continue;
    // Only a value the operand itself defines (HeapSimulator asks IsUserOf(operand_value->instruction())):
    // not one reached through a bitcast, a get-tuple-element or a tuple.
    const HloValue& defined = model_.values[p[0]];
    if (defined.computation != value.computation || defined.instruction != ops[k]) continue;
    candidates.emplace_back(p[0], k);
  }
  // Operands are tried in operand order, the first that qualifies wins (HeapSimulator::RunComputation in
  // xla/service/heap_simulator/heap_simulator.cc). vit_b16_infer's MLP output fusion (bias, matmul,
  // residual, ...) takes its matmul operand's memory, not the older residual's.
  for (const auto& [ov, k] : candidates) {
    const HloValue& operand_value = model_.values[ov];
    const HloBuffer& ob = model_.buffers[operand_value.buffer];
    if (ob.kind != BufferKind::kTemp || ob.values.size() != 1 || operand_value.end != t || reused[ov] ||
        interval_of[ov] == UINT32_MAX || operand_value.size_bytes != value.size_bytes)
      continue;
    if (!can_share(ov, value.computation, value.instruction, value.index, k)) continue;
    reused[ov] = true;
    return interval_of[ov];
  }
  return kNotColocated;
}

// XLA's DefaultMemoryScheduler (hlo_memory_scheduler.cc) runs its list, DFS and post-order schedulers and
// keeps the one for which HeapSimulator::MinimumMemoryForComputation is least. That is a NoFragmentationStats
// heap over every value the HeapSimulator tracks: arguments and outputs are in it, constants are not (no
// alloc_constants), and nor are host values - inferred, not read in XLA's sources (gpu_hlo_schedule.cc's
// GetSizeOfShape sizes every shape alike): the offload program's log, list 4.19 GiB and DFS 5.18 GiB, is this
// sweep over its compiled graph without them (4.1938 and 5.1782 GiB), and with them it is not. It is the only
// shared program with host values. Live ranges are HloLiveRange's: a read-only entry parameter lives to the
// end, one that aliases an output to its last read (NormalizeAliasedBuffers ends it where the next value of
// its buffer starts). Each step allocates what it defines before it frees what dies there, and a value that
// takes over a dying operand's memory (RunComputation's may_reuse_operand_buffers, the same rule as the
// heap's) adds nothing. Over XLA's own graph of gpt_mixed_donate_remat_full_b16 this gives the three figures
// its memory scheduler logged and the choice it made (HloPlan.XlasMemorySchedulerEstimateIsReproduced).
uint64_t Builder::estimate_scheduler_memory() {
  const size_t nv = model_.values.size();
  const uint64_t last = span_[entry_].second;
  std::vector<uint32_t> counted;
  std::vector<uint64_t> end(nv, 0);
  for (uint32_t v = 0; v < nv; ++v) {
    const HloValue& value = model_.values[v];
    const HloBuffer& buffer = model_.buffers[value.buffer];
    if (buffer.kind == BufferKind::kConstant || shape_of_[v]->memory_space == kHostMemorySpace) continue;
    end[v] = value.end;
    const HloInstruction& def = m_.computations[value.computation].instructions[value.instruction];
    if (def.opcode == HloOpcode::kParameter && value.computation == entry_) {
      if (buffer.values.size() == 1) {
        end[v] = std::max(end[v], last);
      } else {
        for (uint32_t w : buffer.values) {
          const HloValue& next = model_.values[w];
          if (w != v && next.start > value.start) end[v] = std::min(end[v], next.start);
        }
        end[v] = std::max(end[v], value.start);
      }
    }
    counted.push_back(v);
  }
  // Values defined at one step are handed to the heap in XLA's order (start, end, value id): the first of two
  // that could take over the same operand gets it.
  const auto& post_order = post_order_positions();
  std::sort(counted.begin(), counted.end(), [&](uint32_t a, uint32_t b) {
    const HloValue& x = model_.values[a];
    const HloValue& y = model_.values[b];
    return std::make_tuple(x.start, end[a], post_order[x.computation][x.instruction], a) <
           std::make_tuple(y.start, end[b], post_order[y.computation][y.instruction], b);
  });
  const size_t steps = static_cast<size_t>(std::max(last, clock_time_)) + 2;
  std::vector<uint64_t> allocated(steps, 0), freed(steps, 0), shared(steps, 0);
  std::vector<bool> taken_over(nv, false), is_counted(nv, false);
  for (uint32_t v : counted) is_counted[v] = true;
  for (uint32_t v : counted) {
    const HloValue& value = model_.values[v];
    allocated[value.start] = saturating_add(allocated[value.start], value.size_bytes);
    freed[end[v] + 1] = saturating_add(freed[end[v] + 1], value.size_bytes);
    const HloInstruction& user = m_.computations[value.computation].instructions[value.instruction];
    if (user.opcode == HloOpcode::kCopy || user.opcode == HloOpcode::kParameter ||
        model_.buffers[value.buffer].values.size() != 1)
      continue;
    const auto& ops = operands_[value.computation][value.instruction];
    for (size_t k = 0; k < ops.size(); ++k) {
      const Positions& p = positions_[value.computation][ops[k]];
      if (p.empty()) continue;
      const uint32_t ov = p[0];
      const HloValue& operand_value = model_.values[ov];
      if (operand_value.computation != value.computation || operand_value.instruction != ops[k]) continue;
      if (!is_counted[ov] || taken_over[ov] || end[ov] != value.start ||
          model_.buffers[operand_value.buffer].values.size() != 1)
        continue;
      if (!can_share(ov, value.computation, value.instruction, value.index, k)) continue;
      taken_over[ov] = true;
      shared[value.start] =
          saturating_add(shared[value.start], std::min(operand_value.size_bytes, value.size_bytes));
      break;
    }
  }
  uint64_t live = 0, most = 0;
  for (size_t t = 0; t < steps; ++t) {
    live = live >= freed[t] ? live - freed[t] : 0;
    live = saturating_add(live, allocated[t]);
    most = std::max(most, live >= shared[t] ? live - shared[t] : 0);
  }
  return most;
}

}  // namespace memfit::buffer_model_internal
