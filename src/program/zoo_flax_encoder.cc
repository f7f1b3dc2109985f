// The flax encoder family of the model zoo (reference_programs.py's flax_encoder): a token embedding without
// positions, flax.linen's blocks (separate q/k/v/out projections with biases, bidirectional attention), a
// final norm and an untied dense head with a bias, the language-model loss (zoo_language_model.cc).
#include "zoo_language_model.h"

namespace memfit::zoo {
namespace {

// flax.linen's names: params['Layer_3']['MultiHeadDotProductAttention_0']['query']['kernel'], ...
constexpr const char* kAttention = "['MultiHeadDotProductAttention_0']";
constexpr const char* kHeadBias = "['Dense_0']['bias']";
constexpr const char* kHeadKernel = "['Dense_0']['kernel']";
constexpr const char* kEmbedding = "['Embed_0']['embedding']";

class FlaxEncoder final : public LanguageModel {
 public:
  BlockParams block_params(const ModelSpec& s) const override {
    const uint64_t D = s.d_model, F = s.ffn_width(), H = s.heads, hd = D / H;
    const std::string a = kAttention;
    BlockParams b;
    // flax names a layer's modules in the order they are made: nn.Dense(D) (the MLP's second GEMM) is made
    // before the nn.Dense(4D) whose output it reads, so 'Dense_0' is [F, D] and 'Dense_1' is [D, F].
    b.shapes = {{"['Dense_0']['bias']", {D}},       {"['Dense_0']['kernel']", {F, D}},
                {"['Dense_1']['bias']", {F}},       {"['Dense_1']['kernel']", {D, F}},
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
    b.w1 = "['Dense_1']['kernel']";
    b.b1 = "['Dense_1']['bias']";
    b.w2 = "['Dense_0']['kernel']";
    b.b2 = "['Dense_0']['bias']";
    b.transposes_attention = false;
    b.lnf_g = "['LayerNorm_0']['scale']";
    b.lnf_b = "['LayerNorm_0']['bias']";
    return b;
  }
  std::string layer_prefix(uint64_t l) const override { return "['Layer_" + std::to_string(l) + "']"; }

  // Sorted keys: the head ('Dense_0'), the embedding, the final norm ('LayerNorm_0' < 'Layer_0'), the layers.
  void add_leading_params(Step& step, const ModelSpec& s) const override {
    step.add_param(kHeadBias, {s.vocab});
    step.add_param(kHeadKernel, {s.d_model, s.vocab});
    step.add_param(kEmbedding, {s.vocab, s.d_model});
    step.add_param("['LayerNorm_0']['bias']", {s.d_model});
    step.add_param("['LayerNorm_0']['scale']", {s.d_model});
  }
  void add_trailing_params(Step& /*step*/, const ModelSpec& /*s*/) const override {}

  T embed(TransformerBuild& x, const T& tok) const override {
    return x.e.loop({x.step.use(x.find(kEmbedding), "jit(step)/embed"), tok}, x.A({x.Bm, x.S, x.D}, x.cd),
                    "jit(step)/jvp(Encoder)/Embed_0/take", "activations");
  }

  // The lookup's gradient: a scatter-add into zeros of the table's shape.
  void embed_backward(TransformerBuild& x, const T& tok, const T& dh) override {
    Param& emb = x.find(kEmbedding);
    x.step.set_grad(
        emb,
        x.e.loop({dh, tok}, x.step.grad_shape(emb), "jit(step)/transpose(jvp())/scatter-add", "gradients"),
        "jit(step)/embed");
  }

 protected:
  Param& head(TransformerBuild& x) const override { return x.find(kHeadKernel); }
  Param* head_bias(TransformerBuild& x) const override { return &x.find(kHeadBias); }
  // An untied head: its own gradients now.
  void head_backward(TransformerBuild& x, const T& dhead, const T& dlogits) override {
    x.step.set_grad(head(x), dhead, "jit(step)/head");
    Param& bias = x.find(kHeadBias);
    x.step.set_grad(
        bias,
        x.e.reduce({dlogits}, x.step.grad_shape(bias), "jit(step)/transpose(jvp())/reduce_sum", "gradients"),
        "jit(step)/head");
  }
};

}  // namespace

std::unique_ptr<TransformerFamily> flax_encoder_family() { return std::make_unique<FlaxEncoder>(); }

}  // namespace memfit::zoo
