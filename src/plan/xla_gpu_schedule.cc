// XLA's memory schedulers over the modeled program (memfit/plan/xla_gpu_model.h).
#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <queue>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "memfit/core/checked.h"
#include "memfit/core/name_map.h"
#include "memfit/plan/xla_gpu_model.h"
#include "xla_gpu_model_internal.h"

namespace memfit {
namespace xla_gpu_internal {

std::optional<OperandGraph> operand_graph(const HloComputation& comp, const NameIndex& index) {
  const size_t n = comp.instructions.size();
  OperandGraph g{std::vector<std::vector<uint32_t>>(n), std::vector<std::vector<uint32_t>>(n),
                 std::vector<std::vector<uint32_t>>(n)};
  std::vector<uint32_t> listed_by(n, UINT32_MAX);  // the last reader that listed each operand: once each
  for (uint32_t i = 0; i < n; ++i) {
    for (const std::string& o : comp.instructions[i].operands) {
      const auto* it = index.find(o);
      if (it == nullptr) return std::nullopt;
      g.positional[i].push_back(it->second);
      if (listed_by[it->second] == i) continue;
      listed_by[it->second] = i;
      g.operands[i].push_back(it->second);
      g.users[it->second].push_back(i);
    }
  }
  return g;
}

std::optional<OperandGraph> operand_graph(const HloComputation& comp) {
  NameIndex index;
  index.reserve(comp.instructions.size());
  for (uint32_t i = 0; i < comp.instructions.size(); ++i) index.emplace(comp.instructions[i].name, i);
  return operand_graph(comp, index);
}

namespace {

// The buffers each instruction reads, as XLA's ListScheduler counts them: every buffer in the points-to
// set of each operand (TuplePointsToAnalysis), so a value read through a tuple, an optimization barrier and
// a get-tuple-element is in use until its last reader through them has run - a saved activation that a
// recomputation's barrier passes on is freed by the gradient that reads it, not by the barrier. A forward
// (tuple, get-tuple-element, bitcast, barrier) defines no buffer; every other instruction one, its own. A
// get-tuple-element of a tuple points at that element's buffers (nested elements flattened into it).
// nullopt past `kMaxEntries` sets' entries in all: a hostile chain of tuples each holding the one before
// would be quadratic; the caller then counts each operand as the buffer (the approximation before).
std::optional<std::vector<std::vector<uint32_t>>> buffers_read(const HloComputation& comp,
                                                               const OperandGraph& g) {
  const size_t n = comp.instructions.size();
  const size_t kMaxEntries = 8 * n + (size_t{1} << 20);
  size_t entries = 0;
  // Per forward, per element of its result, the buffers there; a non-forward `o` is {{o}}.
  std::vector<std::vector<std::vector<uint32_t>>> elements(n);
  std::vector<bool> forward(n, false);
  auto flat = [&](uint32_t o, std::vector<uint32_t>& out) {
    if (!forward[o]) {
      out.push_back(o);
      return;
    }
    for (const std::vector<uint32_t>& e : elements[o]) out.insert(out.end(), e.begin(), e.end());
  };
  // In the computation's order, operands first (a program out of that order - not one XLA accepts - gets
  // the sets of the forwards written before each reader: still an approximation, never a fault).
  for (uint32_t i = 0; i < n; ++i) {
    const HloInstruction& x = comp.instructions[i];
    if (role_of(x.opcode) != Role::kForward) continue;
    forward[i] = true;
    const std::vector<uint32_t>& ops = g.positional[i];
    std::vector<std::vector<uint32_t>>& e = elements[i];
    if (x.opcode == HloOpcode::kTuple) {
      e.resize(ops.size());
      for (size_t k = 0; k < ops.size(); ++k) flat(ops[k], e[k]);
    } else if (x.opcode == HloOpcode::kGetTupleElement && ops.size() == 1 && forward[ops[0]] &&
               x.tuple_index >= 0 && static_cast<size_t>(x.tuple_index) < elements[ops[0]].size()) {
      e.push_back(elements[ops[0]][static_cast<size_t>(x.tuple_index)]);
    } else if (ops.size() == 1 && forward[ops[0]] && x.opcode != HloOpcode::kGetTupleElement) {
      e = elements[ops[0]];  // a bitcast or a barrier: its operand's memory
    } else {
      e.emplace_back();
      for (uint32_t o : ops) flat(o, e.back());
    }
    for (std::vector<uint32_t>& el : e) {
      std::sort(el.begin(), el.end());
      el.erase(std::unique(el.begin(), el.end()), el.end());
      entries += el.size();
    }
    if (entries > kMaxEntries) return std::nullopt;
  }
  std::vector<std::vector<uint32_t>> reads(n);
  for (uint32_t i = 0; i < n; ++i) {
    for (uint32_t o : g.operands[i]) flat(o, reads[i]);
    std::sort(reads[i].begin(), reads[i].end());
    reads[i].erase(std::unique(reads[i].begin(), reads[i].end()), reads[i].end());
    entries += reads[i].size();
    if (entries > 2 * kMaxEntries) return std::nullopt;
  }
  return reads;
}

}  // namespace

// XLA's ListScheduler (xla/service/hlo_memory_scheduler.cc): of the instructions whose operands are done,
// run the one that frees the most bytes net of what it defines (ties: more users first); a buffer is
// freed when its last user has run. Buffers are approximated as each instruction's own bytes (a forward -
// tuple, get-tuple-element, bitcast - defines none), priorities are recomputed when an entry is popped.
// Parameters and constants count for nothing (ListScheduler::IgnoreInstruction): the last reader of a weight
// frees no memory, so a weight's bf16 copy is not run early for the f32 weight it would seem to free.
// A queued entry whose priority rose (another reader of its operand ran) keeps its old place until it is
// popped. XLA re-queues such entries, but only the users of the operand instructions the scheduled one read
// (CreateSchedule's adjust_ready_queue), and its fused graph reads most buffers through bitcasts, so many
// stay where they were. Re-queuing every one here (tried 2026-12-03, before buffers were counted through
// forwards) put 21 of 27 within 5%, not 22: gpt_fp32_donate_scan_remat_full fell from -1.7% to -16%. The
// cost: with cuDNN attention, full remat and long sequences (48 layers of 4096 tokens) a recomputed GELU
// output can wait behind the whole backward pass. A buffer is in use by every reader of its points-to set
// (buffers_read): over the lowered mlp_fp32_donate_remat_full this gives XLA's temp to 7 KB (counted by
// operand, +12.5%); over XLA's compiled graph of it (barriers already gone) it orders a schedule of 336 MB
// where XLA compiled one of 537 MB - that graph is not the one XLA scheduled, and which of XLA's schedulers
// made the compiled order is not known for this program.
// `runs_after`: pairs (a, b) of instruction indices, b to run after a (no data flows: nothing is freed).
void list_schedule(HloComputation& comp, const std::vector<std::pair<uint32_t, uint32_t>>& runs_after) {
  const size_t n = comp.instructions.size();
  std::optional<OperandGraph> graph = operand_graph(comp);
  if (!graph) return;  // not a well-formed computation: keep its order
  std::vector<std::vector<uint32_t>>& operands = graph->operands;
  std::vector<std::vector<uint32_t>>& users = graph->users;
  std::vector<std::vector<uint32_t>> successors(n);
  std::vector<uint64_t> bytes(n);
  std::vector<uint32_t> unscheduled_users(n), waiting_operands(n);
  for (uint32_t i = 0; i < n; ++i) {
    const HloInstruction& x = comp.instructions[i];
    const Role r = role_of(x.opcode);
    // Host buffers take no device memory: offloading one frees its device operand.
    bytes[i] = r == Role::kForward || r == Role::kParameter || r == Role::kConstant ||
                       x.shape.memory_space == kHostMemorySpace
                   ? 0
                   : x.shape.own_bytes();
    waiting_operands[i] = static_cast<uint32_t>(operands[i].size());
  }
  // The buffers each instruction reads through forwards, and each buffer's readers yet to run (one more
  // for a buffer the program returns: never freed). Without the points-to sets (a hostile program's), each
  // operand counts as a buffer.
  std::vector<std::vector<uint32_t>> reads;
  if (std::optional<std::vector<std::vector<uint32_t>>> r = buffers_read(comp, *graph)) {
    reads = std::move(*r);
    for (const std::vector<uint32_t>& rs : reads)
      for (uint32_t b : rs) ++unscheduled_users[b];
    if (const HloInstruction* out = comp.root()) {  // what the root points at is live out
      const auto root_at = static_cast<uint32_t>(out - comp.instructions.data());
      if (role_of(out->opcode) == Role::kForward) {
        for (uint32_t b : reads[root_at]) ++unscheduled_users[b];
      } else {
        ++unscheduled_users[root_at];
      }
    }
  } else {
    reads = operands;
    for (uint32_t i = 0; i < n; ++i) unscheduled_users[i] = static_cast<uint32_t>(users[i].size());
  }
  for (const auto& [a, b] : runs_after) {
    if (a >= n || b >= n || a == b) continue;
    successors[a].push_back(b);
    ++waiting_operands[b];
  }
  // Bytes freed less bytes made, saturating: a hostile program's sizes can sum past 2^63 (its plan is
  // refused later, when the heap's total is checked), and the order then no longer matters.
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  auto clamp = [](uint64_t b) { return static_cast<int64_t>(std::min<uint64_t>(b, kMax)); };
  auto priority = [&](uint32_t i) {
    int64_t freed = 0;
    for (uint32_t o : reads[i]) {
      if (unscheduled_users[o] == 1)
        freed = clamp(static_cast<uint64_t>(freed) + static_cast<uint64_t>(clamp(bytes[o])));
    }
    // freed and the made bytes are both in [0, 2^63): their difference fits.
    return std::make_pair(freed - clamp(bytes[i]), static_cast<int64_t>(users[i].size()));
  };
  const HloInstruction* root = comp.root();
  using Entry = std::tuple<std::pair<int64_t, int64_t>, int64_t, uint32_t>;  // priority, -position, index
  std::priority_queue<Entry> ready;
  auto push = [&](uint32_t i) { ready.emplace(priority(i), -static_cast<int64_t>(i), i); };
  std::vector<uint32_t> order;
  order.reserve(n);
  for (uint32_t i = 0; i < n; ++i) {
    if (comp.instructions[i].opcode == HloOpcode::kParameter)
      order.push_back(i);  // parameters first, as written
  }
  for (uint32_t i : order) {
    for (uint32_t u : users[i]) --waiting_operands[u];
    for (uint32_t u : successors[i]) --waiting_operands[u];
  }
  for (uint32_t i = 0; i < n; ++i) {
    if (comp.instructions[i].opcode != HloOpcode::kParameter && waiting_operands[i] == 0 &&
        &comp.instructions[i] != root)
      push(i);
  }
  std::vector<bool> done(n, false);
  for (uint32_t i : order) done[i] = true;
  auto run = [&](uint32_t i) {
    done[i] = true;
    order.push_back(i);
    for (uint32_t o : reads[i]) --unscheduled_users[o];
    for (uint32_t u : users[i]) {
      if (--waiting_operands[u] == 0 && &comp.instructions[u] != root) push(u);
    }
    for (uint32_t u : successors[i]) {
      if (--waiting_operands[u] == 0 && &comp.instructions[u] != root) push(u);
    }
  };
  while (!ready.empty()) {
    auto [p, pos, i] = ready.top();
    ready.pop();
    if (done[i]) continue;
    if (priority(i) != p) {  // its operands' other users ran since it was queued
      push(i);
      continue;
    }
    run(i);
  }
  for (uint32_t i = 0; i < n; ++i) {
    if (done[i] || &comp.instructions[i] == root) continue;
    // Left waiting: an order asked for in `runs_after` goes against the data (a reader of the old value
    // that also reads the new one). Scheduled without those orders.
    if (!runs_after.empty()) return list_schedule(comp, {});
    run(i);  // not a well-formed computation (a cycle): as written
  }
  for (uint32_t i = 0; i < n; ++i) {
    if (!done[i]) run(i);  // the root, last
  }
  reorder_instructions(comp.instructions, order);
}

// XLA's DFSMemoryScheduler (xla/hlo/transforms/simplifiers/hlo_memory_scheduler.cc): a post order from the
// root (unreachable roots first) visiting operands by decreasing transitive fan-out ("extra users": users
// beyond the first, summed over everything an operand is computed from), then decreasing transitive bytes
// defined, then name. Parameters and constants count for nothing; forwards (bitcast, get-tuple-element,
// optimization barrier) define no bytes, a tuple its pointer table; host values count nothing (the GPU's
// size function). Both sums are capped as XLA caps them.
void dfs_schedule(HloComputation& comp) {
  const size_t n = comp.instructions.size();
  const std::optional<OperandGraph> graph = operand_graph(comp);
  if (!graph) return;  // not a well-formed computation: keep its order
  const std::vector<std::vector<uint32_t>>& operands = graph->operands;
  std::vector<uint64_t> user_count(n);
  for (uint32_t i = 0; i < n; ++i) user_count[i] = graph->users[i].size();
  auto defined_bytes = [](const Shape& s, auto&& self) -> uint64_t {
    if (s.memory_space == kHostMemorySpace) return 0;
    uint64_t b = s.own_bytes();
    for (const Shape& e : s.elements) b = saturating_add(b, self(e, self));
    return b;
  };
  struct Stats {
    uint64_t extra_users = 0;
    uint64_t total_bytes = 0;
  };
  std::vector<Stats> stats(n);
  uint64_t cumulative = 0;
  for (uint32_t i : instruction_post_order(comp)) {
    const HloInstruction& x = comp.instructions[i];
    const Role r = role_of(x.opcode);
    if (r == Role::kParameter || r == Role::kConstant) continue;
    uint64_t own = 0;
    if (x.opcode == HloOpcode::kTuple) {
      own = x.shape.own_bytes();
    } else if (r != Role::kForward) {
      own = defined_bytes(x.shape, defined_bytes);
    }
    cumulative = saturating_add(cumulative, own);
    Stats st{user_count[i] == 0 ? 0 : user_count[i] - 1, own};
    for (uint32_t o : operands[i]) {
      st.extra_users = saturating_add(st.extra_users, stats[o].extra_users);
      st.total_bytes = saturating_add(st.total_bytes, stats[o].total_bytes);
    }
    stats[i] = {std::min<uint64_t>(st.extra_users, n), std::min(st.total_bytes, cumulative)};
  }
  auto before = [&](uint32_t a, uint32_t b) {
    if (stats[a].extra_users != stats[b].extra_users) return stats[a].extra_users > stats[b].extra_users;
    if (stats[a].total_bytes != stats[b].total_bytes) return stats[a].total_bytes > stats[b].total_bytes;
    return comp.instructions[a].name < comp.instructions[b].name;
  };
  std::vector<uint32_t> order;
  order.reserve(n);
  std::vector<bool> seen(n, false);
  // Iterative post order: (instruction, its operands sorted, the next to visit).
  struct Frame {
    uint32_t at;
    std::vector<uint32_t> next;
    size_t k;
  };
  std::vector<Frame> stack;
  auto enter = [&](uint32_t i) {
    seen[i] = true;
    std::vector<uint32_t> sorted = operands[i];
    std::sort(sorted.begin(), sorted.end(), before);
    stack.push_back({i, std::move(sorted), 0});
  };
  auto visit = [&](uint32_t start) {
    if (seen[start]) return;
    enter(start);
    while (!stack.empty()) {
      Frame& f = stack.back();
      if (f.k == f.next.size()) {
        order.push_back(f.at);
        stack.pop_back();
      } else if (const uint32_t o = f.next[f.k++]; !seen[o]) {
        enter(o);  // `f` is not used past this point: the push may move it
      }
    }
  };
  const HloInstruction* root = comp.root();
  uint32_t root_index = UINT32_MAX;
  for (uint32_t i = 0; i < n; ++i) {
    if (&comp.instructions[i] == root) root_index = i;
  }
  for (uint32_t i = 0; i < n; ++i) {
    if (user_count[i] == 0 && i != root_index) visit(i);  // unreachable roots first
  }
  if (root_index != UINT32_MAX) visit(root_index);
  if (order.size() != n) return;  // a cycle: not a program XLA accepts; keep its order
  reorder_instructions(comp.instructions, order);
}

// The order XLA gives a computation converted from StableHLO (instruction_post_order, XLA's
// MakeInstructionPostOrder). The lowered HLO text is printed in this order already; StableHLO's text order is
// JAX's tracing order (a transposed head's GEMM before the backward loop, where XLA's post order puts it
// after), so a StableHLO program is put in XLA's order before it is planned.
void xla_post_order(HloComputation& comp) {
  const std::vector<uint32_t> order = instruction_post_order(comp);
  if (order.size() != comp.instructions.size()) return;  // a cycle: not a program XLA accepts; keep its order
  reorder_instructions(comp.instructions, order);
}

}  // namespace xla_gpu_internal

HloModule dfs_scheduled(HloModule modeled) {
  for (HloComputation& c : modeled.computations) {
    xla_gpu_internal::dfs_schedule(c);
  }
  return modeled;
}

HloModule list_scheduled(HloModule modeled) {
  for (HloComputation& c : modeled.computations) {
    xla_gpu_internal::list_schedule(c, c.is_entry ? xla_gpu_internal::readers_before_writers(modeled, c)
                                                  : std::vector<std::pair<uint32_t, uint32_t>>{});
  }
  return modeled;
}

}  // namespace memfit
