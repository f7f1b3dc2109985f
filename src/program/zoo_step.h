// src/program/zoo_step.h - what every family of the model zoo builds a step with, private to the program
// layer: the Emitter that writes an HloModule instruction by instruction (fused bodies shared by
// signature; a scanned layer outlined into a while loop's body), a parameter's per-device shape over the
// mesh, and the Step that declares the arguments and emits the optimizer update. The families: zoo_mlp.cc,
// and zoo_gpt.cc / zoo_vit.cc around the transformer blocks of zoo_transformer.cc.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "memfit/core/checked.h"
#include "memfit/core/text.h"
#include "memfit/program/adafactor.h"
#include "memfit/program/model_zoo.h"
#include "zoo_sharding.h"

namespace memfit::zoo {

inline Shape array(PrimitiveType type, std::vector<uint64_t> dims) {
  Shape s;
  s.type = type;
  s.dims = std::move(dims);
  return s;
}

// An instruction of a computation written beside the entry (a fused body, a loop's body or condition).
inline HloInstruction instruction(std::string name, const char* opcode, Shape shape,
                                  std::vector<std::string> operands = {}) {
  HloInstruction x;
  x.name = std::move(name);
  x.set_opcode(opcode);
  x.shape = std::move(shape);
  x.operands = std::move(operands);
  return x;
}

// Emits an HloModule instruction by instruction, with fused bodies shared by signature.
class Emitter {
 public:
  struct T {
    std::string name;
    Shape shape;
  };

  explicit Emitter(HloModule& m) : m_(m) {}

  T param(const Shape& s, const std::string& op_name, const std::string& category) {
    HloInstruction i = make(s, "parameter", op_name, category);
    i.parameter_number = static_cast<int64_t>(parameters_++);
    return push(std::move(i));
  }
  uint64_t parameter_count() const { return parameters_; }  // the next parameter's number
  T loop(const std::vector<T>& in, const Shape& out, const std::string& op_name,
         const std::string& category) {
    return fusion(in, out, "kLoop", op_name, category);
  }
  T dot(const std::vector<T>& in, const Shape& out, const std::string& op_name, const std::string& category) {
    return fusion(in, out, "kCustom", op_name, category);
  }
  T reduce(const std::vector<T>& in, const Shape& out, const std::string& op_name,
           const std::string& category) {
    return fusion(in, out, "kInput", op_name, category);
  }
  // A plain op (collectives, dynamic slices): no fused body.
  T op(const std::string& opcode, const std::vector<T>& in, const Shape& out, const std::string& op_name,
       const std::string& category) {
    HloInstruction i = make(out, opcode, op_name, category);
    for (const T& t : in) i.operands.push_back(t.name);
    return push(std::move(i));
  }
  // A library call (cuDNN's fused attention) whose results are a tuple: its elements, each a buffer.
  std::vector<T> custom_call(const std::string& target, const std::vector<T>& in,
                             const std::vector<Shape>& outs, const std::string& op_name,
                             const std::string& category) {
    Shape tuple;
    tuple.elements = outs;
    HloInstruction i = make(tuple, "custom-call", op_name, category);
    i.custom_call_target = target;
    for (const T& t : in) i.operands.push_back(t.name);
    return elements_of(push(std::move(i)), outs, op_name, category);
  }
  // A multi-output loop fusion and its elements.
  std::vector<T> loop_multi(const std::vector<T>& in, const std::vector<Shape>& outs,
                            const std::string& op_name, const std::string& category) {
    Shape tuple;
    tuple.elements = outs;
    return elements_of(fusion(in, tuple, "kLoop", op_name, category), outs, op_name, category);
  }
  void root(const std::vector<T>& outs) {
    Shape tuple;
    for (const T& t : outs) tuple.elements.push_back(t.shape);
    HloInstruction r = make(tuple, "tuple", "", "");
    for (const T& t : outs) r.operands.push_back(t.name);
    r.is_root = true;
    push(std::move(r));
  }
  // The program returns one array, not a tuple (an inference step): that instruction is the root.
  void root_array(const T& out) {
    for (HloInstruction& i : entry_)
      if (i.name == out.name) i.is_root = true;
  }
  // Where the next instruction goes: the start of a region for loop().
  size_t mark() const { return entry_.size(); }

  // jax.lax.scan as XLA runs it: the instructions emitted since `begin` (one iteration, one layer) become
  // the body of a while loop, so the program holds one layer whatever the number of layers. What the
  // region reads from before it is the loop's state, passed through unchanged unless the region makes its
  // next value: `next` pairs such values with what they replace (a layer's output with its input), and a
  // dynamic-update-slice chain in `results` (a stack written layer by layer) replaces the stack it started
  // from. Instructions without operands (the stacks' zeros) are made once, before the loop. Returns the
  // values after the loop, by the name each had in the region: the results. (zoo_loop.cc)
  std::map<std::string, T> loop(size_t begin, const std::vector<std::pair<T, T>>& next,
                                const std::vector<T>& results, const std::string& op_name);

  HloModule finish() {
    HloComputation entry;
    entry.name = "main";
    entry.is_entry = true;
    entry.instructions = std::move(entry_);
    m_.computations.push_back(std::move(entry));
    return std::move(m_);
  }

 private:
  HloInstruction make(const Shape& s, const std::string& opcode, const std::string& op_name,
                      const std::string& category) {
    HloInstruction i;
    i.name = fmt::format("i{}", counter_++);
    i.set_opcode(opcode);
    i.shape = s;
    i.op_name = op_name;
    i.category = category;
    return i;
  }
  // get-tuple-element of each of a tuple-shaped instruction's results.
  std::vector<T> elements_of(const T& tuple, const std::vector<Shape>& outs, const std::string& op_name,
                             const std::string& category) {
    std::vector<T> elements;
    for (size_t k = 0; k < outs.size(); ++k) {
      HloInstruction g = make(outs[k], "get-tuple-element", op_name, category);
      g.operands.push_back(tuple.name);
      g.tuple_index = static_cast<int64_t>(k);
      elements.push_back(push(std::move(g)));
    }
    return elements;
  }
  T push(HloInstruction i) {
    T t{i.name, i.shape};
    entry_.push_back(std::move(i));
    return t;
  }

  T fusion(const std::vector<T>& in, const Shape& out, const char* kind, const std::string& op_name,
           const std::string& category) {
    HloInstruction i = make(out, "fusion", op_name, category);
    i.mutable_fusion_kind() = kind;
    for (const T& t : in) i.operands.push_back(t.name);
    i.called.push_back(body(in, out, kind));
    return push(std::move(i));
  }

  // The fused computation: parameters that have the output's dimensions reach it through elementwise ops
  // (so the fusion may write over them, as XLA:GPU decides); others are broadcast, reduced or contracted.
  std::string body(const std::vector<T>& in, const Shape& out, const std::string& kind) {
    std::string key = fmt::format("{}|{}", kind, out.to_string());
    for (const T& t : in) key += fmt::format("|{}", t.shape.to_string());
    auto it = bodies_.find(key);
    if (it != bodies_.end()) return it->second;
    HloComputation c;
    c.name = fmt::format("fused_{}", bodies_.size());
    int n = 0;
    auto add = [&](const Shape& s, const char* opcode, std::vector<std::string> operands) {
      c.instructions.push_back(instruction(fmt::format("b{}", n++), opcode, s, std::move(operands)));
      return c.instructions.back().name;
    };
    std::vector<std::string> params;
    for (size_t k = 0; k < in.size(); ++k) {
      params.push_back(add(in[k].shape, "parameter", {}));
      c.instructions.back().parameter_number = static_cast<int64_t>(k);
    }
    const std::vector<Shape> outs = out.is_tuple() ? out.elements : std::vector<Shape>{out};
    std::vector<std::string> results;
    for (const Shape& o : outs) {
      std::string acc;
      for (size_t k = 0; k < in.size(); ++k) {
        std::string v = params[k];
        if (kind == "kCustom" && k < 2) {
          if (k == 1)
            acc = add(o, "dot", {acc, v});
          else
            acc = v;
          continue;
        }
        if (in[k].shape.dims != o.dims) v = add(o, kind == "kInput" ? "reduce" : "broadcast", {v});
        acc = acc.empty() ? v : add(o, "add", {acc, v});
      }
      if (acc.empty()) acc = add(o, "broadcast", {});
      if ((!params.empty() && acc == params.front()) || (kind == "kCustom" && in.size() < 2))
        acc = add(o, "negate", {acc});
      results.push_back(acc);
    }
    if (out.is_tuple()) add(out, "tuple", results);
    c.instructions.back().is_root = true;
    m_.computations.push_back(std::move(c));
    bodies_.emplace(key, m_.computations.back().name);
    return m_.computations.back().name;
  }

  HloModule& m_;
  std::vector<HloInstruction> entry_;
  std::map<std::string, std::string> bodies_;
  uint64_t counter_ = 0;
  uint64_t parameters_ = 0;
  uint64_t loops_ = 0;
};

using T = Emitter::T;

// A parameter of the model: its logical shape and how it is laid over the mesh.
struct Param {
  std::string name;
  std::vector<uint64_t> dims;   // logical
  std::vector<uint64_t> local;  // per device
  T value;                      // the entry parameter (per-device shape)
  T m, v;                       // Adam moments; adafactor's full second moment (v) when not factored
  T v_row, v_col;               // adafactor's factored second moment (program/adafactor.h)
  AdafactorMoments adafactor;   // its state's shapes
  T grad;                       // the gradient as the optimizer reads it
  bool gathered = false;        // FSDP: all-gathered before use
  Param* stacked = nullptr;     // scan: this layer's slice of a parameter stacked over the layers
  T compute_copy;               // mixed precision: the weight cast to the compute dtype, read by GEMMs
  // Tensor parallelism: the bias added to a matrix split by columns over 'model' (the first MLP matrix);
  // its gradient comes from activations split the same way.
  bool bias_of_column_split = false;
};

// How the step is built: dtypes, policy, mesh.
struct Ctx {
  const ModelSpec& s;
  Emitter& e;
  PrimitiveType pdt, cdt;
  bool fsdp, cpu;
  uint64_t data, tp;
  RematPolicy remat;
};

// Per-device shape of a parameter, as reference_programs.py shards it (parameter_split).
inline std::vector<uint64_t> local_dims(const Ctx& c, const std::string& name,
                                        const std::vector<uint64_t>& dims) {
  std::vector<uint64_t> d = dims;
  const std::vector<std::string> axes = parameter_split(c.s, name, dims);
  for (size_t k = 0; k < d.size(); ++k)
    if (!axes[k].empty()) d[k] /= c.s.axis_size(axes[k]);  // the split divides (parameter_split)
  return d;
}

class Step {
 public:
  // Adam and AdamW keep two fp32 moments per parameter (AdamW's decay reads the parameter the update
  // already reads: no buffer of its own).
  bool keeps_moments() const {
    return c_.s.optimizer == OptimizerKind::kAdam || c_.s.optimizer == OptimizerKind::kAdamW;
  }
  Step(const Ctx& c) : c_(c), e_(c.e) {}

  Param& add_param(const std::string& name, std::vector<uint64_t> dims) {
    Param p;
    p.name = name;
    p.dims = dims;
    p.local = local_dims(c_, name, dims);
    p.gathered = c_.fsdp && p.local != p.dims;
    params_.push_back(std::move(p));
    return params_.back();
  }

  // Entry parameters in the order jax flattens (params, m, v, count, batch).
  void declare_arguments() {
    for (Param& p : params_) {
      p.value = argument(array(c_.pdt, p.local), fmt::format("params{}", p.name), "parameters");
      uint64_t n = 1;
      for (uint64_t d : p.dims) n *= d;
      args_.parameter_count += n;
      args_.parameter_bytes += p.value.shape.own_bytes();
    }
    if (train() && c_.s.optimizer == OptimizerKind::kAdafactor) declare_adafactor_state();
    if (train() && keeps_moments()) {
      for (Param& p : params_) p.m = state_argument(p.local, fmt::format("opt[0]{}", p.name));
      for (Param& p : params_) p.v = state_argument(p.local, fmt::format("opt[1]{}", p.name));
      count_ = state_argument({}, "opt[2]", PrimitiveType::kS32);
    }
  }
  void count_batch(const T& t) { args_.batch_bytes += t.shape.own_bytes(); }
  const StepArguments& arguments() const { return args_; }

  bool train() const { return c_.s.step == StepKind::kTrain || c_.s.step == StepKind::kVmapGrads; }
  // The weight as the compute uses it: FSDP gathers it (a transient full copy).
  T use(Param& p, const std::string& where) {
    if (p.stacked != nullptr) {  // scan: the body slices its layer out of the stack
      Param& st = *p.stacked;
      T whole = st.gathered ? e_.op("all-gather", {st.value}, array(c_.pdt, st.dims), where + "/all-gather",
                                    "temporaries")
                            : st.value;
      return e_.op("dynamic-slice", {whole}, array(c_.pdt, p.dims), "jit(step)/while/body/dynamic_slice",
                   "temporaries");
    }
    if (!p.gathered) return p.value;
    return e_.op("all-gather", {p.value}, array(c_.pdt, p.dims), where + "/all-gather", "temporaries");
  }
  // A weight as a GEMM reads it. In mixed precision that is the weight cast to bf16, one buffer shared by
  // the forward GEMM and the backward one: XLA's GemmFusion never takes a narrowing convert into a GEMM
  // (IsConversionWorthFusing in xla/service/gpu/triton_tiling_propagation.cc), so the cast is a fusion of
  // its own (the compiled modules' `wrapped_convert`), live until the backward pass has read it.
  // recompute_weights() starts fresh copies for a rematerialized block, whose recomputation casts again.
  T gemm_operand(Param& p, const std::string& where) {
    // FSDP's gathered weights and scan's slices are made again where used, not kept across the step.
    if (c_.cdt == c_.pdt || p.stacked != nullptr || p.gathered) return use(p, where);
    if (p.compute_copy.name.empty())
      p.compute_copy =
          e_.loop({use(p, where)}, array(c_.cdt, p.dims), where + "/convert_element_type", "temporaries");
    return p.compute_copy;
  }
  void recompute_weights(const std::vector<Param*>& params) {
    for (Param* p : params) p->compute_copy = T{};
  }
  // A weight gradient: FSDP reduce-scatters the full one to this device's shard; gradients accumulate
  // over microbatches.
  void set_grad(Param& p, T full, const std::string& where) {
    if (p.stacked != nullptr) {  // scan: written into the stacked gradient, one layer per iteration
      Param& st = *p.stacked;
      if (st.grad.name.empty())
        st.grad = e_.loop({}, grad_shape(st), "jit(step)/while/broadcast_in_dim", "gradients");
      st.grad = e_.op("dynamic-update-slice", {st.grad, full}, st.grad.shape, where + "/dynamic_update_slice",
                      "gradients");
      return;
    }
    T g = full;
    if (p.gathered)
      g = e_.op("reduce-scatter", {full}, array(full.shape.type, p.local), where + "/reduce-scatter",
                "gradients");
    if (accumulating_ && p.grad.name.size()) {
      p.grad = e_.loop({p.grad, g}, array(PrimitiveType::kF32, p.local), where + "/add_any", "gradients");
    } else if (accumulating_) {
      p.grad = e_.loop({g}, array(PrimitiveType::kF32, p.local), where + "/convert", "gradients");
    } else {
      p.grad = g;
    }
  }
  // Gradients have the parameter's dtype; FSDP makes them whole before reduce-scattering them.
  Shape grad_shape(const Param& p) const {
    return array(c_.s.precision == Precision::kBf16 ? PrimitiveType::kBF16 : PrimitiveType::kF32,
                 p.gathered ? p.dims : p.local);
  }

  // Adam, adafactor or SGD per parameter at the end, then the outputs in jax's order; donation aliases each
  // output to the argument it replaces.
  void optimize_and_finish(std::vector<T> extra_outputs, HloModule* module_aliases) {
    if (c_.s.optimizer == OptimizerKind::kAdafactor) return finish_adafactor(extra_outputs, module_aliases);
    std::vector<T> new_params, new_m, new_v;
    for (Param& p : params_) {
      const std::string where = fmt::format("jit(step)/update{}", p.name);
      // Tensor parallelism: XLA's sharding propagation gives a replicated bias of a column-split matrix a
      // new value (and moments) sharded like the activations its gradient comes from; the step returns a
      // shard, which cannot be written over the replicated argument (seen in cpu8_gpt_tp4_dp2's compile,
      // the one tensor-parallel program: each layer's b1, m and v returned as f32[512] of f32[2048]).
      const bool shard = c_.tp > 1 && p.bias_of_column_split && p.local.size() == 1 &&
                         p.local[0] == p.dims[0] && p.dims[0] % c_.tp == 0;
      auto out_shape = [&](const Shape& in) { return shard ? array(in.type, {in.dims[0] / c_.tp}) : in; };
      if (keeps_moments()) {
        auto outs = e_.loop_multi({p.value, p.grad, p.m, p.v, count_},
                                  {out_shape(p.value.shape), out_shape(p.m.shape), out_shape(p.v.shape)},
                                  where, "parameters");
        new_params.push_back(outs[0]);
        new_m.push_back(outs[1]);
        new_v.push_back(outs[2]);
      } else {
        new_params.push_back(e_.loop({p.value, p.grad}, out_shape(p.value.shape), where, "parameters"));
      }
    }
    Outputs outs;
    for (size_t k = 0; k < params_.size(); ++k) outs.add(new_params[k], params_[k].value);
    if (keeps_moments()) {
      for (size_t k = 0; k < params_.size(); ++k) outs.add(new_m[k], params_[k].m);
      for (size_t k = 0; k < params_.size(); ++k) outs.add(new_v[k], params_[k].v);
      outs.add(e_.loop({count_}, count_.shape, "jit(step)/add", "optimizer_state"), count_);
    }
    finish(outs, extra_outputs, module_aliases, c_.s.donate);
  }

  // The step's outputs in jax's order, each with the argument it replaces (written over it when donated).
  struct Outputs {
    std::vector<T> values;
    std::vector<T> replaces;
    void add(const T& out, const T& in) {
      values.push_back(out);
      replaces.push_back(in);
    }
  };

  // Donation writes an output over the argument it replaces when their shapes agree: a new value returned
  // as a shard, or one no argument held (adafactor's placeholders), gets memory of its own.
  // `donated`: the step's donate_argnums cover these arguments (a training step's parameters and state when
  // spec.donate; decode's cache always).
  void finish(const Outputs& outs, const std::vector<T>& extra_outputs, HloModule* module_aliases,
              bool donated) {
    std::vector<T> all = outs.values;
    all.insert(all.end(), extra_outputs.begin(), extra_outputs.end());
    e_.root(all);
    if (!donated) return;
    for (size_t k = 0; k < outs.values.size(); ++k) {
      const T& in = outs.replaces[k];
      auto it = argument_of_.find(in.name);
      if (it == argument_of_.end() || in.shape.dims != outs.values[k].shape.dims) continue;
      HloAlias alias;
      alias.output_index = {k};
      alias.parameter = it->second;
      module_aliases->aliases.push_back(alias);
    }
  }

  std::vector<Param>& params() { return params_; }
  bool accumulating_ = false;

 private:
  T argument(const Shape& shape, const std::string& name, const std::string& category) {
    const auto number = static_cast<int64_t>(e_.parameter_count());
    T t = e_.param(shape, name, category);
    argument_of_.emplace(t.name, number);
    return t;
  }
  T state_argument(const std::vector<uint64_t>& dims, const std::string& name,
                   PrimitiveType type = PrimitiveType::kF32) {
    T t = argument(array(type, dims), name, "optimizer_state");
    args_.optimizer_state_bytes += t.shape.own_bytes();
    return t;
  }

  // optax.adafactor's FactoredState(count, v_row, v_col, v) as jax flattens it: the count, then each
  // parameter's row statistics, column statistics and full moments. Only the arrays the update reads are
  // arguments (program/adafactor.h).
  void declare_adafactor_state() {
    count_ = state_argument({}, "opt[0].count", PrimitiveType::kS32);
    for (Param& p : params_) p.adafactor = adafactor_moments(p.local);
    for (Param& p : params_)
      if (p.adafactor.factored)
        p.v_row = state_argument(p.adafactor.v_row, fmt::format("opt[0].v_row{}", p.name));
    for (Param& p : params_)
      if (p.adafactor.factored)
        p.v_col = state_argument(p.adafactor.v_col, fmt::format("opt[0].v_col{}", p.name));
    for (Param& p : params_)
      if (!p.adafactor.factored) p.v = state_argument(p.adafactor.v, fmt::format("opt[0].v{}", p.name));
  }

  // The update of one parameter: the gradient's squared means over rows and columns (or its full moment),
  // the update's RMS for clip_by_block_rms and the parameter's RMS for multiply_by_parameter_scale are
  // reductions; the new parameter and statistics one multi-output loop over them. The placeholders the step
  // returns are constants' broadcasts.
  void finish_adafactor(const std::vector<T>& extra_outputs, HloModule* module_aliases) {
    std::vector<T> new_params, new_row, new_col, new_v;
    auto placeholder = [&](const std::string& where) {
      return e_.loop({}, array(PrimitiveType::kF32, {1}), where + "/zeros", "optimizer_state");
    };
    for (Param& p : params_) {
      const std::string where = fmt::format("jit(step)/update{}", p.name);
      const AdafactorMoments& a = p.adafactor;
      const T param_rms =
          e_.reduce({p.value}, array(PrimitiveType::kF32, {}), where + "/param_rms", "temporaries");
      if (a.factored) {
        const T row = e_.reduce({p.grad, p.v_row}, p.v_row.shape, where + "/v_row", "temporaries");
        const T col = e_.reduce({p.grad, p.v_col}, p.v_col.shape, where + "/v_col", "temporaries");
        const T rms = e_.reduce({p.grad, row, col}, array(PrimitiveType::kF32, {}), where + "/update_rms",
                                "temporaries");
        auto outs = e_.loop_multi({p.value, p.grad, row, col, rms, param_rms, count_},
                                  {p.value.shape, row.shape, col.shape}, where, "parameters");
        new_params.push_back(outs[0]);
        new_row.push_back(outs[1]);
        new_col.push_back(outs[2]);
        new_v.push_back(placeholder(where));
      } else {
        const T rms =
            e_.reduce({p.grad, p.v}, array(PrimitiveType::kF32, {}), where + "/update_rms", "temporaries");
        auto outs = e_.loop_multi({p.value, p.grad, p.v, rms, param_rms, count_}, {p.value.shape, p.v.shape},
                                  where, "parameters");
        new_params.push_back(outs[0]);
        new_row.push_back(placeholder(where));
        new_col.push_back(placeholder(where));
        new_v.push_back(outs[1]);
      }
    }
    Outputs outs;
    for (size_t k = 0; k < params_.size(); ++k) outs.add(new_params[k], params_[k].value);
    outs.add(e_.loop({count_}, count_.shape, "jit(step)/add", "optimizer_state"), count_);
    for (size_t k = 0; k < params_.size(); ++k) outs.add(new_row[k], params_[k].v_row);
    for (size_t k = 0; k < params_.size(); ++k) outs.add(new_col[k], params_[k].v_col);
    for (size_t k = 0; k < params_.size(); ++k) outs.add(new_v[k], params_[k].v);
    finish(outs, extra_outputs, module_aliases, c_.s.donate);
  }

  std::map<std::string, int64_t> argument_of_;  // a parameter or state argument (by name) -> its number
  const Ctx& c_;
  Emitter& e_;
  std::vector<Param> params_;
  T count_;
  StepArguments args_;
};

void build_mlp(const Ctx& c, Step& step, HloModule& module);
void build_flax_cnn(const Ctx& c, Step& step, HloModule& module);

}  // namespace memfit::zoo
