// src/program/zoo_transformer.h - the transformer families of the model zoo, private to the program layer:
// one block body (zoo_transformer.cc) and what each family adds around it - its parameters outside the
// blocks, its batch, embedding and head (zoo_gpt.cc: tokens, a tied embedding, a language-model loss;
// zoo_vit.cc: patches, a class token, a classifier head).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "zoo_step.h"

namespace memfit::zoo {

// What a family's steps see of the step being built.
struct TransformerBuild {
  const Ctx& c;
  Emitter& e;
  Step& step;
  std::function<Param&(const std::string&)> find;  // a parameter by name (a layer's view under scan)
  uint64_t D = 0, S = 0, V = 0, Bm = 0;            // width, sequence, outputs, microbatch per device
  PrimitiveType cd = PrimitiveType::kF32;          // compute dtype

  Shape A(std::vector<uint64_t> d, PrimitiveType t) const { return array(t, std::move(d)); }
};

class TransformerFamily {
 public:
  virtual ~TransformerFamily() = default;
  virtual uint64_t sequence(const ModelSpec& s) const = 0;  // tokens per example
  virtual uint64_t outputs(const ModelSpec& s) const = 0;   // vocabulary or classes
  // Parameters that sort before ['layers'] in jax's flattening order (dict keys sorted).
  virtual void add_leading_params(Step& step, const ModelSpec& s) const = 0;
  // The batch arguments (per device); labels only when the step trains.
  virtual void add_batch(TransformerBuild& x, uint64_t batch, T& tokens, T& labels) const = 0;
  virtual void before_microbatches(TransformerBuild& /*x*/) {}
  virtual T embed(TransformerBuild& x, const T& tokens) const = 0;
  // Inference: the logits the step returns.
  virtual T infer_head(TransformerBuild& x, const T& lnf) const = 0;
  // Training: the loss of this microbatch (added to `loss`), the head's gradients, and the gradient at the
  // last block's output `h`.
  virtual T train_head(TransformerBuild& x, const T& h, const T& lnf, const T& labels, uint64_t micro,
                       T& loss) = 0;
  // The embedding's gradients from the gradient at the first block's input.
  virtual void embed_backward(TransformerBuild& x, const T& tokens, const T& dx) = 0;
};

std::unique_ptr<TransformerFamily> gpt_family();
std::unique_ptr<TransformerFamily> vit_family();

void build_transformer(const Ctx& c, Step& step, HloModule& module, TransformerFamily& family);

}  // namespace memfit::zoo
