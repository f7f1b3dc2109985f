// src/program/zoo_language_model.h - what the model zoo's language models share, private to the program
// layer: a batch of token ids, logits over the vocabulary and the cross-entropy loss of
// reference_programs.py's gpt and optax.softmax_cross_entropy_with_integer_labels (both take the label's
// logit with take_along_axis). The families differ in their head: the gpt's is its tied embedding
// (zoo_gpt.cc), flax's encoder has a dense head with a bias (zoo_flax_encoder.cc).
#pragma once

#include "zoo_transformer.h"

namespace memfit::zoo {

class LanguageModel : public TransformerFamily {
 public:
  uint64_t sequence(const ModelSpec& s) const override { return s.seq; }
  uint64_t outputs(const ModelSpec& s) const override { return s.vocab; }
  void add_batch(TransformerBuild& x, uint64_t batch, T& tokens, T& labels) const override;
  void before_microbatches(TransformerBuild& x) override;
  T infer_head(TransformerBuild& x, const T& lnf) const override;
  T train_head(TransformerBuild& x, const T& h, const T& lnf, const T& labels, uint64_t micro,
               T& loss) override;

 protected:
  // The matrix the logits come through ([vocab, width] or [width, vocab]) and its bias, if any.
  virtual Param& head(TransformerBuild& x) const = 0;
  virtual Param* head_bias(TransformerBuild& /*x*/) const { return nullptr; }
  // The head matrix's gradient from this microbatch's logits, and the logits' gradient (for a bias).
  virtual void head_backward(TransformerBuild& x, const T& dhead, const T& dlogits) = 0;

 private:
  T zeros_;  // the first microbatch's one-hot scatter target, made before the forward pass
};

}  // namespace memfit::zoo
