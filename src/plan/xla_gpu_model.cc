#include "memfit/plan/xla_gpu_model.h"

#include "memfit/core/name_map.h"

#include <fmt/format.h>

#include "memfit/core/text.h"

#include <algorithm>
#include <cmath>
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
    // A reduce-window (a pool, or its gradient) is loop-fusible as a producer (IsUniversallyLoopFusible,
    // xla/service/gpu/gpu_fusible.cc) and reads a window per element: costly to recompute in each reader.
    case HloOpcode::kReduceWindow:
      return Role::kExpensive;
    // Library calls.
    case HloOpcode::kDot:
    case HloOpcode::kConvolution:
      return Role::kGemm;
    // A reduction fuses the elementwise ops that produce its input (an input fusion,
    // xla/service/gpu/transforms/priority_fusion.cc): its operands need no buffers of their own.
    case HloOpcode::kReduce:
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

uint64_t elements(const Shape& s) {
  uint64_t n = 1;
  for (uint64_t d : s.dims) n *= d;  // shapes were checked when parsed
  return n;
}

HloOpcode combiner_of(const HloInstruction& x, const Combiners& combiners) {
  if (x.reducer != HloOpcode::kUnknown) return x.reducer;
  if (x.called.empty()) return HloOpcode::kUnknown;
  auto it = combiners.find(x.called[0]);
  return it == combiners.end() ? HloOpcode::kUnknown : it->second;
}

}  // namespace xla_gpu_internal

namespace {

using xla_gpu_internal::combiner_of;
using xla_gpu_internal::Combiners;
using xla_gpu_internal::elements;
using xla_gpu_internal::fuses;
using xla_gpu_internal::kSplitKReduce;
using xla_gpu_internal::Role;
using xla_gpu_internal::role_of;

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

// XLA's algebraic simplifier (algebraic_simplifier.cc, HandleReduce): a reduction that leaves as many
// elements as it reads - over dimensions of size 1, as JAX's take_along_axis and its gradient write
// around a gather of one element per row - is a reshape (its init is the combiner's identity), so no
// kernel: what reads it reads the reduced value through a bitcast, and a loss's per-token gradient is an
// elementwise fusion (the compiled GPT steps' division in loop_divide_select_fusion).
void reshape_degenerate_reductions(HloComputation& comp) {
  NameMap<const Shape*> shapes;
  shapes.reserve(comp.instructions.size());
  for (const HloInstruction& x : comp.instructions) shapes.emplace(x.name, &x.shape);
  for (HloInstruction& x : comp.instructions) {
    if (x.opcode != HloOpcode::kReduce || x.operands.size() != 2 || x.shape.is_tuple()) continue;
    const auto in = shapes.find(x.operands[0]);
    if (in == shapes.end() || in->second->is_tuple() ||
        xla_gpu_internal::elements(*in->second) != xla_gpu_internal::elements(x.shape))
      continue;
    x.set_opcode(HloOpcode::kReshape);
    x.operands.resize(1);
    x.called.clear();
    x.dimensions.clear();
    x.reducer = HloOpcode::kUnknown;
  }
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
      t.set_opcode(HloOpcode::kBitcast);
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
constexpr uint64_t kGemmTileRows = 128;
constexpr uint64_t kGemmTileElements = kGemmTileRows * kGemmTileRows;
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
  // The rows of the product (M: lhs's elements over batch and contraction): fewer than 128 rows are one
  // tile of rows, by 128 columns. The autotuner clamps each configuration's block_m to a limit from the
  // product's rows (GetLimits) and raises it to 64 on Hopper (wgmma; GenerateTritonConfigs in
  // xla/service/gpu/autotuning/gemm_fusion_autotuner.cc), so a product of up to 64 rows is one row of
  // tiles whatever the configuration (65-127 rows: one with block_m 128, two with 64 - one here). A long thin
  // product - a decode step's 8 rows by a 32000-word vocabulary, 250 tiles - already fills the GPU and is
  // not split (the compiled gpt_fp32_decode_b8 writes its logits whole), while its 8 x 3072 projection (24
  // tiles) is split 4, as XLA split it.
  uint64_t tiles = (out + kGemmTileElements - 1) / kGemmTileElements;
  if (contraction > 0) {
    const uint64_t rows = elements(lhs) / (batch * contraction);
    if (rows > 0 && rows < kGemmTileRows)
      tiles = batch * ((out / (batch * rows) + kGemmTileRows - 1) / kGemmTileRows);
  }
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
    sum.set_opcode(HloOpcode::kReduce);
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

// `combiners`: each computation's root opcode, for the reductions that name their combiner by computation.
// `bodies` receives the computations of the multi-output fusions it makes, named apart from `names`.
Status model_computation(HloComputation& comp, const Combiners& combiners,
                         std::vector<HloComputation>& bodies, std::unordered_set<std::string>& names) {
  simplify_tuples_and_dce(comp);
  split_k_gemms(comp);
  xla_gpu_internal::ReducedInputs reduced_inputs;
  MEMFIT_RETURN_IF_ERROR(xla_gpu_internal::fuse_computation(comp, combiners, &reduced_inputs));
  xla_gpu_internal::fuse_sibling_outputs(comp, reduced_inputs, bodies, names);
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
    // Each call's instructions are made first; then the computation grows once (into room its writer
    // reserved, when it did) and its instructions move back from the end to make room, those before the
    // first call staying where they are. Into a fresh vector, a 300-layer entry (10^8 bytes) cost a tenth of
    // its plan, most of it page faults.
    std::vector<std::pair<size_t, std::vector<HloInstruction>>> inlined;
    size_t made = 0;
    for (size_t i = 0; i < c.instructions.size(); ++i) {
      const HloInstruction& x = c.instructions[i];
      if (x.opcode != HloOpcode::kCall || x.called.size() != 1) continue;
      std::vector<HloInstruction> body;
      std::vector<std::string_view> stack{c.name};
      MEMFIT_RETURN_IF_ERROR(inline_into(callees, x, x.name, stack, body));
      if (x.is_root)
        for (HloInstruction& y : body) y.is_root = y.name == x.name;
      made += body.size();
      inlined.emplace_back(i, std::move(body));
    }
    if (inlined.empty()) continue;
    // Each call makes at least one instruction (its root, or a bitcast of the argument it returns).
    const size_t n = c.instructions.size(), grown = n - inlined.size() + made;
    c.instructions.resize(grown);
    size_t w = grown;
    auto call = inlined.rbegin();
    for (size_t i = n; i-- > 0;) {
      if (call != inlined.rend() && call->first == i) {
        for (auto y = call->second.rbegin(); y != call->second.rend(); ++y)
          c.instructions[--w] = std::move(*y);
        ++call;
      } else if (--w != i) {
        c.instructions[w] = std::move(c.instructions[i]);
      }
    }
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
      x.set_opcode(HloOpcode::kBitcast);
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
  if (m.from_stablehlo)
    for (HloComputation& c : m.computations) xla_gpu_internal::xla_post_order(c);
  MEMFIT_RETURN_IF_ERROR(inline_calls(m));
  // A sharded program becomes one device's (xla_spmd_partitioner.cc); donors are then paired with results by
  // the shapes each device holds, as XLA pairs them in the partitioned module.
  MEMFIT_RETURN_IF_ERROR(partition_for_each_device(m));
  alias_buffer_donors(m);
  for (HloComputation& c : m.computations) remove_sharding_annotations(c);
  MEMFIT_RETURN_IF_ERROR(xla_gpu_internal::insert_while_copies(m));
  for (HloComputation& c : m.computations) xla_gpu_internal::place_offloaded_values(c);
  Combiners combiners;
  for (const HloComputation& c : m.computations)
    if (const HloInstruction* r = c.root()) combiners.emplace(c.name, r->opcode);
  std::vector<HloComputation> bodies;
  std::unordered_set<std::string> names;
  for (const HloComputation& c : m.computations) names.insert(c.name);
  for (HloComputation& c : m.computations) {
    // Reduction and sort regions are scalar code inside their op, not buffers; they stay as they are.
    fold_add_of_scatter(c, combiners);
    fold_transposes(c);
    reshape_degenerate_reductions(c);
    MEMFIT_RETURN_IF_ERROR(model_computation(c, combiners, bodies, names));
  }
  for (HloComputation& b : bodies) m.computations.push_back(std::move(b));
  m.is_scheduled = true;
  return m;
}

}  // namespace memfit
