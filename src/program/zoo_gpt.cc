// The language-model families of the model zoo: reference_programs.py's gpt - token and position embeddings,
// the blocks (zoo_transformer.cc), a final norm and logits through the tied embedding, a cross-entropy loss -
// and its flax encoder - a token embedding without positions, flax.linen's blocks (separate q/k/v/out
// projections with biases, bidirectional attention), a final norm and an untied dense head with a bias, the
// same loss (optax.softmax_cross_entropy_with_integer_labels takes the label's logit with take_along_axis, as
// the gpt's loss does).
#include "zoo_transformer.h"

namespace memfit::zoo {
namespace {

// flax.linen's names: params['Layer_3']['MultiHeadDotProductAttention_0']['query']['kernel'], ...
constexpr const char* kAttention = "['MultiHeadDotProductAttention_0']";

class Gpt final : public TransformerFamily {
 public:
  explicit Gpt(bool flax_encoder) : flax_(flax_encoder) {}

  uint64_t sequence(const ModelSpec& s) const override { return s.seq; }
  uint64_t outputs(const ModelSpec& s) const override { return s.vocab; }
  bool logits_follow_embedding() const override { return !flax_; }

  BlockParams block_params(const ModelSpec& s) const override {
    if (!flax_) return fused_qkv_block(s.d_model);
    const uint64_t D = s.d_model, F = 4 * D, H = s.heads, hd = D / H;
    const std::string a = kAttention;
    BlockParams b;
    b.shapes = {{"['Dense_0']['bias']", {F}},       {"['Dense_0']['kernel']", {D, F}},
                {"['Dense_1']['bias']", {D}},       {"['Dense_1']['kernel']", {F, D}},
                {"['LayerNorm_0']['bias']", {D}},   {"['LayerNorm_0']['scale']", {D}},
                {"['LayerNorm_1']['bias']", {D}},   {"['LayerNorm_1']['scale']", {D}},
                {a + "['key']['bias']", {H, hd}},   {a + "['key']['kernel']", {D, H, hd}},
                {a + "['out']['bias']", {D}},       {a + "['out']['kernel']", {H, hd, D}},
                {a + "['query']['bias']", {H, hd}}, {a + "['query']['kernel']", {D, H, hd}},
                {a + "['value']['bias']", {H, hd}}, {a + "['value']['kernel']", {D, H, hd}}};
    b.ln1_g = "['LayerNorm_0']['scale']";
    b.ln1_b = "['LayerNorm_0']['bias']";
    b.ln2_g = "['LayerNorm_1']['scale']";
    b.ln2_b = "['LayerNorm_1']['bias']";
    b.wq = a + "['query']['kernel']";
    b.bq = a + "['query']['bias']";
    b.wk = a + "['key']['kernel']";
    b.bk = a + "['key']['bias']";
    b.wv = a + "['value']['kernel']";
    b.bv = a + "['value']['bias']";
    b.wo = a + "['out']['kernel']";
    b.bo = a + "['out']['bias']";
    b.w1 = "['Dense_0']['kernel']";
    b.b1 = "['Dense_0']['bias']";
    b.w2 = "['Dense_1']['kernel']";
    b.b2 = "['Dense_1']['bias']";
    b.transposes_attention = false;
    b.lnf_g = "['LayerNorm_0']['scale']";
    b.lnf_b = "['LayerNorm_0']['bias']";
    return b;
  }
  std::string layer_prefix(uint64_t l) const override {
    return flax_ ? "['Layer_" + std::to_string(l) + "']" : TransformerFamily::layer_prefix(l);
  }

  // Sorted keys: the head ('Dense_0'), the embedding, the final norm ('LayerNorm_0' < 'Layer_0'), the layers.
  void add_leading_params(Step& step, const ModelSpec& s) const override {
    if (!flax_) {
      step.add_param("['embed']", {s.vocab, s.d_model});
      return;
    }
    step.add_param(kHeadBias, {s.vocab});
    step.add_param(kHeadKernel, {s.d_model, s.vocab});
    step.add_param(kEmbedding, {s.vocab, s.d_model});
    step.add_param("['LayerNorm_0']['bias']", {s.d_model});
    step.add_param("['LayerNorm_0']['scale']", {s.d_model});
  }
  void add_trailing_params(Step& step, const ModelSpec& s) const override {
    if (!flax_) TransformerFamily::add_trailing_params(step, s);
  }

  void add_batch(TransformerBuild& x, uint64_t B, T& tokens, T& labels) const override {
    tokens = x.e.param(array(PrimitiveType::kS32, {B, x.S}), "batch[0]", "activations");
    x.step.count_batch(tokens);
    if (x.step.train()) {  // jax.jit drops arguments the step never reads (keep_unused=False)
      labels = x.e.param(array(PrimitiveType::kS32, {B, x.S}), "batch[1]", "activations");
      x.step.count_batch(labels);
    }
  }

  // XLA:GPU schedules the zero buffer of take_along_axis's backward at the very start.
  void before_microbatches(TransformerBuild& x) override {
    if (x.step.train() && !x.c.cpu)
      zeros_ = x.e.loop({}, x.A({x.Bm, x.S, x.V}, PrimitiveType::kF32),
                        "jit(step)/transpose(jvp(jit(take_along_axis)))/broadcast_in_dim", "temporaries");
  }

  T embed(TransformerBuild& x, const T& tok) const override {
    if (flax_)
      return x.e.loop({x.step.use(x.find(kEmbedding), "jit(step)/embed"), tok}, x.A({x.Bm, x.S, x.D}, x.cd),
                      "jit(step)/jvp(Encoder)/Embed_0/take", "activations");
    return x.e.loop({x.step.use(x.find("['embed']"), "jit(step)/embed"), x.find("['pos']").value, tok},
                    x.A({x.Bm, x.S, x.D}, x.cd), "jit(step)/jvp()/add", "activations");
  }

  // The logits as the step returns them (f32): the GEMM writes them, its convert (and the head's bias) an
  // epilogue (gemm_rewriter.cc).
  T infer_head(TransformerBuild& x, const T& lnf) const override {
    std::vector<T> in{lnf, x.find(flax_ ? kHeadKernel : "['embed']").value};
    if (flax_) in.push_back(x.find(kHeadBias).value);
    return x.e.dot(in, x.A({x.Bm, x.S, x.V}, PrimitiveType::kF32), "jit(step)/jvp()/dot_general",
                   "activations");
  }

  T train_head(TransformerBuild& x, const T& h, const T& lnf, const T& lab, uint64_t micro,
               T& loss) override {
    Emitter& e = x.e;
    Step& step = x.step;
    const PrimitiveType f32 = PrimitiveType::kF32, cd = x.cd;
    const uint64_t Bm = x.Bm, S = x.S, V = x.V, D = x.D;
    Param& head = x.find(flax_ ? kHeadKernel : "['embed']");
    std::vector<T> logits_in{lnf, step.gemm_operand(head, "jit(step)/logits")};
    if (flax_) logits_in.push_back(step.use(x.find(kHeadBias), "jit(step)/logits"));
    T logits = e.dot(logits_in, x.A({Bm * S, V}, cd), "jit(step)/jvp()/dot_general", "activations");
    T cpu_exp;
    if (x.c.cpu)
      cpu_exp = e.loop({logits}, x.A({Bm, S, V}, f32), "jit(step)/jvp(jit(log_softmax))/exp", "temporaries");
    T lse =
        e.reduce({logits}, x.A({Bm * S}, f32), "jit(step)/jvp(jit(log_softmax))/reduce_max", "activations");
    T l2 = e.reduce({lse, lab}, x.A({}, f32), "jit(step)/reduce_sum", "temporaries");
    loss = micro ? e.loop({loss, l2}, l2.shape, "jit(step)/add", "temporaries") : l2;
    T z = zeros_.name.empty() || micro
              ? e.loop({}, x.A({Bm, S, V}, f32),
                       "jit(step)/transpose(jvp(jit(take_along_axis)))/broadcast_in_dim", "temporaries")
              : zeros_;
    T scat = e.loop({z, lab}, x.A({Bm, S, V}, f32),
                    "jit(step)/transpose(jvp(jit(take_along_axis)))/scatter-add", "temporaries");
    std::vector<T> dl_in{scat, logits, lse};
    if (x.c.cpu) dl_in.push_back(cpu_exp);
    T dlogits = e.loop(dl_in, x.A({Bm, S, V}, f32), "jit(step)/transpose(jvp(jit(log_softmax)))/add_any",
                       "temporaries");
    if (cd != f32)
      dlogits = e.loop({dlogits}, x.A({Bm * S, V}, cd), "jit(step)/transpose/convert", "temporaries");
    T dembed_head =
        e.dot({dlogits, lnf}, step.grad_shape(head), "jit(step)/transpose(jvp())/dot_general", "gradients");
    T dlnf = e.dot({dlogits, step.gemm_operand(head, "jit(step)/logits")}, x.A({Bm * S, D}, cd),
                   "jit(step)/transpose(jvp())/dot_general", "temporaries");
    if (flax_) {  // an untied head: its own gradients now
      step.set_grad(head, dembed_head, "jit(step)/head");
      Param& bias = x.find(kHeadBias);
      step.set_grad(
          bias,
          e.reduce({dlogits}, step.grad_shape(bias), "jit(step)/transpose(jvp())/reduce_sum", "gradients"),
          "jit(step)/head");
    }
    // The tied embedding's gradient: the logits' part now, the tokens' scatter after the blocks.
    embed_head_grad_ = dembed_head;
    return e.loop({dlnf, h, lnf}, x.A({Bm, S, D}, cd), "jit(step)/transpose(jvp())/lnf/add_any",
                  "temporaries");
  }

  void embed_backward(TransformerBuild& x, const T& tok, const T& dh) override {
    if (flax_) {  // the lookup's gradient: a scatter-add into zeros of the table's shape
      Param& emb = x.find(kEmbedding);
      x.step.set_grad(
          emb,
          x.e.loop({dh, tok}, x.step.grad_shape(emb), "jit(step)/transpose(jvp())/scatter-add", "gradients"),
          "jit(step)/embed");
      return;
    }
    Param& emb = x.find("['embed']");
    T full = x.e.loop({embed_head_grad_, dh, tok}, embed_head_grad_.shape,
                      "jit(step)/transpose(jvp())/scatter-add", "gradients");
    x.step.set_grad(emb, full, "jit(step)/embed");
    positions_backward(x, dh);
  }

 private:
  static constexpr const char* kHeadBias = "['Dense_0']['bias']";
  static constexpr const char* kHeadKernel = "['Dense_0']['kernel']";
  static constexpr const char* kEmbedding = "['Embed_0']['embedding']";
  const bool flax_;
  T zeros_;            // the first microbatch's one-hot scatter target, made before the forward pass
  T embed_head_grad_;  // the tied embedding's gradient from the logits
};

}  // namespace

std::unique_ptr<TransformerFamily> gpt_family() { return std::make_unique<Gpt>(false); }
std::unique_ptr<TransformerFamily> flax_encoder_family() { return std::make_unique<Gpt>(true); }

}  // namespace memfit::zoo
