#include "memfit/plan/buffer_model.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <functional>
#include <numeric>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "memfit/core/text.h"

namespace memfit {

const char* buffer_kind_name(BufferKind kind) {
  switch (kind) {
    case BufferKind::kParameter:
      return "parameter";
    case BufferKind::kOutput:
      return "output";
    case BufferKind::kConstant:
      return "constant";
    case BufferKind::kTemp:
      return "temp";
    case BufferKind::kReusesAllocation:
      return "reuses-allocation";
  }
  return "?";
}

namespace {

constexpr int kMaxCallDepth = 256;

// Shapes are walked in pre-order: node 0 is the shape itself, then each element's subtree.
size_t node_count(const Shape& s) {
  size_t n = 1;
  for (const Shape& e : s.elements) n += node_count(e);
  return n;
}

// Node range [begin, end) of element `i` of a tuple shape whose own node is `base`.
std::pair<size_t, size_t> element_nodes(const Shape& s, size_t base, size_t i) {
  size_t at = base + 1;
  for (size_t j = 0; j < i; ++j) at += node_count(s.elements[j]);
  return {at, at + node_count(s.elements[i])};
}

void for_each_node(const Shape& s, std::vector<uint64_t>& index,
                   const std::function<void(const Shape&, const std::vector<uint64_t>&)>& f) {
  f(s, index);
  for (size_t i = 0; i < s.elements.size(); ++i) {
    index.push_back(i);
    for_each_node(s.elements[i], index, f);
    index.pop_back();
  }
}

// Ops whose result is (part of) an operand's value: they define no buffer.
bool forwards_operand(HloOpcode op) {
  return op == HloOpcode::kBitcast || op == HloOpcode::kAddDependency || op == HloOpcode::kDomain ||
         op == HloOpcode::kOptimizationBarrier;
}

class Builder {
 public:
  explicit Builder(const HloModule& module) : m_(module) {}

  Expected<BufferModel> build() {
    const size_t nc = m_.computations.size();
    for (uint32_t c = 0; c < nc; ++c) {
      comp_index_.emplace(m_.computations[c].name, c);
      auto& names = names_.emplace_back();
      const auto& insts = m_.computations[c].instructions;
      for (uint32_t i = 0; i < insts.size(); ++i) names.emplace(insts[i].name, i);
    }
    positions_.resize(nc);
    operands_.resize(nc);
    time_.resize(nc);
    span_.assign(nc, {0, 0});
    processed_.assign(nc, false);
    in_progress_.assign(nc, false);
    users_.resize(nc);
    users_built_.assign(nc, false);
    const HloComputation* entry = m_.entry();
    if (entry == nullptr) return invalid_argument("the module has no ENTRY computation");
    entry_ = static_cast<uint32_t>(entry - m_.computations.data());
    MEMFIT_RETURN_IF_ERROR(process(entry_, {}, 0));
    MEMFIT_RETURN_IF_ERROR(alias_donations());
    compute_liveness();
    assign_buffers();
    assign_allocations();
    simulate_heap();
    model_.schedule_length = clock_time_;
    return std::move(model_);
  }

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
  Status process(uint32_t c, const std::vector<const Positions*>& bindings, int depth) {
    if (depth > kMaxCallDepth) return invalid_argument("computations nest deeper than 256 calls");
    const HloComputation& comp = m_.computations[c];
    if (in_progress_[c]) {
      return invalid_argument(fmt::format(
          "computation {} calls itself (directly or through the computations it calls): HLO has no "
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

  Status define(uint32_t c, uint32_t i, const std::vector<const Positions*>& bindings, int depth) {
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
      const auto [b, e] = element_nodes(s, 0, static_cast<size_t>(inst.tuple_index));
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
      unite_all(init,
                positions_[body][static_cast<size_t>(root - m_.computations[body].instructions.data())]);
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
        const auto [b, e] = element_nodes(s, 0, 0);
        out.assign(start.begin() + static_cast<ptrdiff_t>(b), start.begin() + static_cast<ptrdiff_t>(e));
      } else if (s.is_tuple() && s.elements.size() >= 2) {
        const auto [b, e] = element_nodes(s, 0, 1);
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
      const auto [b, e] = element_nodes(inst.shape, 0, op == HloOpcode::kCopyStart ? 1 : 0);
      if (op != HloOpcode::kCopyStart && first.is_tuple() && first.elements.size() == inst.operands.size()) {
        for (size_t k = 0; k < inst.operands.size(); ++k) {
          MEMFIT_ASSIGN_OR_RETURN(uint32_t o, operand(c, inst, k));
          const auto [eb, ee] = element_nodes(first, b, k);
          if (positions_[c][o].size() == ee - eb)
            std::copy(positions_[c][o].begin(), positions_[c][o].end(),
                      out.begin() + static_cast<ptrdiff_t>(eb));
        }
      } else if (!inst.operands.empty()) {
        MEMFIT_ASSIGN_OR_RETURN(uint32_t o, operand(c, inst, 0));
        if (positions_[c][o].size() == e - b)
          std::copy(positions_[c][o].begin(), positions_[c][o].end(),
                    out.begin() + static_cast<ptrdiff_t>(b));
      }
      define_missing(c, i, out);
      return Status();
    }
    // Everything else defines its whole result.
    out = define_all(c, i);
    return alias_in_place(c, i);
  }

  // Results written over an operand's buffer (XLA's GetInPlaceInputOutputPairs): one buffer.
  Status alias_in_place(uint32_t c, uint32_t i) {
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
    for (const auto& a : inst.operand_aliases) {
      const Shape* s = inst.shape.at(a.output_index);
      if (s == nullptr) return error_at(inst, "output_to_operand_aliasing names an output it does not have");
      size_t node = 0;
      const Shape* walk = &inst.shape;
      for (uint64_t k : a.output_index) {
        node = element_nodes(*walk, node, k).first;
        walk = &walk->elements[k];
      }
      MEMFIT_ASSIGN_OR_RETURN(uint32_t o, operand(c, inst, a.operand));
      const Shape& os = m_.computations[c].instructions[o].shape;
      size_t onode = 0;
      const Shape* ow = &os;
      for (uint64_t k : a.operand_index) {
        if (!ow->is_tuple() || k >= ow->elements.size())
          return error_at(inst, "output_to_operand_aliasing names an operand index that does not exist");
        onode = element_nodes(*ow, onode, k).first;
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
        if (r == nullptr ||
            (r->opcode != HloOpcode::kDynamicUpdateSlice && r->opcode != HloOpcode::kScatter) ||
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
                alias_operand(element_nodes(inst.shape, 0, k).first, static_cast<size_t>(p), 0));
        }
      } else if (const int64_t p = in_place_parameter(root); p >= 0) {
        MEMFIT_RETURN_IF_ERROR(alias_operand(0, static_cast<size_t>(p), 0));
      }
    }
    return Status();
  }

  const HloInstruction* lookup(uint32_t c, std::string_view name) const {
    auto it = names_[c].find(name);
    return it == names_[c].end() ? nullptr : &m_.computations[c].instructions[it->second];
  }

  Status alias_donations() {
    const HloComputation& entry = m_.computations[entry_];
    const HloInstruction* root = entry.root();
    if (root == nullptr) return invalid_argument("the ENTRY computation is empty");
    const Positions& out = positions_[entry_][static_cast<size_t>(root - entry.instructions.data())];
    for (const HloAlias& a : m_.aliases) {
      size_t node = 0;
      const Shape* s = &root->shape;
      for (uint64_t k : a.output_index) {
        if (!s->is_tuple() || k >= s->elements.size())
          return invalid_argument("input_output_alias names an output index the root does not have");
        node = element_nodes(*s, node, k).first;
        s = &s->elements[k];
      }
      const HloInstruction* param = nullptr;
      uint32_t param_i = 0;
      for (uint32_t i = 0; i < entry.instructions.size(); ++i) {
        if (entry.instructions[i].opcode == HloOpcode::kParameter &&
            entry.instructions[i].parameter_number == a.parameter) {
          param = &entry.instructions[i];
          param_i = i;
        }
      }
      if (param == nullptr)
        return invalid_argument(
            fmt::format("input_output_alias names parameter {}, which the entry does not have", a.parameter));
      size_t pnode = 0;
      const Shape* ps = &param->shape;
      for (uint64_t k : a.parameter_index) {
        if (!ps->is_tuple() || k >= ps->elements.size())
          return invalid_argument("input_output_alias names a parameter index that does not exist");
        pnode = element_nodes(*ps, pnode, k).first;
        ps = &ps->elements[k];
      }
      unite(out[node], positions_[entry_][param_i][pnode]);
    }
    return Status();
  }

  void extend(uint32_t v, uint64_t t) {
    HloValue& value = model_.values[v];
    value.end = std::max(value.end, t);
  }

  void compute_liveness() {
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

  void assign_buffers() {
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
  std::vector<std::vector<uint64_t>> post_order_positions() {
    std::vector<std::vector<uint64_t>> pos(m_.computations.size());
    uint64_t next = 0;
    std::vector<uint8_t> state;
    std::vector<uint32_t> stack;
    for (uint32_t c : computation_post_order_) {
      const auto& insts = m_.computations[c].instructions;
      pos[c].assign(insts.size(), UINT64_MAX);
      const auto& users = users_of(c);
      state.assign(insts.size(), 0);  // 0 new, 1 visiting, 2 done
      for (uint32_t r = 0; r < insts.size(); ++r) {
        auto u = users.find(insts[r].name);
        if (u != users.end() && !u->second.empty()) continue;  // walks start at instructions nothing uses
        stack.assign(1, r);
        while (!stack.empty()) {
          const uint32_t x = stack.back();
          if (state[x] == 2) {
            stack.pop_back();
          } else if (state[x] == 1) {
            stack.pop_back();
            state[x] = 2;
            pos[c][x] = next++;
          } else {
            state[x] = 1;
            const auto& ops = insts[x].operands;
            for (size_t k = ops.size(); k-- > 0;) {
              auto it = names_[c].find(ops[k]);
              if (it != names_[c].end() && state[it->second] != 2) stack.push_back(it->second);
            }
          }
        }
      }
    }
    return pos;
  }

  // BufferAssigner::AssignBuffersForComputations: buffers go largest first (live-out first on ties). Before a
  // temporary is left to the heap it tries the allocation of an operand it may share, then every allocation
  // made so far, smallest first, where it fits and meets nothing already there. Outputs get allocations of
  // their own, so a temporary that dies before an output is written lives in the output's memory.
  void assign_allocations() {
    struct Allocation {
      uint64_t size = 0;
      bool writable = false;
      std::vector<uint32_t> buffers;
      // (start, value) of every value placed here, by start. They never interfere, so their ranges follow
      // one another and a query looks at the few around its own range.
      std::vector<std::pair<uint64_t, uint32_t>> spans;
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
    const auto post_order = post_order_positions();
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
      return true;
    };
    for (uint32_t b : order) {
      HloBuffer& buffer = model_.buffers[b];
      const bool tuple = shape_of_[buffer.values.front()]->is_tuple();
      if (buffer.kind == BufferKind::kParameter || buffer.kind == BufferKind::kConstant) {
        // Arguments are read-only unless donated; constants always.
        const bool writable = buffer.kind == BufferKind::kParameter && is_live_out[b] && !tuple;
        allocs.push_back({buffer.size_bytes, writable, {}, {}});
        allocs.back().add(model_, b);
        alloc_of[b] = static_cast<uint32_t>(allocs.size() - 1);
        // A donated argument's memory is free between its last read and the write of its new value;
        // XLA's dump of gpt_fp32_donate shows small temporaries placed there.
        if (writable) reusable.push_back(alloc_of[b]);
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
      for (size_t r = reusable.size(); r-- > 0 && !placed;) placed = try_assign(reusable[r], b);
      if (placed) {
        if (buffer.kind == BufferKind::kTemp) {
          buffer.kind = BufferKind::kReusesAllocation;
          buffer.allocation_of = allocs[alloc_of[b]].buffers.front();
        }
        continue;
      }
      if (buffer.kind == BufferKind::kTemp) continue;  // to the heap
      allocs.push_back({buffer.size_bytes, !tuple, {}, {}});
      allocs.back().add(model_, b);
      alloc_of[b] = static_cast<uint32_t>(allocs.size() - 1);
      reusable.push_back(alloc_of[b]);
    }
  }

  // Does the fusion/op read operand k in the order it writes the result at user_index? Then the result
  // may take over the operand's memory (GPU's FusionCanShareBufferHint, dataflow's elementwise rule).
  bool can_share(uint32_t operand_value, uint32_t c, uint32_t i, const std::vector<uint64_t>& user_index,
                 size_t k) {
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
    const auto& users = users_of(f);
    std::vector<const HloInstruction*> queue{param};
    std::unordered_set<const HloInstruction*> visited{param};
    bool found = false;
    for (size_t q = 0; q < queue.size(); ++q) {
      const HloInstruction* x = queue[q];
      if (x == output) {
        found = true;
        continue;
      }
      auto it = users.find(x->name);
      if (it == users.end()) continue;
      for (uint32_t ui : it->second) {
        const HloInstruction* u = &body.instructions[ui];
        if (visited.contains(u)) continue;
        // Reaching the result tuple through another output is fine: the dump of mlp_fp32 shows Adam's
        // multi-output update fusion writing a parameter's new value over the gradient it reads.
        if (u == body.root() && u->opcode == HloOpcode::kTuple) continue;
        const bool dus_in_place = u == non_bitcast_root && u->opcode == HloOpcode::kDynamicUpdateSlice &&
                                  !u->operands.empty() && u->operands[0] == x->name;
        if (!dus_in_place && u->opcode != HloOpcode::kBitcast &&
            !(is_elementwise(u->opcode) && u->opcode != HloOpcode::kCopy))
          return false;
        visited.insert(u);
        queue.push_back(u);
      }
    }
    return found;
  }

  bool fused_uses_elementwise(const HloInstruction& fusion, size_t k) {
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

  const std::unordered_map<std::string_view, std::vector<uint32_t>>& users_of(uint32_t c) {
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
  void simulate_heap() {
    simulate_heap_of(/*host=*/false, model_.heap_intervals, model_.heap_values);
    simulate_heap_of(/*host=*/true, model_.host_heap_intervals, model_.host_heap_values);
  }

  // One heap per memory space: device temps, or host temps (S(5)).
  void simulate_heap_of(bool host, std::vector<HeapInterval>& intervals, std::vector<uint32_t>& heap_values) {
    const size_t nv = model_.values.size();
    std::vector<uint32_t> temps;
    for (uint32_t v = 0; v < nv; ++v) {
      if (model_.buffers[model_.values[v].buffer].kind != BufferKind::kTemp) continue;
      if ((shape_of_[v]->memory_space == kHostMemorySpace) != host) continue;
      temps.push_back(v);
    }
    std::sort(temps.begin(), temps.end(), [&](uint32_t a, uint32_t b) {
      const HloValue& x = model_.values[a];
      const HloValue& y = model_.values[b];
      return std::tie(x.start, x.end, a) < std::tie(y.start, y.end, b);
    });
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

  // The dying operand whose chunk a new value takes over. Candidates are tried oldest value first, which is
  // what XLA's dump shows when several operands qualify (a GELU-backward fusion takes its matmul input's
  // memory, not the newer activation's).
  uint32_t reuse_operand(uint32_t v, uint64_t t, const std::vector<uint32_t>& interval_of,
                         std::vector<bool>& reused) {
    const HloValue& value = model_.values[v];
    const HloInstruction& user = m_.computations[value.computation].instructions[value.instruction];
    if (user.opcode == HloOpcode::kCopy || user.opcode == HloOpcode::kParameter) return kNotColocated;
    std::vector<std::pair<uint32_t, size_t>> candidates;  // (operand value, operand number)
    const auto& ops = operands_[value.computation][value.instruction];
    for (size_t k = 0; k < ops.size(); ++k) {
      const Positions& p = positions_[value.computation][ops[k]];
      if (!p.empty()) candidates.emplace_back(p[0], k);
    }
    std::stable_sort(candidates.begin(), candidates.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
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

  const HloModule& m_;
  BufferModel model_;
  uint32_t entry_ = 0;
  uint64_t clock_time_ = 0;  // flattened schedule length so far
  std::unordered_map<std::string_view, uint32_t> comp_index_;
  std::vector<std::unordered_map<std::string_view, uint32_t>> names_;
  std::vector<std::vector<Positions>> positions_;
  std::vector<std::vector<std::vector<uint32_t>>>
      operands_;  // resolved operand indices (sequential computations)
  std::vector<std::vector<int64_t>> time_;
  std::vector<std::pair<uint64_t, uint64_t>> span_;
  std::vector<bool> processed_;
  std::vector<bool> in_progress_;  // on the call stack now: a call to it is recursion
  std::vector<std::unordered_map<std::string_view, std::vector<uint32_t>>> users_;
  std::vector<bool> users_built_;
  std::vector<const Shape*> shape_of_;
  std::vector<uint32_t> parent_;
  std::vector<bool> live_out_;
  std::vector<uint32_t> computation_post_order_;  // sequential computations, callees before callers
};

}  // namespace

std::string value_name(const HloModule& module, const HloValue& value) {
  const HloInstruction& def = module.computations[value.computation].instructions[value.instruction];
  if (!def.shape.is_tuple()) return def.name;
  return fmt::format("{}{{{}}}", def.name, fmt::join(value.index, ","));
}

Expected<BufferModel> build_buffer_model(const HloModule& module) { return Builder(module).build(); }

}  // namespace memfit
