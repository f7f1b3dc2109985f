// XLA's priority fusion over the values several fusions read (memfit/plan/xla_gpu_model.h).
#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "xla_gpu_model_internal.h"

namespace memfit::xla_gpu_internal {
namespace {

// Fusing a producer into its readers saves its kernel's launch: 1 us in XLA's performance model
// (kKernelLaunchOverhead, xla/service/gpu/model/gpu_performance_model_base.h), the time an H100 moves
// 3.35 MB of memory in (3.35 TB/s). A small value's fusion is decided by it, a large one's by its traffic.
constexpr double kLaunchOverheadBytes = 3.35e6;
// The visits the count of who reads what may spend per instruction; the shared programs take about 4.
constexpr uint64_t kFusionWorkPerInstruction = 1000;
// A reader's cone: the ops it feeds that may be in its fusion, walked this far.
constexpr size_t kConeNodes = 48;
constexpr int kConeHops = 10;
// A value this many times smaller than the one whose readers are counted is its statistics (a norm's
// mean, a softmax's sum): a reader's cone walks through it, written or not. A reduction over rows of 16
// elements or more is one; a value of the same size or a slice of it is not. (Not measured against XLA:
// the shared programs' norms and softmaxes reduce rows of 197 to 32000.)
constexpr uint64_t kStatisticsRatio = 16;
// How deep a fused value's inputs are followed for the bytes it reads.
constexpr int kReadDepth = 8;
// How deep a fused reader's own readers are counted.
constexpr int kReaderDepth = 4;
// Times a value goes back into the queue because its profit moved.
constexpr uint8_t kMaxRequeues = 8;
// Where the count stops: a value this many fusions read is written whatever its size.
constexpr uint64_t kMaxFusions = 64;

// Compute, in the same bytes-of-memory-time unit as the rest: an H100 issues 132 SMs x 128 FP32 lanes x 2
// (FMA) x 1.98 GHz = 66.9 flops per ns (CalculateEffectiveFlopsPerNs, gpu_performance_model_base.cc) while
// it moves 3,350 bytes per ns - so one flop takes the time of 0.05 bytes.
constexpr double kBytesPerFlop = 3350.0 / 66908.0;
// What a kernel's compute and memory time overlap by (kMemoryComputeParallelism,
// gpu_performance_model_base.h: CombineComputeAndMemoryAccessTime takes compute + memory - 0.95 x the
// smaller).
constexpr double kMemoryComputeParallelism = 0.95;

// The flops XLA's cost model counts per element of an expensive elementwise op: the clock cycles the
// H100's profile gives it (sm_90 in xla/service/gpu/model/hlo_op_profiles_data.h, read by
// GpuHloCostAnalysis). F16 and F64 have rows of their own; every other type is taken as F32 (BF16 is
// computed in F32 after float normalization; integers are an approximation: their rows are not copied).
// Cheap ops (3 to 7 cycles) are left at 0: their time hides under their memory traffic.
double flops_per_element(HloOpcode op, PrimitiveType type) {
  struct Cycles {
    HloOpcode op;
    double f16, f32, f64;
  };
  static constexpr Cycles kCycles[] = {
      {HloOpcode::kTanh, 502, 467, 431},
      {HloOpcode::kExponential, 102, 79, 376},
      {HloOpcode::kExponentialMinusOne, 217, 190, 712},
      {HloOpcode::kLog, 182, 166, 815},
      {HloOpcode::kLogPlusOne, 245, 229, 1259},
      {HloOpcode::kRsqrt, 95, 75, 277},
      {HloOpcode::kSqrt, 95, 75, 332},
      {HloOpcode::kCbrt, 201, 178, 586},
      {HloOpcode::kSine, 993, 958, 554},
      {HloOpcode::kCosine, 997, 978, 558},
      {HloOpcode::kAtan2, 451, 431, 930},
      {HloOpcode::kDivide, 43, 19, 526},
      {HloOpcode::kPower, 526, 510, 2205},
  };
  for (const Cycles& c : kCycles) {
    if (c.op != op) continue;
    if (type == PrimitiveType::kF16) return c.f16;
    if (type == PrimitiveType::kF64) return c.f64;
    return c.f32;
  }
  // Not profiled (logistic, erf, tan, remainder): XLA expands them into several profiled ops before
  // fusion; taken as a tanh.
  return flops_per_element(HloOpcode::kTanh, type);
}

}  // namespace

double xla_flops_per_element(HloOpcode op, PrimitiveType type) {
  if (!is_elementwise(op)) return 0;  // data movement: no flops in XLA's cost analysis
  if (role_of(op) == Role::kExpensive) return flops_per_element(op, type);
  // The cheap ops the H100's profile lists (hlo_op_profiles_data.h, sm_90); every other elementwise op
  // takes GpuHloCostAnalysis's kDefaultFlopsPerElement, 3.
  const bool f32 = type == PrimitiveType::kF32 || type == PrimitiveType::kBF16;
  switch (op) {
    case HloOpcode::kAdd:
    case HloOpcode::kSubtract:
      return type == PrimitiveType::kF64 ? 15 : 7;
    case HloOpcode::kMultiply:
      return type == PrimitiveType::kF64 ? 15 : f32 ? 3 : 7;
    default:
      return 3;
  }
}

bool fuses_into_one_block_reduction(double producer_flops, uint64_t producer_bytes) {
  // Fused, the producer's flops run on the reduction's one block: one SM's 128 lanes of the 132 the
  // producer's own loop kernel spreads them over (ComputeTime, gpu_performance_model_base.cc). Unfused:
  // a launch more, the producer's kernel and the write and read of its result. Memory-bound parts that
  // both pay (the producer's reads) cancel.
  constexpr double kCores = 132;
  const double fused = producer_flops * kBytesPerFlop * kCores;
  const double unfused =
      kLaunchOverheadBytes + producer_flops * kBytesPerFlop + 2 * static_cast<double>(producer_bytes);
  return fused <= unfused;
}

bool fuses_recomputed(double extra_flops, uint64_t producer_bytes) {
  const double visible = (1 - kMemoryComputeParallelism) * extra_flops * kBytesPerFlop;
  return visible <= kLaunchOverheadBytes + 2 * static_cast<double>(producer_bytes);
}

// Each candidate is fused into all of its consumers or written once, the most profitable first
// (priority_fusion.cc's queue): fusing one changes what its neighbours read and how many fusions read them,
// so a profit is taken again when its value reaches the head of the queue. Profit as
// gpu_performance_model.cc weighs a memory-bound producer: unfused, it reads R, writes O and n consumers
// read O; fused, each consumer reads R instead; and one launch fewer.
void prioritize_shared_values(const FusionGraph& g, const std::vector<bool>& candidate,
                              std::vector<bool>& written) {
  const HloComputation& comp = g.comp;
  const std::vector<Role>& role = g.role;
  const Adjacency& operands = g.operands;
  const Adjacency& users = g.users;
  const size_t n = comp.instructions.size();
  // Each value's bytes, once: the profits below read them for every reader of every candidate.
  std::vector<uint64_t> bytes(n);
  for (size_t i = 0; i < n; ++i) bytes[i] = comp.instructions[i].shape.own_bytes();  // checked when parsed
  enum : uint8_t { kUndecided, kFused, kWritten };
  std::vector<uint8_t> state(n, kUndecided);
  // A value its own kernel reads from memory: written, or a candidate not fused (yet).
  auto buffer = [&](uint32_t x) { return candidate[x] ? state[x] != kFused : written[x]; };
  auto read_of = [&](uint32_t v) {
    uint64_t read = 0;
    std::vector<std::pair<uint32_t, int>> stack{{v, 0}};
    while (!stack.empty()) {
      const auto [x, depth] = stack.back();
      stack.pop_back();
      for (uint32_t o : operands[x]) {
        const HloInstruction& xo = comp.instructions[o];
        const bool sliced = xo.opcode == HloOpcode::kSlice || xo.opcode == HloOpcode::kDynamicSlice;
        if (role[o] == Role::kCheap && !buffer(o) && depth < kReadDepth && !operands[o].empty() && !sliced &&
            xo.custom_call_target != kSplitKReduce)
          stack.emplace_back(o, depth + 1);
        else
          read += bytes[o];
      }
    }
    return read;
  };
  // The fusions that read `v`: readers whose next ops meet within a few hops - a norm's mean, its
  // centering and its variance - are one fusion, and a fused reader counts the fusions that read it.
  std::vector<uint32_t> stamp(n, UINT32_MAX), owner(n, 0);
  uint32_t stamp_next = 0;
  // Work is bounded: a hostile program's readers of readers multiply, so past a budget of visits a
  // value's readers are counted without their cones and recursion (no shared program comes near it).
  uint64_t work = 0;
  const uint64_t work_budget = kFusionWorkPerInstruction * static_cast<uint64_t>(n);
  auto fusions_of = [&](uint32_t v, int depth, auto&& self) -> uint64_t {
    std::vector<uint32_t> distinct(users[v].begin(), users[v].end());
    std::sort(distinct.begin(), distinct.end());
    distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
    work += distinct.size();
    if (work > work_budget) return std::clamp<uint64_t>(distinct.size(), 1, kMaxFusions);
    auto weight = [&](uint32_t u) -> uint64_t {
      if (buffer(u) || !fuses(role[u]) || depth >= kReaderDepth) return 1;
      return self(u, depth + 1, self);
    };
    if (distinct.size() <= 1) return distinct.empty() ? 1 : weight(distinct[0]);
    std::vector<uint32_t> parent(distinct.size());
    for (uint32_t k = 0; k < parent.size(); ++k) parent[k] = k;
    auto find = [&](uint32_t k) {
      while (parent[k] != k) k = parent[k] = parent[parent[k]];
      return k;
    };
    const uint32_t id = stamp_next++;
    const uint64_t v_bytes = bytes[v];
    const bool expensive = role[v] == Role::kExpensive;
    for (uint32_t k = 0; k < distinct.size(); ++k) {
      std::vector<std::pair<uint32_t, int>> queue{{distinct[k], 0}};
      for (size_t q = 0; q < queue.size(); ++q) {
        const auto [x, hops] = queue[q];
        ++work;
        if (stamp[x] == id) {
          // Met in a fusion (not in a tuple or a loop that merely holds both).
          if (fuses(role[x]) || role[x] == Role::kReduce || role[x] == Role::kGemm)
            parent[find(owner[x])] = find(k);
          continue;
        }
        stamp[x] = id;
        owner[x] = k;
        // A reduction and what it feeds - a norm's mean divided by its width, written or not - are
        // inside the diamond: the walk goes on through them.
        const bool reduced = bytes[x] * kStatisticsRatio <= v_bytes;
        bool passable = role[x] == Role::kReduce || (fuses(role[x]) && (!buffer(x) || reduced));
        // For an expensive value, whose count of fusions decides whether its compute is repeated, a
        // fused value several ops read joins its readers only if they are fused ops themselves, which
        // may still end in one fusion (a GELU derivative's terms, summed into one gradient); read by a
        // buffer - a GEMM, a value written for one - it is recomputed in separate fusions, no meeting
        // point (a GELU output read by the next layer's GEMM and by the backward pass does not join the
        // tanh's forward and backward readers).
        if (expensive && x != distinct[k] && !reduced && role[x] != Role::kReduce) {
          bool one_reader = true, fused_readers = true;
          for (uint32_t w : users[x]) {
            one_reader = one_reader && w == users[x][0];
            fused_readers = fused_readers && fuses(role[w]) && !buffer(w);
          }
          passable = passable && (one_reader || fused_readers);
        }
        if (!passable || hops >= kConeHops) continue;
        for (uint32_t w : users[x]) {
          if (queue.size() >= kConeNodes) break;
          queue.emplace_back(w, hops + 1);
        }
      }
    }
    std::vector<uint32_t> members(distinct.size(), 0);
    for (uint32_t k = 0; k < distinct.size(); ++k) ++members[find(k)];
    uint64_t total = 0;
    for (uint32_t k = 0; k < distinct.size(); ++k)
      if (find(k) == k) total += members[k] > 1 ? 1 : weight(distinct[k]);
    return std::min<uint64_t>(total, kMaxFusions);
  };
  // An expensive op's compute, as bytes of memory time (0 for a cheap one).
  auto compute_of = [&](uint32_t v) {
    if (role[v] != Role::kExpensive) return 0.0;
    const HloInstruction& x = comp.instructions[v];
    return static_cast<double>(elements(x.shape)) * flops_per_element(x.opcode, x.shape.type) * kBytesPerFlop;
  };
  auto combined = [](double compute, double memory) {
    return compute + memory - kMemoryComputeParallelism * std::min(compute, memory);
  };
  // Unfused: one launch more, the producer's kernel (compute C over its read R and write O), and each of
  // the nc consumer fusions reads O beside writing its own result (taken as O: an elementwise reader).
  // Fused: each consumer computes C itself over R and its own write. Without compute the profit is
  // O (nc + 1) - R (nc - 1) + launch: a memory-bound producer is fused unless its reads outweigh its
  // writes; a compute-bound one (a tanh takes 467 cycles an element) is written once it is large enough
  // that recomputing it costs more than a launch - the GELU of a 128 x 1024 MLP layer is recomputed by its
  // forward and backward readers (mlp_mean_grads_b128's compiled module), a transformer's is written.
  auto profit = [&](uint32_t v) {
    ++work;
    const double nc = static_cast<double>(fusions_of(v, 0, fusions_of));
    const double out = static_cast<double>(bytes[v]);
    const double kernel = combined(compute_of(v), static_cast<double>(read_of(v)) + out);
    return kLaunchOverheadBytes + 2 * nc * out - (nc - 1) * kernel;
  };
  std::vector<std::pair<double, uint32_t>> heap;
  for (uint32_t v = 0; v < n; ++v)
    if (candidate[v]) heap.emplace_back(profit(v), v);
  // Ties go to the earlier value, as a fixed order.
  auto less = [](const std::pair<double, uint32_t>& x, const std::pair<double, uint32_t>& y) {
    return x.first != y.first ? x.first < y.first : x.second > y.second;
  };
  std::make_heap(heap.begin(), heap.end(), less);
  std::vector<uint8_t> requeued(n, 0);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), less);
    const auto [old_profit, v] = heap.back();
    heap.pop_back();
    if (state[v] != kUndecided) continue;
    // Neighbours' decisions move a profit: take it again, and decide only when it still leads (each
    // value re-queued a bounded number of times: a decision can move many profits).
    const double now = profit(v);
    if (now != old_profit && !heap.empty() && less({now, v}, heap.front()) && requeued[v] < kMaxRequeues) {
      ++requeued[v];
      heap.emplace_back(now, v);
      std::push_heap(heap.begin(), heap.end(), less);
      continue;
    }
    state[v] = now >= 0 ? kFused : kWritten;
  }
  for (uint32_t v = 0; v < n; ++v)
    if (candidate[v]) written[v] = state[v] == kWritten;
}

}  // namespace memfit::xla_gpu_internal
