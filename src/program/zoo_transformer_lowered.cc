// The transformer families' inference step written as JAX lowers it (reference_programs.py's gpt and vit
// with step "infer"; the shared gpt_fp32_infer_b32 and vit_b16_infer_b256 lowered programs are what this
// follows, op for op where memory is concerned): the embedding (GPT's token lookup; ViT's patch projection
// beside the class token), the blocks (layer norms as jnp writes them, attention with an f32 softmax -
// GPT's scores masked causally - and the tanh GELU MLP), the final norm and the head (GPT's logits against
// the tied embedding; ViT's mean over tokens and its classifier) - planned through the model of XLA:GPU
// like any user's lowered program.
#include <fmt/format.h>

#include "memfit/program/model_zoo.h"
#include "zoo_lowered.h"

namespace memfit::zoo {
namespace {

using V = LoweredEmitter::V;

struct LayerParams {
  V b1, b2, ln1_b, ln1_g, ln2_b, ln2_g, w1, w2, wo, wqkv;
};

class TransformerForward {
 public:
  TransformerForward(const ModelSpec& s, HloModule& m) : s_(s), e_(m) {
    vit_ = s.model == ModelFamily::kVit;
    seq_ = vit_ ? (s.image / s.patch) * (s.image / s.patch) + 1 : s.seq;
    pdt_ = s.precision == Precision::kBf16 ? PrimitiveType::kBF16 : PrimitiveType::kF32;
    cdt_ = s.precision == Precision::kFp32 ? PrimitiveType::kF32 : PrimitiveType::kBF16;
  }

  void build(StepArguments& args) {
    declare(args);
    e_.set_category("activations");
    e_.set_op_name("jit(step)");
    V x = vit_ ? patches() : embed();
    if (!vit_) mask_ = e_.constant(LoweredEmitter::array(PrimitiveType::kPred, {seq_, seq_}));
    for (const LayerParams& p : blocks_) x = block(x, p);
    x = layer_norm(x, lnf_g_, lnf_b_);
    V logits;
    if (vit_) {
      // jnp.mean(x, axis=1) @ head.astype(cdt)
      const V sum = e_.reduce_sum(cast(x, PrimitiveType::kF32), {1});
      const V mean = cast(e_.binary("divide", sum, splat(PrimitiveType::kF32, sum.shape.dims)), cdt_);
      logits = e_.dot(mean, cast(head_, cdt_), {s_.batch, s_.classes}, cdt_);
    } else {
      // x @ embed.astype(cdt).T
      const V table = e_.transpose(cast(embed_, cdt_), {1, 0});
      logits = e_.dot(x, table, {s_.batch, seq_, s_.vocab}, cdt_);
    }
    e_.root_array(cast(logits, PrimitiveType::kF32));
    e_.finish();
  }

 private:
  // Entry parameters in jax's order (the params dict's sorted keys, each layer's too), then the tokens;
  // the labels are not read by the forward pass, and jax.jit drops unused arguments.
  void declare(StepArguments& args) {
    const uint64_t d = s_.d_model;
    if (vit_) {
      cls_ = param({d}, "params['cls']", args);
      embed_ = param({s_.patch * s_.patch * s_.channels, d}, "params['embed']", args);
      head_ = param({d, s_.classes}, "params['head']", args);
    } else {
      embed_ = param({s_.vocab, d}, "params['embed']", args);
    }
    for (uint64_t l = 0; l < s_.layers; ++l) {
      auto name = [&](const char* key) { return fmt::format("params['layers'][{}]['{}']", l, key); };
      LayerParams b;
      b.b1 = param({4 * d}, name("b1"), args);
      b.b2 = param({d}, name("b2"), args);
      b.ln1_b = param({d}, name("ln1_b"), args);
      b.ln1_g = param({d}, name("ln1_g"), args);
      b.ln2_b = param({d}, name("ln2_b"), args);
      b.ln2_g = param({d}, name("ln2_g"), args);
      b.w1 = param({d, 4 * d}, name("w1"), args);
      b.w2 = param({4 * d, d}, name("w2"), args);
      b.wo = param({d, d}, name("wo"), args);
      b.wqkv = param({d, 3 * d}, name("wqkv"), args);
      blocks_.push_back(b);
    }
    lnf_b_ = param({d}, "params['lnf_b']", args);
    lnf_g_ = param({d}, "params['lnf_g']", args);
    pos_ = param({seq_, d}, "params['pos']", args);
    tokens_ =
        vit_ ? e_.parameter(LoweredEmitter::array(PrimitiveType::kF32,
                                                  {s_.batch, seq_ - 1, s_.patch * s_.patch * s_.channels}),
                            "batch[0]", "activations")
             : e_.parameter(LoweredEmitter::array(PrimitiveType::kS32, {s_.batch, seq_}), "batch[0]",
                            "activations");
    args.batch_bytes += tokens_.shape.own_bytes();
  }
  V param(std::vector<uint64_t> dims, const std::string& name, StepArguments& args) {
    const Shape shape = LoweredEmitter::array(pdt_, std::move(dims));
    uint64_t count = 1;
    for (uint64_t n : shape.dims) count *= n;
    args.parameter_count += count;
    args.parameter_bytes += shape.own_bytes();
    return e_.parameter(shape, name, "parameters");
  }

  V cast(const V& x, PrimitiveType type) { return x.shape.type == type ? x : e_.convert(x, type); }
  // A scalar of `type` broadcast to `dims` (a Python number in a jnp expression).
  V splat(PrimitiveType type, const std::vector<uint64_t>& dims) { return e_.splat(type, dims); }
  // x (op) v, v broadcast from `v_dims` of x's dimensions, as jnp broadcasts: reshape and broadcast.
  V with(const char* opcode, const V& x, const V& v, const std::vector<int64_t>& kept) {
    return e_.binary(opcode, x, e_.broadcast(v, x.shape.dims, kept));
  }

  // (params['embed'][tokens] + params['pos'][None]).astype(cdt); jnp's indexing wraps negative tokens.
  V embed() {
    const std::vector<uint64_t> bs = {s_.batch, seq_};
    const V negative = e_.compare(tokens_, splat(PrimitiveType::kS32, bs));
    const V wrapped = e_.select(negative, e_.binary("add", tokens_, splat(PrimitiveType::kS32, bs)), tokens_);
    const V rows = e_.gather(embed_, e_.reshape(wrapped, {s_.batch, seq_, 1}));
    const V x = with("add", rows, pos_, {1, 2});
    return cast(x, cdt_);
  }

  // ViT: concatenate([cls, patches.astype(cdt) @ embed.astype(cdt)], axis=1) + pos.astype(cdt).
  V patches() {
    const uint64_t d = s_.d_model;
    const V pe = e_.dot(cast(tokens_, cdt_), cast(embed_, cdt_), {s_.batch, seq_ - 1, d}, cdt_);
    const V cls = e_.broadcast(cast(cls_, cdt_), {s_.batch, 1, d}, {2});
    return with("add", e_.concatenate({cls, pe}, 1), cast(pos_, cdt_), {1, 2});
  }

  // jnp.mean over the last axis, keepdims: an f32 sum (jnp upcasts half types), divided, cast back.
  V mean_last(const V& x) {
    const std::vector<uint64_t> kept = {s_.batch, seq_, 1};
    const V sum = e_.reduce_sum(cast(x, PrimitiveType::kF32), {2});
    const V mean = e_.binary("divide", e_.reshape(sum, kept), splat(PrimitiveType::kF32, kept));
    return cast(mean, x.shape.type);
  }
  // (x - m) * rsqrt(mean((x - m) ** 2) + 1e-5) * g + b, as reference_programs.py's ln writes it.
  V layer_norm(const V& x, const V& g, const V& b) {
    const std::vector<uint64_t> row = {s_.batch, seq_};
    const V m = mean_last(x);
    auto centered = [&] { return with("subtract", x, e_.reshape(m, row), {0, 1}); };
    const V xm = centered();
    const V d = centered();
    const V var = mean_last(e_.binary("multiply", d, d));
    const V inv = e_.unary("rsqrt", e_.binary("add", var, splat(x.shape.type, var.shape.dims)));
    V y = with("multiply", xm, e_.reshape(inv, row), {0, 1});
    y = with("multiply", y, cast(g, x.shape.type), {2});
    return with("add", y, cast(b, x.shape.type), {2});
  }

  V block(const V& x, const LayerParams& p) {
    const uint64_t batch = s_.batch, seq = seq_, d = s_.d_model, heads = s_.heads, hd = d / heads;
    V h = layer_norm(x, p.ln1_g, p.ln1_b);
    const V qkv = e_.dot(h, cast(p.wqkv, cdt_), {batch, seq, 3 * d}, cdt_);
    auto head_split = [&](const std::vector<int64_t>& permutation) {
      return e_.transpose(e_.reshape(e_.slice(qkv, 2, d), {batch, seq, heads, hd}), permutation);
    };
    const V q = head_split({0, 2, 1, 3});
    const V kt = head_split({0, 2, 3, 1});  // k.transpose(0, 1, 3, 2), folded into the head split
    V att = e_.dot(q, kt, {batch, heads, seq, seq}, cdt_, 2);
    att = e_.binary("divide", att, splat(cdt_, att.shape.dims));
    // GPT: jnp.where(mask, att, -1e4)
    if (!vit_) att = e_.select(e_.broadcast(mask_, att.shape.dims, {2, 3}), att, splat(cdt_, att.shape.dims));
    const V probs = cast(softmax(cast(att, PrimitiveType::kF32)), cdt_);
    const V v = head_split({0, 2, 1, 3});
    const V o = e_.dot(probs, v, {batch, heads, seq, hd}, cdt_, 2);
    const V merged = e_.reshape(e_.transpose(o, {0, 2, 1, 3}), {batch, seq, d});
    const V x1 = e_.binary("add", x, e_.dot(merged, cast(p.wo, cdt_), {batch, seq, d}, cdt_));
    h = layer_norm(x1, p.ln2_g, p.ln2_b);
    h = with("add", e_.dot(h, cast(p.w1, cdt_), {batch, seq, 4 * d}, cdt_), cast(p.b1, cdt_), {2});
    h = gelu(h);
    const V x2 = e_.binary("add", x1, e_.dot(h, cast(p.w2, cdt_), {batch, seq, d}, cdt_));
    return with("add", x2, cast(p.b2, cdt_), {2});
  }

  // jax.nn.softmax over the last axis: exp(x - max) / sum, the max floored at -inf.
  V softmax(const V& x) {
    const std::vector<uint64_t> rows(x.shape.dims.begin(), x.shape.dims.end() - 1);
    std::vector<uint64_t> kept = rows;
    kept.push_back(1);
    const std::vector<int64_t> row_dims = {0, 1, 2};
    const V max = e_.binary("maximum", e_.reduce_max(x, {3}), splat(x.shape.type, rows));
    const V shifted = with("subtract", x, e_.reshape(e_.reshape(max, kept), rows), row_dims);
    const V ex = e_.unary("exponential", shifted);
    const V sum = e_.reduce_sum(ex, {3});
    return with("divide", ex, e_.reshape(e_.reshape(sum, kept), rows), row_dims);
  }

  // jax.nn.gelu (approximate=True): x * 0.5 * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 x^3))).
  V gelu(const V& x) {
    const std::vector<uint64_t>& dims = x.shape.dims;
    const PrimitiveType t = x.shape.type;
    const V cube = e_.binary("multiply", e_.binary("multiply", x, x), x);
    const V inner = e_.binary("add", x, e_.binary("multiply", cube, splat(t, dims)));
    const V th = e_.unary("tanh", e_.binary("multiply", inner, splat(t, dims)));
    const V half = e_.binary("multiply", e_.binary("add", th, splat(t, dims)), splat(t, dims));
    return e_.binary("multiply", x, half);
  }

  const ModelSpec& s_;
  LoweredEmitter e_;
  PrimitiveType pdt_, cdt_;
  bool vit_ = false;
  uint64_t seq_ = 0;  // tokens: GPT's sequence, ViT's patches and the class token
  V embed_, cls_, head_, lnf_b_, lnf_g_, pos_, tokens_, mask_;
  std::vector<LayerParams> blocks_;
};

}  // namespace

// Any remat policy: jax.checkpoint adds its optimization barrier only to a differentiated function, and an
// inference step evaluates the block as written (jax/_src/ad_checkpoint.py, remat_lowering).
bool transformer_lowers(const ModelSpec& spec) {
  return (spec.model == ModelFamily::kGpt || spec.model == ModelFamily::kVit) &&
         spec.backend == Backend::kGpu && spec.devices() == 1 && spec.sharding == ShardingKind::kReplicated &&
         spec.step == StepKind::kInfer && !spec.scan && spec.attn == AttentionKind::kXla;
}

void build_transformer_lowered(const ModelSpec& spec, HloModule& module, StepArguments& arguments) {
  TransformerForward(spec, module).build(arguments);
}

}  // namespace memfit::zoo
