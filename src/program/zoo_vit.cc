// The ViT family of the model zoo (reference_programs.py's vit): patch embedding with a class token and
// positions, the blocks (zoo_transformer.cc), a final norm, mean pooling and a classifier head. Written as
// XLA's fused program; inference, and fp32 training without remat, on one GPU are written as the lowered
// program JAX traces instead (zoo_transformer_lowered.cc, chosen by transformer_lowers()).
#include "zoo_transformer.h"

namespace memfit::zoo {
namespace {

class Vit final : public TransformerFamily {
 public:
  uint64_t sequence(const ModelSpec& s) const override {
    return (s.image / s.patch) * (s.image / s.patch) + 1;
  }
  uint64_t outputs(const ModelSpec& s) const override { return s.classes; }

  void add_leading_params(Step& step, const ModelSpec& s) const override {
    step.add_param("['cls']", {s.d_model});
    step.add_param("['embed']", {s.patch * s.patch * s.channels, s.d_model});
    step.add_param("['head']", {s.d_model, s.classes});
  }

  void add_batch(TransformerBuild& x, uint64_t B, T& tokens, T& labels) const override {
    const ModelSpec& s = x.c.s;
    tokens = x.e.param(array(PrimitiveType::kF32, {B, x.S - 1, s.patch * s.patch * s.channels}), "batch[0]",
                       "activations");
    x.step.count_batch(tokens);
    if (x.step.train()) {
      labels = x.e.param(array(PrimitiveType::kS32, {B}), "batch[1]", "activations");
      x.step.count_batch(labels);
    }
  }

  T embed(TransformerBuild& x, const T& tok) const override {
    return x.e.dot({tok, x.step.use(x.find("['embed']"), "jit(step)/patch"), x.find("['cls']").value,
                    x.find("['pos']").value},
                   x.A({x.Bm, x.S, x.D}, x.cd), "jit(step)/jvp()/patch_embed", "activations");
  }

  // The logits as the step returns them (f32): the GEMM writes them, its convert an epilogue
  // (gemm_rewriter.cc).
  T infer_head(TransformerBuild& x, const T& lnf) const override {
    return x.e.dot({lnf, x.find("['head']").value}, x.A({x.Bm, x.V}, PrimitiveType::kF32),
                   "jit(step)/jvp()/head/dot_general", "activations");
  }

  T train_head(TransformerBuild& x, const T& h, const T& lnf, const T& lab, uint64_t micro,
               T& loss) override {
    Emitter& e = x.e;
    Step& step = x.step;
    const PrimitiveType f32 = PrimitiveType::kF32, cd = x.cd;
    const uint64_t Bm = x.Bm, S = x.S, V = x.V, D = x.D;
    T pooled = e.reduce({lnf}, x.A({Bm, D}, cd), "jit(step)/jvp()/pool", "activations");
    T logits = e.dot({pooled, step.gemm_operand(x.find("['head']"), "jit(step)/head")}, x.A({Bm, V}, cd),
                     "jit(step)/jvp()/head/dot_general", "activations");
    T l2 = e.reduce({logits, lab}, x.A({}, f32), "jit(step)/reduce_sum", "temporaries");
    loss = micro ? e.loop({loss, l2}, l2.shape, "jit(step)/add", "temporaries") : l2;
    T dlogits = e.loop({logits, lab}, x.A({Bm, V}, cd), "jit(step)/transpose(jvp(jit(log_softmax)))/add_any",
                       "temporaries");
    step.set_grad(x.find("['head']"),
                  e.dot({pooled, dlogits}, step.grad_shape(x.find("['head']")), "jit(step)/transpose/head",
                        "gradients"),
                  "jit(step)/head");
    T dpool = e.dot({dlogits, step.gemm_operand(x.find("['head']"), "jit(step)/head")}, x.A({Bm, D}, cd),
                    "jit(step)/transpose/head", "temporaries");
    return e.loop({dpool, h}, x.A({Bm, S, D}, cd), "jit(step)/transpose/lnf", "temporaries");
  }

  void embed_backward(TransformerBuild& x, const T& tok, const T& dh) override {
    x.step.set_grad(
        x.find("['embed']"),
        x.e.dot({tok, dh}, x.step.grad_shape(x.find("['embed']")), "jit(step)/transpose/patch", "gradients"),
        "jit(step)/patch");
    x.step.set_grad(
        x.find("['cls']"),
        x.e.reduce({dh}, x.step.grad_shape(x.find("['cls']")), "jit(step)/transpose/cls", "gradients"),
        "jit(step)/cls");
    positions_backward(x, dh);
  }
};

}  // namespace

std::unique_ptr<TransformerFamily> vit_family() { return std::make_unique<Vit>(); }

}  // namespace memfit::zoo
