// The MLP family written as JAX lowers its step (reference_programs.py's mlp; the shared
// mlp_*.lowered.hlo.txt programs are what this follows, op for op where memory is concerned): dense layers
// with the tanh GELU, a mean squared error, the backward pass as JAX's transpose rules write it, and the
// optimizer's update - planned through the model of XLA:GPU like any user's lowered program.
#include <fmt/format.h>

#include "memfit/program/model_zoo.h"
#include "zoo_lowered.h"

namespace memfit::zoo {
namespace {

using V = LoweredEmitter::V;

// A layer's values the backward pass reads: the weight as the GEMMs read it (its compute-dtype cast, one
// value for the forward and the backward GEMM, as JAX writes it), and the GELU's (jax.nn.gelu's default,
// approximate=True) values; the last layer has no GELU, its `act.z` is its output.
struct Layer {
  V in, wc, h;  // h: the GEMM's result, what a dots policy saves
  V host;       // h put in pinned host memory, where an offloading policy saves it
  Gelu act;
  V out;
};

class MlpStep {
 public:
  MlpStep(const ModelSpec& s, HloModule& m) : s_(s), e_(m) {
    pdt_ = s.precision == Precision::kBf16 ? PrimitiveType::kBF16 : PrimitiveType::kF32;
    cdt_ = s.precision == Precision::kFp32 ? PrimitiveType::kF32 : PrimitiveType::kBF16;
    sizes_.push_back(s.din);
    for (uint64_t i = 0; i < s.depth; ++i) sizes_.push_back(s.width);
    sizes_.push_back(s.dout);
    vmap_ = s.step == StepKind::kVmapGrads;
    train_ = s.step != StepKind::kInfer;
    moments_ = keeps_optimizer_state(s);
  }

  void build(StepArguments& args) {
    const size_t n = sizes_.size() - 1;
    declare(args);
    if (!train_) {
      const V out = forward(x_, weight_, bias_).back().out;
      e_.root_array(cdt_ == PrimitiveType::kF32 ? out : e_.convert(out, PrimitiveType::kF32));
      e_.finish();
      return;
    }
    std::vector<V> dw(n), db(n);
    const V loss = s_.accum == 1 ? value_and_grad(x_, y_, weight_, bias_, dw, db) : accumulate(dw, db);
    update(dw, db, loss);
    e_.finish();
  }

 private:
  // vmap(grad(loss_one)) sees one example at a time: [batch, 1, features] throughout.
  std::vector<uint64_t> act(uint64_t batch, uint64_t features) const {
    return vmap_ ? std::vector<uint64_t>{batch, 1, features} : std::vector<uint64_t>{batch, features};
  }

  // The layers over the batch `x_in` ([batch, din], f32), with the parameters as the program has them here.
  std::vector<Layer> forward(const V& x_in, const std::vector<V>& w, const std::vector<V>& b) {
    const size_t n = sizes_.size() - 1;
    const uint64_t batch = x_in.shape.dims[0];
    e_.set_category("activations");
    e_.set_op_name("jit(step)/jvp()");
    V x = vmap_ ? e_.reshape(x_in, act(batch, s_.din)) : x_in;
    if (cdt_ != PrimitiveType::kF32) x = e_.convert(x, cdt_);
    std::vector<Layer> layers(n);
    for (size_t l = 0; l < n; ++l) {
      layers[l] = layer(x, w[l], b[l], act(batch, sizes_[l + 1]), l + 1 < n);
      layers[l].in = x;
      // offload_dot_with_no_batch_dims("device", "pinned_host"): the saved GEMM result is put in host
      // memory as soon as it is computed (a device_put JAX writes as an annotate_device_placement call);
      // the forward pass reads the device's value.
      if (offloads() && checkpointed(l)) layers[l].host = e_.place(layers[l].h, "pinned_host");
      x = layers[l].out;
    }
    return layers;
  }

  // jax.value_and_grad(loss_fn) over one batch: the loss (none under vmap) and each parameter's gradient.
  V value_and_grad(const V& x_in, const V& y_in, const std::vector<V>& w, const std::vector<V>& b,
                   std::vector<V>& dw, std::vector<V>& db) {
    const size_t n = sizes_.size() - 1;
    const uint64_t batch = x_in.shape.dims[0];
    const std::vector<Layer> saved = forward(x_in, w, b);
    // loss = mean((forward(x) - y) ** 2): its cotangent is 2 (out - y) / count.
    e_.set_category("temporaries");
    e_.set_op_name("jit(step)/transpose(jvp())");
    const V x = saved.back().out;
    const V out = cdt_ == PrimitiveType::kF32 ? x : e_.convert(x, PrimitiveType::kF32);
    const V y = vmap_ ? e_.reshape(y_in, act(batch, s_.dout)) : y_in;
    const V diff = e_.binary("subtract", out, y);
    V loss;
    if (!vmap_) {
      const V squares = e_.binary("multiply", diff, diff);
      const V sum = e_.reduce_sum(squares, {0, 1});
      loss = e_.binary("divide", sum, e_.scalar(PrimitiveType::kF32));
    }
    V d = e_.binary("multiply", e_.binary("multiply", diff, e_.splat(PrimitiveType::kF32, diff.shape.dims)),
                    e_.splat(PrimitiveType::kF32, diff.shape.dims));
    if (cdt_ != PrimitiveType::kF32) d = e_.convert(d, cdt_);
    for (size_t l = n; l-- > 0;) {
      V dz = d;
      V in = saved[l].in;
      V wc = saved[l].wc;
      if (l + 1 < n) {
        if (checkpointed(l)) {
          // jax.checkpoint: what the policy saved (dots_saveable, dots_with_no_batch_dims_saveable and
          // offload_dot_with_no_batch_dims all keep an MLP's GEMM results: they have no batch dimensions;
          // the last from host memory), the layer's input, weights and the incoming cotangent go through a
          // barrier; the rest of the layer runs again from them.
          const bool saves_dot = s_.remat != RematPolicy::kFull;
          std::vector<V> kept_dot;
          if (saves_dot) kept_dot.push_back(offloads() ? saved[l].host : saved[l].h);
          const std::vector<V> kept = write_remat_barrier(e_, kept_dot, {in, w[l], b[l], d}, offloads());
          const V h = saves_dot ? kept_dot.front() : V{};
          in = kept[0];
          e_.set_op_name("jit(step)/transpose(jvp())/checkpoint/rematted_computation");
          Layer again;
          if (saves_dot) {
            again.wc = cast(kept[1]);
            activate(again, h, kept[2], act(batch, sizes_[l + 1]), true);
          } else {
            again = layer(in, kept[1], kept[2], act(batch, sizes_[l + 1]), true);
          }
          wc = again.wc;
          e_.set_op_name("jit(step)/transpose(jvp())/checkpoint");
          dz = gelu_transpose(again, kept[3]);
          e_.set_op_name("jit(step)/transpose(jvp())");
        } else {
          dz = gelu_transpose(saved[l], d);
        }
      }
      gradients(l, batch, dz, in, dw[l], db[l]);
      if (l > 0) {  // the batch is not differentiated: no cotangent for the first layer's input
        e_.set_category("temporaries");
        d = e_.dot(dz, wc, act(batch, sizes_[l]), cdt_);
      }
    }
    return loss;
  }

  // Gradient accumulation (accumulate_gradients) over the batch's inputs and targets; the parameters in
  // jax's order, each layer's weight then bias. Returns the mean loss.
  V accumulate(std::vector<V>& dw, std::vector<V>& db) {
    const size_t n = sizes_.size() - 1;
    std::vector<V> grads;
    const V loss = accumulate_gradients(
        e_, s_.accum, params_, {x_, y_},
        [&](const std::vector<V>& rows, const std::vector<V>& carried, std::vector<V>& g) {
          std::vector<V> w, b, gw(n), gb(n);
          for (size_t l = 0; l < n; ++l) {
            w.push_back(carried[2 * l]);
            b.push_back(carried[2 * l + 1]);
          }
          const V micro_loss = value_and_grad(rows[0], rows[1], w, b, gw, gb);
          for (size_t l = 0; l < n; ++l) {
            g[2 * l] = gw[l];
            g[2 * l + 1] = gb[l];
          }
          return micro_loss;
        },
        grads);
    for (size_t l = 0; l < n; ++l) {
      dw[l] = grads[2 * l];
      db[l] = grads[2 * l + 1];
    }
    return loss;
  }

  // Every entry parameter in jax's order: params, then the optimizer's moments and count, then the batch.
  void declare(StepArguments& args) {
    const size_t n = sizes_.size() - 1;
    std::vector<std::string> names;
    for (size_t l = 0; l < n; ++l) {
      names.push_back(fmt::format("params[{}][0]", l));
      weight_.push_back(
          model_parameter(e_, LoweredEmitter::array(pdt_, {sizes_[l], sizes_[l + 1]}), names.back(), args));
      names.push_back(fmt::format("params[{}][1]", l));
      bias_.push_back(model_parameter(e_, LoweredEmitter::array(pdt_, {sizes_[l + 1]}), names.back(), args));
      params_.push_back(weight_.back());
      params_.push_back(bias_.back());
    }
    if (moments_) state_ = declare_optimizer_state(e_, s_, params_, names, args);
    x_ = e_.parameter(LoweredEmitter::array(PrimitiveType::kF32, {s_.batch, s_.din}), "batch[0]",
                      "activations");
    args.batch_bytes += x_.shape.own_bytes();
    if (train_) {  // inference never reads the targets: jax.jit drops them from the program
      y_ = e_.parameter(LoweredEmitter::array(PrimitiveType::kF32, {s_.batch, s_.dout}), "batch[1]",
                        "activations");
      args.batch_bytes += y_.shape.own_bytes();
    }
  }
  bool offloads() const { return s_.remat == RematPolicy::kOffloadDotsNoBatch; }
  // Whether hidden layer l runs under jax.checkpoint (reference_programs.py's rlayer; spec.remat_layers
  // narrows it to some layers).
  bool checkpointed(size_t l) const {
    if (s_.remat == RematPolicy::kNone || l + 2 > sizes_.size() - 1) return false;
    if (s_.remat_layers.empty()) return true;
    for (uint64_t k : s_.remat_layers)
      if (k == l) return true;
    return false;
  }

  // x @ W.astype(cdt) + b.astype(cdt), then the GELU unless it is the last layer.
  Layer layer(const V& x, const V& w, const V& b, const std::vector<uint64_t>& dims, bool gelu) {
    Layer g;
    g.wc = cast(w);
    g.h = e_.dot(x, g.wc, dims, cdt_);
    activate(g, g.h, b, dims, gelu);
    return g;
  }
  // The weight as the GEMMs read it: in mixed precision a copy of the parameter, counted with them.
  V cast(const V& w) {
    if (pdt_ == cdt_) return w;
    const std::string category = e_.category();
    e_.set_category("parameters");
    const V wc = e_.convert(w, cdt_);
    e_.set_category(category);
    return wc;
  }
  // The bias and the GELU over the GEMM's result `h`.
  void activate(Layer& g, const V& h, const V& b, const std::vector<uint64_t>& dims, bool gelu) {
    const V bc = pdt_ == cdt_ ? b : e_.convert(b, cdt_);
    const V bias = write_vector_broadcast(e_, bc, dims);
    g.act.z = e_.binary("add", h, bias);
    g.out = g.act.z;
    if (!gelu) return;
    g.act = write_gelu(e_, g.act.z);
    g.out = g.act.out;
  }
  V splat(const V& like) { return e_.splat(like.shape.type, like.shape.dims); }

  V gelu_transpose(const Layer& g, const V& d) {
    e_.set_category("temporaries");
    return write_gelu_transpose(e_, g.act, d);
  }

  // The weight's and bias's gradients, in the parameter's dtype (vmap: their mean over the examples).
  void gradients(size_t l, uint64_t batch, const V& dz, const V& in, V& dw, V& db) {
    e_.set_category("gradients");
    const uint64_t fin = sizes_[l], fout = sizes_[l + 1];
    if (vmap_) {
      const V per = e_.dot(dz, in, {batch, fout, fin}, cdt_, /*batch_dims=*/1);
      const V sum = e_.reduce_sum(e_.transpose(per, {0, 2, 1}), {0});
      dw = e_.binary("divide", sum, splat(sum));
      const V rows = e_.reduce_sum(dz, {1});
      const V bsum = e_.reduce_sum(rows, {0});
      db = e_.binary("divide", bsum, splat(bsum));
    } else {
      dw = e_.transpose(e_.dot(dz, in, {fout, fin}, cdt_), {1, 0});
      db = e_.reduce_sum(e_.reshape(e_.reduce_sum(dz, {0}), {1, fout}), {0});
    }
    if (cdt_ != pdt_) {
      dw = e_.convert(dw, pdt_);
      db = e_.convert(db, pdt_);
    }
  }

  // The optimizer's update of every parameter, the loss beside it (none under vmap).
  void update(const std::vector<V>& dw, const std::vector<V>& db, const V& loss) {
    std::vector<V> grads;
    for (size_t l = 0; l < dw.size(); ++l) {
      grads.push_back(dw[l]);
      grads.push_back(db[l]);
    }
    write_update(e_, s_, params_, grads, moments_ ? &state_ : nullptr,
                 vmap_ ? std::vector<V>{} : std::vector<V>{loss});
  }

  const ModelSpec& s_;
  LoweredEmitter e_;
  PrimitiveType pdt_, cdt_;
  std::vector<uint64_t> sizes_;
  bool vmap_ = false, train_ = true, moments_ = false;
  std::vector<V> weight_, bias_;
  std::vector<V> params_;  // every parameter in jax's order: each layer's weight, then its bias
  OptimizerState state_;
  V x_, y_;
};

}  // namespace

bool mlp_lowers(const ModelSpec& s) {
  return s.model == ModelFamily::kMlp && s.backend == Backend::kGpu && s.devices() == 1 &&
         s.sharding == ShardingKind::kReplicated && (s.accum == 1 || s.step == StepKind::kTrain) &&
         (s.step == StepKind::kTrain || s.step == StepKind::kInfer || s.step == StepKind::kVmapGrads);
}

void build_mlp_lowered(const ModelSpec& s, HloModule& module, StepArguments& args) {
  MlpStep step(s, module);
  step.build(args);
}

}  // namespace memfit::zoo
