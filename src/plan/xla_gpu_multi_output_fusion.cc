// XLA:GPU's sibling multi-output fusion over one fused computation of the modeled program
// (memfit/plan/xla_gpu_model.h): fusions that read the same buffer and could share one parallel loop are
// made one kernel with several outputs (MultiOutputFusion::FuseSiblings,
// xla/service/gpu/transforms/multi_output_fusion.cc, after priority fusion). For memory it decides when a
// value is computed: the merged kernel runs once all its outputs' operands are ready. A GPT step's
// per-token log-likelihood, which the loss sums at the very end, is computed with the backward pass's first
// division (the compiled modules' loop_divide_select_fusion), so the logits it reads die there, not at the
// end of the step; an MLP's activation, read by its weight gradient's GEMM alone, comes out of the kernel
// that computes the input gradient from the same pre-activation (the compiled offload GPT's GELU), so a
// weight gradient the latency-hiding scheduler defers does not keep the pre-activation alive.
//
// Followed: the siblings of each buffer, visited from the last buffer to the first, multi-output fusions
// first; no constant, effective scalar (IsProfitableOperand: an optimizer's step count, read by every
// update, is "not a profitable shared operand") or GEMM is a parent. A pair is merged when neither reads the
// other through any path (a cycle otherwise), their loop shapes agree - the same element count (a reshape
// of one another), or for two reductions the same input dimensions reduced alike, those of size 1 aside
// (ShapesCompatibleForMultiOutputFusion, gpu_fusible.cc; the algebraic simplifier makes a degenerate
// dimension a bitcast) - and the merged fusion stays within FusionFitsInBudget's limits: 64 operands and
// outputs, 8 reductions, 48 KiB of shared memory (a row reduction's 32 elements, a column reduction's
// 2 x 32 x 33). Not followed: the parent's own fusion into a consumer as another output (producer-consumer
// multi-output fusion, which weighs run times), ParameterSlicesAreNonOverlapping (the slices that would
// meet it are custom calls here), and fusions XLA runs apart for their emitters (transposes, in-place
// updates, scatters, GEMMs, Triton normalizations: none is a candidate). Every fusion counts as a fusion:
// XLA leaves a lone op unfused, and such an op can only join another fusion, never take one in
// (approximated).
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "memfit/core/name_map.h"
#include "xla_gpu_model_internal.h"

namespace memfit::xla_gpu_internal {
namespace {

constexpr size_t kMaxOperandsAndOutputs = 64;      // MaxOperandsAndOutputsPerFusion, gpu_fusible.h
constexpr uint32_t kMaxReductionsPerFusion = 8;    // kMaxUnnestedReductionOutputsPerFusion
constexpr uint64_t kSharedMemoryPerBlock = 49152;  // the H100's default per block
// Bounds for a hostile program of many siblings, past which no more pairs are merged. Paths are walked to
// tell whether two fusions are connected: visits per instruction of the computation. And pairs of siblings
// weighed per instruction. The shared programs and the zoo's weigh under one pair (0.95 at most) and walk
// under 22 visits per instruction (2026-12-07).
constexpr uint64_t kWalkBudgetPerInstruction = 400;
constexpr uint64_t kPairsPerInstruction = 16;
// A pair whose walk visits more than this many fusions is taken as connected: siblings that far apart - a
// weight all-gathered for FSDP, read by the forward pass and by the backward pass's recomputation - are
// connected through the loss, and walking each such pair spent the whole budget on a 300-layer program,
// whose later siblings then went unmerged (its figures not on a line with depth). GPT's stacked change over
// 4 devices has 90 such pairs at 48 layers and 2,610 at 300, every one connected when walked to the end.
// Counted over every shared and bundled lowered program and the 300-layer fits of GPT, the bf16 ViT and
// the flax encoder (2026-12-07): a pair that is not connected is told so within 62 visits, while a
// connected one may take up to 4,087 to be found; the cap, 8x the first, decides no pair otherwise than
// the walk to the end would (the tables and the three fits' output identical with it at 4096) and cuts
// the 300-layer FSDP-4 program's walks from 11.6 million visits to 1.6 million.
constexpr uint64_t kWalkPerPair = 512;

// What a buffer is to the pass.
struct Candidate {
  bool eligible = false;
  bool reduction = false;
  uint64_t loop_elements = 0;  // the loop's shape: a reduction's input, else the result
  // A reduction's input dimensions without those of size 1, each with whether it is reduced: XLA's
  // algebraic simplifier makes a degenerate dimension a bitcast, so two front ends that keep or drop one
  // describe the same loop (JAX's StableHLO keeps a scan body's leading 1 where its HLO drops it).
  std::vector<std::pair<int64_t, bool>> reduced_loop;
  uint64_t shared_memory_bytes = 0;  // a reduction's tile
};

// A loop fusion's root: what fusion fuses into its readers (elementwise ops and data movement, a
// reduce-window), but a transpose or a copy - XLA emits those as transposes, never merged with a sibling
// loop (see the header).
bool loop_fusion_root(HloOpcode op) {
  return fuses(role_of(op)) && op != HloOpcode::kTranspose && op != HloOpcode::kCopy;
}

struct Pass {
  HloComputation& comp;
  const ReducedInputs& reduced_inputs;
  size_t n = 0;
  NameMap<uint32_t> index;                             // each instruction's place, by name
  std::vector<std::vector<uint32_t>> operands, users;  // unique, by index
  std::vector<Candidate> cand;
  // Groups: a union-find over the buffers; a group's data lives at its representative.
  std::vector<uint32_t> parent;
  std::vector<std::vector<uint32_t>> members;
  std::vector<std::vector<uint32_t>> group_operands;  // unique, none a member
  std::vector<uint32_t> reductions;
  std::vector<uint64_t> shared_memory;
  std::vector<uint32_t> level;  // a topological number of each group: above all it reads
  uint64_t walk_budget = 0;
  uint64_t pair_budget = 0;
  std::vector<uint32_t> stamp;
  uint32_t stamp_next = 0;
  std::vector<uint32_t> operand_stamp;  // fits_budget's marks, by instruction
  uint32_t operand_stamp_next = 0;
  std::vector<uint32_t> walk;  // reaches' and raise_readers' stack, kept between calls

  Pass(HloComputation& c, const ReducedInputs& r) : comp(c), reduced_inputs(r) {}

  uint32_t find(uint32_t x) {
    while (parent[x] != x) x = parent[x] = parent[parent[x]];
    return x;
  }

  // False where an operand is not an instruction of the computation (fusion checked the edges: never).
  bool index_edges() {
    n = comp.instructions.size();
    index.reserve(n);
    for (uint32_t i = 0; i < n; ++i) index.emplace(comp.instructions[i].name, i);
    std::optional<OperandGraph> g = operand_graph(comp, index);
    if (!g) return false;
    operands = std::move(g->operands);
    users = std::move(g->users);
    return true;
  }

  void classify() {
    cand.assign(n, {});
    const HloInstruction* root = comp.root();
    for (uint32_t i = 0; i < n; ++i) {
      const HloInstruction& x = comp.instructions[i];
      Candidate& c = cand[i];
      if (&x == root || users[i].empty() || x.shape.is_tuple() || x.shape.memory_space != 0 ||
          !x.custom_call_target.empty())
        continue;
      if (x.opcode == HloOpcode::kReduce) {
        auto it = reduced_inputs.find(x.name);
        if (it == reduced_inputs.end() || it->second.is_tuple()) continue;
        c.reduction = true;
        c.loop_elements = elements(it->second);
        for (size_t d = 0; d < it->second.dims.size(); ++d) {
          if (it->second.dims[d] == 1) continue;
          const bool reduced = std::find(x.dimensions.begin(), x.dimensions.end(), static_cast<int64_t>(d)) !=
                               x.dimensions.end();
          c.reduced_loop.emplace_back(it->second.dims[d], reduced);
        }
        // A row reduction (the minor dimension reduced) keeps a warp's 32 partials, a column one a
        // 2 x 32 x 33 tile (SharedMemoryUsage, gpu_fusible.cc).
        const bool row = !c.reduced_loop.empty() && c.reduced_loop.back().second;
        const uint64_t width = std::max<uint64_t>(1, element_storage_bits(it->second.type) / 8);
        c.shared_memory_bytes = (row ? 32 : 2 * 32 * 33) * width;
      } else if (loop_fusion_root(x.opcode) || x.opcode == HloOpcode::kBitcast) {
        // A reshape, bitcast or broadcast of one buffer to as many elements only renames it (a bitcast,
        // which XLA fuses into its readers); one that computes - reading several buffers, or slicing one -
        // is a loop fusion whichever op the lowered program ends it with (JAX's HLO writes a reshape where
        // its StableHLO writes a broadcast_in_dim).
        if (operands[i].size() == 1 &&
            (x.opcode == HloOpcode::kReshape || x.opcode == HloOpcode::kBitcast ||
             x.opcode == HloOpcode::kBroadcast) &&
            elements(x.shape) == elements(comp.instructions[operands[i][0]].shape))
          continue;
        c.loop_elements = elements(x.shape);
      } else {
        continue;
      }
      c.eligible = true;
    }
  }

  // XLA's ShapesCompatibleForMultiOutputFusion over the two groups' heroes: a reduction if the group
  // has one, else its first output.
  bool compatible(uint32_t a, uint32_t b) const {
    auto hero = [&](uint32_t g) {
      for (uint32_t m : members[g])
        if (cand[m].reduction) return m;
      return members[g][0];
    };
    const uint32_t x = hero(a), y = hero(b);
    if (cand[x].reduction && cand[y].reduction) return cand[x].reduced_loop == cand[y].reduced_loop;
    return cand[x].loop_elements == cand[y].loop_elements;
  }

  // Whether group `g` can take no other: its outputs and operands at FusionFitsInBudget's limit, or its
  // reductions.
  bool full(uint32_t g) const {
    return members[g].size() + group_operands[g].size() >= kMaxOperandsAndOutputs ||
           reductions[g] >= kMaxReductionsPerFusion;
  }

  bool fits_budget(uint32_t a, uint32_t b) {
    const size_t outputs = members[a].size() + members[b].size();
    if (outputs + group_operands[a].size() > kMaxOperandsAndOutputs ||
        outputs + group_operands[b].size() > kMaxOperandsAndOutputs)
      return false;
    if (reductions[a] + reductions[b] > kMaxReductionsPerFusion) return false;
    if (shared_memory[a] + shared_memory[b] > kSharedMemoryPerBlock) return false;
    // The operands of both, each once: a's marked, b's unmarked ones counted.
    ++operand_stamp_next;
    for (uint32_t o : group_operands[a]) operand_stamp[o] = operand_stamp_next;
    size_t operands_of_both = group_operands[a].size();
    for (uint32_t o : group_operands[b]) operands_of_both += operand_stamp[o] != operand_stamp_next;
    return outputs + operands_of_both <= kMaxOperandsAndOutputs;
  }

  // Whether group `to` reads group `from` through any path, merged groups counting as one node. Only
  // groups above `from`'s level can: the walk stops below it. True also when the walk runs out of budget
  // (then nothing more is merged).
  bool reaches(uint32_t from, uint32_t to) {
    if (walk_budget == 0) return true;  // levels may be stale: nothing more is merged
    if (level[to] <= level[from]) return false;
    ++stamp_next;
    std::vector<uint32_t>& stack = walk;
    stack.assign(1, to);
    stamp[to] = stamp_next;
    uint64_t visits = 0;
    while (!stack.empty()) {
      const uint32_t g = stack.back();
      stack.pop_back();
      for (uint32_t o : group_operands[g]) {
        const uint32_t og = find(o);
        if (og == from) return true;
        if (stamp[og] == stamp_next || level[og] <= level[from]) continue;
        if (walk_budget == 0 || ++visits > kWalkPerPair) return true;
        --walk_budget;
        stamp[og] = stamp_next;
        stack.push_back(og);
      }
    }
    return false;
  }

  // After a merge the group must sit above everything it reads and below everything that reads it: the
  // readers' levels are raised where they no longer are (levels only grow, so this ends). The visits count
  // against the walk's budget; once it is spent no pair is merged again, so levels left low do no harm.
  void raise_readers(uint32_t g) {
    std::vector<uint32_t>& stack = walk;
    stack.assign(1, g);
    while (!stack.empty() && walk_budget > 0) {
      const uint32_t x = stack.back();
      stack.pop_back();
      for (uint32_t m : members[x])
        for (uint32_t u : users[m]) {
          const uint32_t ug = find(u);
          if (ug == x || level[ug] > level[x]) continue;
          level[ug] = level[x] + 1;
          stack.push_back(ug);
          if (walk_budget > 0) --walk_budget;
        }
    }
  }

  void merge(uint32_t a, uint32_t b) {  // b into a
    parent[b] = a;
    level[a] = std::max(level[a], level[b]);
    members[a].insert(members[a].end(), members[b].begin(), members[b].end());
    for (uint32_t o : group_operands[b])
      if (std::find(group_operands[a].begin(), group_operands[a].end(), o) == group_operands[a].end())
        group_operands[a].push_back(o);
    reductions[a] += reductions[b];
    shared_memory[a] += shared_memory[b];
    members[b].clear();
    group_operands[b].clear();
    raise_readers(a);
  }

  // GpuMultiOutputFusion::FuseSiblings for every buffer, from the last to the first.
  bool fuse_siblings() {
    parent.resize(n);
    std::iota(parent.begin(), parent.end(), 0);
    members.assign(n, {});
    group_operands = operands;
    reductions.assign(n, 0);
    shared_memory.assign(n, 0);
    stamp.assign(n, 0);
    operand_stamp.assign(n, 0);
    // Each buffer's level: the longest chain of buffers it reads (operands come first).
    level.assign(n, 0);
    for (uint32_t i = 0; i < n; ++i)
      for (uint32_t o : operands[i])
        if (o < i) level[i] = std::max(level[i], level[o] + 1);
    for (uint32_t i = 0; i < n; ++i) {
      members[i] = {i};
      reductions[i] = cand[i].reduction ? 1 : 0;
      shared_memory[i] = cand[i].shared_memory_bytes;
    }
    walk_budget = kWalkBudgetPerInstruction * static_cast<uint64_t>(n);
    pair_budget = kPairsPerInstruction * static_cast<uint64_t>(n);
    bool merged = false;
    for (uint32_t p = static_cast<uint32_t>(n); p-- > 0;) {
      const HloInstruction& x = comp.instructions[p];
      // Constants are never a parent (DoMultiOutputFusion), nor an effective scalar - an optimizer's step
      // count or learning rate, read by every parameter's update (IsProfitableOperand: "not a profitable
      // shared operand") - nor GEMMs and Triton fusions (custom fusions are skipped).
      const Role r = role_of(x.opcode);
      if (r == Role::kConstant || r == Role::kGemm || !x.custom_call_target.empty()) continue;
      if (!x.shape.is_tuple() && elements(x.shape) <= 1) continue;
      std::vector<uint32_t> siblings;
      ++stamp_next;
      for (uint32_t u : users[p]) {
        const uint32_t g = find(u);
        if (cand[u].eligible && stamp[g] != stamp_next) {
          stamp[g] = stamp_next;
          siblings.push_back(g);
        }
      }
      if (siblings.size() < 2) continue;
      // Multi-output fusions first, then the rest in the order they read the parent.
      std::stable_sort(siblings.begin(), siblings.end(), [&](uint32_t a, uint32_t b) {
        return members[a].size() > 1 && members[b].size() == 1;
      });
      std::vector<bool> taken(siblings.size(), false);
      for (size_t i = 0; i < siblings.size(); ++i) {
        if (taken[i]) continue;
        const uint32_t a = siblings[i];
        for (size_t j = i + 1; j < siblings.size() && !full(a); ++j) {
          if (taken[j]) continue;
          // XLA weighs every pair; past this many a hostile program's siblings are left as they are.
          if (pair_budget == 0) return merged;
          --pair_budget;
          const uint32_t b = siblings[j];
          if (compatible(a, b) && fits_budget(a, b) && !reaches(a, b) && !reaches(b, a)) {
            merge(a, b);
            merged = true;
            taken[j] = true;
          }
        }
      }
    }
    return merged;
  }

  // Each group of several outputs becomes one fusion whose results are read through get-tuple-elements
  // that keep the outputs' names (what reads them is unchanged), over a fused computation of one op per
  // output reading the fusion's parameters - what the buffer model reads to tell whether an output may
  // take an operand's memory (XLA's FusionCanShareBufferHint). The computation is ordered again with each
  // fusion where its first output was, or as soon after as its operands allow.
  void rewrite(std::vector<HloComputation>& bodies, std::unordered_set<std::string>& names) {
    std::vector<HloInstruction> fusions;
    std::vector<uint32_t> fusion_of(n, UINT32_MAX);  // member -> index in `fusions`
    std::vector<uint32_t> key;                       // each fusion's place: its first member's
    for (uint32_t g = 0; g < n; ++g) {
      if (find(g) != g || members[g].size() < 2) continue;
      std::vector<uint32_t> ms = members[g];
      std::sort(ms.begin(), ms.end());
      const HloInstruction& first = comp.instructions[ms[0]];
      HloInstruction f;
      f.name = first.name + ".multi_output";
      while (index.contains(f.name) || names.contains(f.name) || names.contains(f.name + ".computation"))
        f.name += "$";
      names.insert(f.name);
      names.insert(f.name + ".computation");
      f.opcode = HloOpcode::kFusion;
      // Named for the last output: the fusion runs once all its outputs can, so it belongs to that one's pass
      // (a loss's forward log-likelihood written with the backward pass's first division runs in the backward
      // pass, and the plan's pass peaks say so).
      f.op_name = comp.instructions[ms.back()].op_name;
      f.category = first.category;
      f.line = first.line;
      f.shape.type = PrimitiveType::kTuple;
      HloComputation body;
      body.name = f.name + ".computation";
      std::unordered_map<uint32_t, std::string> param_of;
      bool input = false;
      for (uint32_t m : ms) {
        for (uint32_t o : operands[m]) {
          if (param_of.contains(o)) continue;
          HloInstruction p;
          p.opcode = HloOpcode::kParameter;
          p.parameter_number = static_cast<int64_t>(f.operands.size());
          p.name = "param_" + std::to_string(f.operands.size());
          p.shape = comp.instructions[o].shape;
          param_of.emplace(o, p.name);
          f.operands.push_back(comp.instructions[o].name);
          body.instructions.push_back(std::move(p));
        }
      }
      HloInstruction tuple;
      tuple.opcode = HloOpcode::kTuple;
      tuple.name = "tuple";
      tuple.is_root = true;
      tuple.shape.type = PrimitiveType::kTuple;
      for (size_t k = 0; k < ms.size(); ++k) {
        const HloInstruction& m = comp.instructions[ms[k]];
        input = input || cand[ms[k]].reduction;
        HloInstruction out;
        out.opcode = m.opcode;
        out.name = "output_" + std::to_string(k);
        out.shape = m.shape;
        out.dimensions = m.dimensions;
        for (uint32_t o : operands[ms[k]]) out.operands.push_back(param_of.at(o));
        tuple.operands.push_back(out.name);
        tuple.shape.elements.push_back(m.shape);
        f.shape.elements.push_back(m.shape);
        body.instructions.push_back(std::move(out));
      }
      body.instructions.push_back(std::move(tuple));
      f.mutable_fusion_kind() = input ? "kInput" : "kLoop";
      f.called = {body.name};
      bodies.push_back(std::move(body));
      for (size_t k = 0; k < ms.size(); ++k) fusion_of[ms[k]] = static_cast<uint32_t>(fusions.size());
      key.push_back(ms[0]);
      fusions.push_back(std::move(f));
    }
    if (fusions.empty()) return;
    // The members become get-tuple-elements of their fusion, in the order its outputs were listed.
    for (uint32_t g = 0; g < n; ++g) {
      if (find(g) != g || members[g].size() < 2) continue;
      std::vector<uint32_t> ms = members[g];
      std::sort(ms.begin(), ms.end());
      for (size_t k = 0; k < ms.size(); ++k) {
        HloInstruction& m = comp.instructions[ms[k]];
        m.set_opcode(HloOpcode::kGetTupleElement);
        m.operands = {fusions[fusion_of[ms[k]]].name};
        m.tuple_index = static_cast<int64_t>(k);
        m.dimensions.clear();
        m.called.clear();
        if (!m.fusion_kind().empty()) m.mutable_fusion_kind().clear();  // no box made for nothing
      }
    }
    // Kahn's order over the instructions and the fusions, the earliest place first: node i < n is an
    // instruction, n + k fusion k (placed at its first member's place, after it in ties).
    const size_t total = n + fusions.size();
    std::vector<std::vector<uint32_t>> succ(total);
    std::vector<uint32_t> pending(total, 0);
    auto edge = [&](uint32_t from, uint32_t to) {
      succ[from].push_back(to);
      ++pending[to];
    };
    for (uint32_t i = 0; i < n; ++i) {
      if (fusion_of[i] != UINT32_MAX) {
        edge(static_cast<uint32_t>(n + fusion_of[i]), i);  // the fusion before its get-tuple-element
        continue;
      }
      for (uint32_t o : operands[i]) edge(o, i);
    }
    for (size_t k = 0; k < fusions.size(); ++k) {
      std::unordered_set<uint32_t> seen;
      for (const std::string& o : fusions[k].operands) {
        const uint32_t oi = index.find(o)->second;
        if (seen.insert(oi).second) edge(oi, static_cast<uint32_t>(n + k));
      }
    }
    auto place = [&](uint32_t node) { return node < n ? node : key[node - n]; };
    auto later = [&](uint32_t a, uint32_t b) { return place(a) > place(b); };
    std::vector<uint32_t> ready;
    for (uint32_t v = 0; v < total; ++v)
      if (pending[v] == 0) ready.push_back(v);
    std::make_heap(ready.begin(), ready.end(), later);
    std::vector<HloInstruction> out;
    out.reserve(total);
    while (!ready.empty()) {
      std::pop_heap(ready.begin(), ready.end(), later);
      const uint32_t v = ready.back();
      ready.pop_back();
      out.push_back(v < n ? std::move(comp.instructions[v]) : std::move(fusions[v - n]));
      for (uint32_t s : succ[v])
        if (--pending[s] == 0) {
          ready.push_back(s);
          std::push_heap(ready.begin(), ready.end(), later);
        }
    }
    comp.instructions = std::move(out);
  }
};

}  // namespace

void fuse_sibling_outputs(HloComputation& comp, const ReducedInputs& reduced_inputs,
                          std::vector<HloComputation>& bodies, std::unordered_set<std::string>& names) {
  Pass pass(comp, reduced_inputs);
  if (!pass.index_edges()) return;
  pass.classify();
  if (pass.fuse_siblings()) pass.rewrite(bodies, names);
}

}  // namespace memfit::xla_gpu_internal
