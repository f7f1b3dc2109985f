// XLA:GPU's fusion over one simplified computation of the modeled program (memfit/plan/xla_gpu_model.h):
// which values get a buffer, and which buffers each of them is computed from. The decisions run as passes
// over the computation's data edges, each one XLA's rule for one kind of fusion, in the order they depend on
// one another (Fusion::run); the last pass rewrites the computation into its buffers.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "memfit/core/checked.h"
#include "memfit/core/dtype.h"
#include "memfit/core/name_map.h"
#include "xla_gpu_model_internal.h"

namespace memfit::xla_gpu_internal {
namespace {

// What a fusion into a GEMM may add to the bytes moved (kIoToleranceBytes, triton_tiling_propagation.cc):
// IsInputWorthFusing lets a producer read this much more than it writes, IsOutputWorthFusing an epilogue
// write this much more than it reads.
constexpr uint64_t kIoToleranceBytes = 1024;

// A fusion takes at most 64 operands and outputs (MaxOperandsAndOutputsPerFusion, gpu_fusible.h;
// FusionFitsInBudget refuses more, tested there as AvoidsLargeFusion: p0 + p1 + ... + p200): where a
// value would be computed from more buffers, the fused values it reads are written out instead and it
// reads those. It also keeps each list short - a chain of 10^4 adds of 10^4 arguments, each list the one
// before plus one, took 6 s.
constexpr size_t kMaxFusionOperandsAndOutputs = 64;

// A prologue deeper than this is written: a hostile chain of fused ops would overflow the stack of the
// walk (the prologues of the shared programs and the zoo's are at most 5 ops deep).
constexpr int kMaxPrologueDepth = 256;

// Consumers that take their operands as buffers, never fusing them in.
bool needs_buffers(Role r) { return r == Role::kForward || r == Role::kControl || r == Role::kRoot; }

// Whether a value was met before, for the short lists fusion builds (a fusion's buffers, a few and at most
// kMaxFusionOperandsAndOutputs once gathered; a walk up a prologue): the first 16 are kept in place and
// scanned, a hash set takes over past them - where a hostile concatenate of 10^5 operands would make the
// scan quadratic. (A std::unordered_set per list, as before, allocated a node for each element.)
template <typename T>
class FirstSeen {
 public:
  FirstSeen() = default;
  explicit FirstSeen(T first) { insert(first); }
  // True the first time `x` is inserted.
  bool insert(T x) {
    if (!spilled_.empty()) return spilled_.insert(x).second;
    if (std::find(few_.begin(), few_.begin() + count_, x) != few_.begin() + count_) return false;
    if (count_ < few_.size()) {
      few_[count_++] = x;
    } else {
      spilled_.insert(few_.begin(), few_.end());
      spilled_.insert(x);
    }
    return true;
  }

 private:
  std::array<T, 16> few_{};
  size_t count_ = 0;
  std::unordered_set<T> spilled_;
};

// The fusion of one computation: its data edges by index, and what each pass decides about each value. The
// passes read and write these fields in run()'s order; each says which of XLA's rules it follows.
struct Fusion {
  HloComputation& comp;
  const Combiners& combiners;
  const HloInstruction* root = nullptr;
  size_t n = 0;
  NameIndex index;
  std::vector<Role> role;
  Adjacency operands, users;
  // Which values get a buffer.
  std::vector<bool> materialized;
  // A sum over a dot's batch dimensions folded into the dot (fold_batch_sums); reduce index -> the folded
  // dot, for those whose sum came through transposes.
  std::vector<bool> folded_dot;
  std::unordered_map<uint32_t, uint32_t> transposed_fold;
  // Written for a GEMM by a fusion of its own while its other readers recompute it (decide_gemm_operands);
  // written by the GEMM that it is the epilogue of (decide_gemm_epilogues).
  std::vector<bool> gemm_input, gemm_epilogue;
  std::vector<int8_t> gemm_fusible;  // fusible_into_gemm's answers: -1 unknown, 0 no, 1 yes
  // Expensive values written only because several ops read them (materialize_by_role), to be fused after
  // all if those ops end up in one fusion (fuse_values_read_by_one_fusion); not one a GEMM writes as its
  // epilogue (decide_gemm_epilogues clears it: StableHLO's scale of the scores by sqrt(64) is one).
  std::vector<bool> written_for_readers;
  // A softmax's or a norm's fusion with its reductions fused in (fuse_values_read_by_one_fusion).
  std::vector<bool> normalization;
  // Per fused value, the buffers it is computed from (gather_sources).
  std::vector<std::vector<uint32_t>> sources;
  // Each value's elements, kept for emit(), which moves the instructions out as it goes.
  std::vector<uint64_t> element_count;
  // Receives what each reduction written reads (emit), when asked.
  ReducedInputs* reduced_inputs = nullptr;

  Fusion(HloComputation& c, const Combiners& k) : comp(c), combiners(k) {}

  Status run() {
    MEMFIT_RETURN_IF_ERROR(index_edges());
    fold_scalar_constants();
    mark_cheap_divisions();
    materialize_by_role();
    // What each GEMM takes in is decided before the values several fusions read, as XLA:GPU runs
    // GemmFusion before PriorityFusion (gpu_compiler.cc: GemmFusion is a pass of
    // OptimizeHloPostLayoutAssignment, priority fusion one of the fusion passes run after it): a GEMM's
    // operand it cannot take in is a buffer, a fusion of its own, when priority fusion counts who reads
    // what - a transformer's GELU output is one by then, and its tanh's forward and backward readers are
    // not joined through it (decided in the other order, gpt_fp32's lowered temp falls to -6.7% of XLA's).
    fold_batch_sums();
    decide_gemm_operands();
    decide_shared_values();
    write_concatenated_norm_inputs();
    decide_gemm_epilogues();
    write_producers_of_one_block_reductions();
    write_values_recomputed_per_broadcast();
    fuse_values_read_by_one_fusion();
    gather_sources();
    if (write_shared_normalized_rows()) {
      for (std::vector<uint32_t>& s : sources) s.clear();
      gather_sources();
    }
    const std::vector<std::string> bitcasts = reshapes_of_buffers();
    emit();
    if (!bitcasts.empty()) {
      NameIndex is_bitcast;
      is_bitcast.reserve(bitcasts.size());
      for (const std::string& name : bitcasts) is_bitcast.emplace(name, 0);
      for (HloInstruction& x : comp.instructions) {
        if (!is_bitcast.contains(x.name)) continue;
        x.set_opcode(HloOpcode::kBitcast);
      }
    }
    return ok_status();
  }

  // XLA's algebraic simplifier, after layout assignment: a reshape whose operand's row-major layout
  // already holds its elements in order is a bitcast (ReshapeIsBitcast, algebraic_simplifier.cc) - no
  // kernel, no buffer: its operand's memory. Fusion leaves a reshape a value of its own only where
  // something needs a buffer of it (a loop's state, a tuple); where it reshapes a buffer directly, of the
  // same type and size, it is that bitcast - a gradient accumulation's microbatches, [4 x 512, 1024]
  // stacked as [4, 512, 1024] and carried through the loop, whose state then aliases the argument (the
  // 25 MB of copies in mlp_fp32_donate_accum4's plan were the model's, not XLA's). One the program returns
  // stays a copy (XLA's copy insertion gives an output of a parameter one). The names, before emit().
  std::vector<std::string> reshapes_of_buffers() const {
    std::vector<bool> returned(n, false);
    if (root != nullptr) {
      const auto r = static_cast<uint32_t>(root - comp.instructions.data());
      returned[r] = true;
      for (uint32_t o : operands[r]) returned[o] = true;
    }
    std::vector<std::string> out;
    for (uint32_t v = 0; v < n; ++v) {
      const HloInstruction& x = at(v);
      // A broadcast that only adds dimensions of size 1, in order, is such a reshape (HandleBroadcast):
      // StableHLO's broadcast_in_dim where the HLO text writes a reshape (a scan's [1, ...] slice).
      const bool reshape =
          x.opcode == HloOpcode::kReshape ||
          (x.opcode == HloOpcode::kBroadcast && std::is_sorted(x.dimensions.begin(), x.dimensions.end()) &&
           std::adjacent_find(x.dimensions.begin(), x.dimensions.end()) == x.dimensions.end());
      if (!reshape || !materialized[v] || returned[v] || operands[v].size() != 1 || x.shape.is_tuple())
        continue;
      const uint32_t o = operands[v][0];
      const Shape& from = at(o).shape;
      if (!materialized[o] || from.is_tuple() || from.type != x.shape.type ||
          from.memory_space != x.shape.memory_space || element_count[o] != element_count[v])
        continue;
      out.push_back(x.name);
    }
    return out;
  }

  const HloInstruction& at(uint32_t i) const { return comp.instructions[i]; }
  bool is_gemm(uint32_t x) const { return role[x] == Role::kGemm || folded_dot[x]; }
  bool several_readers(uint32_t v) const {
    return std::any_of(users[v].begin(), users[v].end(), [&](uint32_t u) { return u != users[v][0]; });
  }

  Status index_edges() {
    n = comp.instructions.size();
    root = comp.root();
    index.reserve(n);
    for (uint32_t i = 0; i < n; ++i) index.emplace(comp.instructions[i].name, i);
    role.resize(n);
    size_t edges = 0;
    for (const HloInstruction& inst : comp.instructions) edges += inst.operands.size();
    operands.reserve(n, edges);
    for (uint32_t i = 0; i < n; ++i) {
      const HloInstruction& inst = comp.instructions[i];
      role[i] = role_of(inst.opcode);
      // The sum over a split GEMM's partials is fused into each consumer, duplicated like a cheap op.
      if (inst.opcode == HloOpcode::kReduce && inst.custom_call_target == kSplitKReduce)
        role[i] = Role::kCheap;
      operands.begin_row();
      for (const std::string& o : inst.operands) {
        auto it = index.find(o);
        if (it == index.end())
          return invalid_argument(fmt::format(
              "line {}: operand '{}' of '{}' is not defined in this computation", inst.line, o, inst.name));
        operands.add(it->second);
      }
    }
    users = operands.transposed(n);
    materialized.assign(n, false);
    folded_dot.assign(n, false);
    gemm_input.assign(n, false);
    gemm_epilogue.assign(n, false);
    gemm_fusible.assign(n, -1);
    written_for_readers.assign(n, false);
    normalization.assign(n, false);
    sources.assign(n, {});
    element_count.resize(n);
    for (uint32_t i = 0; i < n; ++i) element_count[i] = elements(comp.instructions[i].shape);
    return ok_status();
  }

  // Whether `found` holds somewhere along the chain from `x` up through single-operand ops of the opcodes
  // `through` (at most `hops` of them).
  template <typename Found>
  bool along_chain(uint32_t x, int hops, std::initializer_list<HloOpcode> through, Found&& found) const {
    for (int hop = 0; hop <= hops; ++hop) {
      if (found(x)) return true;
      const HloOpcode op = at(x).opcode;
      if (operands[x].size() != 1 || std::find(through.begin(), through.end(), op) == through.end())
        return false;
      x = operands[x][0];
    }
    return false;
  }

  // XLA's constant folding (HloConstantFolding, xla/hlo/transforms/simplifiers/hlo_constant_folding.cc, run
  // before fusion) evaluates an op whose operands are all constants: a scalar computed from constants -
  // StableHLO's 1 / N of a mean's gradient, which JAX's HLO text already holds as one constant - is a
  // constant, folded into its readers (a GEMM fusion takes it in). Operands come before their readers.
  void fold_scalar_constants() {
    for (uint32_t i = 0; i < n; ++i) {
      if (!fuses(role[i]) || elements(at(i).shape) > 1 || at(i).shape.is_tuple() || operands[i].empty())
        continue;
      if (std::all_of(operands[i].begin(), operands[i].end(),
                      [&](uint32_t o) { return role[o] == Role::kConstant; }))
        role[i] = Role::kConstant;
    }
  }

  // XLA's algebraic simplifier turns a floating-point division by a constant (or a broadcast of one) into a
  // multiplication by its inverse ("A / Const => A * (1 / Const)", AlgebraicSimplifierVisitor::HandleDivide
  // in xla/hlo/transforms/simplifiers/algebraic_simplifier.cc): cheap, fused into every reader like any
  // multiply (a mean's division by the batch size is recomputed by each reader, not written once).
  void mark_cheap_divisions() {
    const auto constant = [&](uint32_t y) { return at(y).opcode == HloOpcode::kConstant; };
    for (uint32_t i = 0; i < n; ++i) {
      const HloInstruction& x = at(i);
      if (x.opcode != HloOpcode::kDivide || operands[i].size() != 2 || !is_floating_point(x.shape.type))
        continue;
      if (!constant(operands[i][0]) &&
          along_chain(operands[i][1], 4, {HloOpcode::kBroadcast, HloOpcode::kReshape, HloOpcode::kConvert},
                      constant))
        role[i] = Role::kCheap;
    }
  }

  // Whether `v` feeds only reductions and elementwise ops that also read one of those reductions (through
  // broadcasts and reshapes): the diamond of a softmax or a norm.
  bool normalization_diamond(uint32_t v) const {
    std::unordered_set<uint32_t> reductions;
    for (uint32_t u : users[v]) {
      if (at(u).opcode == HloOpcode::kReduce) reductions.insert(u);
    }
    if (reductions.empty()) return false;
    const auto reduced_from = [&](uint32_t x) {
      return along_chain(x, 5,
                         {HloOpcode::kBroadcast, HloOpcode::kReshape, HloOpcode::kConvert,
                          HloOpcode::kBitcast, HloOpcode::kTranspose},
                         [&](uint32_t y) { return reductions.contains(y); });
    };
    for (uint32_t u : users[v]) {
      if (reductions.contains(u)) continue;
      if (!fuses(role[u])) return false;
      bool reads_reduction = false;
      for (uint32_t o : operands[u]) reads_reduction = reads_reduction || (o != v && reduced_from(o));
      if (!reads_reduction) return false;
    }
    return true;
  }

  // The bytes a fusion recomputing `v` reads, as XLA's performance model counts them: through cheap
  // elementwise and data-movement ops (a broadcast counts its operand, not its result), a slice reading only
  // its result's bytes, and a split GEMM's sum its result's (the GEMM's epilogue could write it in place of
  // the partials).
  uint64_t read_bytes(uint32_t v, int depth) const {
    uint64_t sum = 0;
    for (uint32_t o : operands[v]) {
      const HloInstruction& x = at(o);
      const bool sliced = x.opcode == HloOpcode::kSlice || x.opcode == HloOpcode::kDynamicSlice;
      if (role[o] == Role::kCheap && depth < 8 && !operands[o].empty() && !sliced &&
          x.custom_call_target != kSplitKReduce) {
        sum += read_bytes(o, depth + 1);
      } else {
        sum += x.shape.own_bytes();
      }
    }
    return sum;
  }

  // Which values get a buffer, by what they are. A large constant is a buffer; a scalar one is folded into
  // its users.
  void materialize_by_role() {
    for (uint32_t i = 0; i < n; ++i) {
      const HloInstruction& inst = at(i);
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
          bool needed = &inst == root;
          for (uint32_t u : users[i]) needed = needed || needs_buffers(role[u]);
          if (role[i] == Role::kConstant)
            needed = needed || inst.shape.is_tuple() || elements(inst.shape) > 1;
          // An expensive elementwise value several fusions read is priority fusion's to decide, as XLA's is
          // (priority_fusion.cc weighs run times, not IsExpensive): with the time its recomputation costs
          // (decide_shared_values) - a tanh is written once recomputing it outweighs a launch, an exp is
          // memory-bound and recomputed. A softmax's or a norm's diamond (exp, its sum, the division) is
          // one fusion in XLA:GPU (SoftmaxRewriterTriton) and never a candidate. A reduce-window, which
          // reads a window per element, is written when its reads outweigh its result.
          if (!needed && role[i] == Role::kExpensive && inst.opcode == HloOpcode::kReduceWindow &&
              several_readers(i) && read_bytes(i, 0) >= inst.shape.own_bytes()) {
            needed = true;
            written_for_readers[i] = true;
          }
          // (A cheap or expensive elementwise value several fusions read is decided next.)
          materialized[i] = needed;
          break;
        }
      }
    }
  }

  // The elementwise values several fusions read and no reader needs written (a tuple, a loop: materialized
  // by now), through XLA's priority fusion. A split GEMM's sum is recomputed by each reader, as XLA's
  // compiled programs do. An expensive value priority fusion writes is written for its readers: fused after
  // all if they end up in one fusion (fuse_values_read_by_one_fusion).
  void decide_shared_values() {
    std::vector<bool> candidate(n, false);
    for (uint32_t v = 0; v < n; ++v) {
      const HloInstruction& inst = at(v);
      const bool elementwise =
          role[v] == Role::kCheap || (role[v] == Role::kExpensive && inst.opcode != HloOpcode::kReduceWindow);
      if (!elementwise || materialized[v] || inst.opcode == HloOpcode::kSlice ||
          inst.opcode == HloOpcode::kDynamicSlice || inst.custom_call_target == kSplitKReduce)
        continue;
      candidate[v] = several_readers(v) && !normalization_diamond(v);
    }
    prioritize_shared_values({comp, role, operands, users}, candidate, materialized);
    for (uint32_t v = 0; v < n; ++v)
      if (candidate[v] && materialized[v] && role[v] == Role::kExpensive) written_for_readers[v] = true;
  }

  // A norm or softmax is one Triton fusion (SoftmaxRewriterTriton), and what it takes into itself must be
  // something Triton's block-level emitter supports (xla/service/gpu/fusions/triton/triton_support.cc): a
  // concatenate is not, and priority fusion fuses a producer into all of its readers or none
  // (priority_fusion.cc, CanFuseWithAllNonBitcastUsers). So a norm's input built by a concatenate - ViT's
  // class token joined to the patch embeddings - is written once, by a fusion of its own (the compiled
  // ViT's input_concatenate_fusion, live through the first block), not recomputed in the norm and every
  // other reader. A norm's input is told by its diamond: it is reduced, and read by an elementwise op
  // beside the reduction (x - mean(x), x - max(x)).
  void write_concatenated_norm_inputs() {
    for (uint32_t r = 0; r < n; ++r) {
      if (role[r] != Role::kReduce || operands[r].empty() || materialized[operands[r][0]]) continue;
      const uint32_t v = operands[r][0];
      const bool diamond = std::any_of(users[v].begin(), users[v].end(), [&](uint32_t u) {
        const HloOpcode op = at(u).opcode;
        return u != r && fuses(role[u]) && operands[u].size() >= 2 && op != HloOpcode::kConcatenate &&
               op != HloOpcode::kPad && op != HloOpcode::kDynamicSlice;
      });
      if (!diamond) continue;
      std::vector<uint32_t> stack{v};
      FirstSeen<uint32_t> seen(v);
      while (!stack.empty()) {
        const uint32_t x = stack.back();
        stack.pop_back();
        if (at(x).opcode == HloOpcode::kConcatenate) {
          materialized[x] = true;
          continue;
        }
        for (uint32_t o : operands[x])
          if (!materialized[o] && fuses(role[o]) && seen.insert(o)) stack.push_back(o);
      }
    }
  }

  // A sum over a dot's batch dimensions (through transposes) is a dot that contracts them: XLA's algebraic
  // simplifier folds reduce(dot) into the dot (xla/hlo/transforms/simplifiers/algebraic_simplifier.cc,
  // "reduce of a batch dot"). Per-example gradients by vmap summed into one gradient never exist whole;
  // the reduction reads the dot's operands and is the GEMM. A folded dot whose sum came through transposes:
  // XLA writes the contracted dot, then the transpose as a copy (a layout change) - two buffers of the
  // summed size (transposed_fold).
  void fold_batch_sums() {
    for (uint32_t r = 0; r < n; ++r) {
      const HloInstruction& red = at(r);
      if (role[r] != Role::kReduce || red.opcode != HloOpcode::kReduce || operands[r].empty() ||
          red.dimensions.empty())
        continue;
      if (combiner_of(red, combiners) != HloOpcode::kAdd) continue;
      std::vector<int64_t> dims = red.dimensions;  // in the space of `x` as the walk goes back
      uint32_t x = operands[r][0];
      std::vector<uint32_t> chain;
      bool ok = true;
      while (ok && at(x).opcode == HloOpcode::kTranspose && users[x].size() == 1) {
        const std::vector<int64_t>& perm = at(x).dimensions;
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
      const HloInstruction& dot = at(x);
      if (!ok || dot.opcode != HloOpcode::kDot || users[x].size() != 1 || dot.lhs_batch_dims.empty())
        continue;
      const auto batch = static_cast<int64_t>(dot.lhs_batch_dims.size());  // a dot's result starts with them
      if (!std::all_of(dims.begin(), dims.end(), [&](int64_t d) { return d < batch; })) continue;
      materialized[x] = false;
      folded_dot[x] = true;
      for (uint32_t t : chain) materialized[t] = false;
      if (!chain.empty()) transposed_fold.emplace(r, x);
    }
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
  bool epilogue_input(uint32_t x) const {
    return along_chain(
        x, 15, {HloOpcode::kBroadcast, HloOpcode::kBitcast, HloOpcode::kReshape, HloOpcode::kGetTupleElement},
        [&](uint32_t y) {
          const Shape& shape = at(y).shape;
          return role[y] == Role::kParameter || (!shape.is_tuple() && elements(shape) <= 1);
        });
  }

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
  bool gemm_takes_in(uint32_t p) const {
    const HloInstruction& x = at(p);
    uint64_t in_bytes = 0;
    for (uint32_t o : operands[p]) in_bytes += at(o).shape.own_bytes();
    const uint64_t out_bytes = x.shape.own_bytes();
    if (x.opcode == HloOpcode::kConvert && in_bytes > out_bytes) return false;
    if (in_bytes <= out_bytes + kIoToleranceBytes) return true;
    // A binary elementwise op one of whose operands is a broadcast parameter - a norm's scale or shift - is
    // worth taking in whatever its bytes (the fusion level 2 exception in
    // GetPropagatedDimOrdersAndRequirementsIfProfitablyFusible).
    if (operands[p].size() == 2 && role[p] == Role::kCheap &&
        std::any_of(operands[p].begin(), operands[p].end(),
                    [&](uint32_t o) { return at(o).opcode == HloOpcode::kBroadcast && epilogue_input(o); }))
      return true;
    if (several_readers(p)) return false;
    for (uint32_t o : operands[p]) {
      const Role r = role[o];
      if ((r != Role::kParameter && r != Role::kConstant) || users[o].size() != 1) return false;
    }
    return true;
  }

  // A value a GEMM cannot take in is written for the GEMM by a fusion of its own, just before it - XLA's
  // SoftmaxRewriterTriton fusion writing a norm's normalized rows for the projection - while the value's
  // other readers still recompute it: the backward pass of the compiled ViT recomputes each norm from the
  // saved residual and its statistics rather than keep the normalized rows (the buffer dies with the GEMM).
  // A value only GEMMs read (through ops they take in) is one buffer they share, as a narrowing convert
  // is (XLA's wrapped_convert fusion, read by the forward and the backward GEMM).
  bool only_gemms_read(uint32_t u, int depth) const {
    if (is_gemm(u)) return true;
    if (!fuses(role[u]) || materialized[u] || depth >= 8) return false;
    return std::all_of(users[u].begin(), users[u].end(),
                       [&](uint32_t w) { return only_gemms_read(w, depth + 1); });
  }
  void write_for_gemm(uint32_t o) {
    if (materialized[o]) return;
    if (fuses(role[o]) && at(o).opcode != HloOpcode::kConvert &&
        !std::all_of(users[o].begin(), users[o].end(), [&](uint32_t u) { return only_gemms_read(u, 0); }))
      gemm_input[o] = true;
    else
      materialized[o] = true;
  }
  void stop_at_unworthy(uint32_t o) {
    if (!materialized[o] && !gemm_input[o] && !gemm_takes_in(o)) write_for_gemm(o);
  }

  // A reshape that merges dimensions a transpose made non-adjacent in memory - attention's [b, s, h, d],
  // transposed from [b, h, s, d], read as [b * s, h * d] - is no strided tile: Triton's GEMM emitter cannot
  // take it in (triton_tiling_propagation.cc propagates dimension orders only where each fragment stays
  // contiguous), so the transposed value is written first (the compiled ViT's loop_transpose_fusion
  // before each attention projection).
  bool merges_transposed(uint32_t r) const {
    const HloInstruction& re = at(r);
    if (re.opcode != HloOpcode::kReshape || operands[r].size() != 1) return false;
    const uint32_t ti = operands[r][0];
    const HloInstruction& t = at(ti);
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
  }

  bool fusible_into_gemm(uint32_t v, int depth) {
    if (gemm_fusible[v] >= 0) return gemm_fusible[v] == 1;
    // A GEMM fusion takes in elementwise ops and scalar constants (a division by a constant, which XLA's
    // simplifier makes a multiply), not a sum over another GEMM's partials.
    const bool scalar_constant = role[v] == Role::kConstant && elements(at(v).shape) <= 1;
    bool ok = (role[v] == Role::kCheap || scalar_constant) && at(v).custom_call_target != kSplitKReduce &&
              !merges_transposed(v) && depth < kMaxPrologueDepth;
    for (uint32_t o : operands[v]) {
      if (!ok) break;
      stop_at_unworthy(o);
      if (materialized[o] || gemm_input[o]) {
        ok = role[o] != Role::kReduce;
      } else {
        ok = fusible_into_gemm(o, depth + 1);
      }
    }
    gemm_fusible[v] = ok ? 1 : 0;
    return ok;
  }

  // What each GEMM's operands are: taken into the GEMM's fusion, or buffers written before it.
  void decide_gemm_operands() {
    for (uint32_t i = 0; i < n; ++i) {
      if (!is_gemm(i)) continue;
      // A convolution is a cuDNN call (gpu/transforms/conv_rewriter.cc), not a Triton GEMM fusion: it reads
      // its operands from buffers, so whatever computes them is a fusion of its own - written once for all
      // its readers: priority fusion fuses a producer into all of its readers or none
      // (CanFuseWithAllNonBitcastUsers, priority_fusion.cc), and a cuDNN call fuses nothing. (A Triton
      // GEMM's operand is different: GemmFusion, which runs first, copies cheap producers into the GEMM's
      // fusion, and the other readers recompute them.)
      const bool cudnn = at(i).opcode == HloOpcode::kConvolution;
      for (uint32_t o : operands[i]) {
        if (cudnn) {
          materialized[o] = true;
          continue;
        }
        stop_at_unworthy(o);
        if (!materialized[o] && !gemm_input[o] && !fusible_into_gemm(o, 0)) write_for_gemm(o);
      }
    }
  }

  // XLA's IsOutputWorthFusing (triton_tiling_propagation.cc): an op is taken as an epilogue if it reads
  // at least what it writes, within kIoToleranceBytes (1 KiB), or if no user could fuse it
  // (CanNotBeFusedIntoAUser: the program's result, or the root tuple's only reader). So a widening
  // convert (bf16 product -> f32) is the GEMM's only as the program's result - mixed-precision
  // inference's f32 logits (gemm_fusion_dot.32 of the captured gpt_mixed_infer_b16) - while in training
  // the loss's fusions recompute the f32 logits from the bf16 product.
  bool output_worth_fusing(uint32_t to) const {
    uint64_t in_bytes = 0;
    for (uint32_t o : operands[to]) in_bytes = saturating_add(in_bytes, at(o).shape.own_bytes());
    if (saturating_add(in_bytes, kIoToleranceBytes) >= at(to).shape.own_bytes()) return true;
    const HloInstruction* only_user = users[to].size() == 1 ? &at(users[to][0]) : nullptr;
    return &at(to) == root || (only_user == root && only_user->opcode == HloOpcode::kTuple);
  }
  bool epilogue_of(uint32_t from, uint32_t to) const {
    if (!fuses(role[to]) || at(to).shape.is_tuple() || elements(at(to).shape) != elements(at(from).shape) ||
        !output_worth_fusing(to))
      return false;
    for (uint32_t o : operands[to])
      if (o != from && !epilogue_input(o)) return false;
    // Triton's GEMM emitter writes a batched product with its batch dimensions leading
    // (triton_tiling_propagation.cc: the batch dimension may not be split or moved): a transpose that
    // moves them - attention's [b, h, s, d] product to [b, s, h, d] - is a fusion of its own, a copy.
    const HloInstruction& t = at(to);
    if (t.opcode == HloOpcode::kTranspose && at(from).opcode == HloOpcode::kDot) {
      const size_t batch = at(from).lhs_batch_dims.size();
      for (size_t d = 0; d < batch; ++d)
        if (d >= t.dimensions.size() || t.dimensions[d] != static_cast<int64_t>(d)) return false;
    }
    return true;
  }
  // cuDNN's conv-bias-activation call also takes a relu after the bias when the biased result has no
  // other reader (cudnn_fused_conv_rewriter.cc: FuseBiasOrSideInput, then FuseRelu's WithOneUse, which
  // matches max(x, broadcast(constant)) - the constant's value is not read here). In training relu's
  // derivative reads the pre-activation too, so there the relu stays a fusion of its own.
  bool is_relu_of(uint32_t r, uint32_t x) const {
    if (at(r).opcode != HloOpcode::kMaximum || operands[r].size() != 2) return false;
    const uint32_t other = operands[r][0] == x ? operands[r][1] : operands[r][0];
    const HloInstruction& b = at(other);
    if (b.opcode == HloOpcode::kConstant) return true;
    return b.opcode == HloOpcode::kBroadcast && operands[other].size() == 1 &&
           at(operands[other][0]).opcode == HloOpcode::kConstant;
  }

  // A GEMM's elementwise epilogue (bias add, activation, convert to bf16) is written by the GEMM itself.
  void decide_gemm_epilogues() {
    for (uint32_t i = 0; i < n; ++i) {
      if (role[i] != Role::kGemm || folded_dot[i] || users[i].size() != 1 || &at(i) == root) continue;
      const uint32_t u = users[i][0];
      if (!epilogue_of(i, u)) continue;
      materialized[i] = false;
      uint32_t last = u;
      if (at(i).opcode == HloOpcode::kConvolution && users[u].size() == 1 && is_relu_of(users[u][0], u) &&
          epilogue_of(u, users[u][0]) && &at(u) != root) {
        last = users[u][0];
        materialized[u] = false;
      }
      materialized[last] = true;
      gemm_epilogue[last] = true;
      written_for_readers[last] = false;  // the GEMM writes it now, whoever reads it
    }
  }

  // The flops XLA's cost model counts for computing `v` once per element, through the fused ops it
  // is computed from (each counted at most `per` times: what a gather or a broadcast reads of it). A
  // division by a constant is the multiplication the simplifier makes of it (mark_cheap_divisions).
  double cone_flops(uint32_t v, uint64_t per) const {
    constexpr size_t kMaxConeNodes = 256;
    double flops = 0;
    std::vector<uint32_t> stack{v};
    std::unordered_set<uint32_t> seen{v};
    while (!stack.empty() && seen.size() <= kMaxConeNodes) {
      const uint32_t x = stack.back();
      stack.pop_back();
      const HloOpcode op =
          at(x).opcode == HloOpcode::kDivide && role[x] == Role::kCheap ? HloOpcode::kMultiply : at(x).opcode;
      flops +=
          xla_flops_per_element(op, at(x).shape.type) * static_cast<double>(std::min(element_count[x], per));
      for (uint32_t o : operands[x])
        if (!materialized[o] && fuses(role[o]) && seen.insert(o).second) stack.push_back(o);
    }
    return flops;
  }

  // A sum to a scalar of at most 16384 elements is one thread block on XLA:GPU (the row reduction's 1024
  // threads x 16 elements, ReductionDimensionRaceFreeBound in reduction_utils.cc; a longer one
  // TreeReductionRewriter splits into a first stage of many blocks). Its elementwise producer is fused
  // into it only where the producer's compute on one SM costs less than the launch it saves (priority
  // fusion's run times, fuses_into_one_block_reduction): a loss's per-token log-likelihood - a gather from
  // the log-softmax, a log per token - over 8192 or 16384 tokens is written by a loop fusion of its own (the
  // compiled GPT steps' and the flax encoder's [b, s, 1] select, read by the sum at the end), while a
  // ViT's over 64 images is summed in the same kernel. What it reads - the logits - is then no longer
  // read at the end of the step.
  void write_producers_of_one_block_reductions() {
    constexpr uint64_t kOneBlockElements = 1024 * 16;
    for (uint32_t r = 0; r < n; ++r) {
      const HloInstruction& red = at(r);
      if (role[r] != Role::kReduce || red.shape.is_tuple() || elements(red.shape) != 1 ||
          operands[r].size() != 2)
        continue;
      uint32_t q = operands[r][0];
      const uint64_t reduced = elements(at(q).shape);
      if (reduced > kOneBlockElements || reduced < 2) continue;
      // Through the reshapes and bitcasts that are no op of the producer's.
      while (!materialized[q] && operands[q].size() == 1 &&
             (at(q).opcode == HloOpcode::kReshape || at(q).opcode == HloOpcode::kBitcast))
        q = operands[q][0];
      if (materialized[q] || !fuses(role[q])) continue;
      if (!fuses_into_one_block_reduction(cone_flops(q, reduced), at(q).shape.own_bytes()))
        materialized[q] = true;
    }
  }

  // A value its one reading fusion recomputes for many of its own elements - read through a broadcast: a
  // loss's per-token division [b, s] read by the backward pass's [b, s, vocab] fusion - costs that fusion
  // its flops once per element read, where its own kernel would compute each element once. XLA's
  // performance model adds them to the fusion's compute, of which 5% shows over a memory-bound kernel's
  // traffic (CombineComputeAndMemoryAccessTime, kMemoryComputeParallelism = 0.95); where the extra outweighs
  // the launch and the traffic fusing saves, the value is a fusion of its own (the compiled GPT steps write
  // the division, multi-output fused with the per-token log-likelihood). Later values first: a chain of small
  // values is written at its end.
  void write_values_recomputed_per_broadcast() {
    // one_fusion_reading for every value, from each reader's: the readers come later in the computation
    // and are decided first, so each is walked once (a chain of 10^5 fused ops walked from each of its
    // values took 4096 steps a value).
    std::vector<uint32_t> reading(n, kNoFusion);
    for (uint32_t v = static_cast<uint32_t>(n); v-- > 0;) {
      reading[v] = fusion_reading_from_readers(v, reading);
      if (materialized[v] || !fuses(role[v]) || at(v).shape.is_tuple() || &at(v) == root) continue;
      // A scalar (an optimizer's bias correction, read by every update) is left to its readers: its buffer
      // would be 4 bytes, and XLA's CSE keeps one where the program computes it once per parameter.
      const uint64_t own = element_count[v];
      if (own < 2 || xla_flops_per_element(at(v).opcode, at(v).shape.type) == 0) continue;
      const std::optional<uint32_t> reader =
          reading[v] < n ? std::optional<uint32_t>(reading[v]) : std::nullopt;
      if (!reader) continue;
      const uint32_t c = *reader;
      const uint64_t read =
          role[c] == Role::kReduce && !operands[c].empty() ? element_count[operands[c][0]] : element_count[c];
      if (read <= own) continue;
      const double extra = cone_flops(v, own) * (static_cast<double>(read) / static_cast<double>(own) - 1);
      if (!fuses_recomputed(extra, at(v).shape.own_bytes())) materialized[v] = true;
    }
  }

  // What a reader of a fused value is to the fusion that takes the value in: the end of the walk where
  // it fuses nothing in (a GEMM, an epilogue, a value written for a GEMM, a buffer that is no fusion), the
  // fusion itself (a buffer of elementwise ops or a reduction), or a fused value whose readers are next.
  enum class Reader : uint8_t { kStops, kEnds, kPasses };
  Reader reader_of_fused(uint32_t u) const {
    if (gemm_input[u] || is_gemm(u) || gemm_epilogue[u]) return Reader::kStops;
    if (!fuses(role[u]) && role[u] != Role::kReduce) return Reader::kStops;
    return materialized[u] ? Reader::kEnds : Reader::kPasses;
  }

  // one_fusion_reading(v) from what each of v's readers gives (`reading`, filled for the readers already:
  // they come later in the computation). kNoFusion: the readers end in no buffer; kSeveralFusions: in
  // several, or in something no value fuses into. A reader out of order (not a program XLA accepts) counts
  // as several.
  static constexpr uint32_t kNoFusion = UINT32_MAX;
  static constexpr uint32_t kSeveralFusions = UINT32_MAX - 1;
  uint32_t fusion_reading_from_readers(uint32_t v, const std::vector<uint32_t>& reading) const {
    uint32_t fusion = kNoFusion;
    for (uint32_t u : users[v]) {
      uint32_t ends = kSeveralFusions;
      if (u > v) {
        switch (reader_of_fused(u)) {
          case Reader::kEnds:
            ends = u;
            break;
          case Reader::kPasses:
            ends = reading[u];
            break;
          case Reader::kStops:
            break;
        }
      }
      if (ends == kNoFusion) continue;
      if (ends == kSeveralFusions || (fusion != kNoFusion && fusion != ends)) return kSeveralFusions;
      fusion = ends;
    }
    return fusion;
  }

  // The one fusion all of `v`'s readers end up in, following its fused readers (elementwise ops, and
  // reductions already fused into a normalization) to the values that get a buffer; nullopt when they end
  // in several, in a GEMM (its fusion takes in cheap ops only, fusible_into_gemm), an epilogue, a value
  // written for a GEMM, or a buffer that fuses nothing. `seen` marks the values walked (with `v`'s stamp).
  // A walk longer than kMaxWalk gives nullopt: a hostile program of many such values, each read through long
  // fused chains, would otherwise be quadratic.
  std::optional<uint32_t> one_fusion_reading(uint32_t v, std::vector<uint32_t>& seen) const {
    constexpr size_t kMaxWalk = 4096;
    std::vector<uint32_t> stack(users[v].begin(), users[v].end());
    std::optional<uint32_t> fusion;
    size_t walked = 0;
    while (!stack.empty()) {
      const uint32_t u = stack.back();
      stack.pop_back();
      if (seen[u] == v) continue;
      seen[u] = v;
      if (++walked > kMaxWalk) return std::nullopt;
      switch (reader_of_fused(u)) {
        case Reader::kStops:
          return std::nullopt;
        case Reader::kEnds:
          if (fusion && *fusion != u) return std::nullopt;
          fusion = u;
          break;
        case Reader::kPasses:
          stack.insert(stack.end(), users[u].begin(), users[u].end());
          break;
      }
    }
    return fusion;
  }

  // An expensive value is written when several fusions would compute it (materialize_by_role), but its
  // readers are ops, not yet fusions: XLA's priority fusion fuses the cheap readers into their consumers
  // first and recomputes a producer's priority whenever its consumers merge (PriorityFusionQueue's
  // OnFusingInstruction and CalculateProducerPriority, xla/service/gpu/transforms/priority_fusion.cc).
  // When every reader ends up inside one fusion, fusing the producer there duplicates nothing and saves
  // its write and read, so it is fused: the tanh of a GELU's derivative, read by three elementwise ops of
  // one gradient (mlp_fp32_donate_remat_full's loop_add_fusion computes it from the recomputed product).
  //
  // A reduction read only inside one elementwise fusion that also reads what it reduced - the max and the
  // sum of a softmax, read by the subtraction and the division of the same rows - is part of that fusion:
  // XLA's SoftmaxRewriterTriton makes such a diamond one Triton fusion (triton_softmax, the compiled
  // gpt_fp32_infer_b32's reads the scores and the mask, nothing else), so the statistics never reach
  // memory. A norm's statistics that the backward pass also reads stay written (several fusions).
  //
  // Later values first, so a chain (a sum over the exp of what a max was subtracted from) fuses from its end.
  void fuse_values_read_by_one_fusion() {
    std::vector<uint32_t> seen(n, UINT32_MAX);
    for (uint32_t i = static_cast<uint32_t>(n); i-- > 0;) {
      if (!materialized[i] || &at(i) == root) continue;
      if (written_for_readers[i]) {
        if (one_fusion_reading(i, seen)) materialized[i] = false;
        continue;
      }
      if (role[i] != Role::kReduce || operands[i].empty() || at(i).shape.is_tuple() ||
          transposed_fold.contains(i) || folded_dot[operands[i][0]])
        continue;
      const std::optional<uint32_t> f = one_fusion_reading(i, seen);
      if (!f || !fuses(role[*f])) continue;
      // The diamond: what is reduced is also read, beside the reduction, by the fusion.
      const uint32_t reduced = operands[i][0];
      const bool diamond = std::any_of(users[reduced].begin(), users[reduced].end(),
                                       [&](uint32_t u) { return u != i && (u == *f || seen[u] == i); });
      if (!diamond) continue;
      materialized[i] = false;
      normalization[*f] = true;
    }
  }

  // A fusion's operands in the order XLA's fusion appends them (fusing a producer removes its operand and
  // appends the producer's own), nearest first: the direct buffers `ops` names, then, operand by operand,
  // what `fused` says a fused one reads. The order decides which dying operand's memory the result takes
  // (the heap tries them first to last): a residual sum x + attention + MLP takes the MLP's product, as in
  // the compiled ViT, not the stream. The one place this order is made, for every list below.
  template <typename Take, typename Fused>
  void in_fusion_order(std::span<const uint32_t> ops, Take&& take, Fused&& fused) const {
    for (uint32_t o : ops)
      if (materialized[o]) take(o);
    for (uint32_t o : ops)
      if (!materialized[o]) fused(o);
  }
  // The buffers behind `ops`, each once.
  std::vector<uint32_t> buffers_behind(std::span<const uint32_t> ops) const {
    std::vector<uint32_t> out;
    FirstSeen<uint32_t> seen;
    auto take = [&](uint32_t b) {
      if (seen.insert(b)) out.push_back(b);
    };
    in_fusion_order(ops, take, [&](uint32_t o) {
      for (uint32_t b : sources[o]) take(b);
    });
    return out;
  }

  // A fused value is recomputed inside each consumer, which reads the buffers it was computed from
  // instead. Operands precede users (schedule order), so a forward pass fills each list before it is read.
  void gather_sources() {
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
  }

  // XLA's layout assignment gives a reduction's operand the layout that makes it a row reduction, the
  // reduced dimensions most minor (GpuLayoutAssignment::PropagateReductionLayoutToOperand, through
  // LayoutAssignment::ChooseOperandLayoutFromOutputLayout), and elementwise ops pass a layout on to their
  // operands. A pool over the sequence of a norm's output - ViT's jnp.mean(x, axis=1) of [b, s, d], a middle
  // dimension - so lays the residual stream out transposed: the compiled fp32 ViT holds it as
  // f32[197,768,64], and with no default layout its norms are no Triton fusions (SoftmaxRewriterTriton's
  // IsTriviallyFusible). Where the stream ends in a GEMM instead (GPT's LM head, whose operand the dot's
  // constraint fixes, SetDotOperandLayout), it keeps the default layout. Approximated: whether a reduction
  // over dimensions other than the first and the minor one reads, through fused ops, a value a reduction
  // over the minor dimension normalizes (a norm's statistics); the layout itself is not modeled.
  bool stream_laid_out_by_a_pool() const {
    constexpr size_t kMaxWalk = 64;
    for (uint32_t r = 0; r < n; ++r) {
      if (role[r] != Role::kReduce || at(r).shape.is_tuple() || operands[r].empty()) continue;
      const auto rank = static_cast<int64_t>(at(operands[r][0]).shape.dims.size());
      const std::vector<int64_t>& reduced = at(r).dimensions;
      if (rank < 3 || reduced.empty() ||
          std::find(reduced.begin(), reduced.end(), rank - 1) != reduced.end() ||
          std::find(reduced.begin(), reduced.end(), 0) != reduced.end())
        continue;
      std::vector<uint32_t> stack{operands[r][0]};
      std::unordered_set<uint32_t> seen{operands[r][0]};
      while (!stack.empty() && seen.size() < kMaxWalk) {
        const uint32_t x = stack.back();
        stack.pop_back();
        const std::vector<uint32_t> reads = materialized[x] ? buffers_behind(operands[x]) : sources[x];
        for (uint32_t b : reads) {
          if (role[b] != Role::kReduce || operands[b].empty()) continue;
          const Shape& statistics_of = at(operands[b][0]).shape;
          const auto b_rank = static_cast<int64_t>(statistics_of.dims.size());
          const std::vector<int64_t>& b_reduced = at(b).dimensions;
          if (b_rank >= 2 && std::find(b_reduced.begin(), b_reduced.end(), b_rank - 1) != b_reduced.end() &&
              elements(statistics_of) == element_count[x])
            return true;
        }
        if (materialized[x]) continue;
        for (uint32_t o : operands[x])
          if (seen.insert(o).second) stack.push_back(o);
      }
    }
    return false;
  }

  // A norm's normalized rows, (x - mean) * rsqrt(var + eps), end its Triton fusion: SoftmaxRewriterTriton
  // (xla/service/gpu/transforms/softmax_rewriter_triton.cc) roots the diamond at the binary op that reads the
  // broadcast statistics and takes a consumer in only if it has one user (IsTriviallyFusible); priority
  // fusion then fuses that fusion into all of its readers or none (CanFuseWithAllNonBitcastUsers,
  // xla/service/gpu/transforms/priority_fusion.cc) and never duplicates it.
  // So rows that several fusions read - the scale and shift of the forward pass and the backward pass's
  // gradients of the scale and of the input - are written once and read by all: the compiled
  // gpt_mixed_donate and gpt_mixed_donate_cudnn keep each norm's rows (a Triton fusion, "jvp()/mul") beside
  // its scaled and shifted output (a loop fusion: the GEMM cannot take the bf16 cast of the scale in) until
  // the backward pass; with full remat the rows have one reader and the Triton fusion takes the scale and
  // shift in (gpt2dims_mixed_donate_remat_full_b16). Rows a GEMM takes in with their scale and shift
  // (gemm_input: fp32) are the same Triton fusion's: the compiled gpt_fp32 keeps fusion.920, two a layer,
  // for the forward GEMM, the backward GEMM and the scale's gradient - unless the stream has no default
  // layout (stream_laid_out_by_a_pool: the compiled fp32 ViT recomputes its norms in the backward pass,
  // and decide_gemm_operands writes the rows for each GEMM). The rows are the first value of the chain that
  // normalizes: none of its operands does. Returns whether any was written.
  bool write_shared_normalized_rows() {
    std::vector<uint32_t> seen(n, UINT32_MAX);
    std::vector<uint32_t> rows;
    // Rows a GEMM takes in with their scale and shift (fp32) are the Triton fusion's too, unless the
    // stream has no default layout.
    const bool transposed_stream = stream_laid_out_by_a_pool();
    for (uint32_t v = 0; v < n; ++v) {
      // The diamond's root is an elementwise binary op (MatchesTritonCompatibleClosedReductionDiamondImpl).
      if (materialized[v] || (transposed_stream && gemm_input[v]) || !fuses(role[v]) ||
          operands[v].size() != 2 || !several_readers(v) || at(v).shape.is_tuple())
        continue;
      if (!normalizes(sources[v], elements(at(v).shape), true)) continue;
      const bool operand_normalizes = std::any_of(operands[v].begin(), operands[v].end(), [&](uint32_t o) {
        return !materialized[o] && normalizes(sources[o], elements(at(o).shape), true);
      });
      if (operand_normalizes || one_fusion_reading(v, seen)) continue;
      rows.push_back(v);
    }
    for (uint32_t v : rows) materialized[v] = true;
    return !rows.empty();
  }

  // Whether a value computed from buffers `reads` is a softmax or a two-pass norm: it reads a buffer B and a
  // reduction r that itself reads B and an earlier reduction of B (sum(exp(x - max(x))), mean((x -
  // mean(x))^2)). XLA:GPU makes such a diamond one Triton fusion (SoftmaxRewriterTriton: triton_softmax). A
  // one-pass norm (mean(x) and mean(x*x), flax's fast variance) stays a multi-output reduction and a loop
  // fusion instead. `floating`: the rows B and both reductions hold floating-point values (not a gather's
  // indices and its bounds check's reduce-and, which also form such a diamond). `rows`: the value's element
  // count - the diamond's root writes rows of B's shape (MatchesTritonCompatibleClosedReductionDiamond);
  // a gather of one element per row of a log-softmax, a loss's log-likelihood, is a loop fusion.
  bool normalizes(const std::vector<uint32_t>& reads, uint64_t rows, bool floating = false) const {
    std::unordered_set<uint32_t> direct(reads.begin(), reads.end());
    const auto numbers = [&](uint32_t x) { return !floating || is_floating_point(at(x).shape.type); };
    for (uint32_t r : reads) {
      if (role[r] != Role::kReduce || !numbers(r)) continue;
      const std::vector<uint32_t> r_reads = buffers_behind(operands[r]);
      for (uint32_t b : r_reads) {
        if (!direct.contains(b) || role[b] == Role::kReduce || !numbers(b) || element_count[b] != rows)
          continue;
        for (uint32_t r0 : r_reads) {
          if (r0 == r || role[r0] != Role::kReduce || !numbers(r0)) continue;
          const std::vector<uint32_t> r0_reads = buffers_behind(operands[r0]);
          if (std::find(r0_reads.begin(), r0_reads.end(), b) != r0_reads.end()) return true;
        }
      }
    }
    return false;
  }

  void emit();
};

// The rewrite: the computation becomes its buffers, each reading the buffers its fused operands were
// computed from, with the copies written for GEMMs (gemm_input) emitted before the instruction that reads
// them; their indices follow the program's (n + k).
void Fusion::emit() {
  std::vector<HloInstruction> out;
  out.reserve(n);
  std::vector<std::string> copy_names;
  std::unordered_set<std::string> copy_name_set;
  std::unordered_map<uint64_t, uint32_t> copy_index;  // (value << 32 | GEMM) -> the copy's index
  auto name_of = [&](uint32_t b) -> const std::string& {
    return b < n ? comp.instructions[b].name : copy_names[b - n];
  };
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
    FirstSeen<uint64_t> seen;
    auto take = [&](uint64_t e) {
      if (seen.insert(e)) gemm_reads[x].push_back(e);
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
    FirstSeen<uint32_t> seen;
    auto take = [&](uint32_t b) {
      if (seen.insert(b)) order.push_back(b);
    };
    auto copy_for_gemm = [&](uint32_t x) {
      const uint64_t key = static_cast<uint64_t>(x) << 32 | gemm;
      if (auto found = copy_index.find(key); found != copy_index.end()) return found->second;
      HloInstruction copy;
      copy.opcode = HloOpcode::kCustomCall;
      copy.custom_call_target = xla_gpu_internal::kGemmInput;
      copy.shape = comp.instructions[x].shape;
      copy.op_name = comp.instructions[x].op_name;
      copy.category = comp.instructions[x].category;
      copy.line = comp.instructions[x].line;
      for (uint32_t b : self(x, UINT32_MAX, self)) copy.operands.push_back(name_of(b));
      std::string name = fmt::format("{}.for.{}", comp.instructions[x].name, comp.instructions[gemm].name);
      while (index.contains(name) || copy_name_set.contains(name)) name += "$";  // names stay unique
      copy.name = name;
      const auto position = static_cast<uint32_t>(n + copy_names.size());
      copy_index.emplace(key, position);
      copy_name_set.insert(name);
      copy_names.push_back(std::move(name));
      out.push_back(std::move(copy));
      return position;
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
  // What each reduction written reads, recorded before the loop below moves the instructions out (an
  // operand written earlier would have lost its shape by the time its reduction is reached).
  if (reduced_inputs != nullptr) {
    for (uint32_t i = 0; i < n; ++i)
      if (materialized[i] && role[i] == Role::kReduce && !operands[i].empty() &&
          at(i).opcode == HloOpcode::kReduce)
        reduced_inputs->emplace(at(i).name, at(operands[i][0]).shape);
  }
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
      dot.custom_call_target = xla_gpu_internal::kBatchContractingDot;
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
      inst.custom_call_target = xla_gpu_internal::kGemmWithEpilogue;
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
    } else if (fuses(role[i]) && (normalization[i] || normalizes(unique, element_count[i]))) {
      // A softmax or a two-pass norm: one fusion in XLA:GPU that reads each row whole before writing it, so
      // its result cannot take the input's memory (FusionCanShareBufferHint stops at a reduction).
      inst.opcode = HloOpcode::kCustomCall;
      inst.custom_call_target = xla_gpu_internal::kNormalization;
    }
    out.push_back(std::move(inst));
  }
  comp.instructions = std::move(out);
}

}  // namespace

Adjacency Adjacency::transposed(size_t rows) const {
  Adjacency t;
  t.offsets_.assign(rows + 1, 0);
  for (uint32_t x : edges_) ++t.offsets_[x + 1];
  for (size_t j = 0; j < rows; ++j) t.offsets_[j + 1] += t.offsets_[j];
  t.edges_.resize(edges_.size());
  std::vector<size_t> next(t.offsets_.begin(), t.offsets_.end() - 1);
  for (size_t i = 0; i + 1 < offsets_.size(); ++i)
    for (size_t e = offsets_[i]; e < offsets_[i + 1]; ++e)
      t.edges_[next[edges_[e]]++] = static_cast<uint32_t>(i);
  return t;
}

Status fuse_computation(HloComputation& comp, const Combiners& combiners, ReducedInputs* reduced_inputs) {
  Fusion f(comp, combiners);
  f.reduced_inputs = reduced_inputs;
  return f.run();
}

}  // namespace memfit::xla_gpu_internal
