// The transformer families' steps written as JAX lowers them (reference_programs.py's gpt and vit; the
// shared gpt_fp32_infer_b32, vit_b16_infer_b256 and vit_b16_fp32_donate lowered programs are what this
// follows, op for op where memory is concerned): the embedding (GPT's token lookup; ViT's patch projection
// beside the class token), the blocks (layer norms as jnp writes them, attention with an f32 softmax -
// GPT's scores masked causally - and the tanh GELU MLP), the final norm and the head (GPT's logits against
// the tied embedding; ViT's mean over tokens and its classifier); for training also the loss, the
// transposes JAX's rules write (the data gradient through every block, then each parameter's gradient) and
// the optimizer's update - planned through the model of XLA:GPU like any user's lowered program.
#include <fmt/format.h>

#include <array>
#include <functional>

#include "memfit/program/model_zoo.h"
#include "zoo_lowered.h"

namespace memfit::zoo {
namespace {

using V = LoweredEmitter::V;

struct LayerParams {
  V b1, b2, ln1_b, ln1_g, ln2_b, ln2_g, w1, w2, wo, wqkv;
  // The ten in jax's order (the layer dict's sorted keys), as arguments, gradients and loop elements are.
  std::array<V*, 10> in_jax_order() {
    return {&b1, &b2, &ln1_b, &ln1_g, &ln2_b, &ln2_g, &w1, &w2, &wo, &wqkv};
  }
  // The nine a checkpointed block's barrier and recomputation read: all but b2, which nothing in it reads.
  std::array<V*, 9> read_by_recomputation() {
    return {&b1, &ln1_b, &ln1_g, &ln2_b, &ln2_g, &w1, &w2, &wo, &wqkv};
  }
};

// A layer norm's values its transpose reads: the two centred copies jnp writes, var + eps, its rsqrt, the
// normalized value (before the scale) and the output.
struct Norm {
  V xm, d, var_eps, inv, normalized, y;
  // What JAX's linearization computes in the forward pass for the transpose, when a scan saves it:
  // (inv / var_eps) * -0.5 and 2 d. Empty: the transpose computes them from the values above.
  V k, d2;
};

// The GEMMs of a block whose results a remat policy can save (jax.checkpoint_policies): the qkv projection,
// the attention scores and the attention over the values (batch dimensions: the heads), the output
// projection and the MLP's first GEMM. The MLP's second GEMM feeds only the residual sum, whose transpose
// reads no operand: JAX saves nothing of it under any policy.
enum Dot : size_t { kQkv, kScores, kAttention, kProjection, kMlpIn, kDots };
using Residuals = std::array<V, kDots>;

// What a block's backward pass reads of its forward pass.
struct BlockSaved {
  Norm ln1, ln2;
  V q, kt, v;        // [B,H,S,hd], [B,H,hd,S], [B,H,S,hd]
  V ex, sum, probs;  // the softmax's exp, its row sums ([B,H,S,1]) and the probabilities
  V mask;            // GPT unrolled: the causal mask broadcast to the scores, as jnp.where returns it
  V inv_sum_sq;      // 1 / sum^2, when a scan saves it (empty: the transpose computes it)
  V merged;          // the heads' output, [B,S,D], before the projection
  Gelu gelu;         // the MLP's activation, over its first GEMM's biased result
  // The weights as the GEMMs read them (w.astype(cdt): in mixed precision a bf16 copy, which the backward
  // pass's GEMMs read too).
  V wqkv, wo, w1, w2;
};

// One of the stacks a scanned block's forward loop fills and its backward loop reads, in the order JAX's
// linearization stacks them. A weight is stacked only as its bf16 copy (mixed precision); otherwise the
// backward loop reads the stacked parameter at the same place.
struct ResidualSlot {
  enum Kind : uint8_t {
    kValue,   // a value of the block's forward pass (BlockSaved)
    kScale,   // a norm's scale, a parameter, stacked reshaped to [1, 1, D]
    kWeight,  // a weight as the GEMMs read it (BlockSaved's cast), cast from `param`
  };
  Kind kind = kValue;
  std::vector<uint64_t> dims;  // the stack's shape, [L, ...]
  PrimitiveType type = PrimitiveType::kF32;
  std::function<V&(BlockSaved&, LayerParams&)> at;  // where the value, scale or weight is held
  std::function<V&(LayerParams&)> param;            // kWeight: the parameter
  std::function<void(BlockSaved&)> compute;         // what JAX's jvp computes for the transpose, if anything
};

class TransformerStep {
 public:
  TransformerStep(const ModelSpec& s, HloModule& m) : s_(s), e_(m) {
    train_ = s.step == StepKind::kTrain;
    vit_ = s.model == ModelFamily::kVit;
    cudnn_ = s.attn == AttentionKind::kCudnn;
    masked_ = !vit_ && !cudnn_;
    seq_ = vit_ ? (s.image / s.patch) * (s.image / s.patch) + 1 : s.seq;
    pdt_ = s.precision == Precision::kBf16 ? PrimitiveType::kBF16 : PrimitiveType::kF32;
    cdt_ = s.precision == Precision::kFp32 ? PrimitiveType::kF32 : PrimitiveType::kBF16;
    batch_ = s.batch;
    tp_ = s.step == StepKind::kDecode && s.sharding == ShardingKind::kTp ? s.axis_size("model") : 1;
  }

  void build(StepArguments& args) {
    // About 700 instructions a layer in training (forward, transposes, update), 150 in inference.
    e_.reserve((s_.scan ? 1 : s_.layers + 2) * (train_ ? 1000 : 200));
    declare(args);
    e_.set_category("activations");
    e_.set_op_name(train_ ? "jit(step)/jvp()" : "jit(step)");  // as JAX names a differentiated forward pass
    if (train_) {
      train();
      e_.finish();
      return;
    }
    if (s_.step == StepKind::kDecode) {
      decode();
      e_.finish();
      return;
    }
    V x = vit_ ? patches() : embed();
    if (masked_) mask_ = e_.constant(LoweredEmitter::array(PrimitiveType::kPred, {seq_, seq_}));
    if (s_.scan) {
      x = inference_scan(x);
    } else {
      for (const LayerParams& p : blocks_) x = block(x, p, nullptr);
    }
    x = layer_norm(x, lnf_g_, lnf_b_, nullptr);
    V logits;
    if (vit_) {
      // jnp.mean(x, axis=1) @ head.astype(cdt)
      const V sum = e_.reduce_sum(cast(x, PrimitiveType::kF32), {1});
      const V mean = cast(e_.binary("divide", sum, e_.splat(PrimitiveType::kF32, sum.shape.dims)), cdt_);
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
      param(cls_, {d}, "params['cls']", args);
      param(embed_, {s_.patch * s_.patch * s_.channels, d}, "params['embed']", args);
      param(head_, {d, s_.classes}, "params['head']", args);
    } else {
      // Tensor parallel: the table split by vocabulary when it divides (each device looks up and scores its
      // own rows), else whole on every device.
      vocab_split_ = s_.vocab % tp_ == 0 ? tp_ : 1;
      param(embed_, {s_.vocab / vocab_split_, d}, "params['embed']", args);
    }
    // Unrolled: a dict per layer. Scanned: one dict of arrays stacked over the layers ([L, ...]).
    blocks_.resize(s_.scan ? 1 : s_.layers);  // sized once: param() keeps pointers to the slots
    for (uint64_t l = 0; l < blocks_.size(); ++l) {
      auto name = [&](const char* key) {
        return s_.scan ? fmt::format("params['layers']['{}']", key)
                       : fmt::format("params['layers'][{}]['{}']", l, key);
      };
      auto dims = [&](std::vector<uint64_t> one) {
        if (s_.scan) one.insert(one.begin(), s_.layers);
        return one;
      };
      LayerParams& b = blocks_[l];
      // Tensor parallel (Megatron's split, as XLA's SPMD partitioner leaves each device's share): the qkv
      // projection and the MLP's first GEMM by columns (the heads, the hidden units), the output projection
      // and the MLP's second GEMM by rows; norms and the last bias whole on every device.
      const uint64_t t = tp_;
      param(b.b1, dims({s_.ffn_width() / t}), name("b1"), args);
      param(b.b2, dims({d}), name("b2"), args);
      param(b.ln1_b, dims({d}), name("ln1_b"), args);
      param(b.ln1_g, dims({d}), name("ln1_g"), args);
      param(b.ln2_b, dims({d}), name("ln2_b"), args);
      param(b.ln2_g, dims({d}), name("ln2_g"), args);
      param(b.w1, dims({d, s_.ffn_width() / t}), name("w1"), args);
      param(b.w2, dims({s_.ffn_width() / t, d}), name("w2"), args);
      param(b.wo, dims({d / t, d}), name("wo"), args);
      param(b.wqkv, dims({d, (d + 2 * kv_heads() * (d / s_.heads)) / t}), name("wqkv"), args);
    }
    param(lnf_b_, {d}, "params['lnf_b']", args);
    param(lnf_g_, {d}, "params['lnf_g']", args);
    param(pos_, {seq_, d}, "params['pos']", args);
    // adam's moments and count come between the parameters and the batch (jax's order: params, opt).
    moments_ = keeps_optimizer_state(s_);
    if (moments_) state_ = declare_optimizer_state(e_, s_, params_, param_names_, args);
    if (s_.step == StepKind::kDecode) {
      // decode's arguments after the parameters: the cache [(k, v) per layer], the tokens [B,1], the position
      for (uint64_t l = 0; l < s_.layers; ++l) {
        for (const char* kv : {"k", "v"}) {
          cache_.push_back(
              e_.parameter(LoweredEmitter::array(cdt_, {s_.batch, kv_heads() / tp_, s_.seq, d / s_.heads}),
                           fmt::format("cache[{}][{}]", l, kv), "kv_cache"));
          args.kv_cache_bytes += cache_.back().shape.own_bytes();
        }
      }
      tokens_ = e_.parameter(LoweredEmitter::array(PrimitiveType::kS32, {s_.batch, 1}), "tok", "activations");
      position_ = e_.parameter(LoweredEmitter::array(PrimitiveType::kS32, {}), "pos", "activations");
      args.batch_bytes += tokens_.shape.own_bytes() + position_.shape.own_bytes();
      return;
    }
    tokens_ =
        vit_ ? e_.parameter(LoweredEmitter::array(PrimitiveType::kF32,
                                                  {s_.batch, seq_ - 1, s_.patch * s_.patch * s_.channels}),
                            "batch[0]", "activations")
             : e_.parameter(LoweredEmitter::array(PrimitiveType::kS32, {s_.batch, seq_}), "batch[0]",
                            "activations");
    args.batch_bytes += tokens_.shape.own_bytes();
    if (!train_) return;
    const std::vector<uint64_t> label_dims =
        vit_ ? std::vector<uint64_t>{s_.batch} : std::vector<uint64_t>{s_.batch, seq_};  // GPT: next tokens
    labels_ = e_.parameter(LoweredEmitter::array(PrimitiveType::kS32, label_dims), "batch[1]", "activations");
    args.batch_bytes += labels_.shape.own_bytes();
  }
  // A parameter of the model, into `slot` (the member the blocks read it from).
  void param(V& slot, std::vector<uint64_t> dims, const std::string& name, StepArguments& args) {
    param_names_.push_back(name);
    params_.push_back(model_parameter(e_, LoweredEmitter::array(pdt_, std::move(dims)), name, args));
    slot = params_.back();
    slots_.push_back(&slot);
  }
  // The blocks read `values` (one per parameter, in jax's order) as the parameters from here on.
  void read_parameters_from(const std::vector<V>& values) {
    for (size_t j = 0; j < slots_.size(); ++j) *slots_[j] = values[j];
  }

  V cast(const V& x, PrimitiveType type) { return x.shape.type == type ? x : e_.convert(x, type); }
  // x (op) v, v broadcast from `v_dims` of x's dimensions, as jnp broadcasts: reshape and broadcast.
  V with(const char* opcode, const V& x, const V& v, const std::vector<int64_t>& kept) {
    return e_.binary(opcode, x, e_.broadcast(v, x.shape.dims, kept));
  }

  // (params['embed'][tokens] + params['pos'][None]).astype(cdt); jnp's indexing wraps negative tokens.
  V embed() {
    token_rows_ = write_wrapped_index(e_, tokens_, {batch_, seq_, 1});
    const V rows = e_.gather(embed_, token_rows_);
    const V x = with("add", rows, pos_, {1, 2});
    return cast(x, cdt_);
  }

  // jax.value_and_grad of the loss over the forward pass from `x` (the embedded tokens), then the
  // optimizer's update: the transposes of reference_programs.py's ops as JAX writes them, the data gradient
  // through every block first, each parameter's gradient beside its update.
  void train() {
    std::vector<V> grads;
    const V loss = s_.accum == 1 ? value_and_grad(grads) : accumulate(grads);
    write_update(e_, s_, params_, grads, moments_ ? &state_ : nullptr, {loss});
  }

  // Gradient accumulation (accumulate_gradients): inside the loop the blocks read the microbatch's rows and
  // the parameters as the loop carries them, then the step's own again.
  V accumulate(std::vector<V>& grads) {
    const V whole_tokens = tokens_, whole_labels = labels_;
    const V loss = accumulate_gradients(
        e_, s_.accum, params_, {tokens_, labels_},
        [&](const std::vector<V>& rows, const std::vector<V>& params, std::vector<V>& g) {
          tokens_ = rows[0];
          labels_ = rows[1];
          read_parameters_from(params);
          batch_ = s_.batch / s_.accum;
          e_.set_category("activations");
          e_.set_op_name("jit(step)/while/body/jvp()");
          return value_and_grad(g);
        },
        grads);
    tokens_ = whole_tokens;
    labels_ = whole_labels;
    read_parameters_from(params_);
    batch_ = s_.batch;
    return loss;
  }

  // jax.value_and_grad(loss_fn)(params, batch) over the batch in tokens_ and labels_: the embedding, the
  // forward pass, the loss and the transposes. Returns the loss; `grads` one gradient per parameter.
  V value_and_grad(std::vector<V>& grads) {
    V x = vit_ ? patches() : embed();
    if (masked_) mask_ = e_.constant(LoweredEmitter::array(PrimitiveType::kPred, {seq_, seq_}));
    const uint64_t batch = batch_, seq = seq_, d = s_.d_model;
    std::vector<BlockSaved> saved(blocks_.size());
    std::vector<V> inputs(blocks_.size());  // each block's input, which a checkpointed block's backward reads
    std::vector<Residuals> residuals(blocks_.size());
    std::vector<V> stacks;  // scan: the forward loop's stacked residuals
    if (s_.scan) {
      x = forward_scan(x, stacks);
    } else {
      for (size_t l = 0; l < blocks_.size(); ++l) {
        inputs[l] = x;
        x = checkpointed(l) ? block(x, blocks_[l], nullptr, &residuals[l]) : block(x, blocks_[l], &saved[l]);
      }
    }
    Norm lnf;
    const V y = layer_norm(x, lnf_g_, lnf_b_, &lnf);
    V loss, dy, dhead_or_table;
    if (vit_) {
      // loss = -mean(take_along_axis(log_softmax(mean(y, 1) @ head), labels[:, None]))
      // (jnp.mean(y, axis=1) @ head.astype(cdt)).astype(f32); jnp.mean sums a half type in f32
      const V sum = e_.reduce_sum(cast(y, PrimitiveType::kF32), {1});
      const V pooled = cast(e_.binary("divide", sum, e_.splat(PrimitiveType::kF32, {batch, d})), cdt_);
      const V head = cast(head_, cdt_);
      const V logits = e_.dot(pooled, head, {batch, s_.classes}, cdt_);
      V dlogits;
      loss = cross_entropy(cast(logits, PrimitiveType::kF32), labels_, dlogits);
      dlogits = cast(dlogits, cdt_);
      // Through the head and the mean over the tokens.
      const V dpooled = cast(e_.dot(dlogits, head, {batch, d}, cdt_), PrimitiveType::kF32);
      dhead_or_table = cast(e_.transpose(e_.dot(dlogits, pooled, {s_.classes, d}, cdt_), {1, 0}), pdt_);
      dy = cast(e_.broadcast(e_.binary("divide", dpooled, e_.splat(PrimitiveType::kF32, {batch, d})),
                             {batch, seq, d}, {0, 2}),
                cdt_);
    } else {
      // loss = -mean(take_along_axis(log_softmax(y @ embed.T), labels[..., None])), the logits [B,S,vocab]
      const V table = e_.transpose(cast(embed_, cdt_), {1, 0});
      const V logits = e_.dot(y, table, {batch, seq, s_.vocab}, cdt_);
      V dlogits;
      loss = cross_entropy(cast(logits, PrimitiveType::kF32), labels_, dlogits);
      dlogits = cast(dlogits, cdt_);  // the transpose of logits.astype(f32)
      // Through the tied table: its gradient from the logits, and the cotangent into the final norm.
      dhead_or_table = cast(e_.dot(dlogits, y, {s_.vocab, d}, cdt_), pdt_);
      dy = e_.dot(dlogits, table, {batch, seq, d}, cdt_);
    }
    V g = norm_transpose(lnf, lnf_g_, dy, nullptr);
    std::vector<std::vector<V>> layer_grads(blocks_.size());
    if (s_.scan) {
      g = backward_scan(g, stacks, layer_grads[0]);
    } else {
      for (size_t l = blocks_.size(); l-- > 0;) {
        g = checkpointed(l) ? rematted_transpose(blocks_[l], inputs[l], residuals[l], g, layer_grads[l])
                            : block_transpose(blocks_[l], saved[l], g, layer_grads[l]);
      }
    }
    e_.set_category("gradients");
    V for_pos;  // the cotangent pos receives: ViT adds pos.astype(cdt); GPT casts after adding it
    if (vit_) {
      // The embedding: the class token's row, the patches' projection; then the head.
      const V dcls = cast(e_.reduce_sum(e_.slice(g, 1, 1), {0, 1}), pdt_);
      const V dembed = cast(e_.transpose(e_.dot(e_.slice(g, 1, seq - 1), patches_,
                                                {d, s_.patch * s_.patch * s_.channels}, cdt_),
                                         {1, 0}),
                            pdt_);
      grads = {dcls, dembed, dhead_or_table};
      for_pos = g;
    } else {
      // The token lookup's transpose, a scatter-add into zeros, added to the tied table's gradient; both in
      // the parameters' type (the transpose of (embed[tokens] + pos).astype(cdt)).
      for_pos = cast(g, pdt_);
      const V rows = e_.scatter(e_.splat(pdt_, embed_.shape.dims), token_rows_, for_pos);
      grads = {e_.binary("add", dhead_or_table, rows)};
    }
    // pos[None] broadcast as [1,S,D], then .astype(cdt): the batch's sum in the compute type, cast back to
    // the parameter's, then the sum over the leading 1.
    const V dpos = e_.reduce_sum(cast(e_.reshape(e_.reduce_sum(for_pos, {0}), {1, seq, d}), pdt_), {0});
    for (const std::vector<V>& lg : layer_grads) grads.insert(grads.end(), lg.begin(), lg.end());
    grads.push_back(vector_grad(dy));                                         // lnf_b
    grads.push_back(vector_grad(e_.binary("multiply", lnf.normalized, dy)));  // lnf_g
    grads.push_back(dpos);
    return loss;
  }

  V cross_entropy(const V& logits, const V& labels, V& dlogits) {
    return write_cross_entropy(e_, logits, labels, dlogits);
  }

  // The gradient of a [D] parameter broadcast over [B,S,D]: the sum over the batch and the tokens, through
  // the broadcast's [1,1,D] reshape as jnp writes it.
  V vector_grad(const V& per_token) {
    const uint64_t n = per_token.shape.dims.back();
    return cast(e_.reduce_sum(e_.reshape(e_.reduce_sum(per_token, {0, 1}), {1, 1, n}), {0, 1}), pdt_);
  }

  // The transpose of a layer norm: `dy` (the output's cotangent) back to its input, added to `r` (the
  // residual stream's cotangent) when there is one - the sums over the row as JAX's transpose rules write
  // them. The scale's and shift's gradients come from vector_grad.
  V norm_transpose(const Norm& n, const V& gamma, const V& dy, const V* r) {
    const std::vector<uint64_t> row = {batch_, seq_}, kept = {batch_, seq_, 1};
    const std::vector<uint64_t>& dims = dy.shape.dims;
    const PrimitiveType t = dy.shape.type;  // the activations' type: bf16 in mixed precision
    e_.set_category("temporaries");
    const V a = with("multiply", dy, cast(gamma, dy.shape.type), {2});
    const V t1 = with("multiply", a, e_.reshape(n.inv, row), {0, 1});
    const V r1 = r ? e_.binary("add", *r, t1) : t1;
    const V s1 = e_.reshape(e_.reduce_sum(e_.binary("multiply", n.xm, a), {2}), kept);
    const V k = !n.k.name.empty()
                    ? n.k
                    : e_.binary("multiply", e_.binary("divide", n.inv, n.var_eps), e_.splat(t, kept));
    const V s2 = e_.binary("divide", e_.binary("multiply", s1, k), e_.splat(t, kept));
    const V s3 = e_.broadcast(e_.reduce_sum(s2, {2}), dims, {0, 1});
    const V d2 = !n.d2.name.empty() ? n.d2 : e_.binary("multiply", n.d, e_.splat(t, dims));
    const V t2 = e_.binary("multiply", s3, d2);
    const V r2 = r ? e_.binary("add", r1, t2) : e_.binary("add", t1, t2);
    const V n1 = e_.reshape(e_.reduce_sum(e_.unary("negate", t1), {2}), kept);
    const V n2 = e_.reshape(e_.reduce_sum(e_.unary("negate", t2), {2}), kept);
    const V s4 = e_.binary("divide", e_.binary("add", n1, n2), e_.splat(t, kept));
    return e_.binary("add", r2, e_.broadcast(e_.reduce_sum(s4, {2}), dims, {0, 1}));
  }

  // What the backward pass reads of one block under jax.lax.scan, in the order JAX's linearization stacks
  // them (the shared gpt_fp32_donate_scan's forward loop): per layer norm 2 d, (inv / var_eps) * -0.5, inv,
  // x - mean, the scale reshaped [1,1,D], the normalized value and the output; the attention's k^T, q, exp,
  // row sums, 1 / sum^2, v, probabilities and merged heads (cuDNN's kernel, a custom_vjp: what its forward
  // rule returns - k, q, the softmax's f32 row statistics, v and the output, in its [B,S,H,hd] layout); the
  // MLP's 3 z^2, tanh', 0.5 (1 + tanh), z and the GELU's output. The coefficients are computed in the
  // forward pass, as JAX's jvp does. Each weight's place is just before what its GEMM reads (the norms'
  // outputs, the merged heads, the GELU's output): in mixed precision its bf16 copy is stacked there (the
  // captured gpt_mixed_donate_scan's forward loop) and the backward GEMMs read the copies, not the parameters
  // cast again; otherwise the backward loop reads the stacked parameter there. The one description that the
  // forward loop's stacks (scan_residuals, residual_shapes) and the backward loop's reads (saved_from,
  // backward_scan) follow.
  std::vector<ResidualSlot> residual_layout() {
    const uint64_t b = batch_, sq = seq_, d = s_.d_model, h = s_.heads, hd = d / h, L = s_.layers,
                   f = s_.ffn_width();
    const PrimitiveType c = cdt_, f32 = PrimitiveType::kF32;
    const std::vector<uint64_t> act = {L, b, sq, d}, row = {L, b, sq, 1}, scale = {L, 1, 1, d},
                                mlp = {L, b, sq, f};
    using Slot = ResidualSlot;
    std::vector<Slot> out;
    auto value = [&](auto held, const std::vector<uint64_t>& dims, PrimitiveType type,
                     std::function<void(BlockSaved&)> compute = {}) {
      out.push_back(Slot{Slot::kValue,
                         dims,
                         type,
                         [held](BlockSaved& k, LayerParams&) -> V& { return held(k); },
                         {},
                         std::move(compute)});
    };
    auto weight = [&](V BlockSaved::*cast_of, V LayerParams::*param, const std::vector<uint64_t>& dims) {
      out.push_back(Slot{Slot::kWeight,
                         dims,
                         c,
                         [cast_of](BlockSaved& k, LayerParams&) -> V& { return k.*cast_of; },
                         [param](LayerParams& p) -> V& { return p.*param; },
                         {}});
    };
    auto norm = [&](Norm BlockSaved::*n, V LayerParams::*gamma, V BlockSaved::*cast_of, V LayerParams::*param,
                    const std::vector<uint64_t>& weight_dims) {
      value([n](BlockSaved& k) -> V& { return (k.*n).d2; }, act, c,
            [this, n](BlockSaved& k) {
              Norm& x = k.*n;
              x.d2 = e_.binary("multiply", x.d, e_.splat(x.d.shape.type, x.d.shape.dims));
            });
      value([n](BlockSaved& k) -> V& { return (k.*n).k; }, row, c,
            [this, n](BlockSaved& k) {
              Norm& x = k.*n;
              x.k = e_.binary("multiply", e_.binary("divide", x.inv, x.var_eps),
                              e_.splat(x.inv.shape.type, x.inv.shape.dims));
            });
      value([n](BlockSaved& k) -> V& { return (k.*n).inv; }, row, c);
      value([n](BlockSaved& k) -> V& { return (k.*n).xm; }, act, c);
      out.push_back(Slot{
          Slot::kScale, scale, c, [gamma](BlockSaved&, LayerParams& p) -> V& { return p.*gamma; }, {}, {}});
      value([n](BlockSaved& k) -> V& { return (k.*n).normalized; }, act, c);
      weight(cast_of, param, weight_dims);
      value([n](BlockSaved& k) -> V& { return (k.*n).y; }, act, c);
    };
    norm(&BlockSaved::ln1, &LayerParams::ln1_g, &BlockSaved::wqkv, &LayerParams::wqkv, {L, d, 3 * d});
    if (cudnn_) {
      const std::vector<uint64_t> kernel_heads = {L, b, sq, h, hd};
      value([](BlockSaved& k) -> V& { return k.kt; }, kernel_heads, c);
      value([](BlockSaved& k) -> V& { return k.q; }, kernel_heads, c);
      value([](BlockSaved& k) -> V& { return k.sum; }, {L, b, h, sq}, f32);
      value([](BlockSaved& k) -> V& { return k.v; }, kernel_heads, c);
      value([](BlockSaved& k) -> V& { return k.probs; }, kernel_heads, c);
    } else {
      // the softmax runs in f32: its exp, row sums and 1 / sum^2
      const std::vector<uint64_t> heads = {L, b, h, sq, hd}, probs = {L, b, h, sq, sq},
                                  hrow = {L, b, h, sq, 1};
      value([](BlockSaved& k) -> V& { return k.kt; }, {L, b, h, hd, sq}, c);
      value([](BlockSaved& k) -> V& { return k.q; }, heads, c);
      value([](BlockSaved& k) -> V& { return k.ex; }, probs, f32);
      value([](BlockSaved& k) -> V& { return k.sum; }, hrow, f32);
      value([](BlockSaved& k) -> V& { return k.inv_sum_sq; }, hrow, f32,
            [this](BlockSaved& k) {
              k.inv_sum_sq = e_.binary("divide", e_.splat(k.sum.shape.type, k.sum.shape.dims),
                                       e_.binary("multiply", k.sum, k.sum));
            });
      value([](BlockSaved& k) -> V& { return k.v; }, heads, c);
      value([](BlockSaved& k) -> V& { return k.probs; }, probs, c);
    }
    weight(&BlockSaved::wo, &LayerParams::wo, {L, d, d});
    value([](BlockSaved& k) -> V& { return k.merged; }, act, c);
    norm(&BlockSaved::ln2, &LayerParams::ln2_g, &BlockSaved::w1, &LayerParams::w1, {L, d, f});
    auto splat = [this](const Gelu& g) { return e_.splat(g.z.shape.type, g.z.shape.dims); };
    value([](BlockSaved& k) -> V& { return k.gelu.cube_slope; }, mlp, c,
          [this, splat](BlockSaved& k) {
            Gelu& g = k.gelu;
            g.cube_slope = e_.binary("multiply", e_.binary("multiply", g.z, g.z), splat(g));
          });
    value([](BlockSaved& k) -> V& { return k.gelu.dtanh; }, mlp, c,
          [this, splat](BlockSaved& k) {
            Gelu& g = k.gelu;
            g.dtanh = e_.binary("multiply", e_.binary("add", g.tanh, splat(g)),
                                e_.binary("subtract", splat(g), g.tanh));
          });
    value([](BlockSaved& k) -> V& { return k.gelu.half; }, mlp, c);
    value([](BlockSaved& k) -> V& { return k.gelu.z; }, mlp, c);
    weight(&BlockSaved::w2, &LayerParams::w2, {L, f, d});
    value([](BlockSaved& k) -> V& { return k.gelu.out; }, mlp, c);
    return out;
  }
  // Whether the layout's slot is a stack: every value and scale, a weight only as its bf16 copy.
  bool is_stack(const ResidualSlot& slot) const { return slot.kind != ResidualSlot::kWeight || pdt_ != cdt_; }

  // One block's stacked values, in residual_layout's order (`p`: the layer's parameters, for the scales).
  std::vector<V> scan_residuals(BlockSaved& k, LayerParams& p) {
    std::vector<V> r;
    for (const ResidualSlot& slot : residual_layout()) {
      if (!is_stack(slot)) continue;
      if (slot.compute) slot.compute(k);
      const V& v = slot.at(k, p);
      r.push_back(slot.kind == ResidualSlot::kScale ? e_.reshape(v, {1, 1, s_.d_model}) : v);
    }
    return r;
  }
  // The inverse of scan_residuals: a block's saved values from one layer's slice of each stack (and the
  // weights `p` holds, sliced from theirs).
  BlockSaved saved_from(const std::vector<V>& r, LayerParams& p) {
    BlockSaved k;
    size_t at = 0;
    for (const ResidualSlot& slot : residual_layout()) {
      V& v = slot.at(k, p);
      if (slot.kind == ResidualSlot::kScale)
        v = e_.reshape(r[at++], {s_.d_model});
      else
        v = is_stack(slot) ? r[at++] : cast(slot.param(p), cdt_);
    }
    return k;
  }

  // jax.lax.scan(lambda c, p: (block(c, p), None), x, params['layers']) under value_and_grad, as JAX lowers
  // it: a while loop whose body slices each stacked parameter at the counter, runs the block and writes
  // its residuals into stacks of zeros ([L, ...]); GPT's mask and fill, broadcast to the scores' shape, are
  // loop operands. `stacks` receives the stacked residuals; returns the last block's output.
  V forward_scan(const V& x, std::vector<V>& stacks) {
    LayerParams& stacked = blocks_[0];
    std::vector<V> carried = {e_.scalar(PrimitiveType::kS32), x};
    for (const auto& [dims, type] : residual_shapes()) carried.push_back(e_.zeros(type, dims));
    const size_t params_at = carried.size();
    for (const V* p : stacked.in_jax_order()) carried.push_back(*p);
    V mask;
    if (masked_) {
      const std::vector<uint64_t> scores = {batch_, s_.heads, seq_, seq_};
      mask = e_.broadcast(mask_, scores, {2, 3});
      carried.push_back(mask);
      carried.push_back(e_.splat(cdt_, scores));
    }
    const std::vector<V> done = e_.loop(carried, s_.layers, [&](const std::vector<V>& c) {
      LayerParams p;
      size_t at = params_at;
      for (V* slot : p.in_jax_order()) *slot = e_.index_leading(c[at++], c[0]);
      if (masked_) {
        scan_mask_ = c[at];
        scan_fill_ = c[at + 1];
      }
      e_.set_category("activations");
      std::vector<V> r;
      V out;
      if (checkpointed(0)) {
        // jax.checkpoint's body: what the policy saves, then the block's input.
        Residuals kept;
        out = block(c[1], p, nullptr, &kept);
        for (size_t d = 0; d < kDots; ++d)
          if (saves(static_cast<Dot>(d))) r.push_back(kept[d]);
        r.push_back(c[1]);
      } else {
        BlockSaved k;
        out = block(c[1], p, &k);
        r = scan_residuals(k, p);
      }
      std::vector<V> next = {e_.binary("add", c[0], e_.scalar(PrimitiveType::kS32)), out};
      for (size_t j = 0; j < r.size(); ++j) next.push_back(e_.update_leading(c[2 + j], r[j], c[0]));
      next.insert(next.end(), c.begin() + static_cast<std::ptrdiff_t>(params_at), c.end());
      return next;
    });
    stacks.assign(done.begin() + 2, done.begin() + static_cast<std::ptrdiff_t>(params_at));
    scan_mask_ = mask;  // the backward loop reads the entry's, as JAX passes it
    return done[1];
  }

  // jax.lax.scan(lambda c, p: (block(c, p), None), x, params['layers']) in an inference step: a while loop
  // slicing each stacked parameter at the counter and running the block, with nothing stacked for a
  // backward pass. GPT's mask, a constant the body closes over, is a loop operand as it is ([S, S]: no
  // partial evaluation hoists its broadcast out, as a training scan's does). XLA:GPU then sinks it into the
  // body (WhileLoopConstantSinking in gpu_compiler.cc's simplification pipeline), which the GPU model does
  // not: the plan keeps its [S, S] bytes as a loop operand (a constant written in the body planned the same
  // peak on an 8-layer GPT, d_model 256, checked once). Returns the last block's output.
  V inference_scan(const V& x) {
    std::vector<V> carried = {e_.scalar(PrimitiveType::kS32), x};
    const size_t params_at = carried.size();
    for (const V* p : blocks_[0].in_jax_order()) carried.push_back(*p);
    const V mask = mask_;
    if (masked_) carried.push_back(mask);
    const std::vector<V> done = e_.loop(carried, s_.layers, [&](const std::vector<V>& c) {
      LayerParams p;
      size_t at = params_at;
      for (V* slot : p.in_jax_order()) *slot = e_.index_leading(c[at++], c[0]);
      if (masked_) mask_ = c[at];
      e_.set_category("activations");
      std::vector<V> next = {e_.binary("add", c[0], e_.scalar(PrimitiveType::kS32)), block(c[1], p, nullptr)};
      next.insert(next.end(), c.begin() + static_cast<std::ptrdiff_t>(params_at), c.end());
      return next;
    });
    mask_ = mask;
    return done[1];
  }

  // The loop both backward scans are: a while loop over the layers in reverse carrying the cotangent, one
  // stack of zeros per parameter gradient (jax's order) and `read` (passed through unchanged). The body
  // gets the read elements, the cotangent of the block's output and L - 1 - i, returns the cotangent of its
  // input and puts the layer's
  // ten gradients in `layer`, which are written into their stacks at L - 1 - i. `grads` receives the
  // stacked gradients; returns the cotangent of the first block's input.
  using LayerTranspose =
      std::function<V(const std::vector<V>& read, const V& cotangent, const V& at, std::vector<V>& layer)>;
  V reversed_layer_loop(const V& g, const std::vector<V>& read, const LayerTranspose& body,
                        std::vector<V>& grads) {
    e_.set_category("gradients");
    std::vector<V> carried = {e_.scalar(PrimitiveType::kS32), g};
    for (const V* p : blocks_[0].in_jax_order())
      carried.push_back(e_.zeros(PrimitiveType::kF32, p->shape.dims));
    const size_t read_at = carried.size();
    carried.insert(carried.end(), read.begin(), read.end());
    const std::vector<V> done = e_.loop(carried, s_.layers, [&](const std::vector<V>& c) {
      const V at = e_.binary("subtract", e_.scalar(PrimitiveType::kS32), c[0]);  // L - 1 - i
      std::vector<V> layer;
      const V dx =
          body(std::vector<V>(c.begin() + static_cast<std::ptrdiff_t>(read_at), c.end()), c[1], at, layer);
      e_.set_category("gradients");
      std::vector<V> next = {e_.binary("add", c[0], e_.scalar(PrimitiveType::kS32)), dx};
      for (size_t k = 0; k < layer.size(); ++k) next.push_back(e_.update_leading(c[2 + k], layer[k], at));
      next.insert(next.end(), c.begin() + static_cast<std::ptrdiff_t>(read_at), c.end());
      return next;
    });
    grads.assign(done.begin() + 2, done.begin() + static_cast<std::ptrdiff_t>(read_at));
    return done[1];
  }

  // The transpose of forward_scan: each layer's slice of every stacked residual (and of the four weights its
  // transpose reads), the block's transpose over them.
  V backward_scan(const V& g, const std::vector<V>& stacks, std::vector<V>& grads) {
    if (checkpointed(0)) return backward_scan_rematted(g, stacks, grads);
    LayerParams& stacked_params = blocks_[0];
    // The stacks, and the stacked weights each transpose reads where residual_layout places them.
    std::vector<V> read;
    LayerParams p;              // inside the body: which weight a read element's slice is
    std::vector<V*> weight_of;  // per read element: the weight it is, or null (a stack)
    size_t next_stack = 0;
    for (const ResidualSlot& slot : residual_layout()) {
      if (is_stack(slot)) {
        read.push_back(stacks[next_stack++]);
        weight_of.push_back(nullptr);
      } else {
        read.push_back(slot.param(stacked_params));
        weight_of.push_back(&slot.param(p));
      }
    }
    if (masked_) read.push_back(scan_mask_);
    const V dx = reversed_layer_loop(
        g, read,
        [&](const std::vector<V>& c, const V& cotangent, const V& at, std::vector<V>& layer) {
          std::vector<V> r;
          for (size_t j = 0; j < weight_of.size(); ++j) {
            const V slice = e_.index_leading(c[j], at);
            if (weight_of[j]) {
              *weight_of[j] = slice;
            } else {
              r.push_back(slice);
            }
          }
          if (masked_) scan_mask_ = c.back();
          e_.set_category("temporaries");
          return block_transpose(p, saved_from(r, p), cotangent, layer);
        },
        grads);
    scan_mask_ = scan_fill_ = V{};
    return dx;
  }
  // backward_scan of a checkpointed body (the shared gpt_fp32_donate_scan_remat_full): the loop carries
  // the stacked residuals (the policy's GEMM results, the blocks' inputs) and the parameters (not b2), and
  // its body is rematted_transpose over one layer's slices, GPT's mask a constant of the body.
  V backward_scan_rematted(const V& g, const std::vector<V>& stacks, std::vector<V>& grads) {
    std::vector<V> read = stacks;
    for (const V* p : blocks_[0].read_by_recomputation()) read.push_back(*p);
    scan_mask_ = scan_fill_ = V{};  // the recomputation masks from the body's own constant
    const V entry_mask = mask_;
    const V dx = reversed_layer_loop(
        g, read,
        [&](const std::vector<V>& c, const V& cotangent, const V& at, std::vector<V>& layer) {
          Residuals saved;
          size_t j = 0;
          for (size_t d = 0; d < kDots; ++d)
            if (saves(static_cast<Dot>(d))) saved[d] = e_.index_leading(c[j++], at);
          const V input = e_.index_leading(c[j++], at);
          LayerParams p;
          for (V* slot : p.read_by_recomputation()) *slot = e_.index_leading(c[j++], at);
          if (masked_) mask_ = e_.constant(LoweredEmitter::array(PrimitiveType::kPred, {seq_, seq_}));
          return rematted_transpose(p, input, saved, cotangent, layer);
        },
        grads);
    mask_ = entry_mask;
    return dx;
  }

  // The shapes the forward loop stacks, [L, ...] each, with their element types: scan_residuals' (in the
  // compute type, the softmax's exp and row sums in f32), or under a remat policy the saved GEMM results and
  // the blocks' inputs.
  std::vector<std::pair<std::vector<uint64_t>, PrimitiveType>> residual_shapes() {
    const uint64_t b = batch_, sq = seq_, d = s_.d_model, h = s_.heads, hd = d / h, L = s_.layers,
                   f = s_.ffn_width();
    const PrimitiveType c = cdt_;
    const std::vector<uint64_t> act = {L, b, sq, d};
    std::vector<std::pair<std::vector<uint64_t>, PrimitiveType>> out;
    if (checkpointed(0)) {
      const std::vector<uint64_t> dot_dims[kDots] = {
          {L, b, sq, 3 * d}, {L, b, h, sq, sq}, {L, b, h, sq, hd}, act, {L, b, sq, f}};
      for (size_t k = 0; k < kDots; ++k)
        if (saves(static_cast<Dot>(k))) out.emplace_back(dot_dims[k], c);
      out.emplace_back(act, c);
      return out;
    }
    for (const ResidualSlot& slot : residual_layout())
      if (is_stack(slot)) out.emplace_back(slot.dims, slot.type);
    return out;
  }

  // reference_programs.py's decode step: one new token per sequence against each layer's KV cache of `seq`
  // positions. The token's embedding and its position's row; per layer the qkv projection of one token, its
  // keys and values written into the cache at `pos` (lax.dynamic_update_slice over the donated cache: XLA
  // aliases it, so the cache is held once), the scores against the whole cache with the positions after
  // `pos` masked (jnp.where), the f32 softmax, the MLP; then the one token's logits. The step returns the
  // logits and the new cache, each layer's keys and values written over the cache they replace.
  // Tensor parallel over `tp_` devices, each device's program as XLA's SPMD partitioner writes it: its
  // heads (and their share of the cache) and hidden units, the partial sums of the output projection and of
  // the MLP's second GEMM summed over the group (all-reduce), a vocabulary-split table's lookup likewise,
  // and the logits of the device's own rows of the vocabulary.
  void decode() {
    const uint64_t batch = s_.batch, d = s_.d_model, heads = s_.heads / tp_, hd = s_.d_model / s_.heads,
                   cached = s_.seq, dl = d / tp_, kv = kv_heads() / tp_, group = heads / kv,
                   fl = s_.ffn_width() / tp_;
    const V zero = e_.scalar(PrimitiveType::kS32);
    // (params['embed'][tok] + dynamic_slice_in_dim(params['pos'], pos, 1)[None]).astype(cdt)
    token_rows_ = e_.reshape(tokens_, {batch, 1, 1});
    V rows = e_.gather(embed_, token_rows_);
    if (vocab_split_ > 1) rows = e_.all_reduce_sum(rows);  // the rows other devices hold, zeros here
    const V at = e_.reshape(e_.dynamic_slice(pos_, {position_, zero}, {1, d}), {d});
    V x = cast(with("add", rows, at, {2}), cdt_);
    seq_ = 1;  // the activations hold one token; the cache holds `cached` positions
    // (jnp.arange(S) <= pos)[None, None, None, :]
    const V live = e_.compare(e_.constant(LoweredEmitter::array(PrimitiveType::kS32, {cached})),
                              e_.broadcast(position_, {cached}, {}));
    std::vector<V> new_cache;
    for (size_t l = 0; l < blocks_.size(); ++l) {
      const LayerParams& p = blocks_[l];
      const V h = layer_norm(x, p.ln1_g, p.ln1_b, nullptr);
      const V qkv = e_.dot(h, cast(p.wqkv, cdt_), {batch, 1, dl + 2 * kv * hd}, cdt_);
      auto head = [&](uint64_t n) {
        return e_.transpose(e_.reshape(e_.slice(qkv, 2, n * hd), {batch, 1, n, hd}), {0, 2, 1, 3});
      };
      V q = head(heads);
      const V k = head(kv), v = head(kv);
      // Grouped-query attention: each key/value head serves `group` query heads, as an einsum over
      // q.reshape(B, kv, group, hd) writes it - the cache is read, never repeated to every head.
      if (group > 1) q = e_.reshape(q, {batch, kv, group, hd});
      auto write = [&](const V& cache, const V& row) {
        return e_.dynamic_update_slice(cache, cast(row, cache.shape.type), {zero, zero, position_, zero});
      };
      const V kc = write(cache_[2 * l], k), vc = write(cache_[2 * l + 1], v);
      new_cache.push_back(kc);
      new_cache.push_back(vc);
      V att = e_.dot(q, e_.transpose(kc, {0, 1, 3, 2}), {batch, kv, group > 1 ? group : 1, cached}, cdt_, 2);
      att = e_.binary("divide", att, e_.splat(cdt_, att.shape.dims));
      att = e_.select(e_.broadcast(live, att.shape.dims, {3}), att, e_.splat(cdt_, att.shape.dims));
      V ex, sum;
      const V probs = cast(softmax(cast(att, PrimitiveType::kF32), &ex, &sum), cdt_);
      const V o = e_.dot(probs, vc, {batch, kv, group > 1 ? group : 1, hd}, cdt_, 2);
      const V merged = group > 1 ? e_.reshape(o, {batch, 1, dl})
                                 : e_.reshape(e_.transpose(o, {0, 2, 1, 3}), {batch, 1, dl});
      const V x1 = e_.binary("add", x, summed(e_.dot(merged, cast(p.wo, cdt_), {batch, 1, d}, cdt_)));
      const V h2 = layer_norm(x1, p.ln2_g, p.ln2_b, nullptr);
      const Gelu g = write_gelu(
          e_, with("add", e_.dot(h2, cast(p.w1, cdt_), {batch, 1, fl}, cdt_), cast(p.b1, cdt_), {2}));
      const V x2 = e_.binary("add", x1, summed(e_.dot(g.out, cast(p.w2, cdt_), {batch, 1, d}, cdt_)));
      x = with("add", x2, cast(p.b2, cdt_), {2});
    }
    x = layer_norm(x, lnf_g_, lnf_b_, nullptr);
    const V table = e_.transpose(cast(embed_, cdt_), {1, 0});
    std::vector<V> results = {
        cast(e_.dot(x, table, {batch, 1, s_.vocab / vocab_split_}, cdt_), PrimitiveType::kF32)};
    results.insert(results.end(), new_cache.begin(), new_cache.end());
    e_.root(results);
    // donate_argnums=(1,): each layer's new keys and values over the cache they replace.
    const auto first_cache = static_cast<int64_t>(params_.size());
    for (size_t k = 0; k < new_cache.size(); ++k) e_.alias(1 + k, first_cache + static_cast<int64_t>(k));
  }

  // Key/value heads: the spec's kv_heads under grouped-query attention, else every head.
  uint64_t kv_heads() const { return s_.kv_heads != 0 ? s_.kv_heads : s_.heads; }

  // A GEMM's partial sums over a contraction split across the tensor-parallel group, summed (as is on one
  // device).
  V summed(const V& partial) { return tp_ > 1 ? e_.all_reduce_sum(partial) : partial; }

  // Whether block l runs under jax.checkpoint (reference_programs.py's rblock; spec.remat_layers names
  // the checkpointed blocks when it is not empty).
  bool checkpointed(size_t l) const {
    if (s_.remat == RematPolicy::kNone) return false;
    return s_.remat_layers.empty() ||
           std::find(s_.remat_layers.begin(), s_.remat_layers.end(), l) != s_.remat_layers.end();
  }
  // Whether the policy saves a GEMM's result for the backward pass: dots_saveable every one,
  // dots_with_no_batch_dims_saveable those without batch dimensions, nothing_saveable none.
  // offload_dot_with_no_batch_dims saves the same as dots_with_no_batch_dims_saveable, in pinned host memory.
  bool saves(Dot d) const {
    // cuDNN's kernel computes the scores and their product with v inside one custom call: there is no
    // dot_general of theirs for a policy to save, and the kernel runs again in the block's recomputation.
    if (cudnn_ && (d == kScores || d == kAttention)) return false;
    if (s_.remat == RematPolicy::kDots) return true;
    if (s_.remat == RematPolicy::kDotsNoBatch || s_.remat == RematPolicy::kOffloadDotsNoBatch)
      return d != kScores && d != kAttention;
    return false;
  }
  bool offloads() const { return s_.remat == RematPolicy::kOffloadDotsNoBatch; }
  // A checkpointed block's transpose, as JAX's partial evaluation of jax.checkpoint writes it: the saved
  // GEMM results, the block's input and parameters (all but b2, which nothing in it reads) and the incoming
  // cotangent go through one optimization barrier - GPT's mask with them, a constant the block closes over
  // - and the block runs again from the barrier's outputs (the saved GEMMs read, not recomputed) for the
  // values its transpose reads.
  V rematted_transpose(const LayerParams& p, const V& input, const Residuals& saved, const V& g,
                       std::vector<V>& grads) {
    e_.set_op_name("jit(step)/transpose(jvp())/checkpoint");
    std::vector<V> kept_dots, rest;
    for (size_t d = 0; d < kDots; ++d)
      if (saves(static_cast<Dot>(d))) kept_dots.push_back(saved[d]);
    if (masked_) rest.push_back(mask_);
    rest.push_back(input);
    LayerParams again = p;
    const auto read = again.read_by_recomputation();
    for (V* v : read) rest.push_back(*v);
    rest.push_back(g);
    const std::vector<V> kept = write_remat_barrier(e_, kept_dots, rest, offloads());
    size_t at = 0;
    Residuals from;
    for (size_t d = 0, j = 0; d < kDots; ++d)
      if (saves(static_cast<Dot>(d))) from[d] = kept_dots[j++];
    const V mask = mask_;
    if (masked_) mask_ = kept[at++];
    const V x = kept[at++];
    for (V* v : read) *v = kept[at++];
    const V cotangent = kept[at++];
    e_.set_op_name("jit(step)/transpose(jvp())/checkpoint/rematted_computation");
    e_.set_category("activations");
    BlockSaved recomputed;
    block(x, again, &recomputed, nullptr, &from);
    mask_ = mask;
    e_.set_op_name("jit(step)/transpose(jvp())/checkpoint");
    const V dx = block_transpose(again, recomputed, cotangent, grads);
    e_.set_op_name("jit(step)/transpose(jvp())");
    return dx;
  }

  // The attention's transpose: the cotangent of the merged heads ([B,S,D]) back to the qkv projection's
  // output ([B,S,3D]): the values' and scores' GEMMs, the f32 softmax's transpose, the mask's and scale's.
  V attention_transpose(const BlockSaved& k, const V& dmerged) {
    const uint64_t batch = batch_, seq = seq_, d = s_.d_model, heads = s_.heads, hd = d / heads;
    const V dout = e_.transpose(e_.reshape(dmerged, {batch, seq, heads, hd}), {0, 2, 1, 3});
    // The softmax ran in f32 (att.astype(jnp.float32)): its transpose too, from the probabilities' cast.
    const V dprobs = cast(e_.dot(dout, k.v, {batch, heads, seq, seq}, cdt_, 2), PrimitiveType::kF32);
    const std::vector<uint64_t>& sq = dprobs.shape.dims;
    const std::vector<uint64_t> rows = {batch, heads, seq}, kept = {batch, heads, seq, 1};
    const V a1 = with("divide", dprobs, e_.reshape(k.sum, rows), {0, 1, 2});
    const V inv2 = !k.inv_sum_sq.name.empty() ? k.inv_sum_sq
                                              : e_.binary("divide", e_.splat(PrimitiveType::kF32, kept),
                                                          e_.binary("multiply", k.sum, k.sum));
    const V a3 = e_.binary("multiply", with("multiply", dprobs, e_.reshape(inv2, rows), {0, 1, 2}), k.ex);
    const V s = e_.reduce_sum(e_.unary("negate", e_.reshape(e_.reduce_sum(a3, {3}), kept)), {3});
    V a5 = cast(e_.binary("multiply", e_.binary("add", a1, e_.broadcast(s, sq, {0, 1, 2})), k.ex), cdt_);
    // GPT: jnp.where(mask, att, -1e4)'s transpose passes the cotangent where the mask holds (a nested jit
    // too, reading the mask the forward's returned).
    if (masked_ && !k.mask.name.empty()) {
      a5 = e_.call("_where_transpose", {k.mask, a5}, [&](const std::vector<V>& x) -> std::vector<V> {
        return {e_.select(x[0], x[1], e_.splat(cdt_, sq))};
      })[0];
    } else if (masked_) {
      a5 = e_.select(scan_mask_, a5, e_.splat(cdt_, sq));
    }
    const V dscores = e_.binary("divide", a5, e_.splat(cdt_, sq));
    auto merge = [&](const V& per_head, const std::vector<int64_t>& permutation) {
      return e_.reshape(e_.transpose(per_head, permutation), {batch, seq, d});
    };
    const V dq = merge(e_.dot(dscores, k.kt, {batch, heads, seq, hd}, cdt_, 2), {0, 2, 1, 3});
    const V dk = merge(e_.dot(dscores, k.q, {batch, heads, seq, hd}, cdt_, 2), {0, 2, 1, 3});
    const V dv = merge(e_.dot(dout, k.probs, {batch, heads, hd, seq}, cdt_, 2), {0, 3, 1, 2});
    return e_.concatenate({dq, dk, dv}, 2);
  }
  // cuDNN's: one __cudnn$fmhaSoftmaxBackward call reading q, k, v, the forward's statistics, the output's
  // cotangent and the forward's output, returning dq, dk and dv ([B,H,S,hd]) and a workspace.
  V fused_attention_transpose(const BlockSaved& k, const V& dmerged) {
    const uint64_t batch = batch_, seq = seq_, d = s_.d_model, heads = s_.heads, hd = d / heads;
    const V dout = e_.reshape(dmerged, {batch, seq, heads, hd});
    const Shape per_head = LoweredEmitter::array(cdt_, {batch, heads, seq, hd});
    const std::vector<V> grads = e_.custom_call(
        "__cudnn$fmhaSoftmaxBackward", "dot_product_attention_bwd", {k.q, k.kt, k.v, k.sum, dout, k.probs},
        {per_head, per_head, per_head, LoweredEmitter::array(PrimitiveType::kU8, {0})});
    std::vector<V> merged;
    for (size_t j = 0; j < 3; ++j)
      merged.push_back(e_.reshape(e_.transpose(grads[j], {0, 2, 1, 3}), {batch, seq, d}));
    return e_.concatenate(merged, 2);
  }

  // A block's transpose: `g` (the cotangent of its output) back to its input; its parameters' gradients in
  // jax's order (b1, b2, ln1_b, ln1_g, ln2_b, ln2_g, w1, w2, wo, wqkv) into `grads`.
  V block_transpose(const LayerParams& p, const BlockSaved& k, const V& g, std::vector<V>& grads) {
    const uint64_t batch = batch_, seq = seq_, d = s_.d_model, f = s_.ffn_width();
    e_.set_category("temporaries");
    // x2 = x1 + h @ w2 + b2, h = gelu(z), z = ln2(x1) @ w1 + b1
    const V dh = e_.dot(g, k.w2, {batch, seq, f}, cdt_);
    const V dz = write_gelu_transpose(e_, k.gelu, dh);
    const V dln2 = e_.dot(dz, k.w1, {batch, seq, d}, cdt_);
    const V dx1 = norm_transpose(k.ln2, p.ln2_g, dln2, &g);
    // x1 = x + merged @ wo, merged = the heads of softmax(q k^T / sqrt(hd)) v
    const V dmerged = e_.dot(dx1, k.wo, {batch, seq, d}, cdt_);
    const V dqkv = cudnn_ ? fused_attention_transpose(k, dmerged) : attention_transpose(k, dmerged);
    const V dln1 = e_.dot(dqkv, k.wqkv, {batch, seq, d}, cdt_);
    const V dx = norm_transpose(k.ln1, p.ln1_g, dln1, &dx1);
    e_.set_category("gradients");
    auto weight_grad = [&](const V& dy, const V& in, uint64_t rows_out, uint64_t cols_out) {
      // dot(dy, in) over the batch and the tokens, then transposed to the weight's [in, out] and cast to
      // the parameter's type (the transpose of w.astype(cdt))
      return cast(e_.transpose(e_.dot(dy, in, {rows_out, cols_out}, cdt_), {1, 0}), pdt_);
    };
    grads = {vector_grad(dz),
             vector_grad(g),
             vector_grad(dln1),
             vector_grad(e_.binary("multiply", k.ln1.normalized, dln1)),
             vector_grad(dln2),
             vector_grad(e_.binary("multiply", k.ln2.normalized, dln2)),
             weight_grad(dz, k.ln2.y, f, d),
             weight_grad(g, k.gelu.out, d, f),
             weight_grad(dx1, k.merged, d, d),
             weight_grad(dqkv, k.ln1.y, 3 * d, d)};
    return dx;
  }

  // ViT: concatenate([cls, patches.astype(cdt) @ embed.astype(cdt)], axis=1) + pos.astype(cdt).
  V patches() {
    const uint64_t d = s_.d_model;
    // The embedding's transpose reads this cast too (JAX keeps it; it does not cast a second time).
    patches_ = cast(tokens_, cdt_);
    const V pe = e_.dot(patches_, cast(embed_, cdt_), {batch_, seq_ - 1, d}, cdt_);
    const V cls = e_.broadcast(cast(cls_, cdt_), {batch_, 1, d}, {2});
    return with("add", e_.concatenate({cls, pe}, 1), cast(pos_, cdt_), {1, 2});
  }

  // jnp.mean over the last axis, keepdims: an f32 sum (jnp upcasts half types), divided, cast back.
  V mean_last(const V& x) {
    const std::vector<uint64_t> kept = {batch_, seq_, 1};
    const V sum = e_.reduce_sum(cast(x, PrimitiveType::kF32), {2});
    const V mean = e_.binary("divide", e_.reshape(sum, kept), e_.splat(PrimitiveType::kF32, kept));
    return cast(mean, x.shape.type);
  }
  // (x - m) * rsqrt(mean((x - m) ** 2) + 1e-5) * g + b, as reference_programs.py's ln writes it.
  V layer_norm(const V& x, const V& g, const V& b, Norm* saved) {
    const std::vector<uint64_t> row = {batch_, seq_};
    const V m = mean_last(x);
    auto centered = [&] { return with("subtract", x, e_.reshape(m, row), {0, 1}); };
    const V xm = centered();
    const V d = centered();
    const V var = mean_last(e_.binary("multiply", d, d));
    const V var_eps = e_.binary("add", var, e_.splat(x.shape.type, var.shape.dims));
    const V inv = e_.unary("rsqrt", var_eps);
    const V normalized = with("multiply", xm, e_.reshape(inv, row), {0, 1});
    const V y =
        with("add", with("multiply", normalized, cast(g, x.shape.type), {2}), cast(b, x.shape.type), {2});
    if (saved) *saved = Norm{xm, d, var_eps, inv, normalized, y, {}, {}};
    return y;
  }

  // A block's forward pass from `x`; what its backward pass reads into `saved` when not null. Under a remat
  // policy, `keep` receives the GEMM results the policy saves (each marked by the reduce-precision JAX
  // writes over a saved residual, or put in pinned host memory by an offloading policy), and `from` gives
  // them back to the recomputation, which reads them in place of running those GEMMs again.
  V block(const V& x, const LayerParams& p, BlockSaved* saved, Residuals* keep = nullptr,
          const Residuals* from = nullptr) {
    const uint64_t batch = batch_, seq = seq_, d = s_.d_model, heads = s_.heads, hd = d / heads;
    BlockSaved local;
    BlockSaved& k = saved ? *saved : local;
    auto gemm = [&](Dot which, const V& a, const V& b, std::vector<uint64_t> dims, size_t batch_dims = 0) {
      if (from && saves(which)) return (*from)[which];
      const V r = e_.dot(a, b, dims, cdt_, batch_dims);
      return keep && saves(which) ? write_saved_residual(e_, r, offloads(), (*keep)[which]) : r;
    };
    k.wqkv = cast(p.wqkv, cdt_);
    k.wo = cast(p.wo, cdt_);
    k.w1 = cast(p.w1, cdt_);
    k.w2 = cast(p.w2, cdt_);
    V h = layer_norm(x, p.ln1_g, p.ln1_b, &k.ln1);
    const V qkv = gemm(kQkv, h, k.wqkv, {batch, seq, 3 * d});
    auto head_split = [&](const std::vector<int64_t>& permutation) {
      return e_.transpose(e_.reshape(e_.slice(qkv, 2, d), {batch, seq, heads, hd}), permutation);
    };
    if (cudnn_) {
      // jax.nn.dot_product_attention(q, k, v, is_causal=..., implementation="cudnn"): q, k and v in its
      // [B,S,H,hd] layout (the head split's transposes cancel), one __cudnn$fmhaSoftmax call returning
      // the output, the softmax's row statistics (f32) and a workspace - gpt_mixed_donate_cudnn's program.
      auto heads_of = [&] { return e_.reshape(e_.slice(qkv, 2, d), {batch, seq, heads, hd}); };
      k.q = heads_of();
      k.kt = heads_of();  // k, as the kernel reads it
      k.v = heads_of();
      const std::vector<V> fmha =
          e_.custom_call("__cudnn$fmhaSoftmax", "dot_product_attention_fwd", {k.q, k.kt, k.v},
                         {LoweredEmitter::array(cdt_, {batch, heads, seq, hd}),
                          LoweredEmitter::array(PrimitiveType::kF32, {batch, heads, seq}),
                          LoweredEmitter::array(PrimitiveType::kU8, {0})});
      k.probs = e_.transpose(fmha[0], {0, 2, 1, 3});  // the output in [B,S,H,hd], which its backward reads
      k.sum = fmha[1];                                // the statistics
      k.merged = e_.reshape(k.probs, {batch, seq, d});
    } else {
      k.q = head_split({0, 2, 1, 3});
      k.kt = head_split({0, 2, 3, 1});  // k.transpose(0, 1, 3, 2), folded into the head split
      V att = gemm(kScores, k.q, k.kt, {batch, heads, seq, seq}, 2);
      att = e_.binary("divide", att, e_.splat(cdt_, att.shape.dims));
      // GPT: jnp.where(mask, att, -1e4), a nested jit (`jvp(jit(_where))`): the selection and the mask
      // broadcast to the scores, which its transpose reads - under jax.checkpoint the recomputed one, so
      // the backward pass recomputes the scores before it needs the incoming cotangent, as JAX orders it.
      // The mask is returned only where a transpose reads it (JAX prunes a nested jit's unread results:
      // inference, and the forward pass of a checkpointed block, return the selection alone).
      if (masked_ && scan_mask_.name.empty()) {
        const std::vector<V> where =
            e_.call("_where", {mask_, att, e_.scalar(cdt_)}, [&](const std::vector<V>& a) -> std::vector<V> {
              const V mask = e_.broadcast(a[0], a[1].shape.dims, {2, 3});
              const V selected = e_.select(mask, a[1], e_.broadcast(a[2], a[1].shape.dims, {}));
              if (saved == nullptr) return {selected};
              return {selected, mask};
            });
        att = where[0];
        if (saved != nullptr) k.mask = where[1];
      } else if (masked_) {
        att = e_.select(scan_mask_, att, scan_fill_);
      }
      k.probs = cast(softmax(cast(att, PrimitiveType::kF32), &k.ex, &k.sum), cdt_);
      k.v = head_split({0, 2, 1, 3});
      const V o = gemm(kAttention, k.probs, k.v, {batch, heads, seq, hd}, 2);
      k.merged = e_.reshape(e_.transpose(o, {0, 2, 1, 3}), {batch, seq, d});
    }
    const V x1 = e_.binary("add", x, gemm(kProjection, k.merged, k.wo, {batch, seq, d}));
    h = layer_norm(x1, p.ln2_g, p.ln2_b, &k.ln2);
    k.gelu = write_gelu(
        e_, with("add", gemm(kMlpIn, h, k.w1, {batch, seq, s_.ffn_width()}), cast(p.b1, cdt_), {2}));
    const V x2 = e_.binary("add", x1, e_.dot(k.gelu.out, k.w2, {batch, seq, d}, cdt_));
    // A scanned recomputation has no b2 (nothing its transpose reads depends on it): its output is unused.
    return p.b2.name.empty() ? x2 : with("add", x2, cast(p.b2, cdt_), {2});
  }

  // jax.nn.softmax over the last axis: exp(x - max) / sum, the max floored at -inf.
  V softmax(const V& x, V* ex_out, V* sum_out) {
    const std::vector<uint64_t> rows(x.shape.dims.begin(), x.shape.dims.end() - 1);
    std::vector<uint64_t> kept = rows;
    kept.push_back(1);
    const std::vector<int64_t> row_dims = {0, 1, 2};
    const V max = e_.binary("maximum", e_.reduce_max(x, {3}), e_.splat(x.shape.type, rows));
    const V shifted = with("subtract", x, e_.reshape(e_.reshape(max, kept), rows), row_dims);
    const V ex = e_.unary("exponential", shifted);
    const V sum = e_.reshape(e_.reduce_sum(ex, {3}), kept);
    *ex_out = ex;
    *sum_out = sum;
    return with("divide", ex, e_.reshape(sum, rows), row_dims);
  }

  const ModelSpec& s_;
  LoweredEmitter e_;
  PrimitiveType pdt_, cdt_;
  bool vit_ = false, train_ = false, moments_ = false;
  bool cudnn_ = false;        // attn: cudnn - jax.nn.dot_product_attention's fused kernel
  bool masked_ = false;       // GPT's scores masked by jnp.where (the cuDNN kernel masks inside: is_causal)
  uint64_t seq_ = 0;          // tokens: GPT's sequence, ViT's patches and the class token
  uint64_t batch_ = 0;        // the rows the ops see: the batch, or a microbatch inside the accumulation loop
  uint64_t tp_ = 1;           // decode: the tensor-parallel group's size (sharding tp), 1 on one device
  uint64_t vocab_split_ = 1;  // decode: the devices the embedding's vocabulary is split over
  V embed_, cls_, head_, lnf_b_, lnf_g_, pos_, tokens_, labels_, mask_;
  V patches_;   // ViT: the patches in the compute type, as the embedding's GEMM and its transpose read them
  V position_;  // decode: where the new token is written (an s32 argument)
  std::vector<V> cache_;     // decode: each layer's keys and values, [B,H,S,hd]
  V scan_mask_, scan_fill_;  // scan: GPT's mask and fill broadcast to the scores, as the loops read them
  V token_rows_;             // GPT: the wrapped token ids as the lookup's indices, [B,S,1]
  std::vector<V> params_;    // every parameter, in jax's order
  std::vector<std::string> param_names_;
  std::vector<V*> slots_;  // where the blocks read each parameter, in params_' order
  OptimizerState state_;
  std::vector<LayerParams> blocks_;
};

}  // namespace

// Any remat policy: jax.checkpoint adds its optimization barrier only to a differentiated function, and an
// inference step evaluates the block as written (jax/_src/ad_checkpoint.py, remat_lowering).
bool transformer_lowers(const ModelSpec& spec) {
  const bool one_gpu =
      spec.backend == Backend::kGpu && spec.devices() == 1 && spec.sharding == ShardingKind::kReplicated;
  // Scanned: inference, and training (with accumulation too: the layers' loops inside the microbatches'
  // loop) with remat kept on the device (an offload into a scan's stacked residuals is not modeled:
  // xla_gpu_model.h).
  if (spec.scan && ((spec.step != StepKind::kTrain && spec.step != StepKind::kInfer) ||
                    (spec.step == StepKind::kTrain && spec.remat == RematPolicy::kOffloadDotsNoBatch)))
    return false;
  // Decode over a tensor-parallel group is written per device (validate_model_spec allows no other mesh).
  if (spec.step == StepKind::kDecode) return spec.model == ModelFamily::kGpt && !spec.scan;
  if (!one_gpu) return false;
  if (spec.step == StepKind::kInfer)
    return spec.model == ModelFamily::kGpt || spec.model == ModelFamily::kVit;
  // Training: fp32, mixed or bf16 (scanned too), any remat policy, any optimizer; gradient accumulation as
  // a scan.
  return (spec.model == ModelFamily::kVit || spec.model == ModelFamily::kGpt) &&
         spec.step == StepKind::kTrain;
}

void build_transformer_lowered(const ModelSpec& spec, HloModule& module, StepArguments& arguments) {
  TransformerStep(spec, module).build(arguments);
}

}  // namespace memfit::zoo
