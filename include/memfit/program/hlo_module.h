// memfit/program/hlo_module.h - an XLA HLO module read from its text (`compiled.as_text()` or a dump's
// `*after_optimizations.txt`): computations in schedule order, instructions with shapes, operands, called
// computations and the JAX op that made them, and the entry's input/output aliasing (donation).
//
// Sizes follow XLA (../shared/FACTS.md §5, checked against compiled.memory_analysis() on every shared
// program): an array is elements x element size (packed sub-byte types when the layout says E(n)); a tuple
// is a table of 8-byte pointers to its elements. argument bytes = the entry parameters' arrays; output
// bytes = the root's arrays plus its tuple table; alias bytes = the outputs that reuse a donated argument.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "memfit/core/dtype.h"
#include "memfit/core/status.h"
#include "memfit/program/hlo_opcode.h"

namespace memfit {

// The compiler that wrote the module, told by its backend_config attributes (the text names no platform).
enum class HloPlatform { kUnknown, kGpu, kCpu };

// XLA's memory space of host memory (kHostMemorySpaceColor, memory_kind="pinned_host").
inline constexpr uint32_t kHostMemorySpace = 5;

struct Shape {
  PrimitiveType type = PrimitiveType::kTuple;
  std::vector<uint64_t> dims;
  std::vector<uint32_t> minor_to_major;  // the layout's dimension order; empty when not printed
  uint32_t packed_element_bits = 0;      // the layout's E(n); 0 when absent
  uint32_t memory_space = 0;             // the layout's S(n): 0 device, 5 host (XLA's kHostMemorySpaceColor)
  std::vector<Shape> elements;           // a tuple's elements

  bool is_tuple() const { return type == PrimitiveType::kTuple; }
  // Bytes of this buffer alone: an array's data, or a tuple's pointer table.
  uint64_t own_bytes() const;
  // Bytes of every array below (leaves of a tuple), without tuple tables.
  uint64_t leaf_bytes() const;
  uint64_t leaf_count() const;
  // The sub-shape at a tuple index path ({} = this shape); nullptr when the path does not exist.
  const Shape* at(const std::vector<uint64_t>& index) const;
  std::string to_string() const;  // "f32[2048,1024]", "(f32[4], s32[])"
};

// A T on the heap that is copied with its owner, and takes one pointer while nothing has been written to it.
template <typename T>
class Boxed {
 public:
  Boxed() = default;
  Boxed(const Boxed& other) : value_(other.value_ ? std::make_unique<T>(*other.value_) : nullptr) {}
  Boxed(Boxed&&) noexcept = default;
  Boxed& operator=(const Boxed& other) {
    if (this != &other) value_ = other.value_ ? std::make_unique<T>(*other.value_) : nullptr;
    return *this;
  }
  Boxed& operator=(Boxed&&) noexcept = default;
  ~Boxed() = default;

  bool has_value() const { return value_ != nullptr; }
  // The value, or a default-made one when none was written.
  const T& get() const { return value_ ? *value_ : kEmpty; }
  T& mutable_get() {
    if (!value_) value_ = std::make_unique<T>();
    return *value_;
  }

 private:
  static inline const T kEmpty{};
  std::unique_ptr<T> value_;
};

struct HloInstruction {
  // gather and scatter: their dimension numbers - gather's offset_dims, collapsed_slice_dims,
  // operand_batching_dims, start_indices_batching_dims; scatter's update_window_dims, inserted_window_dims,
  // input_batching_dims, scatter_indices_batching_dims - and index_vector_dim (-1: not given).
  struct GatherDims {
    std::vector<int64_t> window, collapsed, operand_batching, indices_batching;
    int64_t index_vector_dim = -1;
  };
  // output_to_operand_aliasing={{out}: (operand, {index})}: outputs written in place over an operand.
  struct OperandAlias {
    std::vector<uint64_t> output_index;
    uint64_t operand = 0;
    std::vector<uint64_t> operand_index;
  };
  // What few instructions carry, held apart (Boxed): a plan moves and copies every instruction of a
  // 10^5-instruction program pass after pass, and these were 272 of an instruction's 712 bytes.
  struct Rare {
    std::string opcode_text;  // the opcode as written, when XLA's name for it differs (see opcode_name)
    std::string fusion_kind;  // fusion kind=kLoop|kInput|kOutput|kCustom
    // custom-call annotate_device_placement: where JAX asked the value to live, frontend_attributes'
    // _xla_buffer_placement ("pinned_host", "unpinned_host", "device"): jax.device_put(x,
    // memory_kind=...) and offloading remat policies. Empty otherwise.
    std::string buffer_placement;
    GatherDims gather_dims;
    std::vector<OperandAlias> operand_aliases;
    // A parameter or the ENTRY root of a program before partitioning: into how many parts its sharding
    // splits each dimension across the devices - one list for an array, one per element for a tuple (HLO's
    // sharding={devices=[8,1]<=[8]} or {{...}, {...}}, StableHLO's mhlo.sharding or sdy.sharding on main's
    // arguments and results). An empty list: every device holds it whole.
    std::vector<std::vector<uint64_t>> sharding_tiles;
    // Beside sharding_tiles (same layout), which device axis splits each dimension: a token per dimension,
    // "" when it is whole. Two dimensions split by one token are split the same way across the devices (the
    // same mesh axis): Shardy's axis names ("data", "data,model"), or for an HLO sharding the devices' order
    // along that tile dimension (sharding_axis_tokens). An empty list: no sharding given (the compiler's
    // choice). Also read for a Sharding custom call (jax.lax.with_sharding_constraint).
    std::vector<std::vector<std::string>> sharding_axes;
  };

  std::string name;  // without the '%'
  HloOpcode opcode = HloOpcode::kUnknown;
  Shape shape;
  std::vector<std::string> operands;    // instruction names
  std::vector<std::string> called;      // computations: calls=, to_apply=, condition=, body=, branches
  std::string op_name;                  // metadata={op_name="jit(step)/..."}
  int64_t parameter_number = -1;        // parameter(N)
  int64_t tuple_index = -1;             // get-tuple-element index=N
  std::string custom_call_target;       // custom-call custom_call_target="..."
  std::vector<int64_t> dimensions;      // reduce: the dimensions reduced; transpose: the permutation
  std::vector<int64_t> lhs_batch_dims;  // dot: lhs_batch_dims= (StableHLO batching_dims, left side)
  // dot: the other dimension numbers (StableHLO's batching_dims right side, contracting_dims both sides),
  // which the model of XLA's SPMD partitioner needs to map a dot's shardings.
  std::vector<int64_t> rhs_batch_dims, lhs_contracting_dims, rhs_contracting_dims;
  HloOpcode reducer = HloOpcode::kUnknown;       // reduce (StableHLO): the combining op when it is one op
  HloPlatform platform = HloPlatform::kUnknown;  // what its backend_config says, if anything
  // What the buffer is for, when memfit built the program (model zoo): parameters, optimizer_state,
  // gradients, activations, temporaries. Empty for parsed modules.
  std::string category;
  bool is_root = false;
  uint64_t line = 0;
  Boxed<Rare> rare;  // read through the accessors below

  const std::string& fusion_kind() const { return rare.get().fusion_kind; }
  std::string& mutable_fusion_kind() { return rare.mutable_get().fusion_kind; }
  const std::string& buffer_placement() const { return rare.get().buffer_placement; }
  std::string& mutable_buffer_placement() { return rare.mutable_get().buffer_placement; }
  const GatherDims& gather_dims() const { return rare.get().gather_dims; }
  GatherDims& mutable_gather_dims() { return rare.mutable_get().gather_dims; }
  const std::vector<OperandAlias>& operand_aliases() const { return rare.get().operand_aliases; }
  std::vector<OperandAlias>& mutable_operand_aliases() { return rare.mutable_get().operand_aliases; }
  const std::vector<std::vector<uint64_t>>& sharding_tiles() const { return rare.get().sharding_tiles; }
  std::vector<std::vector<uint64_t>>& mutable_sharding_tiles() { return rare.mutable_get().sharding_tiles; }
  const std::vector<std::vector<std::string>>& sharding_axes() const { return rare.get().sharding_axes; }
  std::vector<std::vector<std::string>>& mutable_sharding_axes() { return rare.mutable_get().sharding_axes; }

  // The opcode as the text spells it (fusion-start for an async-start of a fusion, a StableHLO op with no
  // HLO twin), else XLA's name for it.
  std::string_view opcode_name() const {
    const std::string& text = rare.get().opcode_text;
    return text.empty() ? hlo_opcode_name(opcode) : std::string_view(text);
  }
  // Another opcode, spelled XLA's way.
  void set_opcode(HloOpcode op) {
    opcode = op;
    if (!rare.get().opcode_text.empty()) rare.mutable_get().opcode_text.clear();
  }
  void set_opcode(std::string_view spelled) {
    opcode = hlo_opcode_from_name(spelled);
    if (hlo_opcode_name(opcode) != spelled) {
      rare.mutable_get().opcode_text = std::string(spelled);
    } else if (!rare.get().opcode_text.empty()) {
      rare.mutable_get().opcode_text.clear();
    }
  }
};

struct HloComputation {
  std::string name;
  bool is_entry = false;
  std::vector<HloInstruction> instructions;  // in the module's schedule order

  const HloInstruction* root() const;
};

// The _xla_buffer_placement in an op's frontend attributes, as HLO text (`key="v"`) and StableHLO
// (`key = "v"`) write it; empty when absent.
std::string buffer_placement_attribute(std::string_view attributes);

// XLA's HloComputation::MakeInstructionPostOrder (xla/hlo/ir/hlo_computation.cc): depth first from each
// instruction nothing in the computation reads, taken in instruction order, first operands first. Indices
// into comp.instructions; an operand the computation does not define is skipped. Only instructions on a
// cycle (no program XLA accepts) are left out - and, of kWhatTheRootReads, what the root does not read
// (but parameters, and every element of a tuple it reads: how JAX lowers a function, its dead code gone).
enum class PostOrderOf : uint8_t { kAll, kWhatTheRootReads };
std::vector<uint32_t> instruction_post_order(const HloComputation& comp, PostOrderOf of = PostOrderOf::kAll);

// Reorders `instructions` in place to `order` (indices into it, each at most once), dropping those it does
// not name: a deep model's entry (10^5 instructions of a few hundred bytes each) is reordered without a
// second array.
void reorder_instructions(std::vector<HloInstruction>& instructions, const std::vector<uint32_t>& order);

struct HloAlias {
  std::vector<uint64_t> output_index;
  int64_t parameter = 0;
  std::vector<uint64_t> parameter_index;
  bool must_alias = false;
};

struct HloModule {
  std::string name;
  bool is_scheduled = false;
  bool from_stablehlo = false;  // read from StableHLO MLIR text (program/stablehlo_module.h)
  // The devices a program before partitioning is sharded over (its sharding annotations: HLO's
  // sharding={devices=[...]}, StableHLO's mhlo.num_partitions); 1 when none. A compiled module is already
  // one device's program.
  uint64_t num_partitions = 1;
  // Set by the model of XLA:GPU (plan/xla_gpu_model.h) when it partitioned such a program as XLA's SPMD
  // partitioner would: every shape is then one device's share. partition_notes: where it approximated.
  bool partitioned = false;
  std::vector<std::string> partition_notes;
  HloPlatform platform = HloPlatform::kUnknown;
  std::vector<HloAlias> aliases;
  // Donated arguments with no output named (HLO's buffer_donor=, StableHLO's jax.buffer_donor, which JAX
  // writes for a sharded step): the compiler picks the outputs they alias (plan/xla_gpu_model.h).
  struct BufferDonor {
    int64_t parameter = 0;
    std::vector<uint64_t> parameter_index;
  };
  std::vector<BufferDonor> buffer_donors;
  std::vector<HloComputation> computations;

  const HloComputation* entry() const;
  HloComputation* entry() { return const_cast<HloComputation*>(std::as_const(*this).entry()); }
  const HloComputation* find(std::string_view computation_name) const;
};

// The devices an HLO sharding attribute's value tiles over: "{devices=[8,1]<=[8]}" and
// "{devices=[2,1,4]<=[8] last_tile_dim_replicate}" -> 8, "{devices=[2,2]0,1,2,3}" -> 4, "{replicated}" or
// "{maximal device=0}" -> 1. Saturates at 2^32 (a hostile annotation).
uint64_t sharding_devices(std::string_view sharding);

// The parts each of an array's `rank` dimensions is split into by an HLO sharding attribute's value:
// "{devices=[8,1]<=[8]}" -> {8, 1}; "{devices=[1,4,2]<=[2,4]T(1,0) last_tile_dim_replicate}" -> {1, 4} (the
// last tile dimension replicates); "{replicated}", "{maximal device=0}" or anything else -> {} (whole).
std::vector<uint64_t> sharding_tiles(std::string_view sharding, size_t rank);

// Which device axis splits each of an array's `rank` dimensions under an HLO sharding attribute's value
// (HloInstruction::sharding_axes): "" for a whole dimension; else a token naming how the devices are ordered
// along that tile dimension ("{devices=[2,1,4]<=[8] last_tile_dim_replicate}" and
// "{devices=[1,2]<=[2,4]T(1,0) last_tile_dim_replicate}" give equal tokens to dimensions split by the same
// devices). Every token "" when sharding_tiles gives {} (held whole).
std::vector<std::string> sharding_axis_tokens(std::string_view sharding, size_t rank);

// The most instructions memfit reads in one module: ten times the largest modules it is built for
// (ARCHITECTURE.md), a bound on memory and time for text that is not a real program.
inline constexpr uint64_t kMaxHloInstructions = 4'000'000;

// Errors name the line and what was expected there. Every size is checked (no overflow). Two ENTRY
// computations, two computations or instructions of one name, or two parameters of one number are errors.
Expected<HloModule> parse_hlo_module(std::string_view text);

// The checks every importer's module passes (HLO text, StableHLO): one ENTRY, unique names, one parameter
// per number, and no shape or tuple whose bytes overflow 64 bits.
Status validate_hlo_module(const HloModule& module);

struct EntrySizes {
  uint64_t argument_bytes = 0;
  uint64_t output_bytes = 0;
  uint64_t alias_bytes = 0;
  // The same in host memory (S(5): jax.device_put(x, memory_kind="pinned_host")), not on the device.
  uint64_t host_argument_bytes = 0;
  uint64_t host_output_bytes = 0;
  uint64_t host_alias_bytes = 0;
};

// compiled.memory_analysis()'s argument, output and alias sizes, from the entry computation; an array in
// host memory counts in the host_* figures, as xla/pjrt/compiled_memory_stats.cc sorts allocations.
Expected<EntrySizes> entry_sizes(const HloModule& module);

}  // namespace memfit
