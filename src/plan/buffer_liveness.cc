// The flattened schedule and live ranges (xla/hlo/analysis/hlo_live_range.cc), buffers from alias sets.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <functional>
#include <numeric>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "buffer_model_builder.h"

namespace memfit::buffer_model_internal {

void Builder::compute_liveness() {
  const size_t nv = model_.values.size();
  live_out_.assign(nv, false);
  for (uint32_t v = 0; v < nv; ++v) {
    HloValue& value = model_.values[v];
    const HloInstruction& def = m_.computations[value.computation].instructions[value.instruction];
    value.start = def.opcode == HloOpcode::kParameter
                      ? span_[value.computation].first
                      : static_cast<uint64_t>(time_[value.computation][value.instruction]);
    value.end = value.start;
  }
  for (uint32_t c = 0; c < m_.computations.size(); ++c) {
    if (!processed_[c]) continue;
    const HloComputation& comp = m_.computations[c];
    const HloInstruction* root = comp.root();
    for (uint32_t i = 0; i < comp.instructions.size(); ++i) {
      const HloInstruction& inst = comp.instructions[i];
      const uint64_t t = static_cast<uint64_t>(time_[c][i]);
      const bool is_root = &inst == root;
      for (uint32_t v : positions_[c][i]) {
        extend(v, is_root ? span_[c].second : t);
        if (is_root && c == entry_) live_out_[v] = true;
      }
      if (inst.opcode == HloOpcode::kGetTupleElement) {  // reads only the pointer table
        extend(positions_[c][operands_[c][i][0]][0], t);
        continue;
      }
      for (uint32_t o : operands_[c][i]) {
        for (uint32_t v : positions_[c][o]) extend(v, t);
      }
    }
  }
}

void Builder::assign_buffers() {
  const size_t nv = model_.values.size();
  std::vector<uint32_t> buffer_of_root(nv, UINT32_MAX);
  for (uint32_t v = 0; v < nv; ++v) {
    const uint32_t r = find(v);
    if (buffer_of_root[r] == UINT32_MAX) {
      buffer_of_root[r] = static_cast<uint32_t>(model_.buffers.size());
      HloBuffer b;
      b.start = UINT64_MAX;
      model_.buffers.push_back(b);
    }
    const uint32_t id = buffer_of_root[r];
    HloValue& value = model_.values[v];
    value.buffer = id;
    HloBuffer& b = model_.buffers[id];
    b.values.push_back(v);
    b.size_bytes = std::max(b.size_bytes, value.size_bytes);
    b.start = std::min(b.start, value.start);
    b.end = std::max(b.end, value.end);
  }
  for (HloBuffer& b : model_.buffers) {
    bool param = false, out = false, constant = false;
    for (uint32_t v : b.values) {
      const HloValue& value = model_.values[v];
      const HloInstruction& def = m_.computations[value.computation].instructions[value.instruction];
      param |= def.opcode == HloOpcode::kParameter && value.computation == entry_;
      constant |= def.opcode == HloOpcode::kConstant;
      out |= live_out_[v];
    }
    b.kind = param      ? BufferKind::kParameter
             : out      ? BufferKind::kOutput
             : constant ? BufferKind::kConstant
                        : BufferKind::kTemp;
  }
}

// Post-order positions of every instruction in the sequential computations, callees first.
const std::vector<std::vector<uint64_t>>& Builder::post_order_positions() {
  if (post_order_built_) return post_order_;
  post_order_built_ = true;
  post_order_.resize(m_.computations.size());
  uint64_t next = 0;
  for (uint32_t c : computation_post_order_) {
    post_order_[c].assign(m_.computations[c].instructions.size(), UINT64_MAX);
    for (uint32_t i : instruction_post_order(m_.computations[c])) post_order_[c][i] = next++;
  }
  return post_order_;
}

}  // namespace memfit::buffer_model_internal
