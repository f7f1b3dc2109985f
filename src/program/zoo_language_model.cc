// The token batch, logits and language-model loss the zoo's GPT and flax encoder share
// (zoo_language_model.h).
#include "zoo_language_model.h"

namespace memfit::zoo {

void LanguageModel::add_batch(TransformerBuild& x, uint64_t B, T& tokens, T& labels) const {
  tokens = x.e.param(array(PrimitiveType::kS32, {B, x.S}), "batch[0]", "activations");
  x.step.count_batch(tokens);
  if (x.step.train()) {  // jax.jit drops arguments the step never reads (keep_unused=False)
    labels = x.e.param(array(PrimitiveType::kS32, {B, x.S}), "batch[1]", "activations");
    x.step.count_batch(labels);
  }
}

// XLA:GPU schedules the zero buffer of take_along_axis's backward at the very start.
void LanguageModel::before_microbatches(TransformerBuild& x) {
  if (x.step.train() && !x.c.cpu)
    zeros_ = x.e.loop({}, x.A({x.Bm, x.S, x.V}, PrimitiveType::kF32),
                      "jit(step)/transpose(jvp(jit(take_along_axis)))/broadcast_in_dim", "temporaries");
}

// The logits as the step returns them (f32): the GEMM writes them, its convert (and a bias) an epilogue
// (gemm_rewriter.cc).
T LanguageModel::infer_head(TransformerBuild& x, const T& lnf) const {
  std::vector<T> in{lnf, head(x).value};
  if (Param* bias = head_bias(x)) in.push_back(bias->value);
  return x.e.dot(in, x.A({x.Bm, x.S, x.V}, PrimitiveType::kF32), "jit(step)/jvp()/dot_general",
                 "activations");
}

T LanguageModel::train_head(TransformerBuild& x, const T& h, const T& lnf, const T& lab, uint64_t micro,
                            T& loss) {
  Emitter& e = x.e;
  Step& step = x.step;
  const PrimitiveType f32 = PrimitiveType::kF32, cd = x.cd;
  const uint64_t Bm = x.Bm, S = x.S, V = x.V, D = x.D;
  Param& w = head(x);
  std::vector<T> logits_in{lnf, step.gemm_operand(w, "jit(step)/logits")};
  if (Param* bias = head_bias(x)) logits_in.push_back(step.use(*bias, "jit(step)/logits"));
  T logits = e.dot(logits_in, x.A({Bm * S, V}, cd), "jit(step)/jvp()/dot_general", "activations");
  T cpu_exp;
  if (x.c.cpu)
    cpu_exp = e.loop({logits}, x.A({Bm, S, V}, f32), "jit(step)/jvp(jit(log_softmax))/exp", "temporaries");
  T lse = e.reduce({logits}, x.A({Bm * S}, f32), "jit(step)/jvp(jit(log_softmax))/reduce_max", "activations");
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
  T dhead = e.dot({dlogits, lnf}, step.grad_shape(w), "jit(step)/transpose(jvp())/dot_general", "gradients");
  T dlnf = e.dot({dlogits, step.gemm_operand(w, "jit(step)/logits")}, x.A({Bm * S, D}, cd),
                 "jit(step)/transpose(jvp())/dot_general", "temporaries");
  head_backward(x, dhead, dlogits);
  return e.loop({dlnf, h, lnf}, x.A({Bm, S, D}, cd), "jit(step)/transpose(jvp())/lnf/add_any", "temporaries");
}

}  // namespace memfit::zoo
