// Emitter::loop: a scanned layer, emitted once, outlined into the body of a while loop (zoo_step.h).
#include <unordered_map>

#include "zoo_step.h"

namespace memfit::zoo {

std::map<std::string, T> Emitter::loop(size_t begin, const std::vector<std::pair<T, T>>& next,
                                       const std::vector<T>& results, const std::string& op_name) {
  std::vector<HloInstruction> region;
  for (size_t k = begin; k < entry_.size(); ++k) {
    if (entry_[k].operands.empty() && entry_[k].opcode != HloOpcode::kParameter) {
      if (k != begin) entry_[begin] = std::move(entry_[k]);  // hoisted: made once, before the loop
      ++begin;
    } else {
      region.push_back(std::move(entry_[k]));
    }
  }
  entry_.resize(begin);
  std::unordered_map<std::string, size_t> defined;
  for (size_t k = 0; k < region.size(); ++k) defined.emplace(region[k].name, k);
  // The state: every value the region reads and does not make, in first-read order.
  std::vector<T> state;
  std::unordered_map<std::string, size_t> slot;
  for (const HloInstruction& x : region)
    for (const std::string& o : x.operands)
      if (!defined.contains(o) && slot.emplace(o, state.size()).second) state.push_back(T{o, Shape{}});
  for (const HloInstruction& x : entry_)
    if (auto it = slot.find(x.name); it != slot.end()) state[it->second].shape = x.shape;
  // The body's next value of each element: a paired output, or the end of a stack's update chain.
  std::vector<std::string> next_of(state.size());
  for (const auto& [out, in] : next) next_of[slot.at(in.name)] = out.name;
  for (const T& r : results) {
    std::string from = r.name;
    while (defined.contains(from) && region[defined.at(from)].opcode == HloOpcode::kDynamicUpdateSlice)
      from = region[defined.at(from)].operands.front();
    if (defined.contains(r.name) && slot.contains(from) && next_of[slot.at(from)].empty())
      next_of[slot.at(from)] = r.name;
  }

  Shape tuple;
  for (const T& t : state) tuple.elements.push_back(t.shape);
  auto state_parameter = [&] {
    HloInstruction p = instruction("state", "parameter", tuple);
    p.parameter_number = 0;
    return p;
  };
  const uint64_t id = loops_++;
  HloComputation body;
  body.name = fmt::format("scan_body_{}", id);
  body.instructions.push_back(state_parameter());
  std::unordered_map<std::string, std::string> inside;  // state value -> its get-tuple-element
  for (size_t k = 0; k < state.size(); ++k) {
    HloInstruction g =
        instruction(fmt::format("state.{}", k), "get-tuple-element", state[k].shape, {"state"});
    g.tuple_index = static_cast<int64_t>(k);
    inside.emplace(state[k].name, g.name);
    body.instructions.push_back(std::move(g));
  }
  for (HloInstruction& x : region) {
    for (std::string& o : x.operands)
      if (auto it = inside.find(o); it != inside.end()) o = it->second;
    body.instructions.push_back(std::move(x));
  }
  std::vector<std::string> next_state;
  for (size_t k = 0; k < state.size(); ++k)
    next_state.push_back(next_of[k].empty() ? fmt::format("state.{}", k) : next_of[k]);
  body.instructions.push_back(instruction("next_state", "tuple", tuple, std::move(next_state)));
  body.instructions.back().is_root = true;
  // The condition compares the trip count; it holds no buffer of note.
  HloComputation cond;
  cond.name = fmt::format("scan_cond_{}", id);
  cond.instructions.push_back(state_parameter());
  cond.instructions.push_back(instruction("trips", "constant", array(PrimitiveType::kS32, {})));
  cond.instructions.push_back(
      instruction("more", "compare", array(PrimitiveType::kPred, {}), {"trips", "trips"}));
  cond.instructions.back().is_root = true;
  m_.computations.push_back(std::move(cond));
  m_.computations.push_back(std::move(body));

  const T init = op("tuple", state, tuple, op_name, "temporaries");
  HloInstruction w = make(tuple, "while", op_name, "temporaries");
  w.operands = {init.name};
  w.called = {fmt::format("scan_cond_{}", id), fmt::format("scan_body_{}", id)};
  const T loop_state = push(std::move(w));
  std::map<std::string, T> after;
  for (size_t k = 0; k < state.size(); ++k) {
    if (next_of[k].empty()) continue;
    HloInstruction g = make(state[k].shape, "get-tuple-element", op_name, "temporaries");
    g.operands = {loop_state.name};
    g.tuple_index = static_cast<int64_t>(k);
    after.emplace(next_of[k], push(std::move(g)));
  }
  return after;
}

}  // namespace memfit::zoo
