#include "memfit/program/model_zoo.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

#include "memfit/core/checked.h"
#include "memfit/core/text.h"

namespace memfit {

namespace {

Shape array(PrimitiveType type, std::vector<uint64_t> dims) {
  Shape s;
  s.type = type;
  s.dims = std::move(dims);
  return s;
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
  // A multi-output loop fusion and its elements.
  std::vector<T> loop_multi(const std::vector<T>& in, const std::vector<Shape>& outs,
                            const std::string& op_name, const std::string& category) {
    Shape tuple;
    tuple.elements = outs;
    const T f = fusion(in, tuple, "kLoop", op_name, category);
    std::vector<T> elements;
    for (size_t k = 0; k < outs.size(); ++k) {
      HloInstruction g = make(outs[k], "get-tuple-element", op_name, category);
      g.operands.push_back(f.name);
      g.tuple_index = static_cast<int64_t>(k);
      elements.push_back(push(std::move(g)));
    }
    return elements;
  }
  void root(const std::vector<T>& outs) {
    Shape tuple;
    for (const T& t : outs) tuple.elements.push_back(t.shape);
    HloInstruction r = make(tuple, "tuple", "", "");
    for (const T& t : outs) r.operands.push_back(t.name);
    r.is_root = true;
    push(std::move(r));
  }
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
  T push(HloInstruction i) {
    T t{i.name, i.shape};
    entry_.push_back(std::move(i));
    return t;
  }

  T fusion(const std::vector<T>& in, const Shape& out, const char* kind, const std::string& op_name,
           const std::string& category) {
    HloInstruction i = make(out, "fusion", op_name, category);
    i.fusion_kind = kind;
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
      HloInstruction x;
      x.name = fmt::format("b{}", n++);
      x.set_opcode(opcode);
      x.shape = s;
      x.operands = std::move(operands);
      c.instructions.push_back(std::move(x));
      return c.instructions.back().name;
    };
    std::vector<std::string> params;
    for (size_t k = 0; k < in.size(); ++k) {
      HloInstruction p;
      p.name = fmt::format("b{}", n++);
      p.opcode = HloOpcode::kParameter;
      p.shape = in[k].shape;
      p.parameter_number = static_cast<int64_t>(k);
      c.instructions.push_back(std::move(p));
      params.push_back(c.instructions.back().name);
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
};

using T = Emitter::T;

// A parameter of the model: its logical shape and how it is laid over the mesh.
struct Param {
  std::string name;
  std::vector<uint64_t> dims;   // logical
  std::vector<uint64_t> local;  // per device
  T value;                      // the entry parameter (per-device shape)
  T m, v;                       // Adam moments
  T grad;                       // the gradient as the optimizer reads it
  bool gathered = false;        // FSDP: all-gathered before use
  Param* stacked = nullptr;     // scan: this layer's slice of a parameter stacked over the layers
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

// Per-device shape of a parameter, as reference_programs.py shards it: FSDP splits the largest dimension
// over 'data' when it divides; TP splits the q/k/v and first MLP matrix by columns, the output projection
// and second MLP matrix by rows and the embedding by vocabulary over 'model'.
std::vector<uint64_t> local_dims(const Ctx& c, const std::string& name, const std::vector<uint64_t>& dims) {
  std::vector<uint64_t> d = dims;
  if (d.empty()) return d;
  if (c.s.sharding == ShardingKind::kFsdp) {
    // The largest dimension that divides (the reference's rule when the largest one does).
    std::vector<size_t> order(d.size());
    for (size_t i = 0; i < d.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return d[a] > d[b]; });
    for (size_t ax : order) {
      if (d[ax] % c.data == 0) {
        d[ax] /= c.data;
        break;
      }
    }
  } else if (c.s.sharding == ShardingKind::kTp && d.size() >= 2) {
    if ((name.find("wqkv") != std::string::npos || name.find("w1") != std::string::npos) &&
        d.back() % c.tp == 0)
      d.back() /= c.tp;
    else if ((name.find("wo") != std::string::npos || name.find("w2") != std::string::npos) &&
             d[d.size() - 2] % c.tp == 0)
      d[d.size() - 2] /= c.tp;
    else if (name == "embed" && d[0] % c.tp == 0)
      d[0] /= c.tp;
  }
  return d;
}

class Step {
 public:
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
      p.value = e_.param(array(c_.pdt, p.local), fmt::format("params{}", p.name), "parameters");
      uint64_t n = 1;
      for (uint64_t d : p.dims) n *= d;
      args_.parameter_count += n;
      args_.parameter_bytes += p.value.shape.own_bytes();
    }
    if (train() && c_.s.optimizer == OptimizerKind::kAdam) {
      for (Param& p : params_) {
        p.m =
            e_.param(array(PrimitiveType::kF32, p.local), fmt::format("opt[0]{}", p.name), "optimizer_state");
        args_.optimizer_state_bytes += p.m.shape.own_bytes();
      }
      for (Param& p : params_) {
        p.v =
            e_.param(array(PrimitiveType::kF32, p.local), fmt::format("opt[1]{}", p.name), "optimizer_state");
        args_.optimizer_state_bytes += p.v.shape.own_bytes();
      }
      count_ = e_.param(array(PrimitiveType::kS32, {}), "opt[2]", "optimizer_state");
      args_.optimizer_state_bytes += 4;
    }
  }
  void count_batch(const T& t) { args_.batch_bytes += t.shape.own_bytes(); }
  const StepArguments& arguments() const { return args_; }

  bool train() const { return c_.s.step != StepKind::kInfer; }

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

  // Adam (or SGD) per parameter at the end, then the outputs in jax's order; donation aliases them.
  void optimize_and_finish(std::vector<T> extra_outputs, HloModule* module_aliases) {
    std::vector<T> new_params, new_m, new_v;
    for (Param& p : params_) {
      const std::string where = fmt::format("jit(step)/update{}", p.name);
      if (c_.s.optimizer == OptimizerKind::kAdam) {
        auto outs = e_.loop_multi({p.value, p.grad, p.m, p.v, count_}, {p.value.shape, p.m.shape, p.v.shape},
                                  where, "parameters");
        new_params.push_back(outs[0]);
        new_m.push_back(outs[1]);
        new_v.push_back(outs[2]);
      } else {
        new_params.push_back(e_.loop({p.value, p.grad}, p.value.shape, where, "parameters"));
      }
    }
    std::vector<T> outs = new_params;
    if (c_.s.optimizer == OptimizerKind::kAdam) {
      outs.insert(outs.end(), new_m.begin(), new_m.end());
      outs.insert(outs.end(), new_v.begin(), new_v.end());
      outs.push_back(e_.loop({count_}, count_.shape, "jit(step)/add", "optimizer_state"));
    }
    const size_t aliased = outs.size();
    outs.insert(outs.end(), extra_outputs.begin(), extra_outputs.end());
    e_.root(outs);
    if (c_.s.donate) {
      for (size_t k = 0; k < aliased; ++k) {
        HloAlias a;
        a.output_index = {k};
        a.parameter = static_cast<int64_t>(k);
        module_aliases->aliases.push_back(a);
      }
    }
  }

  std::vector<Param>& params() { return params_; }
  bool accumulating_ = false;

 private:
  const Ctx& c_;
  Emitter& e_;
  std::vector<Param> params_;
  T count_;
  StepArguments args_;
};

// ----------------------------------------------------------------------------------------------- MLP

void build_mlp(const Ctx& c, Step& step, HloModule& module) {
  const ModelSpec& s = c.s;
  Emitter& e = c.e;
  std::vector<uint64_t> sizes{s.din};
  for (uint64_t i = 0; i < s.depth; ++i) sizes.push_back(s.width);
  sizes.push_back(s.dout);
  const size_t n = sizes.size() - 1;
  for (size_t l = 0; l < n; ++l) {
    step.add_param(fmt::format("[{}][0]", l), {sizes[l], sizes[l + 1]});
    step.add_param(fmt::format("[{}][1]", l), {sizes[l + 1]});
  }
  step.declare_arguments();
  auto& P = step.params();
  const uint64_t B = s.batch / c.data;
  const T x_in = e.param(array(PrimitiveType::kF32, {B, s.din}), "batch[0]", "activations");
  step.count_batch(x_in);
  T y_in;
  if (s.step != StepKind::kInfer) {
    y_in = e.param(array(PrimitiveType::kF32, {B, s.dout}), "batch[1]", "activations");
    step.count_batch(y_in);
  }
  const uint64_t k = s.accum;
  const uint64_t mb = B / k;
  step.accumulating_ = k > 1;
  T loss;
  for (uint64_t micro = 0; micro < k; ++micro) {
    T x = x_in;
    if (k > 1)
      x = e.op("dynamic-slice", {x_in}, array(PrimitiveType::kF32, {mb, s.din}), "jit(step)/microbatch",
               "activations");
    if (c.cdt != PrimitiveType::kF32)
      x = e.loop({x}, array(c.cdt, {mb, s.din}), "jit(step)/convert", "activations");
    struct Saved {
      T in, h, g0, g1;
    };
    std::vector<Saved> saved(n);
    // Recomputed in the backward pass, only the matmul is kept: XLA fuses GELU's derivative into its user.
    auto forward_layer = [&](size_t l, const T& in, bool recompute) {
      Saved sv;
      sv.in = in;
      const std::string where = "jit(step)/jvp()";
      sv.h = e.dot({in, step.use(P[2 * l], where), P[2 * l + 1].value}, array(c.cdt, {mb, sizes[l + 1]}),
                   where + "/dot_general", "activations");
      if (l + 1 < n && !recompute) {
        auto gelu = e.loop_multi({sv.h}, {array(c.cdt, {mb, sizes[l + 1]}), array(c.cdt, {mb, sizes[l + 1]})},
                                 "jit(step)/jvp()/gelu", "activations");
        sv.g0 = gelu[0];
        sv.g1 = gelu[1];
      }
      return sv;
    };
    T a = x;
    const bool remat_all = c.remat == RematPolicy::kFull;
    for (size_t l = 0; l < n; ++l) {
      saved[l] = forward_layer(l, a, false);
      a = l + 1 < n ? saved[l].g0 : saved[l].h;
    }
    if (s.step == StepKind::kInfer) {
      loss = a;
      break;
    }
    // loss = mean((out - y)^2)
    T out = a;
    T ym = y_in;
    if (k > 1)
      ym = e.op("dynamic-slice", {y_in}, array(PrimitiveType::kF32, {mb, s.dout}), "jit(step)/microbatch",
                "activations");
    T l2 = e.reduce({out, ym}, array(PrimitiveType::kF32, {}), "jit(step)/reduce_sum", "temporaries");
    loss = k > 1 && micro > 0 ? e.loop({loss, l2}, l2.shape, "jit(step)/add", "temporaries") : l2;
    T d = e.loop({out, ym}, array(c.cdt, {mb, s.dout}), "jit(step)/transpose(jvp())/mul", "temporaries");
    for (size_t l = n; l-- > 0;) {
      const std::string where = "jit(step)/transpose(jvp())";
      Saved sv = saved[l];
      const bool recompute =
          remat_all && l + 1 < n &&
          (s.remat_layers.empty() || std::count(s.remat_layers.begin(), s.remat_layers.end(), l));
      if (recompute) sv = forward_layer(l, sv.in, true);
      T dpre = d;
      if (l + 1 < n) {
        std::vector<T> in{d, sv.h};
        if (!recompute) in.push_back(sv.g1);
        dpre = e.loop(in, array(c.cdt, {mb, sizes[l + 1]}), "jit(step)/transpose(jvp())/mul", "temporaries");
      }
      if (s.step == StepKind::kVmapGrads) {
        // Per-example gradients: one weight-sized gradient per example, then their mean.
        T pe = e.dot({sv.in, dpre}, array(PrimitiveType::kF32, {mb, sizes[l], sizes[l + 1]}),
                     where + "/per_example", "temporaries");
        step.set_grad(P[2 * l], e.reduce({pe}, step.grad_shape(P[2 * l]), where + "/mean", "gradients"),
                      where);
      } else {
        step.set_grad(P[2 * l],
                      e.dot({sv.in, dpre}, step.grad_shape(P[2 * l]), where + "/dot_general", "gradients"),
                      where);
      }
      step.set_grad(P[2 * l + 1],
                    e.reduce({dpre}, step.grad_shape(P[2 * l + 1]), where + "/reduce_sum", "gradients"),
                    where);
      if (l > 0)
        d = e.dot({dpre, step.use(P[2 * l], where)}, array(c.cdt, {mb, sizes[l]}), where + "/dot_general",
                  "temporaries");
    }
  }
  if (s.step == StepKind::kInfer) {
    e.root({e.loop({loss}, array(PrimitiveType::kF32, loss.shape.dims), "jit(step)/convert", "activations")});
    return;
  }
  step.optimize_and_finish({loss}, &module);
}

// ----------------------------------------------------------------------------------------- GPT / ViT

struct Block {
  T x;  // input
  std::map<std::string, T> t;
};

void build_transformer(const Ctx& c, Step& step, HloModule& module) {
  const ModelSpec& s = c.s;
  Emitter& e = c.e;
  const bool vit = s.model == ModelFamily::kVit;
  const uint64_t D = s.d_model, H = s.heads, F = 4 * D, L = s.layers;
  const uint64_t S = vit ? (s.image / s.patch) * (s.image / s.patch) + 1 : s.seq;
  const uint64_t V = vit ? s.classes : s.vocab;
  const uint64_t patch_dim = s.patch * s.patch * s.channels;
  // Parameters in jax's flattening order (dict keys sorted).
  if (vit) step.add_param("['cls']", {D});
  step.add_param(vit ? "['embed']" : "['embed']",
                 vit ? std::vector<uint64_t>{patch_dim, D} : std::vector<uint64_t>{V, D});
  if (vit) step.add_param("['head']", {D, V});
  const std::vector<std::pair<std::string, std::vector<uint64_t>>> layer_params = {
      {"['b1']", {F}},    {"['b2']", {D}},         {"['ln1_b']", {D}}, {"['ln1_g']", {D}},
      {"['ln2_b']", {D}}, {"['ln2_g']", {D}},      {"['w1']", {D, F}}, {"['w2']", {F, D}},
      {"['wo']", {D, D}}, {"['wqkv']", {D, 3 * D}}};
  if (s.scan) {  // jax.lax.scan over stacked layers: one parameter per key, [layers, ...]
    for (const auto& [key, dims] : layer_params) {
      std::vector<uint64_t> d{L};
      d.insert(d.end(), dims.begin(), dims.end());
      step.add_param("['layers']" + key, d);
    }
  } else {
    for (uint64_t l = 0; l < L; ++l)
      for (const auto& [key, dims] : layer_params)
        step.add_param(fmt::format("['layers'][{}]{}", l, key), dims);
  }
  step.add_param("['lnf_b']", {D});
  step.add_param("['lnf_g']", {D});
  step.add_param("['pos']", {S, D});
  step.declare_arguments();
  auto& P = step.params();
  // scan: each layer's view of the stacked parameters (sliced where used, gradients written back).
  std::map<std::string, Param> views;
  auto find = [&](const std::string& name) -> Param& {
    for (Param& p : P)
      if (p.name == name) return p;
    auto v = views.find(name);
    if (v != views.end()) return v->second;
    // "['layers'][3]['w1']" -> the stacked "['layers']['w1']"
    const size_t close = name.find(']', 10);
    const std::string stacked = "['layers']" + name.substr(close + 1);
    for (Param& p : P) {
      if (p.name != stacked) continue;
      Param view;
      view.name = name;
      view.dims.assign(p.dims.begin() + 1, p.dims.end());
      view.local = view.dims;
      view.stacked = &p;
      return views.emplace(name, std::move(view)).first->second;
    }
    return P.front();
  };
  const uint64_t B = s.batch / c.data;
  const uint64_t Hl = H / c.tp, Fl = F / c.tp, hd = D / H;
  T tokens, labels;
  if (vit) {
    tokens = e.param(array(PrimitiveType::kF32, {B, S - 1, patch_dim}), "batch[0]", "activations");
    step.count_batch(tokens);
    if (step.train()) {
      labels = e.param(array(PrimitiveType::kS32, {B}), "batch[1]", "activations");
      step.count_batch(labels);
    }
  } else {
    tokens = e.param(array(PrimitiveType::kS32, {B, S}), "batch[0]", "activations");
    step.count_batch(tokens);
    if (step.train()) {  // jax.jit drops arguments the step never reads (keep_unused=False)
      labels = e.param(array(PrimitiveType::kS32, {B, S}), "batch[1]", "activations");
      step.count_batch(labels);
    }
  }
  const uint64_t k = s.accum, Bm = B / k;
  step.accumulating_ = k > 1;
  const PrimitiveType f32 = PrimitiveType::kF32, cd = c.cdt;
  auto A = [&](std::vector<uint64_t> d, PrimitiveType t) { return array(t, std::move(d)); };
  const bool scan = s.scan;

  auto remat_of = [&](uint64_t l) {
    if (!s.remat_layers.empty() && !std::count(s.remat_layers.begin(), s.remat_layers.end(), l))
      return RematPolicy::kNone;
    return c.remat;
  };
  // Which forward tensors a policy keeps for the backward pass (the rest is recomputed there).
  auto saveable = [&](RematPolicy policy, const std::string& key) {
    if (policy == RematPolicy::kNone) return true;
    if (policy == RematPolicy::kFull) return false;
    const bool weight_dot = key == "qkv" || key == "o" || key == "h1" || key == "h2";
    const bool batch_dot = key == "scores" || key == "av";
    if (policy == RematPolicy::kDots) return weight_dot || batch_dot;
    return weight_dot;  // dots_no_batch
  };

  // One block's forward. `reuse`: tensors kept from the forward pass (recomputation takes them as is).
  // `recompute`: rematerialization in the backward pass, which needs neither the output nor h2.
  auto forward = [&](uint64_t l, const T& x, const std::map<std::string, T>& reuse, bool recompute) {
    Block b;
    b.x = x;
    const std::string p = fmt::format("['layers'][{}]", l);
    const std::string w = "jit(step)/jvp()";
    auto get = [&](const std::string& key, auto make) {
      auto it = reuse.find(key);
      T t = it != reuse.end() ? it->second : make();
      b.t[key] = t;
      return t;
    };
    T ln1 = get("ln1", [&] {
      return e.loop({x, step.use(find(p + "['ln1_g']"), w), step.use(find(p + "['ln1_b']"), w)},
                    A({Bm, S, D}, cd), w + "/ln1/mul", "activations");
    });
    T qkv = get("qkv", [&] {
      return e.dot({ln1, step.use(find(p + "['wqkv']"), w)}, A({Bm * S, 3 * D / c.tp}, cd),
                   w + "/qkv/dot_general", "activations");
    });
    T q = get("q", [&] { return e.loop({qkv}, A({Bm, S, D / c.tp}, cd), w + "/split", "activations"); });
    T kk = get("k", [&] { return e.loop({qkv}, A({Bm, S, D / c.tp}, cd), w + "/split", "activations"); });
    T v = get("v", [&] { return e.loop({qkv}, A({Bm, S, D / c.tp}, cd), w + "/split", "activations"); });
    T scores = get("scores", [&] {
      return e.dot({q, kk}, A({Bm * Hl, S, S}, cd), w + "/attention_scores/dot_general", "activations");
    });
    if (c.cpu)
      get("exp", [&] { return e.loop({scores}, A({Bm, Hl, S, S}, f32), w + "/softmax/exp", "activations"); });
    T probs = get("probs", [&] {
      return e.loop({scores}, A({Bm, Hl, S, S}, cd), w + "/softmax/div", "activations");
    });
    if (c.cpu)
      get("probs2", [&] {
        return e.loop({probs}, A({Bm, Hl, S, S}, f32), w + "/softmax/div", "activations");
      });
    T av = get("av", [&] {
      return e.dot({probs, v}, A({Bm * Hl, S, hd}, cd), w + "/attention/dot_general", "activations");
    });
    T at = get("attn_t", [&] {
      return e.loop({av}, A({Bm, S, Hl, hd}, cd), w + "/transpose", "activations");
    });
    T o = get("o", [&] {
      return e.dot({at, step.use(find(p + "['wo']"), w)}, A({Bm * S, D}, cd), w + "/out/dot_general",
                   "activations");
    });
    T ln2 = get("ln2", [&] {
      return e.loop({x, o, step.use(find(p + "['ln2_g']"), w), step.use(find(p + "['ln2_b']"), w)},
                    A({Bm, S, D}, cd), w + "/ln2/mul", "activations");
    });
    T h1 = get("h1", [&] {
      return e.dot({ln2, step.use(find(p + "['w1']"), w), step.use(find(p + "['b1']"), w)},
                   A({Bm * S, Fl}, cd), w + "/mlp/dot_general", "activations");
    });
    T g0 = get("g0", [&] { return e.loop({h1}, A({Bm, S, Fl}, cd), w + "/gelu/mul", "activations"); });
    T g1 = get("g1", [&] { return e.loop({h1}, A({Bm, S, Fl}, cd), w + "/gelu/mul", "activations"); });
    if (recompute) return b;
    T h2 = get("h2", [&] {
      return e.dot({g0, step.use(find(p + "['w2']"), w)}, A({Bm * S, D}, cd), w + "/mlp_out/dot_general",
                   "temporaries");
    });
    if (scan && !recompute) {
      // Inside a scan body XLA fuses less across the saved boundary: the dump of gpt_fp32_donate_scan keeps
      // one more MLP-width and two more model-width residuals per layer than the unrolled program.
      get("scan_f", [&] { return e.loop({h1}, A({Bm, S, Fl}, cd), w + "/scan/residual", "activations"); });
      get("scan_d0", [&] { return e.loop({x, o}, A({Bm, S, D}, cd), w + "/scan/residual", "activations"); });
      get("scan_d1", [&] {
        return e.loop({x, ln2}, A({Bm, S, D}, cd), w + "/scan/residual", "activations");
      });
    }
    if (c.cpu) {
      for (int extra = 0; extra < 7; ++extra)
        get(fmt::format("cpu{}", extra), [&] {
          return e.loop({x, o}, A({Bm, S, D}, f32), w + "/unfused", "activations");
        });
    }
    b.t["out"] =
        e.loop({x, o, h2, step.use(find(p + "['b2']"), w)}, A({Bm, S, D}, cd), w + "/add", "activations");
    return b;
  };

  // One block's backward from the gradient of its output; returns the gradient of its input.
  auto backward = [&](uint64_t l, const Block& b, const T& dy) {
    const std::string p = fmt::format("['layers'][{}]", l);
    const std::string w = "jit(step)/transpose(jvp())";
    auto t = [&](const char* key) { return b.t.at(key); };
    auto grad = [&](const std::string& name, std::vector<T> in, const char* what) {
      Param& q = find(p + name);
      step.set_grad(q, e.dot(in, step.grad_shape(q), w + what, "gradients"), w);
    };
    auto vgrad = [&](const std::string& name, std::vector<T> in) {
      Param& q = find(p + name);
      step.set_grad(q, e.reduce(in, step.grad_shape(q), w + "/reduce_sum", "gradients"), w);
    };
    grad("['w2']", {t("g0"), dy}, "/dot_general");
    vgrad("['b2']", {dy});
    T dg = e.dot({dy, step.use(find(p + "['w2']"), w)}, A({Bm * S, Fl}, cd), w + "/mlp/dot_general",
                 "temporaries");
    T dpre = e.loop({dg, t("g1"), t("g0"), t("h1")}, A({Bm, S, Fl}, cd), w + "/gelu/mul", "temporaries");
    vgrad("['b1']", {dpre});
    grad("['w1']", {t("ln2"), dpre}, "/dot_general");
    T dln2 = e.dot({dpre, step.use(find(p + "['w1']"), w)}, A({Bm * S, D}, cd), w + "/ln2/dot_general",
                   "temporaries");
    T dx2 = e.loop({dln2, t("ln2"), b.x, t("o"), dy}, A({Bm, S, D}, cd), w + "/ln2/add_any", "temporaries");
    vgrad("['ln2_g']", {dln2, b.x});
    vgrad("['ln2_b']", {dln2});
    grad("['wo']", {t("attn_t"), dx2}, "/dot_general");
    T dattn = e.dot({dx2, step.use(find(p + "['wo']"), w)}, A({Bm * S, D / c.tp}, cd), w + "/out/dot_general",
                    "temporaries");
    T dat = e.loop({dattn}, A({Bm, Hl, S, hd}, cd), w + "/transpose", "temporaries");
    T dprobs = e.dot({dat, t("v")}, A({Bm * Hl, S, S}, cd), w + "/attention/dot_general", "temporaries");
    T dv = e.dot({t("probs"), dat}, A({Bm * Hl, S, hd}, cd), w + "/attention/dot_general", "temporaries");
    std::vector<T> softmax_in{dprobs, t("probs")};
    if (!c.cpu) softmax_in.push_back(t("scores"));  // XLA:GPU keeps the raw scores for the softmax backward
    if (c.cpu) {  // XLA:CPU keeps the exponentials and a second copy of the probabilities for this
      softmax_in.push_back(t("exp"));
      softmax_in.push_back(t("probs2"));
    }
    T dscores = e.loop(softmax_in, A({Bm, Hl, S, S}, cd), w + "/softmax/mul", "temporaries");
    T dq = e.dot({dscores, t("k")}, A({Bm * Hl, S, hd}, cd), w + "/scores/dot_general", "temporaries");
    T dk = e.dot({dscores, t("q")}, A({Bm * Hl, S, hd}, cd), w + "/scores/dot_general", "temporaries");
    T dqkv = e.loop({dq, dk, dv}, A({Bm * S, 3 * D / c.tp}, cd), w + "/concatenate", "temporaries");
    grad("['wqkv']", {t("ln1"), dqkv}, "/dot_general");
    T dln1 = e.dot({dqkv, step.use(find(p + "['wqkv']"), w)}, A({Bm * S, D}, cd), w + "/ln1/dot_general",
                   "temporaries");
    std::vector<T> ln1_in{dln1, b.x};
    for (const char* key : {"scan_f", "scan_d0", "scan_d1"})
      if (b.t.contains(key)) ln1_in.push_back(t(key));
    if (c.cpu)
      for (int extra = 0; extra < 7; ++extra) ln1_in.push_back(t(fmt::format("cpu{}", extra).c_str()));
    vgrad("['ln1_g']", ln1_in);
    vgrad("['ln1_b']", {dln1});
    return e.loop({dln1, t("ln1"), b.x, dx2}, A({Bm, S, D}, cd), w + "/ln1/add_any", "temporaries");
  };

  // XLA:GPU schedules the zero buffer of take_along_axis's backward at the very start.
  T zeros;
  if (!vit && step.train() && !c.cpu)
    zeros = e.loop({}, A({Bm, S, V}, f32), "jit(step)/transpose(jvp(jit(take_along_axis)))/broadcast_in_dim",
                   "temporaries");
  T loss;
  T out_logits;
  T embed_head_grad;
  for (uint64_t micro = 0; micro < k; ++micro) {
    T tok = tokens, lab = labels;
    if (k > 1) {
      tok = e.op("dynamic-slice", {tokens},
                 array(tokens.shape.type,
                       [&] {
                         auto d = tokens.shape.dims;
                         d[0] = Bm;
                         return d;
                       }()),
                 "jit(step)/microbatch", "activations");
      if (step.train())
        lab = e.op("dynamic-slice", {labels},
                   array(labels.shape.type,
                         [&] {
                           auto d = labels.shape.dims;
                           d[0] = Bm;
                           return d;
                         }()),
                   "jit(step)/microbatch", "activations");
    }
    T x;
    if (vit) {
      x = e.dot(
          {tok, step.use(find("['embed']"), "jit(step)/patch"), find("['cls']").value, find("['pos']").value},
          A({Bm, S, D}, cd), "jit(step)/jvp()/patch_embed", "activations");
    } else {
      x = e.loop({step.use(find("['embed']"), "jit(step)/embed"), find("['pos']").value, tok},
                 A({Bm, S, D}, cd), "jit(step)/jvp()/add", "activations");
    }
    // Forward; with scan the kept tensors go into stacked buffers, one slice per layer.
    std::vector<Block> kept(L);
    std::map<std::string, T> stacked;
    T h = x;
    for (uint64_t l = 0; l < L; ++l) {
      Block b = forward(l, h, {}, false);
      h = b.t.at("out");
      const RematPolicy policy = step.train() ? remat_of(l) : RematPolicy::kFull;
      Block keep;
      keep.x = b.x;
      for (const auto& [key, t] : b.t)
        if (key != "out" && saveable(policy, key)) keep.t[key] = t;
      if (scan && step.train()) {
        // stacked[key] = dynamic-update-slice(stacked[key], t): XLA allocates each stack at the start.
        auto put = [&](const std::string& key, const T& t) {
          auto it = stacked.find(key);
          if (it == stacked.end()) {
            std::vector<uint64_t> d{L};
            d.insert(d.end(), t.shape.dims.begin(), t.shape.dims.end());
            it = stacked
                     .emplace(key, e.loop({}, array(t.shape.type, d), "jit(step)/scan/broadcast_in_dim",
                                          "activations"))
                     .first;
          }
          it->second = e.op("dynamic-update-slice", {it->second, t}, it->second.shape,
                            "jit(step)/scan/dynamic_update_slice", "activations");
        };
        put("x", keep.x);
        for (const auto& [key, t] : keep.t) put(key, t);
      }
      kept[l] = keep;
    }
    T lnf = e.loop({h, find("['lnf_g']").value, find("['lnf_b']").value}, A({Bm, S, D}, cd),
                   "jit(step)/jvp()/lnf/mul", "activations");
    if (!step.train()) {
      T logits = vit ? e.dot({lnf, find("['head']").value}, A({Bm, V}, cd),
                             "jit(step)/jvp()/head/dot_general", "activations")
                     : e.dot({lnf, find("['embed']").value}, A({Bm * S, V}, cd),
                             "jit(step)/jvp()/dot_general", "activations");
      out_logits =
          e.loop({logits}, A(vit ? std::vector<uint64_t>{Bm, V} : std::vector<uint64_t>{Bm, S, V}, f32),
                 "jit(step)/convert", "activations");
      break;
    }
    T dh;
    if (vit) {
      T pooled = e.reduce({lnf}, A({Bm, D}, cd), "jit(step)/jvp()/pool", "activations");
      T logits = e.dot({pooled, step.use(find("['head']"), "jit(step)/head")}, A({Bm, V}, cd),
                       "jit(step)/jvp()/head/dot_general", "activations");
      T l2 = e.reduce({logits, lab}, A({}, f32), "jit(step)/reduce_sum", "temporaries");
      loss = micro ? e.loop({loss, l2}, l2.shape, "jit(step)/add", "temporaries") : l2;
      T dlogits = e.loop({logits, lab}, A({Bm, V}, cd), "jit(step)/transpose(jvp(jit(log_softmax)))/add_any",
                         "temporaries");
      step.set_grad(find("['head']"),
                    e.dot({pooled, dlogits}, step.grad_shape(find("['head']")), "jit(step)/transpose/head",
                          "gradients"),
                    "jit(step)/head");
      T dpool = e.dot({dlogits, step.use(find("['head']"), "jit(step)/head")}, A({Bm, D}, cd),
                      "jit(step)/transpose/head", "temporaries");
      dh = e.loop({dpool, h}, A({Bm, S, D}, cd), "jit(step)/transpose/lnf", "temporaries");
    } else {
      T logits = e.dot({lnf, step.use(find("['embed']"), "jit(step)/logits")}, A({Bm * S, V}, cd),
                       "jit(step)/jvp()/dot_general", "activations");
      T cpu_exp;
      if (c.cpu)
        cpu_exp = e.loop({logits}, A({Bm, S, V}, f32), "jit(step)/jvp(jit(log_softmax))/exp", "temporaries");
      T lse =
          e.reduce({logits}, A({Bm * S}, f32), "jit(step)/jvp(jit(log_softmax))/reduce_max", "activations");
      T l2 = e.reduce({lse, lab}, A({}, f32), "jit(step)/reduce_sum", "temporaries");
      loss = micro ? e.loop({loss, l2}, l2.shape, "jit(step)/add", "temporaries") : l2;
      T z = zeros.name.empty() || micro
                ? e.loop({}, A({Bm, S, V}, f32),
                         "jit(step)/transpose(jvp(jit(take_along_axis)))/broadcast_in_dim", "temporaries")
                : zeros;
      T scat = e.loop({z, lab}, A({Bm, S, V}, f32),
                      "jit(step)/transpose(jvp(jit(take_along_axis)))/scatter-add", "temporaries");
      std::vector<T> dl_in{scat, logits, lse};
      if (c.cpu) dl_in.push_back(cpu_exp);
      T dlogits = e.loop(dl_in, A({Bm, S, V}, f32), "jit(step)/transpose(jvp(jit(log_softmax)))/add_any",
                         "temporaries");
      if (cd != f32)
        dlogits = e.loop({dlogits}, A({Bm * S, V}, cd), "jit(step)/transpose/convert", "temporaries");
      T dembed_head = e.dot({dlogits, lnf}, step.grad_shape(find("['embed']")),
                            "jit(step)/transpose(jvp())/dot_general", "gradients");
      T dlnf = e.dot({dlogits, step.use(find("['embed']"), "jit(step)/logits")}, A({Bm * S, D}, cd),
                     "jit(step)/transpose(jvp())/dot_general", "temporaries");
      dh = e.loop({dlnf, h, lnf}, A({Bm, S, D}, cd), "jit(step)/transpose(jvp())/lnf/add_any", "temporaries");
      // The embedding's gradient: the logits' part now, the tokens' scatter after the blocks.
      embed_head_grad = dembed_head;
    }
    step.set_grad(find("['lnf_g']"),
                  e.reduce({dh}, step.grad_shape(find("['lnf_g']")), "jit(step)/transpose/lnf", "gradients"),
                  "jit(step)/lnf");
    step.set_grad(find("['lnf_b']"),
                  e.reduce({dh}, step.grad_shape(find("['lnf_b']")), "jit(step)/transpose/lnf", "gradients"),
                  "jit(step)/lnf");
    for (uint64_t l = L; l-- > 0;) {
      Block b = kept[l];
      std::map<std::string, T> have = b.t;
      if (scan) {
        // Each layer's tensors come back out of the stacks (copies).
        auto slice = [&](const std::string& key, const T& like) {
          return e.op("dynamic-slice", {stacked.at(key)}, like.shape, "jit(step)/scan/dynamic_slice",
                      "activations");
        };
        b.x = slice("x", b.x);
        for (auto& [key, t] : have) t = slice(key, t);
      }
      const RematPolicy policy = remat_of(l);
      Block full = policy == RematPolicy::kNone ? Block{b.x, have} : forward(l, b.x, have, true);
      dh = backward(l, full, dh);
    }
    if (vit) {
      step.set_grad(
          find("['embed']"),
          e.dot({tok, dh}, step.grad_shape(find("['embed']")), "jit(step)/transpose/patch", "gradients"),
          "jit(step)/patch");
      step.set_grad(find("['cls']"),
                    e.reduce({dh}, step.grad_shape(find("['cls']")), "jit(step)/transpose/cls", "gradients"),
                    "jit(step)/cls");
    } else {
      Param& emb = find("['embed']");
      T full = e.loop({embed_head_grad, dh, tok}, embed_head_grad.shape,
                      "jit(step)/transpose(jvp())/scatter-add", "gradients");
      step.set_grad(emb, full, "jit(step)/embed");
    }
    step.set_grad(find("['pos']"),
                  e.reduce({dh}, step.grad_shape(find("['pos']")), "jit(step)/transpose/pos", "gradients"),
                  "jit(step)/pos");
  }
  if (!step.train()) {
    e.root({out_logits});
    return;
  }
  step.optimize_and_finish({loss}, &module);
}

}  // namespace

Expected<HloModule> build_step_module(const ModelSpec& spec, StepArguments* arguments) {
  MEMFIT_RETURN_IF_ERROR(validate_model_spec(spec));
  HloModule module;
  module.name = "jit_step";
  module.is_scheduled = true;
  module.platform = spec.backend == Backend::kCpu ? HloPlatform::kCpu : HloPlatform::kGpu;
  Emitter e(module);
  const PrimitiveType pdt = spec.precision == Precision::kBf16 ? PrimitiveType::kBF16 : PrimitiveType::kF32;
  const PrimitiveType cdt = spec.precision == Precision::kFp32 ? PrimitiveType::kF32 : PrimitiveType::kBF16;
  Ctx c{spec,
        e,
        pdt,
        cdt,
        spec.sharding == ShardingKind::kFsdp,
        spec.backend == Backend::kCpu,
        spec.axis_size("data"),
        spec.sharding == ShardingKind::kTp ? spec.axis_size("model") : 1,
        spec.remat};
  Step step(c);
  if (spec.model == ModelFamily::kMlp) {
    build_mlp(c, step, module);
  } else {
    build_transformer(c, step, module);
  }
  if (arguments != nullptr) *arguments = step.arguments();
  HloModule built = e.finish();
  // Every shape is checked like a parsed one: a spec can ask for more than 64 bits of bytes.
  for (const HloComputation& comp : built.computations)
    for (const HloInstruction& i : comp.instructions)
      if (!i.shape.is_tuple() && !array_bytes(i.shape.type, i.shape.dims, 0).ok())
        return invalid_argument(
            fmt::format("the spec's {} tensor {} overflows 64 bits", i.op_name, i.shape.to_string()));
  return built;
}

}  // namespace memfit
