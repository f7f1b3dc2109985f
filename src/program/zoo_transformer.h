// src/program/zoo_transformer.h - the transformer families of the model zoo, private to the program layer:
// one block body (zoo_transformer.cc) and what each family adds around it - its parameters outside the
// blocks, its batch, embedding and head (zoo_language_model.h: tokens and the language-model loss, with
// zoo_gpt.cc's tied embedding and zoo_flax_encoder.cc's dense head and flax block parameters; zoo_vit.cc:
// patches, a class token, a classifier head).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

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

// The parameters of one block, by their names under the layer's prefix, and how the block uses them.
struct BlockParams {
  std::vector<std::pair<std::string, std::vector<uint64_t>>> shapes;  // in jax's flattening order
  std::string ln1_g, ln1_b, ln2_g, ln2_b;
  std::string wqkv;                    // one fused q/k/v projection; empty when each has its own:
  std::string wq, wk, wv, bq, bk, bv;  // separate projections with biases (flax's attention)
  std::string wo, bo;                  // bo empty: no bias
  std::string w1, b1, w2, b2;
  bool transposes_attention = true;  // the attention's output is transposed into a buffer before wo
  std::string lnf_g, lnf_b;          // the final norm, outside the blocks
};

// GPT's and ViT's blocks (reference_programs.py): a fused q/k/v matrix, no attention biases.
BlockParams fused_qkv_block(uint64_t D, uint64_t F);

class TransformerFamily {
 public:
  virtual ~TransformerFamily() = default;
  virtual BlockParams block_params(const ModelSpec& s) const {
    return fused_qkv_block(s.d_model, s.ffn_width());
  }
  virtual std::string layer_prefix(uint64_t l) const { return "['layers'][" + std::to_string(l) + "]"; }
  // Parameters that sort after ['layers']: the final norm and the positions.
  virtual void add_trailing_params(Step& step, const ModelSpec& s) const;
  virtual uint64_t sequence(const ModelSpec& s) const = 0;  // tokens per example
  virtual uint64_t outputs(const ModelSpec& s) const = 0;   // vocabulary or classes
  // Whether the logits come through the (tied) embedding, so that sharding it shards them.
  virtual bool logits_follow_embedding() const { return false; }
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
  // The embedding's (and positions') gradients from the gradient at the first block's input.
  virtual void embed_backward(TransformerBuild& x, const T& tokens, const T& dx) = 0;
};

std::unique_ptr<TransformerFamily> gpt_family();
std::unique_ptr<TransformerFamily> flax_encoder_family();
std::unique_ptr<TransformerFamily> vit_family();

// The positions' gradient (GPT and ViT): the gradient at the first block's input summed over the batch.
void positions_backward(TransformerBuild& x, const T& dx);

void build_transformer(const Ctx& c, Step& step, HloModule& module, TransformerFamily& family);

}  // namespace memfit::zoo
