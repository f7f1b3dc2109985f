// XLA's latency-hiding scheduler over a modeled computation that copies values to and from the host
// (memfit/plan/xla_gpu_model.h). XLA:GPU runs it after the memory scheduler (gpu_hlo_schedule.cc:
// ScheduleGpuModule, RunLatencyHidingSchedulerPasses); over a program with no asynchronous operation it
// changes nothing (gpu/RESULTS.md: the remat program's order and temp were the same with it disabled), and
// over one with host copies it reorders the whole computation (the compiled offload program: 254 places
// per instruction on average).
//
// What it does, from xla/service/latency_hiding_scheduler.cc (DefaultSchedulerCore, ReadySetLt) with the
// GPU's configuration (gpu_hlo_schedule.cc: MakeGPUSchedulerConfig, aggressive_scheduling_policies) and
// trackers (gpu_latency_hiding_scheduler.cc): it schedules bottom-up, from the root, a list of the nodes
// whose users are all scheduled. Each copy is two nodes, copy-start and copy-done, 5000 units apart
// (ApproximateLatencyEstimator::kHighLatency: the SoL estimator, sol_latency_estimator.cc, hands a copy -
// no collective - to the GPU estimator, whose async pairs take kHighLatency); every other edge 1 unit. A
// node's cost is its run time as XLA estimates it (the SoL estimator's microseconds: a copy "takes" 5 ms,
// more than a layer's compute), and the clock advances by it. The candidates are compared in ReadySetLt's
// order:
//   kScheduleDone     a copy-done first (it occupies the async stream; at most 2 in flight:
//                     SchedulerConfig::parallel_async_compute_limit for kGpuAsyncStreamComputes, which
//                     GpuAsyncTracker gives copies; a done beyond that waits);
//   kLessStall        then whatever is ready now over what would stall the clock - so between a copy-done
//                     and its copy-start (placed when its latency has passed or nothing else is left) the
//                     scheduler puts every node that does not depend on the copy, up to 5 ms of them;
//   kStartAtZeroDepth a copy-start no asynchronous op precedes, unless the stream is backed up, last;
//   kFreeBackedupResource a copy-start that frees a backed-up stream first;
//   kAsyncDepth       the node with the most copy latency on the paths into it first;
//   kAvoidWaste       a node whose cost best fills the wait to the next ready node first;
//   kUnlockDone       a node that reads a copy-done first;
//   kCreatesMoreReadyNodes, then kOriginalOrder (the later in the memory scheduler's order first).
// So in a training step whose saved activations go to the host, a copy bringing a layer's values back
// holds the weight gradients of later layers (which no copy waits on) inside its window: they run at the
// end of the backward pass, and what they read lives until then - the compiled offload GPT keeps six
// layers' attention probabilities at its peak.
//
// Approximated: a kernel's cost is its roofline time (roofline_us) times kXlaUnitsPerRooflineUs, where XLA
// uses its performance model and measured GEMM tables - the factor read from how many kernels the compiled
// offload program's copy windows hold; custom calls cost 10 (0.01 x the GPU estimator's kMediumCost, as the
// SoL estimator falls back). The memory-pressure rules, which apply only above half the scheduler's memory
// limit (80% of the GPU less the arguments and outputs), are not modeled; nor are collectives (one device's
// program has none left asynchronous here). Run over XLA's own compiled graph of that program (its copy
// pairs written as placements), it keeps XLA's order within 28 places per instruction and its temp within
// 5% (HloPlan test); over this model's graph, whose sibling multi-output fusions
// (xla_gpu_multi_output_fusion.cc) compute a GELU in the kernel of the input gradient that reads what it
// reads, +1.7% of XLA's temp (+16.5% without those fusions: the GELU, deferred with its weight gradient
// into a copy's window, kept the copied pre-activation and its tanh alive until then).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "memfit/core/checked.h"
#include "memfit/core/name_map.h"
#include "memfit/plan/xla_gpu_model.h"
#include "xla_gpu_model_internal.h"

namespace memfit::xla_gpu_internal {
namespace {

constexpr double kCopyLatency = 5000.0;  // ApproximateLatencyEstimator::kHighLatency
constexpr double kEdgeLatency = 1.0;     // kLowLatency
constexpr int64_t kCopiesInFlight = 2;   // SchedulerConfig::parallel_async_compute_limit
// The ready nodes the scheduler may weigh in all, per computation (each step weighs every ready node, as
// XLA's does): a 300-layer flax encoder that offloads weighs 1.2 x 10^8 (about a second). Past this the
// computation keeps the memory scheduler's order.
constexpr uint64_t kMaxCandidatesWeighed = 500'000'000;
// XLA's estimates of a kernel's run time, against the roofline below - a calibration, from the one compiled
// program that copies to the host (gpt_mixed_donate_offload_dots_nb), and checked on no other. There each
// window XLA opens for a copy (copy-done bottom-up, then whatever does not wait on the copy until its 5000
// units have passed) holds three layers' weight-gradient work - four GEMMs over 8,192 tokens at d_model 1024
// and Adam over 12.6M parameters, 0.88 ms at the roofline - so XLA counts about 1,700 units for what the
// roofline calls 880 us. It was read from that structure, not moved to meet XLA's temp: with sibling
// multi-output fusion the program's temp is +1.7% of XLA's from x2 to x2.5 (+1.6% at x3, +2.7% at x1.75),
// +10.6% at x1.5 and +10.9% at x1 - under 1.75 the windows hold fewer layers' work than XLA's (2026-12-07,
// `memfit hlo` on its lowered program, the constant changed and rebuilt).
constexpr double kXlaUnitsPerRooflineUs = 2.0;

enum class Transfer : uint8_t { kNone, kToHost, kToDevice };

bool is_placement(const HloInstruction& x) {
  return x.opcode == HloOpcode::kCustomCall && x.custom_call_target == "annotate_device_placement";
}

// A GEMM's flops: 2 x its output's elements x the contraction's length - read from a dot's dimension
// numbers, or for a GEMM fused with its epilogue (which keeps the epilogue's op) taken from its two largest
// operands as an unbatched product's: K = sqrt(|A| |B| / |C|).
double gemm_flops(const HloInstruction& x, const std::vector<const Shape*>& operands) {
  const double c = static_cast<double>(elements(x.shape));
  if (x.opcode == HloOpcode::kDot && !operands.empty() && !operands[0]->is_tuple() &&
      !x.lhs_contracting_dims.empty()) {
    double k = 1;
    for (int64_t d : x.lhs_contracting_dims)
      if (d >= 0 && static_cast<size_t>(d) < operands[0]->dims.size())
        k *= static_cast<double>(operands[0]->dims[static_cast<size_t>(d)]);
    return 2 * c * k;
  }
  std::vector<double> sizes;
  for (const Shape* s : operands) sizes.push_back(static_cast<double>(elements(*s)));
  if (sizes.size() < 2 || c <= 0) return 0;
  std::partial_sort(sizes.begin(), sizes.begin() + 2, sizes.end(), std::greater<>());
  return 2 * c * std::max(1.0, std::sqrt(sizes[0] * sizes[1] / c));
}

// A kernel's run time in microseconds at the roofline of an H100-class GPU: a launch, then its traffic at
// 3 TB/s or a GEMM's flops at 700 TFLOP/s (350 with f32 results), whichever is longer.
double roofline_us(const HloInstruction& x, uint64_t read_bytes, double flops) {
  constexpr double kLaunchUs = 2.0, kBytesPerUs = 3.0e6;
  const double bytes = static_cast<double>(read_bytes) + static_cast<double>(x.shape.leaf_bytes());
  const bool wide = x.shape.type == PrimitiveType::kF32 || x.shape.type == PrimitiveType::kF64;
  return kLaunchUs + std::max(bytes / kBytesPerUs, flops / (wide ? 350e6 : 700e6));
}

// The computation as the scheduler sees it: a node per instruction (a transfer's is its copy-start), then a
// copy-done per transfer; edges from operands to readers, and from each copy-start to its done.
struct CopyGraph {
  uint32_t instructions = 0;
  std::vector<Transfer> transfer;        // per instruction
  std::vector<uint32_t> instruction_of;  // per node
  std::vector<std::vector<uint32_t>> preds, succs;
  bool is_done(uint32_t v) const { return v >= instructions; }
  bool is_start(uint32_t v) const { return v < instructions && transfer[v] != Transfer::kNone; }
  double latency(uint32_t from, uint32_t to) const {
    return is_start(from) && is_done(to) ? kCopyLatency : kEdgeLatency;
  }
};

// nullopt when the computation copies nothing (or is not well formed: an operand it does not define).
std::optional<CopyGraph> copy_graph(const HloComputation& comp) {
  CopyGraph g;
  const uint32_t n = g.instructions = static_cast<uint32_t>(comp.instructions.size());
  g.transfer.assign(n, Transfer::kNone);
  bool any = false;
  for (uint32_t i = 0; i < n; ++i) {
    const HloInstruction& x = comp.instructions[i];
    if (!is_placement(x) || x.shape.is_tuple() || x.is_root) continue;
    if (x.shape.memory_space == kHostMemorySpace) {
      g.transfer[i] = Transfer::kToHost;
    } else if (x.buffer_placement() == "device" && x.operands.size() == 1) {
      g.transfer[i] = Transfer::kToDevice;  // a device annotation of a value already there became a bitcast
    }
    any = any || g.transfer[i] != Transfer::kNone;
  }
  if (!any) return std::nullopt;
  NameMap<uint32_t> index;
  index.reserve(n);
  for (uint32_t i = 0; i < n; ++i) index.emplace(comp.instructions[i].name, i);
  std::vector<uint32_t> done_of(n, UINT32_MAX);
  for (uint32_t i = 0; i < n; ++i) g.instruction_of.push_back(i);
  for (uint32_t i = 0; i < n; ++i) {
    if (g.transfer[i] == Transfer::kNone) continue;
    done_of[i] = static_cast<uint32_t>(g.instruction_of.size());
    g.instruction_of.push_back(i);
  }
  g.preds.resize(g.instruction_of.size());
  g.succs.resize(g.instruction_of.size());
  // Each edge once: an operand read twice (x * x) is one edge. Edges into a node are added together, so
  // the last node each source was added to tells.
  std::vector<uint32_t> last_added_to(g.instruction_of.size(), UINT32_MAX);
  auto add_edge = [&](uint32_t from, uint32_t to) {
    if (last_added_to[from] == to) return;
    last_added_to[from] = to;
    g.preds[to].push_back(from);
    g.succs[from].push_back(to);
  };
  for (uint32_t i = 0; i < n; ++i) {
    for (const std::string& o : comp.instructions[i].operands) {
      const auto* p = index.find(o);
      if (p == nullptr) return std::nullopt;
      add_edge(done_of[p->second] != UINT32_MAX ? done_of[p->second] : p->second, i);
    }
    if (done_of[i] != UINT32_MAX) add_edge(i, done_of[i]);
  }
  return g;
}

// Each node's cost in XLA's units, and whether it is a no-op (IsNopInstruction: scheduled as soon as it
// is ready). What XLA's SoL estimator gives each kind (sol_latency_estimator.cc: NodeCost): copies 0.01 x
// kLowCost; Triton fusions that are not GEMMs (a softmax, a norm) the same; custom calls 0.01 x kMediumCost;
// every kernel its run time.
void node_costs(const HloComputation& comp, const CopyGraph& g, std::vector<double>& cost,
                std::vector<bool>& nop) {
  const size_t nodes = g.instruction_of.size();
  cost.assign(nodes, 0.01);
  nop.assign(nodes, false);
  for (uint32_t v = 0; v < g.instructions; ++v) {
    const HloInstruction& x = comp.instructions[v];
    const std::string_view target = x.custom_call_target;
    switch (x.opcode) {
      case HloOpcode::kParameter:
      case HloOpcode::kConstant:
      case HloOpcode::kGetTupleElement:
      case HloOpcode::kBitcast:
      case HloOpcode::kBroadcast:
      case HloOpcode::kIota:
        nop[v] = true;
        cost[v] = 0;
        continue;
      case HloOpcode::kTuple:
      case HloOpcode::kOptimizationBarrier:
        cost[v] = 0;  // not in the no-op set, but free (the GPU estimator's IsNopInstruction)
        continue;
      default:
        break;
    }
    if (g.is_start(v) || target == kNormalization) continue;  // 0.01
    if ((x.opcode == HloOpcode::kCustomCall && !target.starts_with(kModeledKernel)) ||
        role_of(x.opcode) == Role::kControl) {
      cost[v] = 10.0;
      continue;
    }
    uint64_t read = 0;
    std::vector<const Shape*> operands;
    for (uint32_t p : g.preds[v]) {
      operands.push_back(&comp.instructions[g.instruction_of[p]].shape);
      read = saturating_add(read, operands.back()->leaf_bytes());
    }
    cost[v] = kXlaUnitsPerRooflineUs * roofline_us(x, read, written_by_gemm(x) ? gemm_flops(x, operands) : 0);
  }
}

// DefaultSchedulerCore's bottom-up list scheduling (see the header comment): the nodes, last first; empty
// past kMaxCandidatesWeighed.
// `bytes`: the device memory each node defines; `memory_limit`: the scheduler's (GetSchedulerMemoryLimit).
std::vector<uint32_t> schedule_bottom_up(const CopyGraph& g, const std::vector<double>& cost,
                                         const std::vector<bool>& nop, const std::vector<uint64_t>& bytes,
                                         double memory_limit) {
  const size_t nodes = g.instruction_of.size();
  // Async depth: the copy latency on the paths into each node (InitializeGraphAnalysis). Instructions come
  // operands first; a copy-done's depth is set with its start's.
  std::vector<double> depth(nodes, 0.0);
  for (uint32_t i = 0; i < g.instructions; ++i) {
    for (uint32_t p : g.preds[i]) depth[i] = std::max(depth[i], depth[p]);
    for (uint32_t s : g.succs[i])
      if (g.is_done(s)) depth[s] = depth[i] + kCopyLatency;
  }
  std::vector<bool> reads_done(nodes, false);
  for (uint32_t v = 0; v < nodes; ++v)
    for (uint32_t p : g.preds[v]) reads_done[v] = reads_done[v] || g.is_done(p);
  std::vector<int32_t> outdegree(nodes);
  for (uint32_t v = 0; v < nodes; ++v) outdegree[v] = static_cast<int32_t>(g.succs[v].size());
  std::vector<double> ready_time(nodes, std::numeric_limits<double>::max());
  std::vector<uint32_t> ready, nops, sequence;
  std::vector<uint32_t> waiting;  // ready, but not before a later time (next_ready_stack)
  sequence.reserve(nodes);
  uint64_t weighed = 0;
  double now = 0, next = 0;  // next: the earliest time a waiting node is ready
  // Memory, bottom-up (MemoryPressureTracker): a buffer is live from the first of its readers scheduled
  // until its definition is.
  std::vector<bool> live(nodes, false), scheduled(nodes, false);
  double usage = 0;
  // Per node, kept as the schedule goes (the ready set is scanned at every step): the bytes of its operands
  // not yet live, and how many of its operands it is the last unscheduled reader of.
  std::vector<double> operands_not_live(nodes, 0);
  std::vector<int32_t> last_reader_of(nodes, 0);
  for (uint32_t v = 0; v < nodes; ++v)
    for (uint32_t p : g.preds[v]) {
      operands_not_live[v] += static_cast<double>(bytes[p]);
      last_reader_of[v] += outdegree[p] == 1;
    }
  // Scheduling `v`: its operands not yet live become so (at once, beside its own buffer: the peak), then
  // its own buffer is freed (MemoryPressureDifference). {net change, peak increase}.
  auto pressure = [&](uint32_t v) {
    const double added = operands_not_live[v];
    return std::make_pair(added - (live[v] ? static_cast<double>(bytes[v]) : 0.0), added);
  };
  int64_t streams_free = kCopiesInFlight, dones_queued = 0, in_flight = 0;
  auto make_ready = [&](uint32_t v) {
    double t = now;
    for (uint32_t s : g.succs[v]) t = std::max(t, ready_time[s] + g.latency(v, s));
    ready_time[v] = t;
    if (g.is_done(v)) ++dones_queued;
    if (nop[v]) {
      nops.push_back(v);
      return;
    }
    ready.push_back(v);
    if (t > now) waiting.push_back(v);
  };
  for (uint32_t v = 0; v < nodes; ++v)
    if (outdegree[v] == 0) make_ready(v);
  // A copy-start whose stream is full while dones wait for it.
  auto backed_up = [&](uint32_t v) { return g.is_start(v) && streams_free == 0 && dones_queued > 0; };
  auto ready_if_scheduled = [&](uint32_t v) { return last_reader_of[v]; };
  // ReadySetLt::AIsBetterThanB for the rules that apply, in its order.
  auto better = [&](uint32_t a, uint32_t b) {
    if (usage > memory_limit / 2) {  // MemoryPressurePolicy
      const auto [a_net, a_peak] = pressure(a);
      const auto [b_net, b_peak] = pressure(b);
      if (usage >= memory_limit && a_net != b_net) return a_net < b_net;  // kDecreaseMemoryOverLimit
      const bool a_under = a_peak + usage <= memory_limit, b_under = b_peak + usage <= memory_limit;
      if (a_under != b_under) return a_under;  // kMemoryPeakOverLimit
    }
    if (g.is_done(a) != g.is_done(b)) return g.is_done(a);  // kScheduleDone
    if (ready_time[a] != ready_time[b]) {                   // kLessStall
      const double sa = std::max(ready_time[a] - now, 0.0), sb = std::max(ready_time[b] - now, 0.0);
      if (sa != sb) return sa < sb;
    }
    auto not_idle = [&](uint32_t v) { return !(g.is_start(v) && depth[v] == 0 && !backed_up(v)); };
    if (not_idle(a) != not_idle(b)) return not_idle(a);     // kStartAtZeroDepth
    if (backed_up(a) != backed_up(b)) return backed_up(a);  // kFreeBackedupResource
    if (depth[a] != depth[b]) return depth[a] > depth[b];   // kAsyncDepth
    if (!waiting.empty()) {                                 // kAvoidWaste
      const double wa = std::abs(next - now - cost[a]), wb = std::abs(next - now - cost[b]);
      const bool fa = !g.is_start(a) && wa < wb, fb = !g.is_start(b) && wb < wa;
      if (fa != fb) return fa;
    }
    if (reads_done[a] != reads_done[b]) return bool(reads_done[a]);  // kUnlockDone
    const int ra = ready_if_scheduled(a), rb = ready_if_scheduled(b);
    if (ra != rb) return ra > rb;  // kCreatesMoreReadyNodes
    if (usage > memory_limit / 2) {
      const bool a_frees = pressure(a).first < 0, b_frees = pressure(b).first < 0;
      if (a_frees != b_frees) return a_frees;  // kDecreaseMemory
    }
    return a > b;  // kOriginalOrder (a copy-done's node sorts after every instruction)
  };
  auto schedule = [&](uint32_t v) {
    sequence.push_back(v);
    scheduled[v] = true;
    for (uint32_t p : g.preds[v])
      if (!live[p]) {
        live[p] = true;
        usage += static_cast<double>(bytes[p]);
        for (uint32_t reader : g.succs[p]) operands_not_live[reader] -= static_cast<double>(bytes[p]);
      }
    if (live[v]) {
      live[v] = false;
      usage -= static_cast<double>(bytes[v]);
    }
    double t = now;
    for (uint32_t s : g.succs[v]) t = std::max(t, ready_time[s] + g.latency(v, s));
    ready_time[v] = t;
    now = t + cost[v];
    if (g.is_done(v)) {
      --streams_free;
      --dones_queued;
      ++in_flight;
    } else if (g.is_start(v)) {
      ++streams_free;
      --in_flight;
    }
    std::erase_if(waiting, [&](uint32_t w) { return ready_time[w] < now; });
    for (uint32_t p : g.preds[v]) {
      if (--outdegree[p] == 0) {
        make_ready(p);
      } else if (outdegree[p] == 1) {
        for (uint32_t reader : g.succs[p]) last_reader_of[reader] += !scheduled[reader];
      }
    }
  };
  while (!ready.empty() || !nops.empty()) {
    if (!nops.empty()) {
      const uint32_t v = nops.back();
      nops.pop_back();
      schedule(v);
      continue;
    }
    next = std::numeric_limits<double>::max();
    for (uint32_t w : waiting) next = std::min(next, ready_time[w]);
    size_t best = ready.size();
    weighed += ready.size();
    if (weighed > kMaxCandidatesWeighed) return {};
    for (size_t k = 0; k < ready.size(); ++k) {
      if (g.is_done(ready[k]) && streams_free <= 0 && in_flight > 0) continue;  // over the stream's limit
      if (best == ready.size() || better(ready[k], ready[best])) best = k;
    }
    if (best == ready.size()) best = 0;  // only dones over the limit: not a state XLA reaches
    const uint32_t v = ready[best];
    ready[best] = ready.back();
    ready.pop_back();
    std::erase(waiting, v);
    schedule(v);
  }
  return sequence;
}

}  // namespace

void latency_hiding_schedule(HloComputation& comp, uint64_t memory_limit_bytes) {
  const std::optional<CopyGraph> graph = copy_graph(comp);
  if (!graph) return;
  std::vector<double> cost;
  std::vector<bool> nop;
  node_costs(comp, *graph, cost, nop);
  // The device memory each node defines: a copy to the device's at its start, nothing for a copy-done, a
  // host value, a forward (tuple, get-tuple-element, bitcast, barrier) or an argument.
  std::vector<uint64_t> bytes(graph->instruction_of.size(), 0);
  for (uint32_t v = 0; v < graph->instructions; ++v) {
    const HloInstruction& x = comp.instructions[v];
    const Role r = role_of(x.opcode);
    if (r == Role::kForward || r == Role::kParameter || x.shape.memory_space == kHostMemorySpace) continue;
    bytes[v] = x.shape.leaf_bytes();
  }
  const std::vector<uint32_t> sequence =
      schedule_bottom_up(*graph, cost, nop, bytes, static_cast<double>(memory_limit_bytes));
  // Empty past the work bound; short of the nodes for a cycle (not a program XLA accepts): the order stays.
  if (sequence.size() != graph->instruction_of.size()) return;
  // The order, first instruction first: a copy to the device at its start (its device buffer is written
  // from there), a copy to the host at its done (the device value it reads lives until the copy is over).
  std::vector<uint32_t> order;
  order.reserve(graph->instructions);
  for (auto it = sequence.rbegin(); it != sequence.rend(); ++it) {
    const uint32_t i = graph->instruction_of[*it];
    const Transfer t = graph->transfer[i];
    if (t == Transfer::kNone || (t == Transfer::kToDevice) == !graph->is_done(*it)) order.push_back(i);
  }
  reorder_instructions(comp.instructions, order);
}

}  // namespace memfit::xla_gpu_internal

namespace memfit {

uint64_t xla_scheduler_memory_limit(const HloModule& module, uint64_t device_memory_bytes) {
  // GetSchedulerMemoryLimit (gpu_hlo_schedule.cc): 80% of the device, less the arguments and the outputs
  // (every subshape, tuple tables too; an output that aliases an argument counted once), times
  // xla_gpu_memory_limit_slop_factor's 95%.
  auto all_bytes = [](const Shape& s, auto&& self) -> uint64_t {
    uint64_t b = s.own_bytes();
    for (const Shape& e : s.elements) b = saturating_add(b, self(e, self));
    return b;
  };
  const HloComputation* entry = module.entry();
  uint64_t io = 0;
  if (entry != nullptr) {
    for (const HloInstruction& x : entry->instructions) {
      if (x.opcode == HloOpcode::kParameter) io = saturating_add(io, all_bytes(x.shape, all_bytes));
    }
    if (const HloInstruction* root = entry->root()) {
      io = saturating_add(io, all_bytes(root->shape, all_bytes));
      for (const HloAlias& a : module.aliases)
        if (const Shape* out = root->shape.at(a.output_index)) io -= std::min(io, all_bytes(*out, all_bytes));
    }
  }
  const uint64_t base = device_memory_bytes / 10 * 8;
  return base > io ? (base - io) / 100 * 95 : 0;
}

HloModule latency_hiding_scheduled(HloModule scheduled, uint64_t device_memory_bytes) {
  const uint64_t limit = xla_scheduler_memory_limit(scheduled, device_memory_bytes);
  for (HloComputation& c : scheduled.computations) xla_gpu_internal::latency_hiding_schedule(c, limit);
  return scheduled;
}

}  // namespace memfit
