// src/program/zoo_lowered.h - the model zoo's writer of *lowered* programs, private to the program layer:
// the op-by-op program jax.jit(step).lower() prints (dot_general, broadcasts, elementwise ops, reductions,
// jax.checkpoint's optimization barriers), before XLA fuses or schedules anything. The plan then goes
// through the same model of XLA:GPU as a user's own lowered program (plan/xla_gpu_model.h): the zoo says
// what JAX traces, the GPU model what XLA materializes. zoo_mlp_lowered.cc writes the MLP this way.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "memfit/program/adafactor.h"
#include "memfit/program/hlo_module.h"
#include "memfit/program/model_spec.h"
#include "memfit/program/model_zoo.h"

namespace memfit::zoo {

class LoweredEmitter {
 public:
  struct V {
    std::string name;
    Shape shape;
  };

  explicit LoweredEmitter(HloModule& module) : m_(module) {}
  // Room for about `instructions` in the computation being written: a deep model's entry is written
  // without moving its instructions each time the vector grows.
  void reserve(size_t instructions) { entry_.reserve(instructions); }

  static Shape array(PrimitiveType type, std::vector<uint64_t> dims) {
    Shape s;
    s.type = type;
    s.dims = std::move(dims);
    return s;
  }

  // What the next instructions are for (the plan's breakdown: activations, gradients, temporaries, ...)
  // and the op name JAX's metadata would give them.
  void set_category(std::string category) { category_ = std::move(category); }
  const std::string& category() const { return category_; }
  void set_op_name(std::string op_name) { op_name_ = std::move(op_name); }

  V parameter(const Shape& shape, const std::string& op_name, const std::string& category);
  uint64_t parameter_count() const { return parameters_; }
  // A scalar constant broadcast to `dims` (jnp's Python scalars in an expression).
  V splat(PrimitiveType type, const std::vector<uint64_t>& dims);
  // Zeros of `dims` (a loop's initial sums and stacks): one broadcast per shape and type in each computation,
  // as JAX's lowering shares equal constants (XLA's copy insertion then gives each loop element that needs
  // one a copy of its own).
  V zeros(PrimitiveType type, const std::vector<uint64_t>& dims);
  // A scalar constant: one per type in each computation, whatever its value (an HloInstruction holds no
  // literal, and a scalar is folded into its readers: only a loop's operand is a buffer, of a few bytes).
  V scalar(PrimitiveType type);
  // broadcast_in_dim: `kept` names the output dimensions the operand's dimensions become.
  V broadcast(const V& x, const std::vector<uint64_t>& dims, const std::vector<int64_t>& kept);
  V reshape(const V& x, const std::vector<uint64_t>& dims);
  V transpose(const V& x, const std::vector<int64_t>& permutation);
  V convert(const V& x, PrimitiveType type);
  // x as `type`, as jnp's astype writes it: x itself when it is of that type already, else a convert.
  V astype(const V& x, PrimitiveType type) { return x.shape.type == type ? x : convert(x, type); }
  V unary(const char* opcode, const V& x);
  V binary(const char* opcode, const V& a, const V& b);  // elementwise, on equal shapes
  // jax.device_put(x, memory_kind=...) as an offloading remat policy writes it: an
  // annotate_device_placement custom call whose _xla_buffer_placement is `placement` ("pinned_host",
  // "device").
  V place(const V& x, const char* placement);
  // A custom call (a library kernel such as cuDNN's fused attention) returning a tuple of `results`; their
  // values are returned. `primitive` names it in op_name as JAX does ("dot_product_attention_fwd").
  std::vector<V> custom_call(const char* target, const char* primitive, const std::vector<V>& operands,
                             const std::vector<Shape>& results);
  V compare(const V& a, const V& b);  // pred of a's dims
  V select(const V& predicate, const V& on_true, const V& on_false);
  // An array constant JAX folded (jnp.tril's mask): its bytes, not its literal.
  V constant(const Shape& shape);
  // One of jnp.split's pieces: `size` of `x` along `dim` (where it starts moves no bytes).
  V slice(const V& x, size_t dim, uint64_t size);
  // table[indices]: rows of `table` ([rows, width]) at `indices` ([..., 1]), shaped [..., width].
  V gather(const V& table, const V& indices);
  // take_along_axis's gather: one entry of `x` per row at `indices`, shaped `dims`.
  V gather(const V& x, const V& indices, const std::vector<uint64_t>& dims);
  // A scatter-add of `updates` into `operand` at `indices` (a gather's transpose).
  V scatter(const V& operand, const V& indices, const V& updates);
  V concatenate(const std::vector<V>& values, size_t dim);
  // dot_general: `batch_dims` leading dimensions of both operands are batch dimensions.
  V dot(const V& a, const V& b, const std::vector<uint64_t>& dims, PrimitiveType type, size_t batch_dims = 0);
  // dot_general whose batch dimensions are `lhs_batch_dims` of the left operand, wherever they lie (flax's
  // attention: the heads of [B,S,H,hd]); the result starts with them.
  V batched_dot(const V& a, const V& b, const std::vector<uint64_t>& dims, PrimitiveType type,
                const std::vector<int64_t>& lhs_batch_dims);
  // lax.conv_general_dilated as flax's Conv writes it (NHWC, HWIO): a convolution of `x` by `kernel`
  // shaped `dims`; its transposes are convolutions too (the input's gradient by the flipped kernel, the
  // kernel's by the input and the output's gradient).
  V convolution(const V& x, const V& kernel, const std::vector<uint64_t>& dims);
  // lax.reduce_window's sum, shaped `dims` (avg_pool's sum over each window, or its transpose over the
  // padded gradient).
  V reduce_window_sum(const V& x, const std::vector<uint64_t>& dims);
  // lax.pad with zeros, shaped `dims`.
  V pad(const V& x, const std::vector<uint64_t>& dims);
  // A sum over `reduced`; the result keeps the other dimensions in order.
  V reduce_sum(const V& x, const std::vector<int64_t>& reduced);
  V reduce_max(const V& x, const std::vector<int64_t>& reduced);
  V reduce_and(const V& x, const std::vector<int64_t>& reduced);  // jnp.all over `reduced` of a pred
  // jax.checkpoint: what the recomputation reads goes through an optimization barrier (a tuple in, its
  // elements out), so XLA cannot move the recomputation into the forward pass.
  std::vector<V> barrier(const std::vector<V>& values);
  // lax.dynamic_index_in_dim's slice: `sizes` of `x` from the scalar `starts`.
  V dynamic_slice(const V& x, const std::vector<V>& starts, const std::vector<uint64_t>& sizes);
  // lax.dynamic_index_in_dim(x, index, 0, keepdims=False): the slice of `x` at the scalar `index` along its
  // leading dimension, as a scan's body reads its stacked inputs.
  V index_leading(const V& x, const V& index);
  // lax.dynamic_update_index_in_dim(x, update, index, 0): `x` with `update` written at `index` along its
  // leading dimension, as a scan's body stacks its outputs.
  V update_leading(const V& x, const V& update, const V& index);
  // lax.dynamic_update_slice(x, update, starts): `update` written into `x` at the scalar `starts`.
  V dynamic_update_slice(const V& x, const V& update, const std::vector<V>& starts);
  // The sum of `x` over the devices of a tensor-parallel group (all-reduce with an add region): what XLA's
  // SPMD partitioner writes after a GEMM whose contraction is split across them.
  V all_reduce_sum(const V& x);
  // jax.lax.scan as JAX lowers it: a while loop over a tuple of carried values whose element 0 is the
  // s32 counter, run `trips` times. `body` writes the body's instructions (into their own computation)
  // from the carried values and returns their next values; the loop's results are returned.
  std::vector<V> loop(const std::vector<V>& carried, uint64_t trips,
                      const std::function<std::vector<V>(const std::vector<V>&)>& body);

  // A call of a function JAX lowers as a computation of its own (a nested jit: jax.nn.log_softmax,
  // jnp.take_along_axis, and their transposes): `body` writes its instructions from its parameters (one
  // per operand) and returns its results; the call's results are returned (a tuple's elements where there
  // are several). XLA inlines it first (CallInliner); what it keeps is the program's order: a reader of a
  // call's result comes after all the call reads, as JAX prints the program. `name` names the computation.
  std::vector<V> call(const std::string& name, const std::vector<V>& operands,
                      const std::function<std::vector<V>(const std::vector<V>&)>& body);

  // The step's results: a tuple, or (root_array) one array.
  void root(const std::vector<V>& values);
  void root_array(const V& value);
  // input_output_alias: result `output` of the root tuple written over entry parameter `parameter`.
  void alias(uint64_t output, int64_t parameter);
  // Writes the entry into the module, in the order JAX prints a lowered program: XLA's post order from the
  // root (HloComputation::MakeInstructionPostOrder), so that the GPU model plans what it would from JAX -
  // and, as JAX lowers a function, without what the root does not read (each computation is written so).
  void finish();

 private:
  V push(HloInstruction i);
  HloInstruction make(const Shape& shape, const char* opcode, std::vector<std::string> operands);
  // A reduction's combiner computation, in the type reduced (one per opcode and type: "add", "maximum",
  // "and" of preds), made on first use.
  const std::string& region(const char* opcode, PrimitiveType type);
  V reduce(const char* combiner, const V& x, const std::vector<int64_t>& reduced);
  // A computation of the instructions written since `entry_` was emptied, in XLA's post order.
  void seal(std::string name, bool is_entry);
  // Writes a computation of its own, `name` (a loop's body or condition, a call's callee): what `write`
  // writes goes into it, with scalars of its own; then the computation being written goes on.
  void write_computation(std::string name, const std::function<void()>& write);
  // A tuple of `values`, and get-tuple-element of each of a tuple's elements.
  V tuple(const std::vector<V>& values);
  std::vector<V> elements(const V& tuple);
  // A computation's tuple parameter and its elements.
  std::vector<V> unpack_parameter(const Shape& tuple_shape);
  // Where `value` sits among the instructions written so far.
  size_t index_of(const V& value) const;

  HloModule& m_;
  std::vector<HloInstruction> entry_;
  std::vector<std::pair<PrimitiveType, V>> scalars_;  // entry_'s scalar constant of each type (scalar())
  std::vector<V> zeros_;                              // entry_'s zeros of each shape and type (zeros())
  std::string category_;
  std::string op_name_;
  struct Region {
    std::string opcode;
    PrimitiveType type;
    std::string computation;
  };
  std::vector<Region> regions_;  // each combiner's computation
  uint64_t counter_ = 0;
  uint64_t parameters_ = 0;
  uint64_t loops_ = 0;
  uint64_t calls_ = 0;
};

// Entry parameters counted in the step's arguments: a model parameter (its elements and bytes) and an
// optimizer's state (its bytes).
LoweredEmitter::V model_parameter(LoweredEmitter& e, const Shape& shape, const std::string& name,
                                  StepArguments& args);
LoweredEmitter::V optimizer_parameter(LoweredEmitter& e, const Shape& shape, const std::string& name,
                                      StepArguments& args);

// jnp's broadcasting of a [n] vector (a bias) against an array shaped `dims` whose last dimension is n, as
// JAX lowers it: reshaped to rank ([1, ..., 1, n]), broadcast, reshaped to the dimensions the result keeps
// (n, and any of size 1 in `dims` too), then broadcast to `dims`.
LoweredEmitter::V write_vector_broadcast(LoweredEmitter& e, const LoweredEmitter::V& v,
                                         const std::vector<uint64_t>& dims);

// A GEMM result a remat policy saves, as JAX writes it in a checkpointed forward pass: an offloading policy
// puts it in pinned host memory (annotate_device_placement; the forward pass reads the device's value), the
// others mark it with the reduce-precision JAX writes over a saved residual (the forward pass reads the
// marked value). Returns what the forward pass reads; `saved` receives what the checkpoint's barrier takes.
LoweredEmitter::V write_saved_residual(LoweredEmitter& e, const LoweredEmitter::V& value, bool offloaded,
                                       LoweredEmitter::V& saved);

// The barrier of a checkpointed block's transpose (jax.checkpoint's partial evaluation): the saved residuals
// first, then `rest` (the block's input, the parameters its recomputation reads, the incoming cotangent),
// through one optimization barrier. `saved` is replaced by its barrier outputs, each brought back to the
// device where an offloading policy kept it in host memory; returns `rest`'s barrier outputs.
std::vector<LoweredEmitter::V> write_remat_barrier(LoweredEmitter& e, std::vector<LoweredEmitter::V>& saved,
                                                   const std::vector<LoweredEmitter::V>& rest,
                                                   bool offloaded);

// jax.nn.gelu (approximate=True), x * 0.5 * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 x^3))), as JAX lowers
// it, with the values its transpose reads.
struct Gelu {
  LoweredEmitter::V z, tanh, half, out;  // the input, tanh(...), 0.5 (1 + tanh(...)), the result
  // What JAX's linearization computes in the forward pass for the transpose, when a scan saves it:
  // 3 z^2 and tanh' = (1 + t)(1 - t). Empty: the transpose computes them.
  LoweredEmitter::V cube_slope, dtanh;
};
Gelu write_gelu(LoweredEmitter& e, const LoweredEmitter::V& z);
// Its transpose as JAX writes it: the product rule over z * half, tanh' = (1 + t)(1 - t), the cube's
// derivative 3 z^2; `d` is the result's cotangent.
LoweredEmitter::V write_gelu_transpose(LoweredEmitter& e, const Gelu& g, const LoweredEmitter::V& d);

// An optimizer's state as the step's arguments hold it, one entry per parameter in the parameters' order:
// adam's and adamw's moments and step count; optax.adafactor's count, factored row and column statistics
// and full second moments (an empty V where the parameter has none: a placeholder the step returns).
struct OptimizerState {
  std::vector<LoweredEmitter::V> m, v;
  LoweredEmitter::V count;
  bool adafactor = false;
  std::vector<AdafactorMoments> moments;        // adafactor: each parameter's state shapes
  std::vector<LoweredEmitter::V> v_row, v_col;  // adafactor: the factored statistics
  // The argument number of each state array (for donation): count, then per parameter v_row, v_col, v, m
  // (-1 where there is none).
  int64_t count_argument = -1;
  std::vector<int64_t> m_argument, v_argument, v_row_argument, v_col_argument;
};

// Whether the step keeps optimizer state the update reads: training (per-example gradients too) with adam,
// adamw or adafactor (sgd keeps none).
bool keeps_optimizer_state(const ModelSpec& spec);

// Declares the optimizer's state after `params` (named `names`, "params..."), as jax flattens it: adam's
// and adamw's first moments, the second, then the count, each moment named as jax names it ("opt[0]..." for
// "params..."); optax.adafactor's FactoredState(count, v_row, v_col, v), only the arrays its update reads.
OptimizerState declare_optimizer_state(LoweredEmitter& e, const ModelSpec& spec,
                                       const std::vector<LoweredEmitter::V>& params,
                                       const std::vector<std::string>& names, StepArguments& args);

// The optimizer's update as reference_programs.py writes it (its own adam; optax's adamw, the decay on the
// parameter; optax.adafactor's factored second moments, block-RMS clipping and parameter scale; sgd),
// parameter by parameter in f32, and the step's results in jax's order: the new parameters, (`state` given)
// the new state, then `extra` (the loss); with spec.donate each new parameter and state array is written
// over the argument it replaces.
void write_update(LoweredEmitter& e, const ModelSpec& spec, const std::vector<LoweredEmitter::V>& params,
                  const std::vector<LoweredEmitter::V>& grads, const OptimizerState* state,
                  const std::vector<LoweredEmitter::V>& extra);

// jnp's index of `ids` (s32) into an axis: a negative one wraps (ids < 0 ? ids + n : ids), reshaped to
// `index_dims` (a gather's indices: a trailing 1 for the indexed axis).
LoweredEmitter::V write_wrapped_index(LoweredEmitter& e, const LoweredEmitter::V& ids,
                                      const std::vector<uint64_t>& index_dims);
// jnp's bounds check of a gather's `index` in fill mode (jnp.take, take_along_axis): whether
// 0 <= index <= n - 1 over its last axis (jnp.all), per row - a row out of range reads NaN.
LoweredEmitter::V write_index_in_range(LoweredEmitter& e, const LoweredEmitter::V& index);

// -mean(take_along_axis(log_softmax(logits), labels[..., None])) over the last axis, op for op as JAX's
// log_softmax and take_along_axis and their transposes write it (the label's entry gathered, its cotangent
// scattered into zeros, the log_softmax transpose over the saved exp and row sums); the logits' cotangent
// into `dlogits`. The loss is categorized as an output, the rest as temporaries.
LoweredEmitter::V write_cross_entropy(LoweredEmitter& e, const LoweredEmitter::V& logits,
                                      const LoweredEmitter::V& labels, LoweredEmitter::V& dlogits);

// Gradient accumulation as reference_programs.py writes it: jax.lax.scan over each of `batch`'s arrays
// (the batch their leading dimension) reshaped into `microbatches`, carrying an f32 sum per parameter and
// the loss's sum (and the batches and parameters the body reads), then each divided by the count. `step`
// writes one microbatch's value_and_grad - from its rows of each batch array and the parameters as the
// loop carries them - returning its loss and filling one gradient per parameter. Returns the mean loss;
// `grads` the mean gradients, in `params`' order.
using MicrobatchStep = std::function<LoweredEmitter::V(const std::vector<LoweredEmitter::V>& rows,
                                                       const std::vector<LoweredEmitter::V>& params,
                                                       std::vector<LoweredEmitter::V>& grads)>;
LoweredEmitter::V accumulate_gradients(LoweredEmitter& e, uint64_t microbatches,
                                       const std::vector<LoweredEmitter::V>& params,
                                       const std::vector<LoweredEmitter::V>& batch,
                                       const MicrobatchStep& step, std::vector<LoweredEmitter::V>& grads);

// The transformer configurations written as lowered programs (zoo_transformer_lowered.cc): GPT and ViT
// inference and training on one GPU (several through lowers_sharded), unrolled or scanned (any remat policy
// and optimizer; accumulation as a scan, around the layers' scans too), GPT decode (one GPU or tensor
// parallel). The rest is still written as XLA's fused program (zoo_gpt.cc, zoo_vit.cc, zoo_transformer.cc).
bool transformer_lowers(const ModelSpec& spec);
void build_transformer_lowered(const ModelSpec& spec, HloModule& module, StepArguments& arguments);

// The MLP configurations written as lowered programs (zoo_mlp_lowered.cc): one GPU (several through
// lowers_sharded), gradient accumulation as a scan, the remat policies that keep values on the device, every
// optimizer. The others (XLA:CPU, host offload) are still written as XLA's fused program (zoo_mlp.cc).
bool mlp_lowers(const ModelSpec& spec);
void build_mlp_lowered(const ModelSpec& spec, HloModule& module, StepArguments& arguments);
// The flax conv net on one GPU, as JAX lowers it (zoo_flax_cnn_lowered.cc).
bool flax_cnn_lowers(const ModelSpec& spec);
void build_flax_cnn_lowered(const ModelSpec& spec, HloModule& module, StepArguments& arguments);

// The flax encoder on one GPU (several through lowers_sharded) in fp32, mixed or bf16 precision (training
// under any remat policy, accumulation as a scan, inference), as JAX lowers it
// (zoo_flax_encoder_lowered.cc); scanned layers are still written as XLA's fused program
// (zoo_flax_encoder.cc).
bool flax_encoder_lowers(const ModelSpec& spec);
void build_flax_encoder_lowered(const ModelSpec& spec, HloModule& module, StepArguments& arguments);

// A step over several GPUs (data parallel, FSDP, tensor parallel; training - scanned, accumulated - or
// inference) written as JAX lowers it (zoo_sharding.cc): the one-device program of the global batch,
// its arguments annotated with the shardings reference_programs.py gives them, which the model of XLA's SPMD
// partitioner (plan/xla_gpu_model.h) turns into each device's program. Several devices' other steps are
// still written as XLA's fused per-device program.
bool lowers_sharded(const ModelSpec& spec);
// The spec on one device, the whole batch: what the lowered writer writes before the shardings.
ModelSpec unsharded(const ModelSpec& spec);
// Annotates `module` (written for unsharded(spec)) with spec's mesh: the batch split over 'data', the
// parameters and optimizer state as spec.sharding splits them; donation as buffer donors (JAX's form for a
// sharded step), and `arguments`' bytes become each device's.
void shard_lowered_step(const ModelSpec& spec, HloModule& module, StepArguments& arguments);

}  // namespace memfit::zoo
