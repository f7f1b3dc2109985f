// src/plan/buffer_model_builder.h - the builder behind build_buffer_model (memfit/plan/buffer_model.h),
// private to the plan layer. One class, its steps in one file each, in the order build() runs them:
// - buffer_dataflow.cc: values and which must share a buffer (XLA's HloDataflowAnalysis and
//   HloAliasAnalysis: forwarding ops, while/call/conditional bindings, in-place ops, donation);
// - buffer_liveness.cc: the flattened schedule, each value's live range, buffers from the alias sets;
// - buffer_allocation.cc: allocations (parameters, outputs, constants, temps; operand reuse) and the heap
//   intervals XLA's heap simulator sees.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "memfit/core/name_map.h"
#include "memfit/core/text.h"
#include "memfit/plan/buffer_model.h"

namespace memfit::buffer_model_internal {

inline constexpr int kMaxCallDepth = 256;

// Shapes are walked in pre-order: node 0 is the shape itself, then each element's subtree.
inline size_t node_count(const Shape& s) {
  size_t n = 1;
  for (const Shape& e : s.elements) n += node_count(e);
  return n;
}

inline void for_each_node(const Shape& s, std::vector<uint64_t>& index,
                          const std::function<void(const Shape&, const std::vector<uint64_t>&)>& f) {
  f(s, index);
  for (size_t i = 0; i < s.elements.size(); ++i) {
    index.push_back(i);
    for_each_node(s.elements[i], index, f);
    index.pop_back();
  }
}

// Ops whose result is (part of) an operand's value: they define no buffer.
inline bool forwards_operand(HloOpcode op) {
  return op == HloOpcode::kBitcast || op == HloOpcode::kAddDependency || op == HloOpcode::kDomain ||
         op == HloOpcode::kOptimizationBarrier;
}

class Builder {
 public:
  explicit Builder(const HloModule& module) : m_(module) {}

  Expected<BufferModel> build();
  Expected<uint64_t> scheduler_estimate();  // scheduler_estimate_bytes(): the values, not the heap

 private:
  using Positions = std::vector<uint32_t>;  // a value per pre-order node of the result shape

  uint32_t new_value(uint32_t c, uint32_t i, const std::vector<uint64_t>& index, const Shape& s) {
    HloValue v;
    v.computation = c;
    v.instruction = i;
    v.index = index;
    v.size_bytes = s.own_bytes();
    model_.values.push_back(std::move(v));
    shape_of_.push_back(&s);
    parent_.push_back(static_cast<uint32_t>(parent_.size()));
    return static_cast<uint32_t>(model_.values.size() - 1);
  }

  static constexpr uint32_t kUnset = UINT32_MAX;

  // New values for the nodes of `p` not forwarded from an operand (kUnset); an empty `p` means all of them.
  void define_missing(uint32_t c, uint32_t i, Positions& p) {
    const Shape& shape = m_.computations[c].instructions[i].shape;
    if (p.empty()) p.assign(node_count(shape), kUnset);
    std::vector<uint64_t> index;
    size_t node = 0;
    for_each_node(shape, index, [&](const Shape& s, const std::vector<uint64_t>& idx) {
      if (p[node] == kUnset) p[node] = new_value(c, i, idx, s);
      ++node;
    });
  }
  Positions define_all(uint32_t c, uint32_t i) {
    Positions p;
    define_missing(c, i, p);
    return p;
  }

  uint32_t find(uint32_t v) {
    while (parent_[v] != v) {
      parent_[v] = parent_[parent_[v]];
      v = parent_[v];
    }
    return v;
  }
  void unite(uint32_t a, uint32_t b) {
    a = find(a);
    b = find(b);
    if (a != b) parent_[std::max(a, b)] = std::min(a, b);
  }
  void unite_all(const Positions& a, const Positions& b) {
    for (size_t k = 0; k < std::min(a.size(), b.size()); ++k) unite(a[k], b[k]);
  }

  Error error_at(const HloInstruction& inst, std::string_view what) const {
    return invalid_argument(fmt::format("line {}: '{}': {}", inst.line, inst.name, what));
  }

  Expected<uint32_t> operand(uint32_t c, const HloInstruction& inst, size_t k) const {
    if (k >= inst.operands.size()) return error_at(inst, fmt::format("expected an operand #{}", k));
    auto it = names_[c].find(inst.operands[k]);
    if (it == names_[c].end())
      return error_at(inst, fmt::format("operand '{}' is not defined in this computation", inst.operands[k]));
    return it->second;
  }

  Expected<uint32_t> callee(const HloInstruction& inst, size_t k) const {
    if (k >= inst.called.size()) return error_at(inst, "expected a called computation");
    auto it = comp_index_.find(inst.called[k]);
    if (it == comp_index_.end())
      return error_at(inst, fmt::format("calls '{}', which is not in the module", inst.called[k]));
    return it->second;
  }

  // Runs a sequential computation with its parameters bound to the caller's operand values.
  Status process(uint32_t c, const std::vector<const Positions*>& bindings, int depth);

  Status define(uint32_t c, uint32_t i, const std::vector<const Positions*>& bindings, int depth);

  // Results written over an operand's buffer (XLA's GetInPlaceInputOutputPairs): one buffer.
  Status alias_in_place(uint32_t c, uint32_t i);

  const HloInstruction* lookup(uint32_t c, std::string_view name) const {
    auto it = names_[c].find(name);
    return it == names_[c].end() ? nullptr : &m_.computations[c].instructions[it->second];
  }

  Status alias_donations();

  void extend(uint32_t v, uint64_t t) {
    HloValue& value = model_.values[v];
    value.end = std::max(value.end, t);
  }

  void compute_liveness();

  void assign_buffers();

  // Post-order positions of every instruction in the sequential computations, callees first (XLA's
  // MakeInstructionPostOrder per computation); computed once, on first need.
  const std::vector<std::vector<uint64_t>>& post_order_positions();

  // BufferAssigner::AssignBuffersForComputations: buffers go largest first (live-out first on ties). Before a
  // temporary is left to the heap it tries the allocation of an operand it may share, then every allocation
  // made so far, smallest first, where it fits and meets nothing already there. Outputs get allocations of
  // their own, so a temporary that dies before an output is written lives in the output's memory.
  void assign_allocations();

  // Does the fusion/op read operand k in the order it writes the result at user_index? Then the result
  // may take over the operand's memory (GPU's FusionCanShareBufferHint, dataflow's elementwise rule).
  bool can_share(uint32_t operand_value, uint32_t c, uint32_t i, const std::vector<uint64_t>& user_index,
                 size_t k);

  bool fused_uses_elementwise(const HloInstruction& fusion, size_t k);

  const std::unordered_map<std::string_view, std::vector<uint32_t>>& users_of(uint32_t c);
  // The reduction a fused computation's roots lead to, its reduction emitter's hero (or null); found once.
  const HloInstruction* reduction_hero_of(uint32_t c);

  // Node range [begin, end) of element `k` of tuple shape `tuple` (one of the module's, so its address is
  // stable) whose own node is `base` (shapes are walked in pre-order), each tuple's element offsets summed
  // once. A loop carrying thousands of arrays is read by thousands of get-tuple-elements, and each walk over
  // the elements before the one asked made that O(n^2).
  std::pair<size_t, size_t> element_range(const Shape& tuple, size_t base, size_t k);

  // HeapSimulator::RunComputation: per time step, the values defined then are allocated (sharing their
  // buffer's chunk, or a dying operand's), then the values that die then are freed; every event ticks.
  void simulate_heap();

  // One heap per memory space: device temps, or host temps (S(5)).
  void simulate_heap_of(bool host, std::vector<HeapInterval>& intervals, std::vector<uint32_t>& heap_values);

  // Values, their live ranges and buffers: what both the buffer model and the scheduler estimate need.
  Status analyze();

  // scheduler_estimate_bytes(): the live-bytes sweep XLA's memory scheduler compares orders by.
  uint64_t estimate_scheduler_memory();

  // The dying operand whose chunk a new value takes over. Candidates are tried oldest value first, which is
  // what XLA's dump shows when several operands qualify (a GELU-backward fusion takes its matmul input's
  // memory, not the newer activation's).
  uint32_t reuse_operand(uint32_t v, uint64_t t, const std::vector<uint32_t>& interval_of,
                         std::vector<bool>& reused);

  const HloModule& m_;
  BufferModel model_;
  uint32_t entry_ = 0;
  uint64_t clock_time_ = 0;  // flattened schedule length so far
  NameIndex comp_index_;
  std::vector<NameIndex> names_;
  std::vector<std::vector<Positions>> positions_;
  std::vector<std::vector<std::vector<uint32_t>>>
      operands_;  // resolved operand indices (sequential computations)
  std::vector<std::vector<int64_t>> time_;
  std::vector<std::pair<uint64_t, uint64_t>> span_;
  std::vector<bool> processed_;
  std::vector<bool> in_progress_;  // on the call stack now: a call to it is recursion
  std::vector<std::unordered_map<std::string_view, std::vector<uint32_t>>> users_;
  std::vector<bool> users_built_;
  std::vector<const HloInstruction*> heroes_;
  std::vector<bool> heroes_built_;
  std::unordered_map<const Shape*, std::vector<size_t>> element_starts_;  // element_range's offsets
  std::vector<const Shape*> shape_of_;
  std::vector<uint32_t> parent_;
  std::vector<bool> live_out_;
  std::vector<uint32_t> computation_post_order_;   // sequential computations, callees before callers
  std::vector<std::vector<uint64_t>> post_order_;  // post_order_positions(), once built
  bool post_order_built_ = false;
};

}  // namespace memfit::buffer_model_internal
