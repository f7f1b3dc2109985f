// Values and must-alias sets (xla/hlo/analysis/hlo_dataflow_analysis.cc, hlo_alias_analysis.cc).
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

// Runs a sequential computation with its parameters bound to the caller's operand values.
Status Builder::process(uint32_t c, const std::vector<const Positions*>& bindings, int depth) {
  if (depth > kMaxCallDepth) return invalid_argument("computations nest deeper than 256 calls");
  const HloComputation& comp = m_.computations[c];
  if (in_progress_[c]) {
    return invalid_argument(
        fmt::format("computation {} calls itself (directly or through the computations it calls): HLO has no "
                    "recursion, loops are while instructions",
                    excerpt(comp.name)));
  }
  if (processed_[c]) {  // a second call site: its values flow into the same parameters
    for (uint32_t i = 0; i < comp.instructions.size(); ++i) {
      const HloInstruction& inst = comp.instructions[i];
      if (inst.opcode == HloOpcode::kParameter &&
          static_cast<size_t>(inst.parameter_number) < bindings.size())
        unite_all(positions_[c][i], *bindings[inst.parameter_number]);
    }
    return Status();
  }
  processed_[c] = true;
  in_progress_[c] = true;
  positions_[c].resize(comp.instructions.size());
  operands_[c].resize(comp.instructions.size());
  time_[c].assign(comp.instructions.size(), -1);
  const uint64_t start = clock_time_;
  for (uint32_t i = 0; i < comp.instructions.size(); ++i) {
    for (size_t k = 0; k < comp.instructions[i].operands.size(); ++k) {
      MEMFIT_ASSIGN_OR_RETURN(uint32_t o, operand(c, comp.instructions[i], k));
      if (o >= i)
        return error_at(comp.instructions[i],
                        "an operand is used before it is defined (not in schedule order)");
      operands_[c][i].push_back(o);
    }
    MEMFIT_RETURN_IF_ERROR(define(c, i, bindings, depth));
    time_[c][i] = static_cast<int64_t>(clock_time_++);
    const size_t expected = node_count(comp.instructions[i].shape);
    if (positions_[c][i].size() != expected)
      return error_at(comp.instructions[i], "its operands do not have the shape its result says");
  }
  span_[c] = {start, clock_time_ == start ? start : clock_time_ - 1};
  in_progress_[c] = false;
  computation_post_order_.push_back(c);
  return Status();
}

Status Builder::define(uint32_t c, uint32_t i, const std::vector<const Positions*>& bindings, int depth) {
  const HloInstruction& inst = m_.computations[c].instructions[i];
  const HloOpcode op = inst.opcode;
  Positions& out = positions_[c][i];
  if (op == HloOpcode::kParameter) {
    if (c == entry_) {
      out = define_all(c, i);
    } else if (static_cast<size_t>(inst.parameter_number) < bindings.size()) {
      out = *bindings[inst.parameter_number];
    } else {
      return error_at(inst, "a parameter the caller does not pass");
    }
    return Status();
  }
  if (op == HloOpcode::kGetTupleElement) {
    MEMFIT_ASSIGN_OR_RETURN(uint32_t o, operand(c, inst, 0));
    const Shape& s = m_.computations[c].instructions[o].shape;
    if (!s.is_tuple() || inst.tuple_index < 0 || static_cast<size_t>(inst.tuple_index) >= s.elements.size())
      return error_at(inst, "get-tuple-element of an index its operand does not have");
    const auto [b, e] = element_range(s, 0, static_cast<size_t>(inst.tuple_index));
    out.assign(positions_[c][o].begin() + static_cast<ptrdiff_t>(b),
               positions_[c][o].begin() + static_cast<ptrdiff_t>(e));
    return Status();
  }
  if (forwards_operand(op)) {
    MEMFIT_ASSIGN_OR_RETURN(uint32_t o, operand(c, inst, 0));
    const Positions& from = positions_[c][o];
    if (op == HloOpcode::kBitcast && !inst.shape.is_tuple() && !from.empty()) {
      out.assign(1, from.front());  // a new shape over the same buffer
    } else {
      out = from;
    }
    return Status();
  }
  if (op == HloOpcode::kTuple) {
    out.push_back(new_value(c, i, {}, inst.shape));
    for (size_t k = 0; k < inst.operands.size(); ++k) {
      MEMFIT_ASSIGN_OR_RETURN(uint32_t o, operand(c, inst, k));
      out.insert(out.end(), positions_[c][o].begin(), positions_[c][o].end());
    }
    return Status();
  }
  if (op == HloOpcode::kWhile) {
    MEMFIT_ASSIGN_OR_RETURN(uint32_t o, operand(c, inst, 0));
    MEMFIT_ASSIGN_OR_RETURN(uint32_t cond, callee(inst, 0));
    MEMFIT_ASSIGN_OR_RETURN(uint32_t body, callee(inst, 1));
    // The parser keeps condition= and body= in text order; XLA prints condition first.
    const Positions& init = positions_[c][o];
    MEMFIT_RETURN_IF_ERROR(process(cond, {&init}, depth + 1));
    MEMFIT_RETURN_IF_ERROR(process(body, {&init}, depth + 1));
    const HloInstruction* root = m_.computations[body].root();
    if (root == nullptr) return error_at(inst, "its body is empty");
    unite_all(init, positions_[body][static_cast<size_t>(root - m_.computations[body].instructions.data())]);
    out = init;
    return Status();
  }
  if (op == HloOpcode::kCall || op == HloOpcode::kConditional) {
    std::vector<Positions> args;
    for (size_t k = 0; k < inst.operands.size(); ++k) {
      MEMFIT_ASSIGN_OR_RETURN(uint32_t o, operand(c, inst, k));
      args.push_back(positions_[c][o]);
    }
    if (op == HloOpcode::kCall) {
      MEMFIT_ASSIGN_OR_RETURN(uint32_t callee_c, callee(inst, 0));
      std::vector<const Positions*> b;
      for (const Positions& a : args) b.push_back(&a);
      MEMFIT_RETURN_IF_ERROR(process(callee_c, b, depth + 1));
      const HloInstruction* root = m_.computations[callee_c].root();
      if (root == nullptr) return error_at(inst, "calls an empty computation");
      out = positions_[callee_c][static_cast<size_t>(root - m_.computations[callee_c].instructions.data())];
      return Status();
    }
    out = define_all(c, i);
    if (op == HloOpcode::kConditional) {  // branch k gets operand k + 1; every branch root is the result
      for (size_t k = 0; k < inst.called.size(); ++k) {
        MEMFIT_ASSIGN_OR_RETURN(uint32_t branch, callee(inst, k));
        std::vector<const Positions*> b;
        if (k + 1 < args.size()) b.push_back(&args[k + 1]);
        MEMFIT_RETURN_IF_ERROR(process(branch, b, depth + 1));
        const HloInstruction* root = m_.computations[branch].root();
        if (root != nullptr)
          unite_all(
              out,
              positions_[branch][static_cast<size_t>(root - m_.computations[branch].instructions.data())]);
      }
    }
    return Status();
  }
  if (is_async_done(op)) {  // the result the matching *-start made
    MEMFIT_ASSIGN_OR_RETURN(uint32_t o, operand(c, inst, 0));
    const Shape& s = m_.computations[c].instructions[o].shape;
    const Positions& start = positions_[c][o];
    if (op == HloOpcode::kCopyDone && s.is_tuple() && !s.elements.empty()) {
      const auto [b, e] = element_range(s, 0, 0);
      out.assign(start.begin() + static_cast<ptrdiff_t>(b), start.begin() + static_cast<ptrdiff_t>(e));
    } else if (s.is_tuple() && s.elements.size() >= 2) {
      const auto [b, e] = element_range(s, 0, 1);
      out.assign(start.begin() + static_cast<ptrdiff_t>(b), start.begin() + static_cast<ptrdiff_t>(e));
    } else {
      out = start;
    }
    if (out.size() != node_count(inst.shape)) out = define_all(c, i);
    return Status();
  }
  if (is_async_start(op) && inst.shape.is_tuple() && !inst.shape.elements.empty()) {
    // (operands, results..., context): element 0 is what was passed in.
    out.assign(node_count(inst.shape), kUnset);
    const Shape& first = inst.shape.elements[0];
    const auto [b, e] = element_range(inst.shape, 0, op == HloOpcode::kCopyStart ? 1 : 0);
    if (op != HloOpcode::kCopyStart && first.is_tuple() && first.elements.size() == inst.operands.size()) {
      for (size_t k = 0; k < inst.operands.size(); ++k) {
        MEMFIT_ASSIGN_OR_RETURN(uint32_t o, operand(c, inst, k));
        const auto [eb, ee] = element_range(first, b, k);
        if (positions_[c][o].size() == ee - eb)
          std::copy(positions_[c][o].begin(), positions_[c][o].end(),
                    out.begin() + static_cast<ptrdiff_t>(eb));
      }
    } else if (!inst.operands.empty()) {
      MEMFIT_ASSIGN_OR_RETURN(uint32_t o, operand(c, inst, 0));
      if (positions_[c][o].size() == e - b)
        std::copy(positions_[c][o].begin(), positions_[c][o].end(), out.begin() + static_cast<ptrdiff_t>(b));
    }
    define_missing(c, i, out);
    return Status();
  }
  // Everything else defines its whole result.
  out = define_all(c, i);
  return alias_in_place(c, i);
}

// Results written over an operand's buffer (XLA's GetInPlaceInputOutputPairs): one buffer.
Status Builder::alias_in_place(uint32_t c, uint32_t i) {
  const HloInstruction& inst = m_.computations[c].instructions[i];
  Positions& out = positions_[c][i];
  auto alias_operand = [&](size_t out_node, size_t k, size_t operand_node) -> Status {
    MEMFIT_ASSIGN_OR_RETURN(uint32_t o, operand(c, inst, k));
    if (operand_node < positions_[c][o].size() && out_node < out.size())
      unite(out[out_node], positions_[c][o][operand_node]);
    return Status();
  };
  if (inst.opcode == HloOpcode::kDynamicUpdateSlice || inst.opcode == HloOpcode::kScatter)
    return alias_operand(0, 0, 0);
  for (const auto& a : inst.operand_aliases()) {
    const Shape* s = inst.shape.at(a.output_index);
    if (s == nullptr) return error_at(inst, "output_to_operand_aliasing names an output it does not have");
    size_t node = 0;
    const Shape* walk = &inst.shape;
    for (uint64_t k : a.output_index) {
      node = element_range(*walk, node, k).first;
      walk = &walk->elements[k];
    }
    MEMFIT_ASSIGN_OR_RETURN(uint32_t o, operand(c, inst, a.operand));
    const Shape& os = m_.computations[c].instructions[o].shape;
    size_t onode = 0;
    const Shape* ow = &os;
    for (uint64_t k : a.operand_index) {
      if (!ow->is_tuple() || k >= ow->elements.size())
        return error_at(inst, "output_to_operand_aliasing names an operand index that does not exist");
      onode = element_range(*ow, onode, k).first;
      ow = &ow->elements[k];
    }
    MEMFIT_RETURN_IF_ERROR(alias_operand(node, a.operand, onode));
  }
  if (inst.opcode == HloOpcode::kFusion && !inst.called.empty()) {
    auto fused = comp_index_.find(inst.called[0]);
    if (fused == comp_index_.end()) return error_at(inst, "calls a computation that is not in the module");
    const HloComputation& body = m_.computations[fused->second];
    const HloInstruction* root = body.root();
    if (root == nullptr) return Status();
    auto in_place_parameter = [&](const HloInstruction* r) -> int64_t {
      while (r != nullptr && r->opcode == HloOpcode::kBitcast)
        r = lookup(fused->second, r->operands.empty() ? "" : r->operands[0]);
      if (r == nullptr || (r->opcode != HloOpcode::kDynamicUpdateSlice && r->opcode != HloOpcode::kScatter) ||
          r->operands.empty())
        return -1;
      const HloInstruction* p = lookup(fused->second, r->operands[0]);
      while (p != nullptr && p->opcode == HloOpcode::kBitcast)
        p = lookup(fused->second, p->operands.empty() ? "" : p->operands[0]);
      return p != nullptr && p->opcode == HloOpcode::kParameter ? p->parameter_number : -1;
    };
    if (root->opcode == HloOpcode::kTuple) {
      for (size_t k = 0; k < root->operands.size() && inst.shape.is_tuple(); ++k) {
        const int64_t p = in_place_parameter(lookup(fused->second, root->operands[k]));
        if (p >= 0 && k < inst.shape.elements.size())
          MEMFIT_RETURN_IF_ERROR(
              alias_operand(element_range(inst.shape, 0, k).first, static_cast<size_t>(p), 0));
      }
    } else if (const int64_t p = in_place_parameter(root); p >= 0) {
      MEMFIT_RETURN_IF_ERROR(alias_operand(0, static_cast<size_t>(p), 0));
    }
  }
  return Status();
}

Status Builder::alias_donations() {
  const HloComputation& entry = m_.computations[entry_];
  const HloInstruction* root = entry.root();
  if (root == nullptr) return invalid_argument("the ENTRY computation is empty");
  const Positions& out = positions_[entry_][static_cast<size_t>(root - entry.instructions.data())];
  // A step donating thousands of arrays has thousands of aliases into a root tuple of thousands of elements:
  // the entry's parameters are indexed once (and element_range sums each tuple's offsets once), or the
  // aliases alone cost O(n^2).
  std::unordered_map<int64_t, uint32_t> parameter_at;
  for (uint32_t i = 0; i < entry.instructions.size(); ++i) {
    if (entry.instructions[i].opcode == HloOpcode::kParameter)
      parameter_at[entry.instructions[i].parameter_number] = i;  // the last, as the scan it replaces
  }
  for (const HloAlias& a : m_.aliases) {
    size_t node = 0;
    const Shape* s = &root->shape;
    for (uint64_t k : a.output_index) {
      if (!s->is_tuple() || k >= s->elements.size())
        return invalid_argument("input_output_alias names an output index the root does not have");
      node = element_range(*s, node, k).first;
      s = &s->elements[k];
    }
    const auto param = parameter_at.find(a.parameter);
    if (param == parameter_at.end())
      return invalid_argument(
          fmt::format("input_output_alias names parameter {}, which the entry does not have", a.parameter));
    size_t pnode = 0;
    const Shape* ps = &entry.instructions[param->second].shape;
    for (uint64_t k : a.parameter_index) {
      if (!ps->is_tuple() || k >= ps->elements.size())
        return invalid_argument("input_output_alias names a parameter index that does not exist");
      pnode = element_range(*ps, pnode, k).first;
      ps = &ps->elements[k];
    }
    unite(out[node], positions_[entry_][param->second][pnode]);
  }
  return Status();
}

std::pair<size_t, size_t> Builder::element_range(const Shape& tuple, size_t base, size_t k) {
  std::vector<size_t>& starts = element_starts_[&tuple];
  if (starts.empty()) {
    size_t at = 1;
    starts.reserve(tuple.elements.size() + 1);
    for (const Shape& e : tuple.elements) {
      starts.push_back(at);
      at += node_count(e);
    }
    starts.push_back(at);
  }
  return {base + starts[k], base + starts[k + 1]};
}

}  // namespace memfit::buffer_model_internal
