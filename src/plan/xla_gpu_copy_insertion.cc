// XLA's copy insertion over the modeled program (memfit/plan/xla_gpu_model.h): loops and donated arguments.
#include <algorithm>
#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "memfit/core/name_map.h"
#include "memfit/plan/xla_gpu_model.h"
#include "xla_gpu_model_internal.h"

namespace memfit {
namespace xla_gpu_internal {

// XLA's copy insertion for loops (xla/service/copy_insertion.cc, AddCopiesForWhile): a while updates its
// state in place, so an element of its initial tuple gets a copy of its own when the loop changes it and the
// value is also needed elsewhere - the same value at two positions of the tuple (JAX's scan stacks its
// residuals into zeros that CSE made one broadcast), a value read again after the loop, or an entry parameter
// (read only unless donated). Elements the body passes through unchanged share the value (copy insertion
// removes those copies again). A donated entry parameter (input_output_alias) may be updated in place.
Status insert_while_copies(HloModule& m) {
  std::unordered_set<int64_t> donated;
  for (const HloAlias& a : m.aliases) donated.insert(a.parameter);
  std::unordered_map<std::string_view, const HloComputation*> by_name;
  for (const HloComputation& c : m.computations) by_name.emplace(c.name, &c);
  // Whether the body hands element k back unchanged: its root's element k is get-tuple-element(param, k).
  // Each body's instructions by name, made when a loop first asks about it.
  std::unordered_map<const HloComputation*, std::unordered_map<std::string_view, const HloInstruction*>>
      named;
  auto passes_through = [&](const HloComputation& body, size_t k) {
    const HloInstruction* root = body.root();
    if (root == nullptr || root->opcode != HloOpcode::kTuple || k >= root->operands.size()) return false;
    const auto emplaced = named.try_emplace(&body);
    auto& table = emplaced.first->second;
    if (emplaced.second)
      for (const HloInstruction& x : body.instructions) table.emplace(x.name, &x);
    auto find = [&](std::string_view name) -> const HloInstruction* {
      auto at = table.find(name);
      return at == table.end() ? nullptr : at->second;
    };
    const HloInstruction* x = find(root->operands[k]);
    if (x == nullptr || x->opcode != HloOpcode::kGetTupleElement ||
        x->tuple_index != static_cast<int64_t>(k) || x->operands.empty())
      return false;
    const HloInstruction* p = find(x->operands[0]);
    return p != nullptr && p->opcode == HloOpcode::kParameter;
  };
  uint64_t made = 0;
  for (HloComputation& c : m.computations) {
    if (std::none_of(c.instructions.begin(), c.instructions.end(),
                     [](const HloInstruction& x) { return x.opcode == HloOpcode::kWhile; }))
      continue;
    // Keyed by views of the instructions' names, which this pass does not change.
    std::unordered_map<std::string_view, uint32_t> index;
    for (uint32_t i = 0; i < c.instructions.size(); ++i) index.emplace(c.instructions[i].name, i);
    // The last position (in schedule order) each instruction's value is read at; 0 when never read.
    std::vector<uint32_t> last_use(c.instructions.size(), 0);
    for (uint32_t i = 0; i < c.instructions.size(); ++i)
      for (const std::string& o : c.instructions[i].operands)
        if (auto it = index.find(o); it != index.end()) last_use[it->second] = i;
    std::vector<std::pair<uint32_t, HloInstruction>> copies;  // (insert before this index, the copy)
    for (uint32_t w = 0; w < c.instructions.size(); ++w) {
      const HloInstruction& loop = c.instructions[w];
      if (loop.opcode != HloOpcode::kWhile || loop.operands.empty() || loop.called.size() < 2) continue;
      auto init_it = index.find(loop.operands[0]);
      auto body_it = by_name.find(loop.called[1]);
      if (init_it == index.end() || body_it == by_name.end()) continue;
      HloInstruction& init = c.instructions[init_it->second];
      if (init.opcode != HloOpcode::kTuple) continue;
      std::unordered_set<std::string> seen;
      for (size_t k = 0; k < init.operands.size(); ++k) {
        const std::string v = init.operands[k];
        const bool repeated = !seen.insert(v).second;
        if (passes_through(*body_it->second, k)) continue;
        auto def = index.find(v);
        const bool read_only = def != index.end() && c.is_entry &&
                               c.instructions[def->second].opcode == HloOpcode::kParameter &&
                               !donated.contains(c.instructions[def->second].parameter_number);
        if (def == index.end()) continue;
        const bool read_after = last_use[def->second] > w;
        if (!repeated && !read_only && !read_after) continue;
        HloInstruction copy;
        copy.name = fmt::format("{}.loop_copy.{}", v, made++);
        copy.opcode = HloOpcode::kCopy;
        copy.shape = c.instructions[def->second].shape;
        copy.operands = {v};
        copy.op_name = "copy insertion (while " + loop.name + ")";
        copy.category = c.instructions[def->second].category;  // a copy of the same kind of data
        copy.line = loop.line;
        init.operands[k] = copy.name;
        copies.emplace_back(init_it->second, std::move(copy));
      }
    }
    if (copies.empty()) continue;
    std::stable_sort(copies.begin(), copies.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<HloInstruction> out;
    out.reserve(c.instructions.size() + copies.size());
    size_t next = 0;
    for (uint32_t i = 0; i < c.instructions.size(); ++i) {
      while (next < copies.size() && copies[next].first == i) out.push_back(std::move(copies[next++].second));
      out.push_back(std::move(c.instructions[i]));
    }
    c.instructions = std::move(out);
    named.erase(&c);  // its instructions moved: a loop over it as a body looks them up again
  }
  return ok_status();
}

}  // namespace xla_gpu_internal

namespace {

constexpr std::string_view kDonationCopySuffix = ".donated-copy";

std::string donation_copy_name(std::string_view parameter) {
  return std::string(parameter).append(kDonationCopySuffix);
}

// What the three steps of donation copy insertion below start from: the entry's names, and its donated
// parameters that a new value is written over, each with the op that writes it (through
// get-tuple-element and bitcast). A parameter passed through unchanged is left out.
struct DonatedWrites {
  NameIndex index;                                   // views of the entry's names
  std::vector<std::pair<uint32_t, uint32_t>> pairs;  // (parameter, writer), indices into the entry
};

DonatedWrites donated_writes(const HloModule& m, const HloComputation& entry) {
  DonatedWrites d;
  const HloInstruction* root = entry.root();
  // Most programs donate nothing (inference, a step without donate_argnums): no index is built for them.
  if (m.aliases.empty() || root == nullptr || root->opcode != HloOpcode::kTuple) return d;
  const auto& insts = entry.instructions;
  d.index.reserve(insts.size());
  for (uint32_t i = 0; i < insts.size(); ++i) d.index.emplace(insts[i].name, i);
  auto writer_of = [&](uint32_t i) {
    for (int hops = 0; hops < 64; ++hops) {
      const HloInstruction& x = insts[i];
      if ((x.opcode != HloOpcode::kGetTupleElement && x.opcode != HloOpcode::kBitcast) || x.operands.empty())
        break;
      const auto o = d.index.find(x.operands[0]);
      if (o == d.index.end()) break;
      i = o->second;
    }
    return i;
  };
  std::unordered_map<int64_t, uint32_t> parameter_at;
  for (uint32_t i = 0; i < insts.size(); ++i)
    if (insts[i].opcode == HloOpcode::kParameter) parameter_at[insts[i].parameter_number] = i;
  for (const HloAlias& a : m.aliases) {
    if (a.output_index.size() != 1 || !a.parameter_index.empty() ||
        a.output_index[0] >= root->operands.size())
      continue;
    const auto p = parameter_at.find(a.parameter);
    const auto w = d.index.find(root->operands[a.output_index[0]]);
    if (p == parameter_at.end() || w == d.index.end() || w->second == p->second) continue;
    if (insts[p->second].shape.is_tuple()) continue;
    d.pairs.emplace_back(p->second, writer_of(w->second));
  }
  return d;
}

}  // namespace

namespace xla_gpu_internal {

// For the list scheduler: each reader of a donated parameter's copy runs before the op that writes the new
// value over the parameter. XLA's scheduler sees the copy's bytes stay live while a reader is left, and the
// compiled modules keep few such copies (none of the weight matrices of gpt_fp32_donate or
// vit_b16_fp32_donate); a greedy order that frees the gradient first would keep one of every weight.
std::vector<std::pair<uint32_t, uint32_t>> readers_before_writers(const HloModule& m,
                                                                  const HloComputation& c) {
  std::vector<std::pair<uint32_t, uint32_t>> edges;
  const DonatedWrites d = donated_writes(m, c);
  if (d.pairs.empty()) return edges;
  std::unordered_map<std::string, uint32_t> writer;  // copy name -> the op writing the new value
  for (const auto& [p, w] : d.pairs) writer.emplace(donation_copy_name(c.instructions[p].name), w);
  for (uint32_t i = 0; i < c.instructions.size(); ++i) {
    if (c.instructions[i].is_root) continue;
    for (const std::string& o : c.instructions[i].operands) {
      const auto w = writer.find(o);
      if (w != writer.end() && w->second != i) edges.emplace_back(i, w->second);
    }
  }
  return edges;
}

}  // namespace xla_gpu_internal

void alias_buffer_donors(HloModule& m) {
  HloComputation* entry = m.entry();
  if (m.buffer_donors.empty() || entry == nullptr || entry->root() == nullptr) return;
  struct Leaf {
    std::vector<uint64_t> index;
    int64_t parameter = -1;
    uint64_t bytes = 0;
    uint32_t memory_space = 0;
  };
  std::unordered_map<int64_t, const HloInstruction*> parameters;
  for (const HloInstruction& i : entry->instructions)
    if (i.opcode == HloOpcode::kParameter) parameters[i.parameter_number] = &i;
  // Arguments already aliased (tf.aliasing_output) give nothing more; a deep step has 10^5 of each.
  std::set<std::pair<int64_t, std::vector<uint64_t>>> aliased_inputs;
  for (const HloAlias& a : m.aliases) aliased_inputs.emplace(a.parameter, a.parameter_index);
  std::vector<Leaf> donors;
  for (const HloModule::BufferDonor& d : m.buffer_donors) {
    const auto p = parameters.find(d.parameter);
    if (p == parameters.end() || aliased_inputs.contains({d.parameter, d.parameter_index})) continue;
    const Shape* s = p->second->shape.at(d.parameter_index);
    if (s == nullptr || s->is_tuple()) continue;
    donors.push_back({d.parameter_index, d.parameter, s->own_bytes(), s->memory_space});
  }
  std::vector<Leaf> donees;
  std::vector<std::pair<const Shape*, std::vector<uint64_t>>> stack{{&entry->root()->shape, {}}};
  std::vector<std::vector<uint64_t>> taken;
  for (const HloAlias& a : m.aliases) taken.push_back(a.output_index);
  std::sort(taken.begin(), taken.end());
  while (!stack.empty()) {
    auto [s, index] = stack.back();
    stack.pop_back();
    if (!s->is_tuple()) {
      if (!std::binary_search(taken.begin(), taken.end(), index))
        donees.push_back({index, -1, s->own_bytes(), s->memory_space});
      continue;
    }
    for (size_t k = s->elements.size(); k-- > 0;) {  // in index order once popped
      std::vector<uint64_t> element = index;
      element.push_back(k);
      stack.emplace_back(&s->elements[k], std::move(element));
    }
  }
  auto larger = [](const Leaf& a, const Leaf& b) { return a.bytes > b.bytes; };
  std::stable_sort(donors.begin(), donors.end(), larger);
  std::stable_sort(donees.begin(), donees.end(), larger);
  std::vector<uint32_t> spaces;
  for (const Leaf& d : donors) spaces.push_back(d.memory_space);
  std::sort(spaces.begin(), spaces.end());
  spaces.erase(std::unique(spaces.begin(), spaces.end()), spaces.end());
  for (uint32_t space : spaces) {
    size_t i = 0, j = 0;
    auto next = [&](const std::vector<Leaf>& v, size_t k) {
      while (k < v.size() && v[k].memory_space != space) ++k;
      return k;
    };
    for (i = next(donors, i), j = next(donees, j); i < donors.size() && j < donees.size();) {
      if (donors[i].bytes > donees[j].bytes) {
        i = next(donors, i + 1);
      } else if (donors[i].bytes < donees[j].bytes) {
        j = next(donees, j + 1);
      } else {
        m.aliases.push_back({donees[j].index, donors[i].parameter, donors[i].index, false});
        i = next(donors, i + 1);
        j = next(donees, j + 1);
      }
    }
  }
  m.buffer_donors.clear();  // matched or not, the compile has decided
}

namespace {

// A new value of a donated parameter that its writer cannot write over the parameter (a transpose fusion,
// kTransposeFusion) stays in a buffer of its own and is copied over the parameter just before the root:
// the copies of the root's elements XLA's copy insertion adds once the schedule is fixed (the compiled
// mlp_vmap_grads_b64's copy.60 to copy.72, after every update). Every reader of the parameter then runs
// before its new value is written, and its donation copy goes. Returns whether it added any (the writes
// `d` found are then stale).
bool copy_outputs_written_apart(const DonatedWrites& d, HloComputation& c) {
  std::vector<HloInstruction> copies;
  std::unordered_map<std::string, std::string> renamed;  // writer -> its copy, for the root
  for (const auto& [p, w] : d.pairs) {
    const HloInstruction& x = c.instructions[w];
    if (x.opcode != HloOpcode::kCustomCall || x.custom_call_target != xla_gpu_internal::kTransposeFusion)
      continue;
    std::string name = x.name + ".output";
    if (d.index.contains(name) || renamed.contains(x.name)) continue;
    HloInstruction copy;
    copy.name = name;
    copy.set_opcode("copy");
    copy.shape = x.shape;
    copy.operands = {x.name};
    copy.op_name = "copy insertion (" + x.name + " over the donated argument)";
    copy.category = x.category;
    renamed.emplace(x.name, std::move(name));
    copies.push_back(std::move(copy));
  }
  if (copies.empty()) return false;
  std::vector<HloInstruction> out;
  out.reserve(c.instructions.size() + copies.size());
  for (HloInstruction& x : c.instructions) {
    if (x.is_root) {
      for (HloInstruction& copy : copies) out.push_back(std::move(copy));
      for (std::string& o : x.operands)
        if (const auto it = renamed.find(o); it != renamed.end()) o = it->second;
    }
    out.push_back(std::move(x));
  }
  c.instructions = std::move(out);
  return true;
}

}  // namespace

void copy_donated_parameters(HloModule& m) {
  HloComputation* c = m.entry();
  if (c == nullptr) return;
  const DonatedWrites d = donated_writes(m, *c);
  if (d.pairs.empty()) return;
  std::unordered_map<std::string, uint32_t> copied;  // parameter name -> its copy's slot in `copies`
  std::vector<HloInstruction> copies;
  for (const auto& [p, w] : d.pairs) {
    const HloInstruction& param = c->instructions[p];
    if (copied.contains(param.name)) continue;
    HloInstruction copy;
    copy.name = donation_copy_name(param.name);
    copy.set_opcode("copy");
    copy.shape = param.shape;
    copy.operands = {param.name};
    copy.op_name = "copy insertion (donated " + param.name + ")";
    copy.category = param.category;
    copied.emplace(param.name, static_cast<uint32_t>(copies.size()));
    copies.push_back(std::move(copy));
  }
  // Each copy goes just before the first instruction that reads the parameter, which then reads the copy
  // (as every other reader but the root tuple does).
  std::vector<bool> placed(copies.size(), false);
  std::vector<HloInstruction> out;
  out.reserve(c->instructions.size() + copies.size());
  for (HloInstruction& x : c->instructions) {
    for (std::string& o : x.operands) {
      const auto it = x.is_root ? copied.end() : copied.find(o);
      if (it == copied.end()) continue;
      if (!placed[it->second]) {
        placed[it->second] = true;
        out.push_back(copies[it->second]);
      }
      o = copies[it->second].name;
    }
    out.push_back(std::move(x));
  }
  c->instructions = std::move(out);
}

void remove_unneeded_donation_copies(HloModule& m) {
  HloComputation* c = m.entry();
  if (c == nullptr) return;
  // The entry's name index is built once, and again only if copies were added (a deep step has 10^5
  // instructions, and every plan runs this twice).
  DonatedWrites d = donated_writes(m, *c);
  if (copy_outputs_written_apart(d, *c)) d = donated_writes(m, *c);
  // The last reader of each copy.
  std::unordered_map<std::string_view, uint32_t> last_reader;
  for (uint32_t i = 0; i < c->instructions.size(); ++i)
    for (const std::string& o : c->instructions[i].operands)
      if (std::string_view(o).ends_with(kDonationCopySuffix)) last_reader[o] = i;
  std::unordered_map<std::string, std::string> removed;  // copy -> parameter
  for (const auto& [p, w] : d.pairs) {
    std::string copy = donation_copy_name(c->instructions[p].name);
    if (!d.index.contains(copy)) continue;
    // Every reader runs before the new value is written, or is the op that writes it: no copy needed.
    const auto last = last_reader.find(copy);
    if (last == last_reader.end() || last->second <= w)
      removed.emplace(std::move(copy), c->instructions[p].name);
  }
  if (removed.empty()) return;
  std::vector<HloInstruction> out;
  out.reserve(c->instructions.size());
  for (HloInstruction& x : c->instructions) {
    if (removed.contains(x.name)) continue;
    for (std::string& o : x.operands)
      if (const auto it = removed.find(o); it != removed.end()) o = it->second;
    out.push_back(std::move(x));
  }
  c->instructions = std::move(out);
}

}  // namespace memfit
