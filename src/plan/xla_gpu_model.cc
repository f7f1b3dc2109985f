#include "memfit/plan/xla_gpu_model.h"

#include "memfit/core/checked.h"
#include "memfit/core/name_map.h"

#include <fmt/format.h>

#include "memfit/core/text.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "xla_gpu_model_internal.h"

namespace memfit {
namespace xla_gpu_internal {

Role role_of(HloOpcode op) {
  switch (op) {
    // Cheap elementwise and data movement (fused, duplicated).
    case HloOpcode::kAdd:
    case HloOpcode::kSubtract:
    case HloOpcode::kMultiply:
    case HloOpcode::kMaximum:
    case HloOpcode::kMinimum:
    case HloOpcode::kNegate:
    case HloOpcode::kAbs:
    case HloOpcode::kCompare:
    case HloOpcode::kSelect:
    case HloOpcode::kClamp:
    case HloOpcode::kConvert:
    case HloOpcode::kAnd:
    case HloOpcode::kOr:
    case HloOpcode::kXor:
    case HloOpcode::kNot:
    case HloOpcode::kSign:
    case HloOpcode::kFloor:
    case HloOpcode::kCeil:
    case HloOpcode::kRoundNearestAfz:
    case HloOpcode::kRoundNearestEven:
    case HloOpcode::kShiftLeft:
    case HloOpcode::kShiftRightArithmetic:
    case HloOpcode::kShiftRightLogical:
    case HloOpcode::kIsFinite:
    case HloOpcode::kReal:
    case HloOpcode::kImag:
    case HloOpcode::kComplex:
    case HloOpcode::kCountLeadingZeros:
    case HloOpcode::kBitcastConvert:
    case HloOpcode::kReducePrecision:
    case HloOpcode::kBroadcast:
    case HloOpcode::kReshape:
    case HloOpcode::kTranspose:
    case HloOpcode::kSlice:
    case HloOpcode::kDynamicSlice:
    case HloOpcode::kPad:
    case HloOpcode::kConcatenate:
    case HloOpcode::kIota:
    case HloOpcode::kReverse:
    case HloOpcode::kGather:
    case HloOpcode::kCopy:
    case HloOpcode::kPopcnt:
    case HloOpcode::kStochasticConvert:
    case HloOpcode::kPartitionId:
    case HloOpcode::kReplicaId:
      return Role::kCheap;
    // Expensive elementwise (xla/hlo/ir/hlo_instruction.cc, IsExpensive).
    case HloOpcode::kExponential:
    case HloOpcode::kExponentialMinusOne:
    case HloOpcode::kLog:
    case HloOpcode::kLogPlusOne:
    case HloOpcode::kLogistic:
    case HloOpcode::kTanh:
    case HloOpcode::kSqrt:
    case HloOpcode::kRsqrt:
    case HloOpcode::kCbrt:
    case HloOpcode::kPower:
    case HloOpcode::kDivide:
    case HloOpcode::kRemainder:
    case HloOpcode::kSine:
    case HloOpcode::kCosine:
    case HloOpcode::kTan:
    case HloOpcode::kAtan2:
    case HloOpcode::kErf:
      return Role::kExpensive;
    // Library calls.
    case HloOpcode::kDot:
    case HloOpcode::kConvolution:
      return Role::kGemm;
    // A reduction fuses the elementwise ops that produce its input (an input fusion,
    // xla/service/gpu/transforms/priority_fusion.cc): its operands need no buffers of their own.
    case HloOpcode::kReduce:
    case HloOpcode::kReduceWindow:
      return Role::kReduce;
    // Fusion roots and ops that always write their own buffer.
    case HloOpcode::kSelectAndScatter:
    case HloOpcode::kScatter:
    case HloOpcode::kDynamicUpdateSlice:
    case HloOpcode::kSort:
    case HloOpcode::kCustomCall:
    case HloOpcode::kRng:
    case HloOpcode::kRngBitGenerator:
    case HloOpcode::kRngGetAndUpdateState:
    case HloOpcode::kAllReduce:
    case HloOpcode::kAllGather:
    case HloOpcode::kReduceScatter:
    case HloOpcode::kAllToAll:
    case HloOpcode::kCollectivePermute:
    case HloOpcode::kCholesky:
    case HloOpcode::kTriangularSolve:
    case HloOpcode::kFft:
    case HloOpcode::kBatchNormTraining:
    case HloOpcode::kBatchNormInference:
    case HloOpcode::kBatchNormGrad:
    case HloOpcode::kInfeed:
    case HloOpcode::kOutfeed:
    case HloOpcode::kSend:
    case HloOpcode::kRecv:
    case HloOpcode::kMap:
    case HloOpcode::kTopK:
      return Role::kRoot;
    // No buffer of their own.
    case HloOpcode::kAfterAll:
    case HloOpcode::kTuple:
    case HloOpcode::kGetTupleElement:
    case HloOpcode::kBitcast:
    case HloOpcode::kOptimizationBarrier:
    case HloOpcode::kAddDependency:
    case HloOpcode::kDomain:
      return Role::kForward;
    // Control flow.
    case HloOpcode::kWhile:
    case HloOpcode::kCall:
    case HloOpcode::kConditional:
    case HloOpcode::kAsyncStart:
    case HloOpcode::kAsyncDone:
      return Role::kControl;
    case HloOpcode::kParameter:
      return Role::kParameter;
    case HloOpcode::kConstant:
      return Role::kConstant;
    default:
      return Role::kRoot;  // unknown: its own buffer, the safe side
  }
}

}  // namespace xla_gpu_internal

namespace {

using xla_gpu_internal::fuses;
using xla_gpu_internal::kSplitKReduce;
using xla_gpu_internal::prioritize_shared_values;
using xla_gpu_internal::Role;
using xla_gpu_internal::role_of;

// Consumers that take their operands as buffers, never fusing them in.
bool needs_buffers(Role r) { return r == Role::kForward || r == Role::kControl || r == Role::kRoot; }

uint64_t elements(const Shape& s) {
  uint64_t n = 1;
  for (uint64_t d : s.dims) n *= d;  // shapes were checked when parsed
  return n;
}

// What algebraic simplification and dead code elimination leave after inlining: get-tuple-element of a
// tuple built in the same computation reads the element itself (a jvp'd helper returns (value, residual)
// tuples), and values nothing reads are gone (xla/hlo/transforms/simplifiers/tuple_simplifier.cc,
// hlo_dce.cc). Side-effecting and control instructions stay.
void simplify_tuples_and_dce(HloComputation& comp) {
  const size_t n = comp.instructions.size();
  NameIndex index;
  index.reserve(n);
  for (uint32_t i = 0; i < n; ++i) index.emplace(comp.instructions[i].name, i);
  // A get-tuple-element of a tuple -> the element's name (itself resolved); the map keeps the names, as
  // the instructions they came from are rewritten.
  std::unordered_map<std::string, std::string> replaced;
  auto resolve = [&](std::string& name) {
    for (int hops = 0; hops < 64; ++hops) {
      auto r = replaced.find(name);
      if (r == replaced.end()) break;
      name = r->second;
    }
  };
  for (uint32_t i = 0; i < n; ++i) {
    HloInstruction& x = comp.instructions[i];
    if (!replaced.empty())
      for (std::string& o : x.operands) resolve(o);
    if (x.opcode != HloOpcode::kGetTupleElement || x.operands.size() != 1 || x.tuple_index < 0) continue;
    auto t = index.find(x.operands[0]);
    if (t == index.end()) continue;
    const HloInstruction& tuple = comp.instructions[t->second];
    if (tuple.opcode != HloOpcode::kTuple || static_cast<size_t>(x.tuple_index) >= tuple.operands.size())
      continue;
    if (x.is_root) continue;  // the root keeps its name
    std::string element = tuple.operands[static_cast<size_t>(x.tuple_index)];
    resolve(element);
    replaced[x.name] = std::move(element);
  }
  // Dead code: in reverse order, drop what nothing reads.
  NameMap<uint32_t> uses;
  uses.reserve(n);
  for (const HloInstruction& x : comp.instructions) {
    for (const std::string& o : x.operands) ++uses[o];
  }
  std::vector<bool> dead(n, false);
  for (size_t k = n; k-- > 0;) {
    const HloInstruction& x = comp.instructions[k];
    const Role r = role_of(x.opcode);
    const bool removable =
        r == Role::kCheap || r == Role::kExpensive || r == Role::kGemm || r == Role::kConstant ||
        (r == Role::kForward && x.opcode != HloOpcode::kAfterAll) || x.opcode == HloOpcode::kReduce;
    if (x.is_root || !removable || uses[x.name] > 0) continue;
    dead[k] = true;
    for (const std::string& o : x.operands) --uses[o];
  }
  if (std::find(dead.begin(), dead.end(), true) == dead.end()) return;
  // Compacted in place: a second vector of the program's instructions would be faulted in page by page.
  size_t kept = 0;
  for (uint32_t i = 0; i < n; ++i) {
    if (dead[i]) continue;
    if (kept != i) comp.instructions[kept] = std::move(comp.instructions[i]);
    ++kept;
  }
  comp.instructions.erase(comp.instructions.begin() + static_cast<std::ptrdiff_t>(kept),
                          comp.instructions.end());
}

// Each computation's root opcode: the combiner of the reductions and scatters that call it.
using Combiners = std::unordered_map<std::string, HloOpcode>;

// What a reduce or scatter combines with: its one-op region (StableHLO), else its called computation's root.
HloOpcode combiner_of(const HloInstruction& x, const Combiners& combiners) {
  if (x.reducer != HloOpcode::kUnknown) return x.reducer;
  if (x.called.empty()) return HloOpcode::kUnknown;
  auto it = combiners.find(x.called[0]);
  return it == combiners.end() ? HloOpcode::kUnknown : it->second;
}

// XLA's algebraic simplifier folds add(A, scatter-add(zeros, indices, updates)) into scatter-add(A, indices,
// updates) (xla/hlo/transforms/simplifiers/algebraic_simplifier.cc, HandleAdd: "A + scatter(0, ...)"): the
// scatter adds into A where A lies. JAX's gradient of a gather (an embedding lookup) is such a scatter into
// zeros, added to the tied weight's other gradient: folded, that GEMM's result is the scatter's operand, not
// an epilogue waiting for the scatter at the end of the backward pass with the logits' gradient held.
void fold_add_of_scatter(HloComputation& comp, const Combiners& combiners) {
  auto& insts = comp.instructions;
  if (std::none_of(insts.begin(), insts.end(),
                   [](const HloInstruction& x) { return x.opcode == HloOpcode::kScatter; }))
    return;
  const size_t n = insts.size();
  // Only the scatters, the two instructions behind each and their readers matter: small tables over the
  // few names involved, each probed once per operand of the program, instead of an index of every name
  // (a 300-layer step has one scatter among 2 x 10^5 instructions).
  NameIndex scatters;  // views of the names: nothing is rewritten until every fold is found
  // The operand chain scatter -> zeros -> scalar, resolved in two passes (the zeros first, then its operand).
  std::vector<std::string_view> wanted;
  for (uint32_t i = 0; i < n; ++i) {
    if (insts[i].opcode != HloOpcode::kScatter) continue;
    scatters.emplace(insts[i].name, i);
    if (!insts[i].operands.empty()) wanted.emplace_back(insts[i].operands[0]);
  }
  NameIndex behind;
  auto resolve = [&](const std::vector<std::string_view>& names) {
    for (std::string_view name : names) behind.emplace(name, UINT32_MAX);
    for (uint32_t i = 0; i < n; ++i)
      if (auto* e = behind.find(insts[i].name); e != nullptr && e->second == UINT32_MAX) e->second = i;
  };
  resolve(wanted);
  wanted.clear();
  for (uint32_t i = 0; i < n; ++i) {
    if (insts[i].opcode != HloOpcode::kScatter || insts[i].operands.empty()) continue;
    const auto* z = behind.find(insts[i].operands[0]);
    if (z != nullptr && z->second != UINT32_MAX && !insts[z->second].operands.empty())
      wanted.emplace_back(insts[z->second].operands[0]);
  }
  resolve(wanted);
  std::vector<uint32_t> uses(n, 0);  // readers of each scatter
  for (const HloInstruction& x : insts)
    for (const std::string& o : x.operands)
      if (const auto* it = scatters.find(o); it != nullptr) ++uses[it->second];
  auto find = [&](std::string_view name) -> uint32_t {
    if (const auto* it = scatters.find(name); it != nullptr) return it->second;
    const auto* it = behind.find(name);
    return it == nullptr ? UINT32_MAX : it->second;
  };
  auto scatter_into_zeros = [&](uint32_t i) {
    if (i == UINT32_MAX) return false;
    const HloInstruction& s = insts[i];
    if (s.opcode != HloOpcode::kScatter || s.operands.size() != 3 || uses[i] != 1 || s.is_root ||
        combiner_of(s, combiners) != HloOpcode::kAdd)
      return false;
    const uint32_t zeros = find(s.operands[0]);
    if (zeros == UINT32_MAX || insts[zeros].opcode != HloOpcode::kBroadcast ||
        insts[zeros].operands.size() != 1)
      return false;
    const uint32_t scalar = find(insts[zeros].operands[0]);
    return scalar != UINT32_MAX && insts[scalar].opcode == HloOpcode::kConstant &&
           !insts[scalar].shape.is_tuple() && insts[scalar].shape.dims.empty();
  };
  // (add, scatter, the add's other operand): every fold is found on the program as written, then rewritten.
  // A folded add becomes a scatter into its other operand; only if that operand were zeros could it feed a
  // second fold, an add of zeros JAX does not emit, so finding the folds first loses none.
  struct Fold {
    uint32_t add, scatter;
    size_t other;
  };
  std::vector<Fold> folds;
  std::vector<bool> folded(n, false);
  for (uint32_t a = 0; a < n; ++a) {
    const HloInstruction& add = insts[a];
    if (add.opcode != HloOpcode::kAdd || add.operands.size() != 2) continue;
    for (size_t k = 0; k < 2; ++k) {
      const uint32_t s = find(add.operands[k]);
      // The scatter is read once (scatter_into_zeros), so by this add alone.
      if (!scatter_into_zeros(s) || insts[s].shape.type != add.shape.type ||
          insts[s].shape.dims != add.shape.dims)
        continue;
      folds.push_back({a, s, 1 - k});
      folded[s] = true;
      break;
    }
  }
  if (folds.empty()) return;
  for (const Fold& f : folds) {
    HloInstruction& add = insts[f.add];
    HloInstruction scatter = insts[f.scatter];
    scatter.name = add.name;
    scatter.operands[0] = add.operands[f.other];
    scatter.is_root = add.is_root;
    scatter.line = add.line;
    add = std::move(scatter);
  }
  size_t kept = 0;  // compacted in place, as simplify_tuples_and_dce does
  for (uint32_t i = 0; i < n; ++i) {
    if (folded[i]) continue;
    if (kept != i) insts[kept] = std::move(insts[i]);
    ++kept;
  }
  insts.erase(insts.begin() + static_cast<std::ptrdiff_t>(kept), insts.end());
}

// XLA's algebraic simplifier (algebraic_simplifier.cc, HandleTranspose): a transpose of a transpose is one
// transpose of the first one's operand, with the permutations composed, and a transpose that permutes
// nothing is its operand. JAX's StableHLO writes the tied embedding's gradient as a GEMM, its transpose and
// that transposed back (gpt_fp32_donate_scan: 125 MB each); the HLO text of the same program has neither.
// A transpose left with nothing to do becomes a bitcast (no buffer); the one it read is removed later if
// nothing else reads it.
void fold_transposes(HloComputation& comp) {
  auto& insts = comp.instructions;
  auto is_transpose = [](const HloInstruction& x) {
    return x.opcode == HloOpcode::kTranspose && x.operands.size() == 1 && !x.shape.is_tuple() &&
           x.dimensions.size() == x.shape.dims.size();
  };
  if (std::count_if(insts.begin(), insts.end(), is_transpose) < 2) return;
  NameIndex transposes;  // views of the names, none of which change
  for (uint32_t i = 0; i < insts.size(); ++i)
    if (is_transpose(insts[i])) transposes.emplace(insts[i].name, i);
  for (uint32_t i = 0; i < insts.size(); ++i) {  // in program order: a chain folds link by link
    HloInstruction& t = insts[i];
    if (!is_transpose(t)) continue;
    const auto inner = transposes.find(t.operands[0]);
    if (inner == transposes.end() || inner->second == i) continue;
    const HloInstruction& first = insts[inner->second];
    if (!is_transpose(first) || first.dimensions.size() != t.dimensions.size()) continue;
    std::vector<int64_t> composed(t.dimensions.size());
    bool identity = true, valid = true;
    for (size_t d = 0; d < composed.size(); ++d) {
      const int64_t k = t.dimensions[d];
      if (k < 0 || static_cast<size_t>(k) >= first.dimensions.size()) {
        valid = false;
        break;
      }
      composed[d] = first.dimensions[static_cast<size_t>(k)];
      identity = identity && composed[d] == static_cast<int64_t>(d);
    }
    if (!valid) continue;
    t.operands[0] = first.operands[0];
    if (identity) {
      t.opcode = HloOpcode::kBitcast;
      t.opcode_text.clear();
      t.dimensions.clear();
    } else {
      t.dimensions = std::move(composed);
    }
  }
}

// Split-K. A GEMM whose output tiles cannot fill the GPU (a small batch: 128 rows x 1024 columns is 8 tiles
// of 128x128 for 132 SMs) is split along its contraction: XLA's Triton GEMM fusion then writes one f32
// partial result per split, [split, ...], and the sum over the splits is fused into each consumer
// (xla/service/gpu/split_k_gemm_rewriter.cc; consumers of the partials in the compiled mlp_mean_grads_b128
// reduce them again, so a value saved for the backward pass is saved as its partials). Which split the
// autotuner picks is measured on the GPU (gemm_fusion_autotuner.cc: split-K is tried while the tiles make
// fewer than kMaxWavesForSplitK = 5 waves, up to split 16); approximated here by what the H200 picked in
// every split GEMM of the captured programs (GPT, ViT, encoder and MLP weight gradients, small-batch MLP
// layers): the power of two nearest SMs / tiles (128x128 tiles, 132 SMs: H100 and H200), at most 16, and at
// least 128 of the contraction per split (what bounds the small-batch MLP's layers, 512 -> 4 and 1024 -> 8,
// and ViT's 64x1000 head, 768 -> 4, below the SM count's wish). Two of the split shapes seen differ, both
// transient: ViT's 768x2304 weight gradient (108 tiles: XLA split 2, this 1) and its 64x768 head gradient
// (XLA 8, this 4).
constexpr uint64_t kGemmCores = 132;
constexpr uint64_t kGemmTileElements = 128 * 128;
constexpr uint64_t kMaxSplitK = 16;
constexpr uint64_t kMinContractionPerSplit = 128;

uint64_t split_k_of(const HloInstruction& dot, const Shape& lhs, const Shape& rhs) {
  if (dot.shape.is_tuple() || lhs.is_tuple() || rhs.is_tuple()) return 1;
  const uint64_t out = elements(dot.shape);
  uint64_t batch = 1;
  for (int64_t d : dot.lhs_batch_dims) {
    if (d < 0 || static_cast<size_t>(d) >= lhs.dims.size()) return 1;
    batch *= lhs.dims[static_cast<size_t>(d)];
  }
  if (out == 0 || batch == 0) return 1;
  // lhs x rhs elements = batch^2 M N K^2 and out = batch M N: the contraction K without parsing its dims.
  const double k2 = static_cast<double>(elements(lhs)) * static_cast<double>(elements(rhs)) /
                    (static_cast<double>(out) * static_cast<double>(batch));
  const auto contraction = static_cast<uint64_t>(std::llround(std::sqrt(k2)));
  const uint64_t tiles = (out + kGemmTileElements - 1) / kGemmTileElements;
  const double want = static_cast<double>(kGemmCores) / static_cast<double>(tiles);
  uint64_t split = 1;
  while (split < kMaxSplitK && static_cast<double>(split * 2) <= want * std::sqrt(2.0) &&
         contraction / (split * 2) >= kMinContractionPerSplit)
    split *= 2;
  return split;
}

// Each split GEMM becomes its partials (a dot named "<dot>.split_k") and the sum over them, which keeps the
// dot's name and shape and is fused like a cheap op.
void split_k_gemms(HloComputation& comp) {
  std::vector<uint64_t> split(comp.instructions.size(), 1);
  {
    NameMap<const Shape*> shapes;
    shapes.reserve(comp.instructions.size());
    for (const HloInstruction& x : comp.instructions) shapes.emplace(x.name, &x.shape);
    for (size_t i = 0; i < comp.instructions.size(); ++i) {
      const HloInstruction& x = comp.instructions[i];
      if (x.opcode != HloOpcode::kDot || x.operands.size() != 2) continue;
      auto l = shapes.find(x.operands[0]);
      auto r = shapes.find(x.operands[1]);
      if (l != shapes.end() && r != shapes.end()) split[i] = split_k_of(x, *l->second, *r->second);
    }
  }
  const auto splits =
      static_cast<size_t>(std::count_if(split.begin(), split.end(), [](uint64_t s) { return s != 1; }));
  if (splits == 0) return;
  // Widened in place from the back (each split GEMM becomes two instructions), as simplify_tuples_and_dce
  // compacts: a second vector of the program would be faulted in page by page.
  std::vector<HloInstruction>& insts = comp.instructions;
  const size_t n = insts.size();
  insts.resize(n + splits);
  size_t w = n + splits;  // insts[w..] is written; w > i until the first split is written
  for (size_t i = n; i-- > 0;) {
    HloInstruction& x = insts[i];
    if (split[i] == 1) {
      if (--w != i) insts[w] = std::move(x);
      continue;
    }
    HloInstruction partials = x;
    partials.name = x.name + ".split_k";
    partials.is_root = false;
    partials.shape.type = PrimitiveType::kF32;
    partials.shape.dims.insert(partials.shape.dims.begin(), split[i]);
    partials.shape.minor_to_major.clear();
    HloInstruction sum = std::move(x);
    sum.opcode = HloOpcode::kReduce;
    sum.opcode_text.clear();
    sum.operands = {partials.name};
    sum.called.clear();
    sum.dimensions = {0};
    sum.reducer = HloOpcode::kAdd;
    sum.lhs_batch_dims.clear();
    sum.custom_call_target = std::string(kSplitKReduce);
    insts[--w] = std::move(sum);
    insts[--w] = std::move(partials);
  }
}

// What a fusion into a GEMM may add to the bytes moved (kIoToleranceBytes, triton_tiling_propagation.cc):
// IsInputWorthFusing lets a producer read this much more than it writes, IsOutputWorthFusing an epilogue
// write this much more than it reads.
constexpr uint64_t kIoToleranceBytes = 1024;

// `combiners`: each computation's root opcode, for the reductions that name their combiner by computation.
Status model_computation(HloComputation& comp, const Combiners& combiners) {
  simplify_tuples_and_dce(comp);
  split_k_gemms(comp);
  const size_t n = comp.instructions.size();
  NameIndex index;
  index.reserve(n);
  for (uint32_t i = 0; i < n; ++i) index.emplace(comp.instructions[i].name, i);
  std::vector<Role> role(n);
  std::vector<std::vector<uint32_t>> operands(n), users(n);
  for (uint32_t i = 0; i < n; ++i) {
    const HloInstruction& inst = comp.instructions[i];
    role[i] = role_of(inst.opcode);
    // The sum over a split GEMM's partials is fused into each consumer, duplicated like a cheap op.
    if (inst.opcode == HloOpcode::kReduce && inst.custom_call_target == kSplitKReduce) role[i] = Role::kCheap;
    for (const std::string& o : inst.operands) {
      auto it = index.find(o);
      if (it == index.end())
        return invalid_argument(fmt::format(
            "line {}: operand '{}' of '{}' is not defined in this computation", inst.line, o, inst.name));
      operands[i].push_back(it->second);
      users[it->second].push_back(i);
    }
  }
  // Whether `found` holds somewhere along the chain from `x` up through single-operand ops of the opcodes
  // `through` (at most `hops` of them).
  auto along_chain = [&](uint32_t x, int hops, std::initializer_list<HloOpcode> through, auto&& found) {
    for (int hop = 0; hop <= hops; ++hop) {
      if (found(x)) return true;
      const HloOpcode op = comp.instructions[x].opcode;
      if (operands[x].size() != 1 || std::find(through.begin(), through.end(), op) == through.end())
        return false;
      x = operands[x][0];
    }
    return false;
  };
  // XLA's algebraic simplifier turns a floating-point division by a constant (or a broadcast of one) into a
  // multiplication by its inverse ("A / Const => A * (1 / Const)", AlgebraicSimplifierVisitor::HandleDivide
  // in xla/hlo/transforms/simplifiers/algebraic_simplifier.cc): cheap, fused into every reader like any
  // multiply (a mean's division by the batch size is recomputed by each reader, not written once).
  for (uint32_t i = 0; i < n; ++i) {
    const HloInstruction& x = comp.instructions[i];
    if (x.opcode != HloOpcode::kDivide || operands[i].size() != 2 || !is_floating_point(x.shape.type))
      continue;
    const auto constant = [&](uint32_t y) { return comp.instructions[y].opcode == HloOpcode::kConstant; };
    if (!constant(operands[i][0]) &&
        along_chain(operands[i][1], 4, {HloOpcode::kBroadcast, HloOpcode::kReshape, HloOpcode::kConvert},
                    constant))
      role[i] = Role::kCheap;
  }
  // Whether `v` feeds only reductions and elementwise ops that also read one of those reductions (through
  // broadcasts and reshapes): the diamond of a softmax or a norm.
  auto reduced_from = [&](uint32_t x, const std::unordered_set<uint32_t>& reductions) {
    return along_chain(x, 5,
                       {HloOpcode::kBroadcast, HloOpcode::kReshape, HloOpcode::kConvert, HloOpcode::kBitcast,
                        HloOpcode::kTranspose},
                       [&](uint32_t y) { return reductions.contains(y); });
  };
  auto normalization_diamond = [&](uint32_t v) {
    std::unordered_set<uint32_t> reductions;
    for (uint32_t u : users[v]) {
      if (comp.instructions[u].opcode == HloOpcode::kReduce) reductions.insert(u);
    }
    if (reductions.empty()) return false;
    for (uint32_t u : users[v]) {
      if (reductions.contains(u)) continue;
      if (!fuses(role[u])) return false;
      bool reads_reduction = false;
      for (uint32_t o : operands[u])
        reads_reduction = reads_reduction || (o != v && reduced_from(o, reductions));
      if (!reads_reduction) return false;
    }
    return true;
  };
  // The bytes a fusion recomputing `v` reads, as XLA's performance model counts them: through cheap
  // elementwise and data-movement ops (a broadcast counts its operand, not its result), a slice reading only
  // its result's bytes, and a split GEMM's sum its result's (the GEMM's epilogue could write it in place of
  // the partials).
  auto read_bytes = [&](uint32_t v, auto&& self, int depth) -> uint64_t {
    uint64_t sum = 0;
    for (uint32_t o : operands[v]) {
      const HloInstruction& x = comp.instructions[o];
      const bool sliced = x.opcode == HloOpcode::kSlice || x.opcode == HloOpcode::kDynamicSlice;
      if (role[o] == Role::kCheap && depth < 8 && !operands[o].empty() && !sliced &&
          x.custom_call_target != kSplitKReduce) {
        sum += self(o, self, depth + 1);
      } else {
        sum += x.shape.own_bytes();
      }
    }
    return sum;
  };
  // Which values get a buffer. A large constant is a buffer; a scalar one is folded into its users.
  std::vector<bool> materialized(n, false);
  const HloInstruction* root = comp.root();
  for (uint32_t i = 0; i < n; ++i) {
    const HloInstruction& inst = comp.instructions[i];
    switch (role[i]) {
      case Role::kParameter:
      case Role::kGemm:
      case Role::kRoot:
      case Role::kReduce:
      case Role::kControl:
      case Role::kForward:
        materialized[i] = true;
        break;
      case Role::kConstant:
      case Role::kCheap:
      case Role::kExpensive: {
        std::unordered_set<uint32_t> distinct(users[i].begin(), users[i].end());
        bool needed = &inst == root;
        for (uint32_t u : distinct) needed = needed || needs_buffers(role[u]);
        if (role[i] == Role::kConstant) needed = needed || inst.shape.is_tuple() || elements(inst.shape) > 1;
        // An expensive value read by several fusions is computed once, into a buffer - unless its readers are
        // a reduction and what divides or shifts by that reduction: a softmax (exp, its sum, the division)
        // or a norm is one fusion in XLA:GPU (SoftmaxRewriterTriton), and the exp never reaches memory.
        // XLA's priority fusion weighs memory traffic (gpu_performance_model): an expensive op computed
        // from narrower buffers than its result - exp over bf16 scores widened to f32 - is recomputed in
        // each consumer rather than written out wide.
        if (role[i] == Role::kExpensive && distinct.size() > 1 && !normalization_diamond(i) &&
            read_bytes(i, read_bytes, 0) >= inst.shape.own_bytes())
          needed = true;
        // (A cheap value several fusions read is decided below, by priority fusion.)
        materialized[i] = needed;
        break;
      }
    }
  }
  {
    // The cheap values several fusions read and no reader needs written (a tuple, a loop: materialized by
    // now). A split GEMM's sum is recomputed by each reader, as XLA's compiled programs do.
    std::vector<bool> candidate(n, false);
    for (uint32_t v = 0; v < n; ++v) {
      const HloInstruction& inst = comp.instructions[v];
      if (role[v] != Role::kCheap || materialized[v] || inst.opcode == HloOpcode::kSlice ||
          inst.opcode == HloOpcode::kDynamicSlice || inst.custom_call_target == kSplitKReduce)
        continue;
      const bool several =
          std::any_of(users[v].begin(), users[v].end(), [&](uint32_t u) { return u != users[v][0]; });
      candidate[v] = several && !normalization_diamond(v);
    }
    prioritize_shared_values({comp, role, operands, users}, candidate, materialized);
  }
  // A norm or softmax is one Triton fusion (SoftmaxRewriterTriton), and what it takes into itself must be
  // something Triton's block-level emitter supports (xla/service/gpu/fusions/triton/triton_support.cc): a
  // concatenate is not, and priority fusion fuses a producer into all of its readers or none
  // (priority_fusion.cc, CanFuseWithAllNonBitcastUsers). So a norm's input built by a concatenate - ViT's
  // class token joined to the patch embeddings - is written once, by a fusion of its own (the compiled
  // ViT's input_concatenate_fusion, live through the first block), not recomputed in the norm and every
  // other reader. A norm's input is told by its diamond: it is reduced, and read by an elementwise op
  // beside the reduction (x - mean(x), x - max(x)).
  for (uint32_t r = 0; r < n; ++r) {
    if (role[r] != Role::kReduce || operands[r].empty() || materialized[operands[r][0]]) continue;
    const uint32_t v = operands[r][0];
    const bool diamond = std::any_of(users[v].begin(), users[v].end(), [&](uint32_t u) {
      const HloOpcode op = comp.instructions[u].opcode;
      return u != r && fuses(role[u]) && operands[u].size() >= 2 && op != HloOpcode::kConcatenate &&
             op != HloOpcode::kPad && op != HloOpcode::kDynamicSlice;
    });
    if (!diamond) continue;
    std::vector<uint32_t> stack{v};
    std::unordered_set<uint32_t> seen{v};
    while (!stack.empty()) {
      const uint32_t x = stack.back();
      stack.pop_back();
      if (comp.instructions[x].opcode == HloOpcode::kConcatenate) {
        materialized[x] = true;
        continue;
      }
      for (uint32_t o : operands[x])
        if (!materialized[o] && fuses(role[o]) && seen.insert(o).second) stack.push_back(o);
    }
  }
  // A sum over a dot's batch dimensions (through transposes) is a dot that contracts them: XLA's algebraic
  // simplifier folds reduce(dot) into the dot (xla/hlo/transforms/simplifiers/algebraic_simplifier.cc,
  // "reduce of a batch dot"). Per-example gradients by vmap summed into one gradient never exist whole;
  // the reduction reads the dot's operands and is the GEMM.
  std::vector<bool> folded_dot(n, false);
  // A folded dot whose sum came through transposes: XLA writes the contracted dot, then the transpose as a
  // copy (a layout change) - two buffers of the summed size. reduce index -> the folded dot.
  std::unordered_map<uint32_t, uint32_t> transposed_fold;
  for (uint32_t r = 0; r < n; ++r) {
    const HloInstruction& red = comp.instructions[r];
    if (role[r] != Role::kReduce || red.opcode != HloOpcode::kReduce || operands[r].empty() ||
        red.dimensions.empty())
      continue;
    if (combiner_of(red, combiners) != HloOpcode::kAdd) continue;
    std::vector<int64_t> dims = red.dimensions;  // in the space of `x` as the walk goes back
    uint32_t x = operands[r][0];
    std::vector<uint32_t> chain;
    bool ok = true;
    while (ok && comp.instructions[x].opcode == HloOpcode::kTranspose && users[x].size() == 1) {
      const std::vector<int64_t>& perm = comp.instructions[x].dimensions;
      for (int64_t& d : dims) {
        if (d < 0 || static_cast<size_t>(d) >= perm.size())
          ok = false;
        else
          d = perm[static_cast<size_t>(d)];
      }
      chain.push_back(x);
      if (operands[x].empty())
        ok = false;
      else
        x = operands[x][0];
    }
    const HloInstruction& dot = comp.instructions[x];
    if (!ok || dot.opcode != HloOpcode::kDot || users[x].size() != 1 || dot.lhs_batch_dims.empty()) continue;
    const auto batch = static_cast<int64_t>(dot.lhs_batch_dims.size());  // a dot's result starts with them
    if (!std::all_of(dims.begin(), dims.end(), [&](int64_t d) { return d < batch; })) continue;
    materialized[x] = false;
    folded_dot[x] = true;
    for (uint32_t t : chain) materialized[t] = false;
    if (!chain.empty()) transposed_fold.emplace(r, x);
  }
  // What else an epilogue may read (triton_tiling_propagation.cc, the output side of
  // GetPropagatedDimOrdersAndRequirementsIfProfitablyFusible): an effective parameter - a parameter, or a
  // bitcast or tuple element of one (hlo_query::IsEffectiveParameter; in a loop body, the carried values) -
  // or a broadcast of one or of a scalar: a bias. (A tuple element's operand is a tuple, never a
  // broadcast's: one walk through all four finds both.) A residual add reads a computed value, so the GEMM
  // writes its own product and the add is fused into the add's readers (the compiled ViT's gemm_fusion_dot.2
  // is the attention's projection alone, and its residual sum is recomputed by the norm and the next sum).
  // The lowered program spells a broadcast as a chain of reshapes and broadcasts that XLA's simplifier
  // folds into one, so the walk looks through both.
  auto epilogue_input = [&](uint32_t x) {
    return along_chain(
        x, 15, {HloOpcode::kBroadcast, HloOpcode::kBitcast, HloOpcode::kReshape, HloOpcode::kGetTupleElement},
        [&](uint32_t y) {
          const Shape& shape = comp.instructions[y].shape;
          return role[y] == Role::kParameter || (!shape.is_tuple() && elements(shape) <= 1);
        });
  };
  // What a GEMM fusion takes into its operands (xla/service/gpu/transforms/gemm_fusion.cc): cheap
  // elementwise and data movement over buffers - a layer norm's scale and shift, a transpose, a widening
  // convert. A chain with an expensive op, or one that reads a reduction (a softmax's division by its sum, a
  // norm's rsqrt of the variance), is a fusion of its own (SoftmaxRewriterTriton, loop fusion) whose result
  // the GEMM reads from a buffer: attention probabilities are materialized. The walk up a chain also stops
  // at a producer not worth taking in (IsInputWorthFusing, IsConversionWorthFusing in
  // xla/service/gpu/triton_tiling_propagation.cc), which is then a buffer the fusion reads: never a
  // narrowing conversion (a weight's f32 -> bf16 cast in mixed precision, XLA's wrapped_convert); an op that
  // reads at most 1 KiB more than it writes; else only an op with one reader whose operands are parameters
  // or constants read by it alone.
  auto gemm_takes_in = [&](uint32_t p) {
    const HloInstruction& x = comp.instructions[p];
    uint64_t in_bytes = 0;
    for (uint32_t o : operands[p]) in_bytes += comp.instructions[o].shape.own_bytes();
    const uint64_t out_bytes = x.shape.own_bytes();
    if (x.opcode == HloOpcode::kConvert && in_bytes > out_bytes) return false;
    if (in_bytes <= out_bytes + kIoToleranceBytes) return true;
    // A binary elementwise op one of whose operands is a broadcast parameter - a norm's scale or shift - is
    // worth taking in whatever its bytes (the fusion level 2 exception in
    // GetPropagatedDimOrdersAndRequirementsIfProfitablyFusible).
    if (operands[p].size() == 2 && role[p] == Role::kCheap &&
        std::any_of(operands[p].begin(), operands[p].end(), [&](uint32_t o) {
          return comp.instructions[o].opcode == HloOpcode::kBroadcast && epilogue_input(o);
        }))
      return true;
    if (std::any_of(users[p].begin(), users[p].end(), [&](uint32_t u) { return u != users[p][0]; }))
      return false;
    for (uint32_t o : operands[p]) {
      const Role r = role[o];
      if ((r != Role::kParameter && r != Role::kConstant) || users[o].size() != 1) return false;
    }
    return true;
  };
  // A value a GEMM cannot take in is written for the GEMM by a fusion of its own, just before it - XLA's
  // SoftmaxRewriterTriton fusion writing a norm's normalized rows for the projection - while the value's
  // other readers still recompute it: the backward pass of the compiled ViT recomputes each norm from the
  // saved residual and its statistics rather than keep the normalized rows (the buffer dies with the GEMM).
  // A value only GEMMs read (through ops they take in) is one buffer they share, as a narrowing convert
  // is (XLA's wrapped_convert fusion, read by the forward and the backward GEMM).
  std::vector<bool> gemm_input(n, false);
  auto only_gemms_read = [&](uint32_t u, int depth, auto&& self) -> bool {
    if (role[u] == Role::kGemm || folded_dot[u]) return true;
    if (!fuses(role[u]) || materialized[u] || depth >= 8) return false;
    return std::all_of(users[u].begin(), users[u].end(),
                       [&](uint32_t w) { return self(w, depth + 1, self); });
  };
  auto write_for_gemm = [&](uint32_t o) {
    if (materialized[o]) return;
    if (fuses(role[o]) && comp.instructions[o].opcode != HloOpcode::kConvert &&
        !std::all_of(users[o].begin(), users[o].end(),
                     [&](uint32_t u) { return only_gemms_read(u, 0, only_gemms_read); }))
      gemm_input[o] = true;
    else
      materialized[o] = true;
  };
  auto stop_at_unworthy = [&](uint32_t o) {
    if (!materialized[o] && !gemm_input[o] && !gemm_takes_in(o)) write_for_gemm(o);
  };
  // A reshape that merges dimensions a transpose made non-adjacent in memory - attention's [b, s, h, d],
  // transposed from [b, h, s, d], read as [b * s, h * d] - is no strided tile: Triton's GEMM emitter cannot
  // take it in (triton_tiling_propagation.cc propagates dimension orders only where each fragment stays
  // contiguous), so the transposed value is written first (the compiled ViT's loop_transpose_fusion
  // before each attention projection).
  auto merges_transposed = [&](uint32_t r) {
    const HloInstruction& re = comp.instructions[r];
    if (re.opcode != HloOpcode::kReshape || operands[r].size() != 1) return false;
    const uint32_t ti = operands[r][0];
    const HloInstruction& t = comp.instructions[ti];
    if (t.opcode != HloOpcode::kTranspose || materialized[ti] || t.shape.is_tuple() || re.shape.is_tuple())
      return false;
    const std::vector<uint64_t>& in = t.shape.dims;
    const std::vector<uint64_t>& out = re.shape.dims;
    const std::vector<int64_t>& perm = t.dimensions;
    if (perm.size() != in.size()) return false;
    size_t i = 0, j = 0;
    while (i < in.size() && j < out.size()) {
      uint64_t pi = in[i], pj = out[j];
      std::vector<size_t> group{i};
      while (pi != pj) {
        if (pi < pj) {
          if (++i >= in.size() || in[i] == 0) return false;
          pi *= in[i];
          group.push_back(i);
        } else {
          if (++j >= out.size() || out[j] == 0) return false;
          pj *= out[j];
        }
      }
      int64_t last = -1;
      for (size_t g : group) {
        if (in[g] == 1) continue;
        if (last >= 0 && perm[g] != last + 1) return true;
        last = perm[g];
      }
      ++i;
      ++j;
    }
    return false;
  };
  std::vector<int8_t> gemm_fusible(n, -1);  // -1 unknown, 0 no, 1 yes
  // A prologue deeper than this is written: a hostile chain of fused ops would overflow the stack of the
  // walk (the prologues of the shared programs and the zoo's are at most 5 ops deep).
  constexpr int kMaxPrologueDepth = 256;
  auto fusible_into_gemm = [&](uint32_t v, int depth, auto&& self) -> bool {
    if (gemm_fusible[v] >= 0) return gemm_fusible[v] == 1;
    // A GEMM fusion takes in elementwise ops, not a sum over another GEMM's partials.
    bool ok = role[v] == Role::kCheap && comp.instructions[v].custom_call_target != kSplitKReduce &&
              !merges_transposed(v) && depth < kMaxPrologueDepth;
    for (uint32_t o : operands[v]) {
      if (!ok) break;
      stop_at_unworthy(o);
      if (materialized[o] || gemm_input[o]) {
        ok = role[o] != Role::kReduce;
      } else {
        ok = self(o, depth + 1, self);
      }
    }
    gemm_fusible[v] = ok ? 1 : 0;
    return ok;
  };
  for (uint32_t i = 0; i < n; ++i) {
    if (role[i] != Role::kGemm && !folded_dot[i]) continue;
    // A convolution is a cuDNN call (gpu/transforms/conv_rewriter.cc), not a Triton GEMM fusion: it reads
    // its operands from buffers, so whatever computes them is a fusion of its own.
    const bool cudnn = comp.instructions[i].opcode == HloOpcode::kConvolution;
    for (uint32_t o : operands[i]) {
      stop_at_unworthy(o);
      if (!materialized[o] && !gemm_input[o] && (cudnn || !fusible_into_gemm(o, 0, fusible_into_gemm)))
        write_for_gemm(o);
    }
  }
  // A GEMM's elementwise epilogue (bias add, activation, convert to bf16) is written by the GEMM itself.
  std::vector<bool> gemm_epilogue(n, false);
  for (uint32_t i = 0; i < n; ++i) {
    if (role[i] != Role::kGemm || folded_dot[i] || users[i].size() != 1 || &comp.instructions[i] == root)
      continue;
    const uint32_t u = users[i][0];
    // XLA's IsOutputWorthFusing (triton_tiling_propagation.cc): an op is taken as an epilogue if it reads
    // at least what it writes, within kIoToleranceBytes (1 KiB), or if no user could fuse it
    // (CanNotBeFusedIntoAUser: the program's result, or the root tuple's only reader). So a widening
    // convert (bf16 product -> f32) is the GEMM's only as the program's result - mixed-precision
    // inference's f32 logits (gemm_fusion_dot.32 of the captured gpt_mixed_infer_b16) - while in training
    // the loss's fusions recompute the f32 logits from the bf16 product.
    auto output_worth_fusing = [&](uint32_t to) {
      uint64_t in_bytes = 0;
      for (uint32_t o : operands[to])
        in_bytes = saturating_add(in_bytes, comp.instructions[o].shape.own_bytes());
      if (saturating_add(in_bytes, kIoToleranceBytes) >= comp.instructions[to].shape.own_bytes()) return true;
      const HloInstruction* only_user = users[to].size() == 1 ? &comp.instructions[users[to][0]] : nullptr;
      return &comp.instructions[to] == root || (only_user == root && only_user->opcode == HloOpcode::kTuple);
    };
    auto epilogue_of = [&](uint32_t from, uint32_t to) {
      if (!fuses(role[to]) || comp.instructions[to].shape.is_tuple() ||
          elements(comp.instructions[to].shape) != elements(comp.instructions[from].shape) ||
          !output_worth_fusing(to))
        return false;
      for (uint32_t o : operands[to])
        if (o != from && !epilogue_input(o)) return false;
      // Triton's GEMM emitter writes a batched product with its batch dimensions leading
      // (triton_tiling_propagation.cc: the batch dimension may not be split or moved): a transpose that
      // moves them - attention's [b, h, s, d] product to [b, s, h, d] - is a fusion of its own, a copy.
      const HloInstruction& t = comp.instructions[to];
      if (t.opcode == HloOpcode::kTranspose && comp.instructions[from].opcode == HloOpcode::kDot) {
        const size_t batch = comp.instructions[from].lhs_batch_dims.size();
        for (size_t d = 0; d < batch; ++d)
          if (d >= t.dimensions.size() || t.dimensions[d] != static_cast<int64_t>(d)) return false;
      }
      return true;
    };
    if (!epilogue_of(i, u)) continue;
    materialized[i] = false;
    uint32_t last = u;
    // cuDNN's conv-bias-activation call also takes a relu after the bias when the biased result has no
    // other reader (cudnn_fused_conv_rewriter.cc: FuseBiasOrSideInput, then FuseRelu's WithOneUse, which
    // matches max(x, broadcast(constant)) - the constant's value is not read here). In training relu's
    // derivative reads the pre-activation too, so there the relu stays a fusion of its own.
    auto is_relu_of = [&](uint32_t r, uint32_t x) {
      if (comp.instructions[r].opcode != HloOpcode::kMaximum || operands[r].size() != 2) return false;
      const uint32_t other = operands[r][0] == x ? operands[r][1] : operands[r][0];
      const HloInstruction& b = comp.instructions[other];
      if (b.opcode == HloOpcode::kConstant) return true;
      return b.opcode == HloOpcode::kBroadcast && operands[other].size() == 1 &&
             comp.instructions[operands[other][0]].opcode == HloOpcode::kConstant;
    };
    if (comp.instructions[i].opcode == HloOpcode::kConvolution && users[u].size() == 1 &&
        is_relu_of(users[u][0], u) && epilogue_of(u, users[u][0]) && &comp.instructions[u] != root) {
      last = users[u][0];
      materialized[u] = false;
    }
    materialized[last] = true;
    gemm_epilogue[last] = true;
  }
  // A fused value is recomputed inside each consumer, which reads the buffers it was computed from
  // instead. Operands precede users (schedule order), so a forward pass fills each list before it is read.
  std::vector<std::vector<uint32_t>> sources(n);  // per fused value, the buffers it is computed from
  // A fusion's operands in the order XLA's fusion appends them (fusing a producer removes its operand and
  // appends the producer's own), nearest first: the direct buffers `ops` names, then, operand by operand,
  // what `fused` says a fused one reads. The order decides which dying operand's memory the result takes
  // (the heap tries them first to last): a residual sum x + attention + MLP takes the MLP's product, as in
  // the compiled ViT, not the stream. The one place this order is made, for every list below.
  auto in_fusion_order = [&](const std::vector<uint32_t>& ops, auto&& take, auto&& fused) {
    for (uint32_t o : ops)
      if (materialized[o]) take(o);
    for (uint32_t o : ops)
      if (!materialized[o]) fused(o);
  };
  // The buffers behind `ops`, each once.
  auto buffers_behind = [&](const std::vector<uint32_t>& ops) {
    std::vector<uint32_t> out;
    std::unordered_set<uint32_t> seen;
    auto take = [&](uint32_t b) {
      if (seen.insert(b).second) out.push_back(b);
    };
    in_fusion_order(ops, take, [&](uint32_t o) {
      for (uint32_t b : sources[o]) take(b);
    });
    return out;
  };
  // A fusion takes at most 64 operands and outputs (MaxOperandsAndOutputsPerFusion, gpu_fusible.h;
  // FusionFitsInBudget refuses more, tested there as AvoidsLargeFusion: p0 + p1 + ... + p200): where a
  // value would be computed from more buffers, the fused values it reads are written out instead and it
  // reads those. It also keeps each list short - a chain of 10^4 adds of 10^4 arguments, each list the one
  // before plus one, took 6 s.
  constexpr size_t kMaxFusionOperandsAndOutputs = 64;
  for (uint32_t i = 0; i < n; ++i) {
    if (materialized[i]) continue;
    sources[i] = buffers_behind(operands[i]);
    if (sources[i].size() + 1 <= kMaxFusionOperandsAndOutputs) continue;
    for (uint32_t o : operands[i]) {
      if (materialized[o]) continue;
      materialized[o] = true;
      sources[o].clear();
    }
    sources[i] = buffers_behind(operands[i]);
  }
  // Whether a value computed from buffers `reads` is a softmax or a two-pass norm: it reads a buffer B and a
  // reduction r that itself reads B and an earlier reduction of B (sum(exp(x - max(x))), mean((x -
  // mean(x))^2)). XLA:GPU makes such a diamond one Triton fusion (SoftmaxRewriterTriton: triton_softmax). A
  // one-pass norm (mean(x) and mean(x*x), flax's fast variance) stays a multi-output reduction and a loop
  // fusion instead.
  auto normalizes = [&](const std::vector<uint32_t>& reads) {
    std::unordered_set<uint32_t> direct(reads.begin(), reads.end());
    for (uint32_t r : reads) {
      if (role[r] != Role::kReduce) continue;
      const std::vector<uint32_t> r_reads = buffers_behind(operands[r]);
      for (uint32_t b : r_reads) {
        if (!direct.contains(b) || role[b] == Role::kReduce) continue;
        for (uint32_t r0 : r_reads) {
          if (r0 == r || role[r0] != Role::kReduce) continue;
          const std::vector<uint32_t> r0_reads = buffers_behind(operands[r0]);
          if (std::find(r0_reads.begin(), r0_reads.end(), b) != r0_reads.end()) return true;
        }
      }
    }
    return false;
  };
  // Copies written for a GEMM (gemm_input), emitted before the instruction that reads them; their indices
  // follow the program's (n + k).
  std::vector<HloInstruction> out;
  out.reserve(n);
  std::vector<std::string> copy_names;
  std::unordered_set<std::string> copy_name_set;
  std::unordered_map<uint64_t, uint32_t> copy_index;  // (value << 32 | GEMM) -> the copy's index
  auto name_of = [&](uint32_t b) -> const std::string& {
    return b < n ? comp.instructions[b].name : copy_names[b - n];
  };
  auto is_gemm = [&](uint32_t x) { return role[x] == Role::kGemm || folded_dot[x]; };
  // The fused values from which, through fused values, a GEMM reaches a value written for it, or a fused
  // GEMM is reached (one under its epilogue): only these are walked when a fusion's operands are listed,
  // the others' buffers are their `sources`. In a GEMM's operands such a value reads `gemm_reads`: its
  // buffers and the values written for the GEMM (kCopyOf | value), made once for all the GEMMs reading it.
  constexpr uint64_t kCopyOf = uint64_t{1} << 32;
  std::vector<bool> reaches_copy(n, false), reaches_gemm(n, false);
  std::vector<std::vector<uint64_t>> gemm_reads(n);
  for (uint32_t x = 0; x < n; ++x) {
    if (materialized[x]) continue;
    reaches_copy[x] = gemm_input[x];
    reaches_gemm[x] = is_gemm(x);
    for (uint32_t o : operands[x]) {
      if (materialized[o]) continue;
      reaches_copy[x] = reaches_copy[x] || reaches_copy[o];
      reaches_gemm[x] = reaches_gemm[x] || reaches_gemm[o];
    }
    if (!reaches_copy[x] || gemm_input[x] || reaches_gemm[x]) continue;
    std::unordered_set<uint64_t> seen;
    auto take = [&](uint64_t e) {
      if (seen.insert(e).second) gemm_reads[x].push_back(e);
    };
    in_fusion_order(operands[x], take, [&](uint32_t o) {
      if (gemm_input[o]) {
        take(kCopyOf | o);
      } else if (reaches_copy[o]) {
        for (uint64_t e : gemm_reads[o]) take(e);
      } else {
        for (uint32_t b : sources[o]) take(b);
      }
    });
  }
  // The buffers fusion `i` reads, in XLA's order (in_fusion_order), `gemm` the GEMM whose operands `i`
  // computes, if any; a value written for that GEMM is read as its copy, emitted here the first time.
  auto fusion_operands = [&](uint32_t i, uint32_t gemm, auto&& self) -> std::vector<uint32_t> {
    std::vector<uint32_t> order;
    std::unordered_set<uint32_t> seen;
    auto take = [&](uint32_t b) {
      if (seen.insert(b).second) order.push_back(b);
    };
    auto copy_for_gemm = [&](uint32_t x) {
      const uint64_t key = static_cast<uint64_t>(x) << 32 | gemm;
      if (auto found = copy_index.find(key); found != copy_index.end()) return found->second;
      HloInstruction copy;
      copy.opcode = HloOpcode::kCustomCall;
      copy.custom_call_target = "__memfit$gemm_input";
      copy.shape = comp.instructions[x].shape;
      copy.op_name = comp.instructions[x].op_name;
      copy.category = comp.instructions[x].category;
      copy.line = comp.instructions[x].line;
      for (uint32_t b : self(x, UINT32_MAX, self)) copy.operands.push_back(name_of(b));
      std::string name = fmt::format("{}.for.{}", comp.instructions[x].name, comp.instructions[gemm].name);
      while (index.contains(name) || copy_name_set.contains(name)) name += "$";  // names stay unique
      copy.name = name;
      const auto at = static_cast<uint32_t>(n + copy_names.size());
      copy_index.emplace(key, at);
      copy_name_set.insert(name);
      copy_names.push_back(std::move(name));
      out.push_back(std::move(copy));
      return at;
    };
    in_fusion_order(operands[i], take, [&](uint32_t o) {
      if (gemm != UINT32_MAX && gemm_input[o]) {
        take(copy_for_gemm(o));
      } else if (reaches_gemm[o]) {  // an epilogue's GEMM, or what lies between them: walked
        for (uint32_t b : self(o, is_gemm(o) ? o : gemm, self)) take(b);
      } else if (gemm != UINT32_MAX && reaches_copy[o]) {
        for (uint64_t e : gemm_reads[o])
          take(e & kCopyOf ? copy_for_gemm(static_cast<uint32_t>(e)) : static_cast<uint32_t>(e));
      } else {
        for (uint32_t b : sources[o]) take(b);
      }
    });
    return order;
  };
  std::unordered_map<uint32_t, std::string> folded_name;  // folded dot -> its contracted result's name
  std::unordered_set<uint32_t> transposed_in_readers;     // folded sums whose transpose their readers fuse
  for (const auto& [r, x] : transposed_fold)
    folded_name.emplace(x, comp.instructions[x].name + ".contracted");
  for (uint32_t i = 0; i < n; ++i) {
    if (auto f = folded_name.find(i); f != folded_name.end()) {
      // The dot that contracts the batch, written where the dot was.
      HloInstruction dot;
      dot.name = f->second;
      dot.opcode = HloOpcode::kCustomCall;
      dot.custom_call_target = "__memfit$batch_contracting_dot";
      for (const auto& [r, x] : transposed_fold)
        if (x == i) dot.shape = comp.instructions[r].shape;
      for (uint32_t b : fusion_operands(i, i, fusion_operands)) dot.operands.push_back(name_of(b));
      dot.op_name = comp.instructions[i].op_name;
      dot.line = comp.instructions[i].line;
      out.push_back(std::move(dot));
    }
    if (!materialized[i]) continue;
    // Later buffers' operands are named by what they read; nothing else of this instruction is read again.
    HloInstruction inst = std::move(comp.instructions[i]);
    comp.instructions[i].name = inst.name;
    if (auto t = transposed_fold.find(i); t != transposed_fold.end()) {
      // The transpose of the contracted dot: XLA's layout assignment writes the sum in the dot's order and
      // fuses the transpose into its readers (below), or, read by no fusion, writes it as a copy.
      const bool fused_away =
          !users[i].empty() && std::all_of(users[i].begin(), users[i].end(), [&](uint32_t u) {
            return !materialized[u] || (fuses(role[u]) && !is_gemm(u) && !gemm_epilogue[u]);
          });
      inst.opcode = fused_away ? HloOpcode::kBitcast : HloOpcode::kCopy;
      inst.operands = {folded_name.at(t->second)};
      if (fused_away) transposed_in_readers.insert(i);
      out.push_back(std::move(inst));
      continue;
    }
    // Tuples, loops and calls keep their operand positions (their shapes name them one by one); every
    // other buffer reads the buffers its fused operands came from.
    if (role[i] == Role::kForward || role[i] == Role::kControl) {
      out.push_back(std::move(inst));
      continue;
    }
    std::vector<uint32_t> unique = fusion_operands(i, is_gemm(i) ? i : UINT32_MAX, fusion_operands);
    inst.operands.clear();
    for (uint32_t r : unique) inst.operands.push_back(name_of(r));
    std::erase_if(unique, [&](uint32_t r) { return r >= n; });
    if (gemm_epilogue[i]) {
      // The GEMM writes it: a new buffer, never one of its operands' (not elementwise in XLA's sense).
      inst.opcode = HloOpcode::kCustomCall;
      inst.custom_call_target = "__memfit$gemm_with_epilogue";
    } else if (fuses(role[i]) && std::any_of(unique.begin(), unique.end(),
                                             [&](uint32_t r) { return transposed_in_readers.contains(r); })) {
      // It reads a sum written in the transposed order: XLA's transpose fusion, which iterates in that
      // order and reads every other operand through a transpose, so no result takes an operand's memory
      // (FusionCanShareBufferHint allows only elementwise ops between a parameter and the result). The
      // compiled mlp_vmap_grads_b64 writes Adam's new moments of each weight in fresh buffers and copies
      // them over the donated arguments at the end (remove_unneeded_donation_copies); the new weight, which
      // reads the moments, XLA writes in place or apart from one weight to the next - here in place, which
      // both programs measured agree with (written apart too, the temp of mlp_vmap_grads_b128 was +30.7% of
      // XLA's and b64's +4.8%, against +1.9% and +0.5%).
      inst.opcode = HloOpcode::kCustomCall;
      inst.custom_call_target = xla_gpu_internal::kTransposeFusion;
    } else if (fuses(role[i]) && normalizes(unique)) {
      // A softmax or a two-pass norm: one fusion in XLA:GPU that reads each row whole before writing it, so
      // its result cannot take the input's memory (FusionCanShareBufferHint stops at a reduction).
      inst.opcode = HloOpcode::kCustomCall;
      inst.custom_call_target = "__memfit$normalization";
    }
    out.push_back(std::move(inst));
  }
  comp.instructions = std::move(out);
  return ok_status();
}

// XLA's CallInliner (xla/service/call_inliner.cc) runs first in the GPU pipeline: JAX's nested jits and
// helpers (jnp.where, take, ...) are `call`s in the lowered program, and once inlined, fusion crosses their
// boundaries. Each inlined instruction is named "<call>/<name>"; the callee's root takes the call's name.
using Callees = std::unordered_map<std::string_view, const HloComputation*>;

Status inline_into(const Callees& callees, const HloInstruction& call, const std::string& prefix,
                   std::vector<std::string_view>& stack, std::vector<HloInstruction>& out) {
  const auto found = call.called.empty() ? callees.end() : callees.find(call.called[0]);
  const HloComputation* callee = found == callees.end() ? nullptr : found->second;
  if (callee == nullptr)
    return invalid_argument(
        fmt::format("line {}: '{}' calls a computation that is not in the module", call.line, call.name));
  if (std::find(stack.begin(), stack.end(), callee->name) != stack.end()) {
    return invalid_argument(fmt::format(
        "computation {} calls itself (directly or through the computations it calls): HLO has no recursion, "
        "loops are while instructions",
        excerpt(callee->name)));
  }
  if (stack.size() >= 64)
    return invalid_argument(fmt::format("line {}: calls nest deeper than 64", call.line));
  stack.push_back(callee->name);
  const HloInstruction* root = callee->root();
  if (root == nullptr)
    return invalid_argument(fmt::format("line {}: '{}' calls an empty computation", call.line, call.name));
  std::unordered_map<std::string, std::string> names;  // callee name -> name in the caller
  for (const HloInstruction& x : callee->instructions) {
    if (x.opcode == HloOpcode::kParameter) {
      if (x.parameter_number < 0 || static_cast<size_t>(x.parameter_number) >= call.operands.size())
        return invalid_argument(fmt::format("line {}: '{}' does not pass parameter {}", call.line, call.name,
                                            x.parameter_number));
      names[x.name] = call.operands[static_cast<size_t>(x.parameter_number)];
    }
  }
  for (const HloInstruction& x : callee->instructions) {
    if (x.opcode == HloOpcode::kParameter) continue;
    HloInstruction y = x;
    y.is_root = false;
    y.name = &x == root ? prefix : prefix + "/" + x.name;
    for (std::string& o : y.operands) {
      auto it = names.find(o);
      if (it == names.end())
        return invalid_argument(
            fmt::format("line {}: operand '{}' is not defined in '{}'", x.line, o, callee->name));
      o = it->second;
    }
    names[x.name] = y.name;
    if (y.opcode == HloOpcode::kCall && y.called.size() == 1) {
      MEMFIT_RETURN_IF_ERROR(inline_into(callees, y, y.name, stack, out));
    } else {
      out.push_back(std::move(y));
    }
  }
  if (root->opcode == HloOpcode::kParameter) {  // the call returns an argument as it is
    HloInstruction alias = call;
    alias.opcode = HloOpcode::kBitcast;
    alias.called.clear();
    alias.operands = {names[root->name]};
    alias.name = prefix;
    alias.is_root = false;
    out.push_back(std::move(alias));
  }
  stack.pop_back();
  return ok_status();
}

Status inline_calls(HloModule& m) {
  // Callees are read as written, before their own calls are inlined: a copy of just the called
  // computations (copying the whole module cost a seventh of a 300-layer plan).
  std::unordered_set<std::string_view> called;
  for (const HloComputation& c : m.computations)
    for (const HloInstruction& x : c.instructions)
      if (x.opcode == HloOpcode::kCall && x.called.size() == 1) called.insert(x.called[0]);
  if (called.empty()) return ok_status();
  HloModule original;
  for (const HloComputation& c : m.computations)
    if (called.count(c.name) != 0) original.computations.push_back(c);
  Callees callees;
  for (const HloComputation& c : original.computations) callees.emplace(c.name, &c);
  // What inlining will make, counted before it is made: calls that multiply (f calls g twice, g calls h
  // twice, ...) grow a small text exponentially. Each computation's size once inlined, callees first (a
  // topological order of the call graph); one in a cycle counts as written (the inliner refuses it).
  constexpr uint64_t kMaxInlined = 1'000'000;
  std::unordered_map<std::string_view, size_t> index;
  for (size_t k = 0; k < m.computations.size(); ++k) index.emplace(m.computations[k].name, k);
  std::vector<uint64_t> pending(m.computations.size(), 0), size(m.computations.size(), 0);
  std::vector<std::vector<size_t>> callers(m.computations.size());
  std::vector<size_t> ready;
  for (size_t k = 0; k < m.computations.size(); ++k) {
    for (const HloInstruction& x : m.computations[k].instructions) {
      const auto callee =
          x.opcode == HloOpcode::kCall && x.called.size() == 1 ? index.find(x.called[0]) : index.end();
      if (callee == index.end()) continue;
      ++pending[k];
      callers[callee->second].push_back(k);
    }
    if (pending[k] == 0) ready.push_back(k);
  }
  auto inlined_size = [&](size_t k, bool callees_known) {
    uint64_t n = 0;
    for (const HloInstruction& x : m.computations[k].instructions) {
      const auto callee =
          x.opcode == HloOpcode::kCall && x.called.size() == 1 ? index.find(x.called[0]) : index.end();
      n = std::min(n + (callees_known && callee != index.end() ? size[callee->second] : 1), kMaxInlined + 1);
    }
    return n;
  };
  std::vector<bool> sized(m.computations.size(), false);
  while (!ready.empty()) {
    const size_t k = ready.back();
    ready.pop_back();
    size[k] = inlined_size(k, true);
    sized[k] = true;
    for (size_t caller : callers[k])
      if (--pending[caller] == 0) ready.push_back(caller);
  }
  uint64_t total = 0;
  for (size_t k = 0; k < m.computations.size(); ++k)
    total = std::min(total + (sized[k] ? size[k] : inlined_size(k, false)), kMaxInlined + 1);
  if (total > kMaxInlined)
    return invalid_argument(fmt::format(
        "inlining the program's calls would make more than {} instructions: its calls multiply (a function "
        "that calls another several times, which calls another several times, ...)",
        kMaxInlined));
  for (HloComputation& c : m.computations) {
    bool any = false;
    for (const HloInstruction& x : c.instructions)
      any = any || (x.opcode == HloOpcode::kCall && x.called.size() == 1);
    if (!any) continue;
    std::vector<HloInstruction> out;
    out.reserve(c.instructions.size());
    for (HloInstruction& x : c.instructions) {
      if (x.opcode != HloOpcode::kCall || x.called.size() != 1) {
        out.push_back(std::move(x));
        continue;
      }
      const bool was_root = x.is_root;
      const size_t first = out.size();
      std::vector<std::string_view> stack{c.name};
      MEMFIT_RETURN_IF_ERROR(inline_into(callees, x, x.name, stack, out));
      if (was_root) {
        for (size_t k = first; k < out.size(); ++k) out[k].is_root = out[k].name == x.name;
      }
    }
    c.instructions = std::move(out);
  }
  return ok_status();
}

// Sharding annotations are no buffers. Compiled for one device, XLA's ShardingRemover
// (xla/service/sharding_remover.cc) hands each Sharding, SPMDFullToShardShape and SPMDShardToFullShape
// custom call's readers its operand; JAX's with_sharding_constraint and shard_map write them, and Shardy's
// export their xla.sdy.* twins. Before partitioning the program is planned as one device running all of it,
// so they forward their operand (a bitcast), as StableHLO's sdy.sharding_constraint is read.
void remove_sharding_annotations(HloComputation& comp) {
  for (HloInstruction& x : comp.instructions) {
    if (x.opcode != HloOpcode::kCustomCall || x.operands.size() != 1 || x.shape.is_tuple()) continue;
    const std::string_view target = x.custom_call_target;
    if (target == "Sharding" || target == "SPMDFullToShardShape" || target == "SPMDShardToFullShape" ||
        target == "xla.sdy.GlobalToLocalShape" || target == "xla.sdy.LocalToGlobalShape" ||
        target == "xla.sdy.FuncResultSharding") {
      x.opcode = HloOpcode::kBitcast;
      x.opcode_text.clear();
    }
  }
}

}  // namespace

bool is_lowered_module(const HloModule& module) { return !module.is_scheduled; }

void pack_four_bit_types(HloModule& m) {
  for (HloComputation& c : m.computations) {
    for (HloInstruction& x : c.instructions) {
      std::vector<Shape*> stack{&x.shape};
      while (!stack.empty()) {
        Shape* s = stack.back();
        stack.pop_back();
        for (Shape& e : s->elements) stack.push_back(&e);
        if (s->packed_element_bits == 0 && (s->type == PrimitiveType::kS4 || s->type == PrimitiveType::kU4 ||
                                            s->type == PrimitiveType::kF4E2M1FN))
          s->packed_element_bits = 4;
      }
    }
  }
}

Expected<HloModule> model_xla_gpu(HloModule lowered) {
  HloModule m = std::move(lowered);
  pack_four_bit_types(m);
  alias_buffer_donors(m);
  if (m.from_stablehlo)
    for (HloComputation& c : m.computations) xla_gpu_internal::xla_post_order(c);
  MEMFIT_RETURN_IF_ERROR(inline_calls(m));
  for (HloComputation& c : m.computations) remove_sharding_annotations(c);
  MEMFIT_RETURN_IF_ERROR(xla_gpu_internal::insert_while_copies(m));
  for (HloComputation& c : m.computations) xla_gpu_internal::place_offloaded_values(c);
  Combiners combiners;
  for (const HloComputation& c : m.computations)
    if (const HloInstruction* r = c.root()) combiners.emplace(c.name, r->opcode);
  for (HloComputation& c : m.computations) {
    // Reduction and sort regions are scalar code inside their op, not buffers; they stay as they are.
    fold_add_of_scatter(c, combiners);
    fold_transposes(c);
    MEMFIT_RETURN_IF_ERROR(model_computation(c, combiners));
    xla_gpu_internal::defer_host_copies(c);
  }
  m.is_scheduled = true;
  return m;
}

}  // namespace memfit
