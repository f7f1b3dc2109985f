// Internal to memfit_plan: the passes of the XLA:GPU model (memfit/plan/xla_gpu_model.h) kept in files of
// their own - fusion (xla_gpu_fusion.cc) and its priority fusion (xla_gpu_priority_fusion.cc), host offload
// (xla_gpu_host_offload.cc), the list scheduler (xla_gpu_schedule.cc), copy insertion
// (xla_gpu_copy_insertion.cc) - and what they share with the simplification passes (xla_gpu_model.cc).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "memfit/core/name_map.h"
#include "memfit/core/status.h"
#include "memfit/program/hlo_module.h"

namespace memfit::xla_gpu_internal {

// What an opcode is to fusion, resolved once per instruction.
enum class Role {
  kCheap,      // elementwise or data movement XLA fuses into its consumers and duplicates freely
  kExpensive,  // elementwise, fused, but not duplicated into several consumers (IsExpensive)
  kGemm,       // a library call or GEMM fusion root: dot, convolution
  kRoot,       // gets its own buffer: scatter, sort, custom calls, collectives, rng ...
  kReduce,     // gets its own buffer, with its elementwise producers fused in (XLA:GPU's input fusion)
  kForward,    // no buffer of its own: tuple, get-tuple-element, bitcast, optimization barrier
  kControl,    // while, call, conditional: its operands and result are buffers
  kParameter,
  kConstant,
};
Role role_of(HloOpcode op);
// Fused into its readers (recomputed there) unless a rule writes it.
inline bool fuses(Role r) { return r == Role::kCheap || r == Role::kExpensive; }

// The sum over a split GEMM's partials (a reduce so marked): fused into each reader, as XLA's are.
inline constexpr std::string_view kSplitKReduce = "__memfit$split_k_reduce";
// An elementwise fusion that reads a value through a transpose XLA fuses into it: no result shares an
// operand's buffer, and a new value of a donated parameter is written apart and copied over it.
inline constexpr std::string_view kTransposeFusion = "__memfit$transpose_fusion";
// The other kernels fusion writes as custom calls of its own: a value written for a GEMM that cannot take it
// in, a dot that contracts a sum's batch dimensions, a GEMM with its epilogue (the epilogue's op kept), a
// softmax or norm (one Triton fusion). All start with kModeledKernel; XLA's own custom calls do not.
inline constexpr std::string_view kModeledKernel = "__memfit$";
inline constexpr std::string_view kGemmInput = "__memfit$gemm_input";
inline constexpr std::string_view kBatchContractingDot = "__memfit$batch_contracting_dot";
inline constexpr std::string_view kGemmWithEpilogue = "__memfit$gemm_with_epilogue";
inline constexpr std::string_view kNormalization = "__memfit$normalization";
// Whether a modeled buffer is written by a GEMM (a dot, a convolution, or fusion's kernels around one).
inline bool written_by_gemm(const HloInstruction& x) {
  return x.opcode == HloOpcode::kDot || x.opcode == HloOpcode::kConvolution ||
         x.custom_call_target == kGemmWithEpilogue || x.custom_call_target == kBatchContractingDot;
}

// An array's elements (a tuple's: 1).
uint64_t elements(const Shape& s);

// Each computation's root opcode: the combiner of the reductions and scatters that call it.
using Combiners = std::unordered_map<std::string, HloOpcode>;
// What a reduce or scatter combines with: its one-op region (StableHLO), else its called computation's root.
HloOpcode combiner_of(const HloInstruction& x, const Combiners& combiners);

// What each reduction the fusion wrote reads (its input's shape), by name: a fused computation no longer
// shows it, and multi-output fusion compares loop shapes by it.
using ReducedInputs = std::unordered_map<std::string, Shape>;

// XLA:GPU's fusion of one computation, simplified and its GEMMs split (xla_gpu_fusion.cc): the computation
// becomes the values that get a buffer, each reading the buffers its fused operands were computed from;
// `reduced_inputs`, if given, receives what each reduction reads.
Status fuse_computation(HloComputation& comp, const Combiners& combiners,
                        ReducedInputs* reduced_inputs = nullptr);

// Each instruction's operands, or users, by index: row i holds instruction i's, in order (a value read
// twice, twice). One array for all rows: a vector per instruction was the fusion pass's largest share of a
// deep step's allocations (2 x 10^5 instructions, two rows each).
class Adjacency {
 public:
  std::span<const uint32_t> operator[](uint32_t i) const {
    return {edges_.data() + offsets_[i], offsets_[i + 1] - offsets_[i]};
  }
  // Rows are written in order: begin_row(), then add() its entries.
  void begin_row() {
    if (offsets_.empty()) offsets_.push_back(0);
    offsets_.push_back(offsets_.back());
  }
  void add(uint32_t x) {
    edges_.push_back(x);
    ++offsets_.back();
  }
  void reserve(size_t rows, size_t edges) {
    offsets_.reserve(rows + 1);
    edges_.reserve(edges);
  }
  // The transpose: row j lists the rows that hold j, in row order. `rows`: how many rows it has.
  Adjacency transposed(size_t rows) const;

 private:
  std::vector<size_t> offsets_;  // rows + 1 once a row is begun
  std::vector<uint32_t> edges_;
};

// A computation as the fusion model reads it: each instruction's role, operands and users by index.
struct FusionGraph {
  const HloComputation& comp;
  const std::vector<Role>& role;
  const Adjacency& operands;
  const Adjacency& users;
};
// XLA's priority fusion over the values several fusions read (xla_gpu_priority_fusion.cc): each candidate
// is fused into all of its readers or written once. `written` holds whether each other value is a buffer
// and receives the candidates' decisions.
void prioritize_shared_values(const FusionGraph& g, const std::vector<bool>& candidate,
                              std::vector<bool>& written);

// The flops XLA's cost model counts for one element of `op` (GpuHloCostAnalysis with the H100's op
// profile): a transcendental's clock cycles, an add's 7, a multiply's 3, any other elementwise op 3, data
// movement 0.
double xla_flops_per_element(HloOpcode op, PrimitiveType type);
// Whether XLA's priority fusion fuses a producer into a reduction XLA:GPU runs as one thread block (a sum
// to a scalar of at most 16384 elements): gpu_performance_model.cc's run times, fused against unfused, for
// a producer of `producer_flops` (per XLA's cost model) writing `producer_bytes`.
bool fuses_into_one_block_reduction(double producer_flops, uint64_t producer_bytes);

// XLA:GPU's sibling multi-output fusion (xla_gpu_multi_output_fusion.cc) over a fused computation: buffers
// that read the same buffer and that one kernel can write together become one fusion with several outputs;
// the fused computations it makes are appended to `bodies`, named apart from `names` (which receives them).
void fuse_sibling_outputs(HloComputation& comp, const ReducedInputs& reduced_inputs,
                          std::vector<HloComputation>& bodies, std::unordered_set<std::string>& names);

// Whether priority fusion fuses a producer into a memory-bound consumer that recomputes it for
// `extra_flops` in all (its flops times the elements read per element): 5% of that compute shows over the
// consumer's traffic (CombineComputeAndMemoryAccessTime), against the launch and traffic fusing saves.
bool fuses_recomputed(double extra_flops, uint64_t producer_bytes);

// Host memory spaces from JAX's placement annotations (XLA's HostOffloader).
void place_offloaded_values(HloComputation& comp);
// XLA's latency-hiding scheduler over a computation that copies values to or from the host
// (xla_gpu_latency_hiding.cc), under the scheduler's memory limit; a computation without such copies keeps
// its order.
void latency_hiding_schedule(HloComputation& comp, uint64_t memory_limit_bytes);

// A computation's data edges by index: each reader's operands once each, in the order it lists them, and
// each instruction's readers in program order; `positional` every operand in place, as a tuple's elements
// need. nullopt when an operand is not an instruction of the computation (not a well-formed one). `index`:
// the computation's names, where the caller has them already.
struct OperandGraph {
  std::vector<std::vector<uint32_t>> operands, users;
  std::vector<std::vector<uint32_t>> positional;
};
std::optional<OperandGraph> operand_graph(const HloComputation& comp, const NameIndex& index);
std::optional<OperandGraph> operand_graph(const HloComputation& comp);

// XLA's ListScheduler over the modeled computation; `runs_after`: pairs (a, b), b to run after a.
void list_schedule(HloComputation& comp, const std::vector<std::pair<uint32_t, uint32_t>>& runs_after);
// XLA's MakeInstructionPostOrder, the order a computation converted from StableHLO gets.
void xla_post_order(HloComputation& comp);
void dfs_schedule(HloComputation& comp);

// XLA's copy insertion for loops; and for the list scheduler, each reader of a donated parameter's copy
// before the op that writes the new value over it.
Status insert_while_copies(HloModule& m);
std::vector<std::pair<uint32_t, uint32_t>> readers_before_writers(const HloModule& m,
                                                                  const HloComputation& c);

}  // namespace memfit::xla_gpu_internal
