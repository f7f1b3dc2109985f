// The flax encoder written as JAX lowers its step (reference_programs.py's flax_encoder; the shared
// flax_encoder_adafactor_b32.lowered.hlo.txt is what this follows, op for op where memory is concerned):
// flax.linen's Embed (jnp.take: the rows gathered, out-of-range tokens filled), per layer a LayerNorm as
// flax computes it (the mean and the mean of squares, var = max(E[x^2] - E[x]^2, 0)), flax's
// MultiHeadDotProductAttention (DenseGeneral query/key/value projections to [B,S,H,hd] with biases, the
// query divided by sqrt(hd), bidirectional scores [B,H,S,S] and softmax, the values' product [B,H,hd,S]
// transposed back, the output projection from [B,S,H,hd]), a second LayerNorm and the tanh GELU MLP of two
// Dense layers; the final LayerNorm and an untied Dense head with a bias; optax's
// softmax_cross_entropy_with_integer_labels (the log-sum-exp, the label's logit taken along the axis);
// the transposes JAX's rules write (every kernel's gradient a product transposed into the kernel's layout);
// the optimizer's update (optax.adafactor as the reference trains it). Beyond the reference: inference,
// gradient accumulation as the zoo's other families write it, and remat policies as flax's nn.remat of a
// layer lowers (jax.checkpoint: GPT's writer, checked against JAX's programs, is the pattern), and mixed
// precision as flax's dtype=jnp.bfloat16 on every module computes (param_dtype stays fp32): each module
// casts its parameters and input to bf16 (flax.linen.dtypes.promote_dtype) - the residual stream, the
// scores, the softmax (jax.nn.softmax in the input's type), the logits and the loss's log-sum-exp are bf16 -
// while a LayerNorm computes its statistics and normalizes in f32 (flax's _compute_stats promotes to at
// least f32) and casts its output to bf16; each parameter's gradient comes back to fp32 through the cast's
// transpose. bf16 parameters (param_dtype=jnp.bfloat16 as well) compute alike without the parameters'
// casts: each LayerNorm widens its scale and bias into its f32 math, and optax's Adafactor keeps its factored
// state in f32 (optax/_src/factorized.py makes its zeros in the default dtype) and writes the update back in
// bf16. No JAX capture of a mixed-precision or bf16 encoder exists: those programs are written from flax's
// and optax's sources, not checked against JAX's. Planned through the model of XLA:GPU like any user's
// lowered program.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "memfit/program/model_zoo.h"
#include "zoo_lowered.h"

namespace memfit::zoo {
namespace {

using V = LoweredEmitter::V;

// What a flax LayerNorm's transpose reads of its forward pass.
struct FlaxNorm {
  V x, mean, xm, spread, var_eps, inv, scaled;     // spread: E[x^2] - E[x]^2 before the max with 0; x in f32
  V scale, bias;                                   // the parameters
  PrimitiveType input_type = PrimitiveType::kF32;  // the input's type (and the output's): bf16 under mixed
};

// The values a layer's backward pass reads.
struct EncoderLayer {
  // Where its sixteen parameters start in params_ (the slots: TopParam, then each layer's LayerParam), and
  // those parameters as the layer reads them (a recomputation: through the barrier).
  size_t first_param = 0;
  std::vector<V> w;
  std::vector<V> cw;  // w as the modules compute with them: cast to the compute type (flax's promote_dtype)
  V h, q, qs, k, v, ex, sum, probs, merged, x_mid, h2;
  FlaxNorm ln0, ln1;
  Gelu gelu;
};

// A layer's parameters in jax's order (flax's module names sorted, 'bias' before 'kernel').
enum LayerParam : size_t {
  kOutBias,     // Dense_0: the MLP's second layer (flax names modules in the order they are made:
  kOutKernel,   //          nn.Dense(D) is made before the nn.Dense(4D) it wraps)
  kInBias,      // Dense_1: the MLP's first layer
  kInKernel,    //
  kLn0Bias,     // LayerNorm_0: before attention
  kLn0Scale,    //
  kLn1Bias,     // LayerNorm_1: before the MLP
  kLn1Scale,    //
  kKeyBias,     // MultiHeadDotProductAttention_0's key, out, query, value
  kKeyKernel,   //
  kProjBias,    //
  kProjKernel,  //
  kQueryBias,   //
  kQueryKernel,
  kValueBias,
  kValueKernel,
  kLayerParams
};

// The GEMMs of a layer whose results a remat policy can save (jax.checkpoint_policies): the query, key and
// value projections, the scores and the values' product (batch dimensions: the heads), the output
// projection and the MLP's first GEMM. The MLP's second GEMM feeds only the residual sum, whose transpose
// reads no operand: no policy saves it.
enum EncoderDot : size_t {
  kQueryDot,
  kKeyDot,
  kValueDot,
  kScoresDot,
  kValuesDot,
  kProjDot,
  kMlpInDot,
  kEncoderDots
};
using EncoderResiduals = std::array<V, kEncoderDots>;

class EncoderStep {
 public:
  EncoderStep(const ModelSpec& s, HloModule& m)
      : s_(s),
        e_(m),
        pt_(s.precision == Precision::kBf16 ? PrimitiveType::kBF16 : kF32),
        ct_(s.precision == Precision::kFp32 ? kF32 : PrimitiveType::kBF16) {}

  void build(StepArguments& args) {
    e_.reserve((s_.layers + 2) * 1000);
    train_ = s_.step == StepKind::kTrain;
    batch_ = s_.batch;
    declare(args);
    if (!train_) {
      // model.apply(params, tokens): the logits are the step's result.
      e_.set_category("activations");
      e_.set_op_name("jit(step)");
      V y;
      e_.root_array(forward(y));
      e_.finish();
      return;
    }
    std::vector<V> grads;
    V loss;
    if (s_.accum == 1) {
      loss = value_and_grad(grads);
    } else {
      // Gradient accumulation as the zoo's other families write it (accumulate_gradients): the body reads
      // its microbatch's rows and the parameters as the loop carries them.
      const V whole_tokens = tokens_, whole_labels = labels_;
      const std::vector<V> whole_params = params_;
      loss = accumulate_gradients(
          e_, s_.accum, jax_params_, {tokens_, labels_},
          [&](const std::vector<V>& rows, const std::vector<V>& carried, std::vector<V>& g) {
            tokens_ = rows[0];
            labels_ = rows[1];
            for (size_t i = 0; i < order_.size(); ++i) params_[order_[i]] = carried[i];
            batch_ = s_.batch / s_.accum;
            return value_and_grad(g);
          },
          grads);
      tokens_ = whole_tokens;
      labels_ = whole_labels;
      params_ = whole_params;
      batch_ = s_.batch;
    }
    write_update(e_, s_, jax_params_, grads, keeps_optimizer_state(s_) ? &state_ : nullptr, {loss});
    e_.finish();
  }

 private:
  // The embedding, the layers, the final norm (its output into `y`) and the head: the logits [B,S,vocab].
  V forward(V& y) {
    e_.set_category("activations");
    e_.set_op_name("jit(step)/jvp(Encoder)");
    V x = embed();
    layers_.assign(s_.layers, EncoderLayer{});
    inputs_.assign(s_.layers, V{});
    residuals_.assign(s_.layers, EncoderResiduals{});
    for (uint64_t l = 0; l < s_.layers; ++l) {
      inputs_[l] = x;
      EncoderLayer& k = layers_[l];
      k.first_param = kTopParams + l * kLayerParams;
      k.w.assign(params_.begin() + static_cast<ptrdiff_t>(k.first_param),
                 params_.begin() + static_cast<ptrdiff_t>(k.first_param + kLayerParams));
      x = layer(x, k, checkpointed(l) ? &residuals_[l] : nullptr);
    }
    e_.set_op_name("jit(step)/jvp(Encoder)/LayerNorm_0");
    y = layer_norm(x, params_[kLnfScale], params_[kLnfBias], lnf_);
    e_.set_op_name("jit(step)/jvp(Encoder)/Dense_0");
    const std::vector<uint64_t> dims = {batch_, s_.seq, s_.vocab};
    head_kernel_ = e_.astype(params_[kHeadKernel], ct_);
    const V bias = e_.astype(params_[kHeadBias], ct_);
    return e_.binary("add", e_.dot(y, head_kernel_, dims, ct_), write_vector_broadcast(e_, bias, dims));
  }

  // jax.value_and_grad of the loss over tokens_ and labels_: the forward pass, the loss and the transposes.
  // Returns the loss; `grads` one gradient per parameter, in the arguments' order.
  V value_and_grad(std::vector<V>& grads) {
    V y;
    const V logits = forward(y);
    V dlogits;
    const V loss = cross_entropy(logits, dlogits);
    const uint64_t D = s_.d_model;
    grads_.assign(params_.size(), V{});
    e_.set_category("gradients");
    e_.set_op_name("jit(step)/transpose(jvp(Encoder))/Dense_0");
    grads_[kHeadBias] = as_parameter(e_.reduce_sum(dlogits, {0, 1}));
    grads_[kHeadKernel] = as_parameter(e_.transpose(e_.dot(dlogits, y, {s_.vocab, D}, ct_), {1, 0}));
    e_.set_category("temporaries");
    const V dy = e_.dot(dlogits, head_kernel_, {batch_, s_.seq, D}, ct_);
    V g = norm_transpose(lnf_, dy, nullptr, kLnfScale, kLnfBias);
    for (uint64_t l = s_.layers; l-- > 0;)
      g = checkpointed(l) ? rematted_transpose(layers_[l], inputs_[l], residuals_[l], g)
                          : layer_transpose(layers_[l], g);
    // The lookup's transpose: a scatter-add of the cotangent into zeros of the table's shape (a nested jit
    // too, reading the index the forward's call returned).
    e_.set_category("gradients");
    e_.set_op_name("jit(step)/transpose(jvp(Encoder))/Embed_0");
    const std::vector<uint64_t>& table = params_[kEmbedding].shape.dims;
    grads_[kEmbedding] = as_parameter(
        e_.call("_take_transpose", {token_rows_, g}, [&](const std::vector<V>& a) -> std::vector<V> {
          return {e_.scatter(e_.splat(ct_, table), a[0], a[1])};
        })[0]);
    grads.clear();
    for (size_t slot : order_) grads.push_back(grads_[slot]);
    return loss;
  }

  // The top-level parameters' places in jax's order: 'Dense_0' (the head), 'Embed_0', 'LayerNorm_0' (the
  // final norm: 'LayerNorm_0' sorts before 'Layer_0'), then the layers.
  enum TopParam : size_t { kHeadBias, kHeadKernel, kEmbedding, kLnfBias, kLnfScale, kTopParams };

  void declare(StepArguments& args) {
    const uint64_t D = s_.d_model, F = s_.ffn_width(), H = s_.heads, hd = D / H;
    struct Named {
      std::string name;
      std::vector<uint64_t> dims;
      size_t slot;  // TopParam, or kTopParams + layer * kLayerParams + LayerParam
    };
    std::vector<Named> named = {{"params['Dense_0']['bias']", {s_.vocab}, kHeadBias},
                                {"params['Dense_0']['kernel']", {D, s_.vocab}, kHeadKernel},
                                {"params['Embed_0']['embedding']", {s_.vocab, D}, kEmbedding},
                                {"params['LayerNorm_0']['bias']", {D}, kLnfBias},
                                {"params['LayerNorm_0']['scale']", {D}, kLnfScale}};
    const char* attention = "['MultiHeadDotProductAttention_0']";
    for (uint64_t l = 0; l < s_.layers; ++l) {
      const std::string layer = fmt::format("params['Layer_{}']", l);
      auto add = [&](const std::string& key, std::vector<uint64_t> dims, LayerParam p) {
        named.push_back({layer + key, std::move(dims), kTopParams + l * kLayerParams + p});
      };
      add("['Dense_0']['bias']", {D}, kOutBias);
      add("['Dense_0']['kernel']", {F, D}, kOutKernel);
      add("['Dense_1']['bias']", {F}, kInBias);
      add("['Dense_1']['kernel']", {D, F}, kInKernel);
      add("['LayerNorm_0']['bias']", {D}, kLn0Bias);
      add("['LayerNorm_0']['scale']", {D}, kLn0Scale);
      add("['LayerNorm_1']['bias']", {D}, kLn1Bias);
      add("['LayerNorm_1']['scale']", {D}, kLn1Scale);
      add(fmt::format("{}['key']['bias']", attention), {H, hd}, kKeyBias);
      add(fmt::format("{}['key']['kernel']", attention), {D, H, hd}, kKeyKernel);
      add(fmt::format("{}['out']['bias']", attention), {D}, kProjBias);
      add(fmt::format("{}['out']['kernel']", attention), {H, hd, D}, kProjKernel);
      add(fmt::format("{}['query']['bias']", attention), {H, hd}, kQueryBias);
      add(fmt::format("{}['query']['kernel']", attention), {D, H, hd}, kQueryKernel);
      add(fmt::format("{}['value']['bias']", attention), {H, hd}, kValueBias);
      add(fmt::format("{}['value']['kernel']", attention), {D, H, hd}, kValueKernel);
    }
    // jax flattens a dict in its keys' sorted order ('Layer_10' before 'Layer_2'): the parameters' argument
    // numbers are that order's, and the slots say where each is read.
    std::sort(named.begin(), named.end(), [](const Named& a, const Named& b) { return a.name < b.name; });
    std::vector<V> by_slot(named.size());
    std::vector<std::string> names;
    for (const Named& n : named) {
      jax_params_.push_back(model_parameter(e_, LoweredEmitter::array(pt_, n.dims), n.name, args));
      names.push_back(n.name);
      by_slot[n.slot] = jax_params_.back();
    }
    // params_ is kept in slot order (what the writer reads); the update and the optimizer's state take the
    // parameters in jax's order, so the slots are mapped back after the backward pass (order_).
    params_ = std::move(by_slot);
    for (const Named& n : named) order_.push_back(n.slot);
    if (train_ && keeps_optimizer_state(s_))
      state_ = declare_optimizer_state(e_, s_, jax_params_, names, args);
    tokens_ = e_.parameter(LoweredEmitter::array(PrimitiveType::kS32, {s_.batch, s_.seq}), "batch[0]",
                           "activations");
    args.batch_bytes += tokens_.shape.own_bytes();
    if (!train_) return;  // inference never reads the labels: jax.jit drops them from the program
    labels_ = e_.parameter(LoweredEmitter::array(PrimitiveType::kS32, {s_.batch, s_.seq}), "batch[1]",
                           "activations");
    args.batch_bytes += labels_.shape.own_bytes();
  }

  static const V& p(const EncoderLayer& layer, LayerParam k) { return layer.w[k]; }
  // A parameter as the module reading it computes with it: cast to the compute type where the layer's
  // forward pass (or its recomputation) first reads it, the cast kept for the transpose.
  const V& c(EncoderLayer& layer, LayerParam k) {
    if (layer.cw[k].name.empty()) layer.cw[k] = e_.astype(layer.w[k], ct_);
    return layer.cw[k];
  }
  static const V& c(const EncoderLayer& layer, LayerParam k) { return layer.cw[k]; }
  // A gradient in the parameter's type: the transpose of the cast to the compute type (none in bf16).
  V as_parameter(const V& g) { return e_.astype(g, pt_); }

  // Whether layer l runs under jax.checkpoint (flax's nn.remat of the layer; spec.remat_layers names the
  // checkpointed layers when it is not empty).
  bool checkpointed(size_t l) const {
    if (s_.remat == RematPolicy::kNone) return false;
    return s_.remat_layers.empty() ||
           std::find(s_.remat_layers.begin(), s_.remat_layers.end(), l) != s_.remat_layers.end();
  }
  // Whether the policy saves a GEMM's result: dots_saveable every one, dots_with_no_batch_dims_saveable
  // (and its offloading form) those without batch dimensions, nothing_saveable none.
  bool saves(EncoderDot d) const {
    if (s_.remat == RematPolicy::kDots) return true;
    if (s_.remat == RematPolicy::kDotsNoBatch || s_.remat == RematPolicy::kOffloadDotsNoBatch)
      return d != kScoresDot && d != kValuesDot;
    return false;
  }
  bool offloads() const { return s_.remat == RematPolicy::kOffloadDotsNoBatch; }

  // A GEMM of a checkpointed layer's forward pass (`keep` not null) or of its recomputation (`from` not
  // null): a saved result is read back in place of the product; a result the policy saves is marked by the
  // reduce-precision JAX writes over a saved residual, or put in pinned host memory by an offloading policy
  // (the forward pass reads the device's value).
  V gemm(EncoderDot which, const std::function<V()>& product) {
    if (from_ != nullptr && saves(which)) return (*from_)[which];
    const V r = product();
    return keep_ != nullptr && saves(which) ? write_saved_residual(e_, r, offloads(), (*keep_)[which]) : r;
  }

  // A checkpointed layer's transpose, as JAX's partial evaluation of jax.checkpoint writes it: the saved
  // GEMM results, the layer's input, the parameters its recomputation reads (all but the MLP's last bias,
  // which nothing in it reads) and the incoming cotangent go through one optimization barrier, and the layer
  // runs again from the barrier's outputs (the saved GEMMs read, not recomputed) for the values its
  // transpose reads.
  V rematted_transpose(EncoderLayer& k, const V& input, const EncoderResiduals& saved, const V& g) {
    e_.set_op_name("jit(step)/transpose(jvp(Encoder))/checkpoint");
    std::vector<V> kept_dots, rest;
    for (size_t d = 0; d < kEncoderDots; ++d)
      if (saves(static_cast<EncoderDot>(d))) kept_dots.push_back(saved[d]);
    rest.push_back(input);
    for (size_t w = 0; w < kLayerParams; ++w)
      if (w != kOutBias) rest.push_back(k.w[w]);
    rest.push_back(g);
    const std::vector<V> kept = write_remat_barrier(e_, kept_dots, rest, offloads());
    EncoderResiduals from;
    for (size_t d = 0, j = 0; d < kEncoderDots; ++d)
      if (saves(static_cast<EncoderDot>(d))) from[d] = kept_dots[j++];
    size_t at = 0;
    const V x = kept[at++];
    for (size_t w = 0; w < kLayerParams; ++w)
      if (w != kOutBias) k.w[w] = kept[at++];
    const V cotangent = kept[at++];
    e_.set_op_name("jit(step)/transpose(jvp(Encoder))/checkpoint/rematted_computation");
    e_.set_category("activations");
    from_ = &from;
    layer(x, k, nullptr);
    from_ = nullptr;
    e_.set_category("temporaries");
    return layer_transpose(k, cotangent);
  }

  // nn.Embed: jnp.take(embedding, tokens, axis=0) in its default fill mode - a negative token wraps, the rows
  // gathered, and a row whose token is out of range filled with NaN (a select over the gathered rows).
  // jnp.take is a nested jit (`jit(_take)`): a call returning the rows, and in training the index its
  // transpose reads (JAX prunes a nested jit's results nothing reads).
  V embed() {
    const V table = e_.astype(params_[kEmbedding], ct_);  // promote_dtype(embedding, dtype=...)
    const std::vector<V> taken = e_.call("_take", {table, tokens_}, [&](const std::vector<V>& a) {
      const V index = write_wrapped_index(e_, a[1], {batch_, s_.seq, 1});
      const V in_range = write_index_in_range(e_, index);
      const V rows = e_.gather(a[0], index);
      const std::vector<uint64_t>& dims = rows.shape.dims;
      const V selected = e_.select(e_.broadcast(in_range, dims, {0, 1}), rows, e_.splat(ct_, dims));
      return train_ ? std::vector<V>{selected, index} : std::vector<V>{selected};
    });
    if (train_) token_rows_ = taken[1];
    return taken[0];
  }

  // flax.linen.LayerNorm over the last axis: mean = E[x], var = max(E[x^2] - mean^2, 0),
  // y = (x - mean) * (rsqrt(var + eps) * scale) + bias.
  V layer_norm(const V& x, const V& scale, const V& bias, FlaxNorm& n) {
    const std::vector<uint64_t>& dims = x.shape.dims;
    const std::vector<uint64_t> rows = {dims[0], dims[1]}, kept = {dims[0], dims[1], 1};
    n.input_type = x.shape.type;
    n.x = e_.astype(x, kF32);          // the statistics and the normalization in at least f32
    n.scale = e_.astype(scale, kF32);  // bf16 parameters (param_dtype) join the f32 math widened
    n.bias = e_.astype(bias, kF32);
    n.mean = e_.binary("divide", e_.reduce_sum(n.x, {2}), e_.splat(kF32, rows));
    n.xm = e_.binary("subtract", n.x, e_.broadcast(n.mean, dims, {0, 1}));
    const V mean_sq =
        e_.binary("divide", e_.reduce_sum(e_.binary("multiply", n.x, n.x), {2}), e_.splat(kF32, rows));
    n.spread = e_.binary("subtract", mean_sq, e_.binary("multiply", n.mean, n.mean));
    const V var = e_.binary("maximum", n.spread, e_.splat(kF32, rows));
    n.var_eps = e_.binary("add", e_.reshape(var, kept), e_.splat(kF32, kept));
    n.inv = e_.unary("rsqrt", n.var_eps);
    n.scaled = e_.binary("multiply", e_.broadcast(e_.reshape(n.inv, rows), dims, {0, 1}),
                         write_vector_broadcast(e_, n.scale, dims));
    return e_.astype(
        e_.binary("add", e_.binary("multiply", n.xm, n.scaled), write_vector_broadcast(e_, n.bias, dims)),
        n.input_type);
  }

  // The transpose of layer_norm: `dy` (the output's cotangent) back to the input, added to `r` (the residual
  // stream's cotangent) when there is one, as JAX's rules write it - through the centred copy, the mean's
  // broadcast, the rsqrt and var's max and square; the scale's and bias's gradients into their slots.
  V norm_transpose(const FlaxNorm& n, const V& output_cotangent, const V* r, size_t scale_slot,
                   size_t bias_slot) {
    const V dy = e_.astype(output_cotangent, kF32);  // the output cast's transpose
    // A bf16 input was widened: its cotangent is summed in f32, cast back, and only then added to r.
    const bool widened = n.input_type != kF32;
    const std::vector<uint64_t>& dims = dy.shape.dims;
    const std::vector<uint64_t> rows = {dims[0], dims[1]}, kept = {dims[0], dims[1], 1};
    const V through_scaled = e_.binary("multiply", dy, n.scaled);
    const V centred_sum = e_.reduce_sum(
        e_.reshape(e_.reduce_sum(e_.unary("negate", through_scaled), {2}), kept), {2});  // the mean's part
    const V xm_dy = e_.binary("multiply", n.xm, dy);
    const V scale_sum = e_.reshape(
        e_.reduce_sum(e_.binary("multiply", xm_dy, write_vector_broadcast(e_, n.scale, dims)), {2}), kept);
    const V slope = e_.binary("multiply", e_.binary("divide", n.inv, n.var_eps), e_.splat(kF32, kept));
    const V dvar = e_.reduce_sum(e_.binary("multiply", scale_sum, slope), {2});
    // max(spread, 0)'s derivative: 1 above 0, a half at 0.
    const V above = e_.compare(n.spread, e_.splat(kF32, rows));
    const V at = e_.compare(n.spread, e_.splat(kF32, rows));
    const V step =
        e_.select(above, e_.splat(kF32, rows), e_.select(at, e_.splat(kF32, rows), e_.splat(kF32, rows)));
    const V dspread = e_.binary("multiply", dvar, step);
    const V dmean = e_.binary("add", centred_sum,
                              e_.binary("multiply", e_.unary("negate", dspread),
                                        e_.binary("multiply", n.mean, e_.splat(kF32, rows))));
    V dx = r != nullptr && !widened ? e_.binary("add", *r, through_scaled) : through_scaled;
    dx = e_.binary("add", dx, e_.broadcast(e_.binary("divide", dmean, e_.splat(kF32, rows)), dims, {0, 1}));
    const V dsquare = e_.broadcast(e_.binary("divide", dspread, e_.splat(kF32, rows)), dims, {0, 1});
    dx = e_.binary("add", dx,
                   e_.binary("multiply", dsquare, e_.binary("multiply", n.x, e_.splat(kF32, dims))));
    if (widened) {
      dx = e_.convert(dx, n.input_type);
      if (r != nullptr) dx = e_.binary("add", *r, dx);
    }
    e_.set_category("gradients");
    grads_[bias_slot] = as_parameter(e_.reduce_sum(dy, {0, 1}));
    grads_[scale_slot] = as_parameter(e_.reduce_sum(
        e_.binary("multiply", e_.broadcast(e_.reshape(n.inv, rows), dims, {0, 1}), xm_dy), {0, 1}));
    e_.set_category("temporaries");
    return dx;
  }

  // nn.DenseGeneral to [B,S,H,hd]: the product by a [D,H,hd] kernel and the [H,hd] bias.
  V head_projection(EncoderDot which, const V& h, const V& kernel, const V& bias) {
    const std::vector<uint64_t> dims = {batch_, s_.seq, s_.heads, s_.d_model / s_.heads};
    const V product = gemm(which, [&] { return e_.dot(h, kernel, dims, ct_); });
    return e_.binary("add", product, e_.broadcast(bias, dims, {2, 3}));
  }

  // A layer's forward pass from `x` over k.w; what its backward pass reads into `k`. `keep`: the GEMM results
  // a remat policy saves (a checkpointed layer's forward pass).
  V layer(const V& x, EncoderLayer& k, EncoderResiduals* keep) {
    keep_ = keep;
    if (from_ == nullptr)
      e_.set_op_name(
          fmt::format("jit(step)/jvp(Encoder)/Layer_{}", (k.first_param - kTopParams) / kLayerParams));
    const uint64_t B = batch_, S = s_.seq, D = s_.d_model, H = s_.heads, hd = D / H, F = s_.ffn_width();
    k.cw.assign(kLayerParams, V{});
    k.h = layer_norm(x, p(k, kLn0Scale), p(k, kLn0Bias), k.ln0);
    k.q = head_projection(kQueryDot, k.h, c(k, kQueryKernel), c(k, kQueryBias));
    k.qs = e_.binary("divide", k.q, e_.splat(ct_, k.q.shape.dims));  // query / sqrt(depth)
    k.k = head_projection(kKeyDot, k.h, c(k, kKeyKernel), c(k, kKeyBias));
    k.v = head_projection(kValueDot, k.h, c(k, kValueKernel), c(k, kValueBias));
    // einsum('...qhd,...khd->...hqk'): batch dimensions B and H of both, the scores [B,H,S,S]
    const std::vector<uint64_t> scores_dims = {B, H, S, S}, rows = {B, H, S};
    const V scores = gemm(kScoresDot, [&] { return e_.batched_dot(k.qs, k.k, scores_dims, ct_, {0, 2}); });
    const V mx = e_.binary("maximum", e_.reduce_max(scores, {3}), e_.splat(ct_, rows));
    k.ex = e_.unary("exponential", e_.binary("subtract", scores, e_.broadcast(mx, scores_dims, {0, 1, 2})));
    k.sum = e_.reshape(e_.reduce_sum(k.ex, {3}), {B, H, S, 1});
    k.probs = e_.binary("divide", k.ex, e_.broadcast(e_.reshape(k.sum, rows), scores_dims, {0, 1, 2}));
    // einsum('...hqk,...khd->...qhd') as JAX writes it: the values' product [B,H,hd,S], transposed
    k.merged = e_.transpose(gemm(kValuesDot,
                                 [&] {
                                   return e_.batched_dot(k.v, k.probs, {B, H, hd, S}, ct_, {0, 2});
                                 }),
                            {0, 3, 1, 2});
    // Each module casts its kernel whether or not a remat policy saved its product: the transpose reads it.
    const V proj_kernel = c(k, kProjKernel);
    const V attended = e_.binary("add",
                                 gemm(kProjDot,
                                      [&] {
                                        return e_.dot(k.merged, proj_kernel, {B, S, D}, ct_);
                                      }),
                                 write_vector_broadcast(e_, c(k, kProjBias), {B, S, D}));
    k.x_mid = e_.binary("add", x, attended);
    k.h2 = layer_norm(k.x_mid, p(k, kLn1Scale), p(k, kLn1Bias), k.ln1);
    const V in_kernel = c(k, kInKernel);
    const V z = e_.binary("add",
                          gemm(kMlpInDot,
                               [&] {
                                 return e_.dot(k.h2, in_kernel, {B, S, F}, ct_);
                               }),
                          write_vector_broadcast(e_, c(k, kInBias), {B, S, F}));
    k.gelu = write_gelu(e_, z);
    const V out = e_.binary("add", e_.dot(k.gelu.out, c(k, kOutKernel), {B, S, D}, ct_),
                            write_vector_broadcast(e_, c(k, kOutBias), {B, S, D}));
    keep_ = nullptr;
    return e_.binary("add", k.x_mid, out);
  }

  // A layer's transpose from `g` (its output's cotangent) to its input's; its parameters' gradients into
  // grads_.
  V layer_transpose(const EncoderLayer& k, const V& g) {
    const size_t at = k.first_param;
    const uint64_t B = batch_, S = s_.seq, D = s_.d_model, H = s_.heads, hd = D / H, F = s_.ffn_width();
    e_.set_op_name(
        fmt::format("jit(step)/transpose(jvp(Encoder))/Layer_{}", (at - kTopParams) / kLayerParams));
    e_.set_category("gradients");
    grads_[at + kOutBias] = as_parameter(e_.reduce_sum(g, {0, 1}));
    grads_[at + kOutKernel] = as_parameter(e_.transpose(e_.dot(g, k.gelu.out, {D, F}, ct_), {1, 0}));
    e_.set_category("temporaries");
    const V dz = write_gelu_transpose(e_, k.gelu, e_.dot(g, c(k, kOutKernel), {B, S, F}, ct_));
    e_.set_category("gradients");
    grads_[at + kInBias] = as_parameter(e_.reduce_sum(dz, {0, 1}));
    grads_[at + kInKernel] = as_parameter(e_.transpose(e_.dot(dz, k.h2, {F, D}, ct_), {1, 0}));
    e_.set_category("temporaries");
    const V dh2 = e_.dot(dz, c(k, kInKernel), {B, S, D}, ct_);
    const V g1 = norm_transpose(k.ln1, dh2, &g, at + kLn1Scale, at + kLn1Bias);
    // The attention's output projection.
    e_.set_category("gradients");
    grads_[at + kProjBias] = as_parameter(e_.reduce_sum(g1, {0, 1}));
    grads_[at + kProjKernel] = as_parameter(e_.transpose(e_.dot(g1, k.merged, {D, H, hd}, ct_), {1, 2, 0}));
    e_.set_category("temporaries");
    const V datt =
        e_.transpose(e_.dot(g1, c(k, kProjKernel), {B, S, H, hd}, ct_), {0, 2, 3, 1});  // [B,H,hd,S]
    const std::vector<uint64_t> scores_dims = {B, H, S, S}, rows = {B, H, S};
    const V dv = e_.transpose(e_.batched_dot(datt, k.probs, {B, H, hd, S}, ct_, {0, 1}), {0, 3, 1, 2});
    const V dprobs = e_.batched_dot(datt, k.v, scores_dims, ct_, {0, 1});
    // The softmax's transpose through ex / sum: the quotient's two terms, the row sums' broadcast.
    const V sum_rows = e_.broadcast(e_.reshape(k.sum, rows), scores_dims, {0, 1, 2});
    const V through_sum = e_.binary("divide", dprobs, sum_rows);
    const V inv_sq = e_.binary("divide", e_.splat(ct_, {B, H, S, 1}), e_.binary("multiply", k.sum, k.sum));
    const V by_ex = e_.binary(
        "multiply",
        e_.binary("multiply", dprobs, e_.broadcast(e_.reshape(inv_sq, rows), scores_dims, {0, 1, 2})), k.ex);
    const V dsum =
        e_.reduce_sum(e_.unary("negate", e_.reshape(e_.reduce_sum(by_ex, {3}), {B, H, S, 1})), {3});
    const V dscores = e_.binary(
        "multiply", e_.binary("add", through_sum, e_.broadcast(dsum, scores_dims, {0, 1, 2})), k.ex);
    const V dk = e_.transpose(e_.batched_dot(dscores, k.qs, {B, H, S, hd}, ct_, {0, 1}), {0, 2, 1, 3});
    const V dq = e_.binary(
        "divide", e_.transpose(e_.batched_dot(dscores, k.k, {B, H, S, hd}, ct_, {0, 1}), {0, 2, 1, 3}),
        e_.splat(ct_, {B, S, H, hd}));
    V dh = e_.dot(dv, c(k, kValueKernel), {B, S, D}, ct_);
    dh = e_.binary("add", dh, e_.dot(dk, c(k, kKeyKernel), {B, S, D}, ct_));
    dh = e_.binary("add", dh, e_.dot(dq, c(k, kQueryKernel), {B, S, D}, ct_));
    e_.set_category("gradients");
    for (auto [d, kernel, bias] :
         {std::tuple{&dq, kQueryKernel, kQueryBias}, std::tuple{&dk, kKeyKernel, kKeyBias},
          std::tuple{&dv, kValueKernel, kValueBias}}) {
      grads_[at + bias] = as_parameter(e_.reduce_sum(*d, {0, 1}));
      grads_[at + kernel] = as_parameter(e_.transpose(e_.dot(*d, k.h, {H, hd, D}, ct_), {2, 0, 1}));
    }
    e_.set_category("temporaries");
    return norm_transpose(k.ln0, dh, &g1, at + kLn0Scale, at + kLn0Bias);
  }

  // optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean(): the log-sum-exp over the
  // shifted logits less the label's logit (taken along the axis); its transpose the exp scaled by the rows'
  // 1 / sum, and the label's -1 / N scattered into zeros. The logits' cotangent into `dlogits`.
  V cross_entropy(const V& logits, V& dlogits) {
    e_.set_op_name("jit(step)/jvp()");
    const std::vector<uint64_t>& dims = logits.shape.dims;
    const PrimitiveType ct = logits.shape.type;  // bf16 logits under mixed precision: optax takes them so
    const std::vector<uint64_t> rows = {dims[0], dims[1]}, kept = {dims[0], dims[1], 1};
    const V mx = e_.binary("maximum", e_.reduce_max(logits, {2}), e_.splat(ct, rows));
    const V shift = e_.select(e_.unary("is-finite", mx), mx, e_.splat(ct, rows));
    const V ex = e_.unary("exponential", e_.binary("subtract", logits, e_.broadcast(shift, dims, {0, 1})));
    const V sum = e_.reduce_sum(ex, {2});
    const V lse = e_.binary("add", e_.unary("log", sum), shift);
    const V index = e_.reshape(e_.reshape(labels_, kept), {dims[0], dims[1], 1, 1});
    const V picked = e_.reshape(e_.gather(logits, index, kept), rows);
    e_.set_category("outputs");  // the loss: one of the step's results
    // .mean(): jnp.mean sums a bf16 array in f32 and casts the mean back.
    const V loss = e_.astype(
        e_.binary("divide", e_.reduce_sum(e_.astype(e_.binary("subtract", lse, picked), kF32), {0, 1}),
                  e_.scalar(kF32)),
        ct);
    e_.set_category("temporaries");
    e_.set_op_name("jit(step)/transpose(jvp())");
    const V weight = e_.binary("divide", e_.splat(ct, rows), e_.unary("abs", sum));
    const V through_exp = e_.binary("multiply", e_.broadcast(weight, dims, {0, 1}), ex);
    const V label_part = e_.scatter(e_.splat(ct, dims), index, e_.splat(ct, kept));
    dlogits = e_.binary("add", through_exp, label_part);
    return loss;
  }

  static constexpr PrimitiveType kF32 = PrimitiveType::kF32;
  const ModelSpec& s_;
  LoweredEmitter e_;
  PrimitiveType pt_;           // the parameters' type (flax's param_dtype): bf16 under bf16, else f32
  PrimitiveType ct_;           // what the modules compute in (flax's dtype): bf16 under mixed and bf16
  V head_kernel_;              // the head's kernel as the head computes with it
  std::vector<V> params_;      // by slot (TopParam, then each layer's LayerParam)
  std::vector<size_t> order_;  // jax's order: the slot of each argument
  std::vector<V> jax_params_;  // the same parameters in jax's order
  std::vector<V> grads_;       // by slot
  OptimizerState state_;
  bool train_ = true;
  uint64_t batch_ = 0;  // the rows the step reads: the batch, or a microbatch inside accumulation's loop
  V tokens_, labels_, token_rows_;
  std::vector<EncoderLayer> layers_;
  std::vector<V> inputs_;  // each layer's input, which a checkpointed layer's backward reads
  std::vector<EncoderResiduals> residuals_;  // what each checkpointed layer's policy saved
  EncoderResiduals* keep_ = nullptr;         // the layer being written saves its GEMMs here (gemm)
  const EncoderResiduals* from_ = nullptr;   // the layer being recomputed reads its saved GEMMs here
  FlaxNorm lnf_;
};

}  // namespace

bool flax_encoder_lowers(const ModelSpec& s) {
  return s.model == ModelFamily::kFlaxEncoder && s.backend == Backend::kGpu && s.devices() == 1 &&
         s.sharding == ShardingKind::kReplicated &&
         (s.step == StepKind::kTrain || (s.step == StepKind::kInfer && s.accum == 1)) && !s.scan;
}

void build_flax_encoder_lowered(const ModelSpec& s, HloModule& module, StepArguments& args) {
  EncoderStep(s, module).build(args);
}

}  // namespace memfit::zoo
