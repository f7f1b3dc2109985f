// The GPT family of the model zoo (reference_programs.py's gpt): token and position embeddings, the blocks
// (zoo_transformer.cc), a final norm and logits through the tied embedding, a cross-entropy loss.
#include "zoo_transformer.h"

namespace memfit::zoo {
namespace {

class Gpt final : public TransformerFamily {
 public:
  uint64_t sequence(const ModelSpec& s) const override { return s.seq; }
  uint64_t outputs(const ModelSpec& s) const override { return s.vocab; }

  void add_leading_params(Step& step, const ModelSpec& s) const override {
    step.add_param("['embed']", {s.vocab, s.d_model});
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
    return x.e.loop({x.step.use(x.find("['embed']"), "jit(step)/embed"), x.find("['pos']").value, tok},
                    x.A({x.Bm, x.S, x.D}, x.cd), "jit(step)/jvp()/add", "activations");
  }

  // The logits as the step returns them (f32): the GEMM writes them, its convert an epilogue
  // (gemm_rewriter.cc).
  T infer_head(TransformerBuild& x, const T& lnf) const override {
    return x.e.dot({lnf, x.find("['embed']").value}, x.A({x.Bm, x.S, x.V}, PrimitiveType::kF32),
                   "jit(step)/jvp()/dot_general", "activations");
  }

  T train_head(TransformerBuild& x, const T& h, const T& lnf, const T& lab, uint64_t micro,
               T& loss) override {
    Emitter& e = x.e;
    Step& step = x.step;
    const PrimitiveType f32 = PrimitiveType::kF32, cd = x.cd;
    const uint64_t Bm = x.Bm, S = x.S, V = x.V, D = x.D;
    T logits = e.dot({lnf, step.gemm_operand(x.find("['embed']"), "jit(step)/logits")}, x.A({Bm * S, V}, cd),
                     "jit(step)/jvp()/dot_general", "activations");
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
    T dembed_head = e.dot({dlogits, lnf}, step.grad_shape(x.find("['embed']")),
                          "jit(step)/transpose(jvp())/dot_general", "gradients");
    T dlnf = e.dot({dlogits, step.gemm_operand(x.find("['embed']"), "jit(step)/logits")},
                   x.A({Bm * S, D}, cd), "jit(step)/transpose(jvp())/dot_general", "temporaries");
    // The embedding's gradient: the logits' part now, the tokens' scatter after the blocks.
    embed_head_grad_ = dembed_head;
    return e.loop({dlnf, h, lnf}, x.A({Bm, S, D}, cd), "jit(step)/transpose(jvp())/lnf/add_any",
                  "temporaries");
  }

  void embed_backward(TransformerBuild& x, const T& tok, const T& dh) override {
    Param& emb = x.find("['embed']");
    T full = x.e.loop({embed_head_grad_, dh, tok}, embed_head_grad_.shape,
                      "jit(step)/transpose(jvp())/scatter-add", "gradients");
    x.step.set_grad(emb, full, "jit(step)/embed");
  }

 private:
  T zeros_;            // the first microbatch's one-hot scatter target, made before the forward pass
  T embed_head_grad_;  // the tied embedding's gradient from the logits
};

}  // namespace

std::unique_ptr<TransformerFamily> gpt_family() { return std::make_unique<Gpt>(); }

}  // namespace memfit::zoo
