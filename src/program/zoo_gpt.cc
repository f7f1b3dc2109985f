// The GPT family of the model zoo (reference_programs.py's gpt): token and position embeddings, the blocks
// (zoo_transformer.cc), a final norm and logits through the tied embedding, the language-model loss
// (zoo_language_model.cc). Written as XLA's fused program; inference, and fp32 training without remat, on
// one GPU are written as the lowered program JAX traces instead (zoo_transformer_lowered.cc, chosen by
// transformer_lowers()).
#include "zoo_language_model.h"

namespace memfit::zoo {
namespace {

class Gpt final : public LanguageModel {
 public:
  bool logits_follow_embedding() const override { return true; }

  void add_leading_params(Step& step, const ModelSpec& s) const override {
    step.add_param("['embed']", {s.vocab, s.d_model});
  }

  T embed(TransformerBuild& x, const T& tok) const override {
    return x.e.loop({x.step.use(x.find("['embed']"), "jit(step)/embed"), x.find("['pos']").value, tok},
                    x.A({x.Bm, x.S, x.D}, x.cd), "jit(step)/jvp()/add", "activations");
  }

  void embed_backward(TransformerBuild& x, const T& tok, const T& dh) override {
    Param& emb = x.find("['embed']");
    T full = x.e.loop({embed_head_grad_, dh, tok}, embed_head_grad_.shape,
                      "jit(step)/transpose(jvp())/scatter-add", "gradients");
    x.step.set_grad(emb, full, "jit(step)/embed");
    positions_backward(x, dh);
  }

 protected:
  Param& head(TransformerBuild& x) const override { return x.find("['embed']"); }
  // The tied embedding's gradient: the logits' part now, the tokens' scatter after the blocks.
  void head_backward(TransformerBuild& /*x*/, const T& dhead, const T& /*dlogits*/) override {
    embed_head_grad_ = dhead;
  }

 private:
  T embed_head_grad_;  // the tied embedding's gradient from the logits
};

}  // namespace

std::unique_ptr<TransformerFamily> gpt_family() { return std::make_unique<Gpt>(); }

}  // namespace memfit::zoo
