// The transformer blocks of the model zoo, shared by its GPT and ViT families (zoo_gpt.cc, zoo_vit.cc): the
// step's parameters and microbatches, each block's forward with the tensors its remat policy keeps (stacked
// under scan), the backward pass with recomputation, and the optimizer.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "zoo_transformer.h"

namespace memfit::zoo {

// The forward kernel's workspace in gpt_mixed_donate_cudnn's module (u8[256], the one shape seen; small
// either way).
constexpr uint64_t kCudnnForwardWorkspaceBytes = 256;

struct Block {
  T x;  // input
  std::map<std::string, T> t;
};

BlockParams fused_qkv_block(uint64_t D, uint64_t F) {
  BlockParams b;
  b.shapes = {{"['b1']", {F}},    {"['b2']", {D}},         {"['ln1_b']", {D}}, {"['ln1_g']", {D}},
              {"['ln2_b']", {D}}, {"['ln2_g']", {D}},      {"['w1']", {D, F}}, {"['w2']", {F, D}},
              {"['wo']", {D, D}}, {"['wqkv']", {D, 3 * D}}};
  b.ln1_g = "['ln1_g']";
  b.ln1_b = "['ln1_b']";
  b.ln2_g = "['ln2_g']";
  b.ln2_b = "['ln2_b']";
  b.wqkv = "['wqkv']";
  b.wo = "['wo']";
  b.w1 = "['w1']";
  b.b1 = "['b1']";
  b.w2 = "['w2']";
  b.b2 = "['b2']";
  b.lnf_g = "['lnf_g']";
  b.lnf_b = "['lnf_b']";
  return b;
}

void TransformerFamily::add_trailing_params(Step& step, const ModelSpec& s) const {
  step.add_param("['lnf_b']", {s.d_model});
  step.add_param("['lnf_g']", {s.d_model});
  step.add_param("['pos']", {sequence(s), s.d_model});
}

void positions_backward(TransformerBuild& x, const T& dx) {
  Param& pos = x.find("['pos']");
  x.step.set_grad(pos, x.e.reduce({dx}, x.step.grad_shape(pos), "jit(step)/transpose/pos", "gradients"),
                  "jit(step)/pos");
}

namespace {

// One block's forward tensors as they are made, each taken as is from `reuse` when an earlier pass kept it.
struct BlockTensors {
  Block b;
  const std::map<std::string, T>& reuse;

  template <typename Make>
  T get(const std::string& key, Make make) {
    auto it = reuse.find(key);
    T t = it != reuse.end() ? it->second : make();
    b.t[key] = t;
    return t;
  }
};

// One transformer step as this emitter writes it (sharded or XLA:CPU programs; the rest are lowered,
// zoo_transformer_lowered.cc): the parameters, then per microbatch each block's forward pass, the head, and
// each block's backward pass with what its remat policy recomputes, then the optimizer.
class TransformerStepWriter {
 public:
  TransformerStepWriter(const Ctx& c, Step& step, TransformerFamily& family)
      : c_(c),
        s_(c.s),
        e_(c.e),
        step_(step),
        family_(family),
        D_(s_.d_model),
        L_(s_.layers),
        S_(family.sequence(s_)),
        k_(s_.accum),
        Hl_(s_.heads / c.tp),
        Fl_(s_.ffn_width() / c.tp),
        hd_(s_.d_model / s_.heads),
        Bm_(s_.batch / c.data / s_.accum),
        cd_(c.cdt) {}

  void build(HloModule& module);

 private:
  void add_params();
  // A parameter by name; under scan a layer's view of the stacked parameter, made on first use.
  Param& find(const std::string& name);
  Shape A(std::vector<uint64_t> d, PrimitiveType t) const { return array(t, std::move(d)); }
  RematPolicy remat_of(uint64_t l) const;
  bool saveable(RematPolicy policy, const std::string& key) const;
  // One block's forward. `reuse`: tensors kept from the forward pass (recomputation takes them as is).
  // `recompute`: rematerialization in the backward pass, which needs neither the output nor h2.
  Block forward(uint64_t l, const T& x, const std::map<std::string, T>& reuse, bool recompute);
  void attention_forward(BlockTensors& k, const std::string& w, const T& q, const T& kk, const T& v);
  // One block's backward from the gradient of its output; returns the gradient of its input.
  T backward(uint64_t l, const Block& b, const T& dy);
  // The gradient of the attention's input projections from the attention's output gradient `dat`.
  void attention_backward(const std::string& w, const Block& b, const T& dat, T& dq, T& dk, T& dv);
  // A microbatch's rows of a batch argument (gradient accumulation).
  T microbatch(const T& whole);
  // Each block's forward pass from the embedded input `x`: the tensors each keeps for the backward pass
  // (under scan, in `stacked`); returns the last block's output.
  T forward_pass(const T& x, std::vector<Block>& kept, std::map<std::string, T>& stacked);
  // Each block's backward pass, last first, from the gradient at the last block's output; returns the
  // gradient at the first block's input.
  T backward_pass(T dh, const std::vector<Block>& kept, const std::map<std::string, T>& stacked);
  // One microbatch's forward pass and head - and when the step trains, its backward pass.
  void run_microbatch(uint64_t micro, T& loss, T& out_logits);

  const Ctx& c_;
  const ModelSpec& s_;
  Emitter& e_;
  Step& step_;
  TransformerFamily& family_;
  // Width, layers, tokens per example, microbatches; per device: heads, MLP width, head width, microbatch.
  const uint64_t D_, L_, S_, k_, Hl_, Fl_, hd_, Bm_;
  const PrimitiveType cd_;  // compute dtype
  BlockParams bp_;
  std::map<std::string, Param> views_;               // scan: each layer's view of the stacked parameters
  std::unordered_map<std::string, size_t> by_name_;  // the step's parameters (complete: addresses stay)
  std::unique_ptr<TransformerBuild> build_;          // what the family's steps see
  T tokens_, labels_;
  const PrimitiveType f32_ = PrimitiveType::kF32;
};

void TransformerStepWriter::add_params() {
  // Parameters in jax's flattening order (dict keys sorted).
  family_.add_leading_params(step_, s_);
  bp_ = family_.block_params(s_);
  const auto& layer_params = bp_.shapes;
  if (s_.scan) {  // jax.lax.scan over stacked layers: one parameter per key, [layers, ...]
    for (const auto& [key, dims] : layer_params) {
      std::vector<uint64_t> d{L_};
      d.insert(d.end(), dims.begin(), dims.end());
      step_.add_param("['layers']" + key, d);
    }
  } else {
    for (uint64_t l = 0; l < L_; ++l) {
      for (const auto& [key, dims] : layer_params) {
        Param& p = step_.add_param(family_.layer_prefix(l) + key, dims);
        p.bias_of_column_split = key == bp_.b1;  // w1 is split by columns (local_dims)
      }
    }
  }
  family_.add_trailing_params(step_, s_);
  step_.declare_arguments();
  auto& P = step_.params();
  for (size_t k = 0; k < P.size(); ++k) by_name_.emplace(P[k].name, k);
}

Param& TransformerStepWriter::find(const std::string& name) {
  auto& P = step_.params();
  if (auto it = by_name_.find(name); it != by_name_.end()) return P[it->second];
  auto v = views_.find(name);
  if (v != views_.end()) return v->second;
  // "['layers'][3]['w1']" -> the stacked "['layers']['w1']"
  const size_t close = name.find(']', 10);
  const std::string stacked = "['layers']" + name.substr(close + 1);
  if (auto it = by_name_.find(stacked); it != by_name_.end()) {
    Param& p = P[it->second];
    Param view;
    view.name = name;
    view.dims.assign(p.dims.begin() + 1, p.dims.end());
    view.local = view.dims;
    view.stacked = &p;
    return views_.emplace(name, std::move(view)).first->second;
  }
  return P.front();
}

RematPolicy TransformerStepWriter::remat_of(uint64_t l) const {
  if (!s_.remat_layers.empty() && !std::count(s_.remat_layers.begin(), s_.remat_layers.end(), l))
    return RematPolicy::kNone;
  return c_.remat;
}

// Which forward tensors a policy keeps for the backward pass (the rest is recomputed there).
bool TransformerStepWriter::saveable(RematPolicy policy, const std::string& key) const {
  // The MLP's second dot feeds only the residual sum, whose gradient needs no operand: no backward pass
  // reads it, so JAX saves no residual for it under any policy (the lowered offload program sends three
  // dots per block to the host - qkv, out, h1 - and a scan stacks none of it).
  if (key == "h2") return false;
  if (policy == RematPolicy::kNone) return true;
  if (policy == RematPolicy::kFull) return false;
  // Separate q/k/v projections are dots; a fused one's q, k and v are slices of its dot.
  const bool qkv_dot = bp_.wqkv.empty() && (key == "q" || key == "k" || key == "v");
  const bool weight_dot = key == "qkv" || key == "o" || key == "h1" || qkv_dot;
  // cuDNN's attention is a custom call, not a dot: JAX's dot policies recompute it.
  if (s_.attn == AttentionKind::kCudnn && (key == "av" || key == "stats")) return false;
  const bool batch_dot = key == "scores" || key == "av";
  if (policy == RematPolicy::kDots) return weight_dot || batch_dot;
  return weight_dot;  // dots_no_batch, and offload_dots_no_batch (the same dots, kept on the host)
}

Block TransformerStepWriter::forward(uint64_t l, const T& x, const std::map<std::string, T>& reuse,
                                     bool recompute) {
  BlockTensors k{Block{x, {}}, reuse};
  const std::string p = family_.layer_prefix(l);
  const std::string w = "jit(step)/jvp()";
  const uint64_t Bm = Bm_, S = S_, D = D_, Fl = Fl_, Hl = Hl_, hd = hd_;
  const PrimitiveType cd = cd_;
  T ln1 = k.get("ln1", [&] {
    return e_.loop({x, step_.use(find(p + bp_.ln1_g), w), step_.use(find(p + bp_.ln1_b), w)},
                   A({Bm, S, D}, cd), w + "/ln1/mul", "activations");
  });
  T q, kk, v;
  if (!bp_.wqkv.empty()) {
    T qkv = k.get("qkv", [&] {
      return e_.dot({ln1, step_.gemm_operand(find(p + bp_.wqkv), w)}, A({Bm * S, 3 * D / c_.tp}, cd),
                    w + "/qkv/dot_general", "activations");
    });
    q = k.get("q", [&] { return e_.loop({qkv}, A({Bm, S, D / c_.tp}, cd), w + "/split", "activations"); });
    kk = k.get("k", [&] { return e_.loop({qkv}, A({Bm, S, D / c_.tp}, cd), w + "/split", "activations"); });
    v = k.get("v", [&] { return e_.loop({qkv}, A({Bm, S, D / c_.tp}, cd), w + "/split", "activations"); });
  } else {
    // Each projection a GEMM with its bias as the epilogue (gemm_rewriter.cc).
    auto projection = [&](const char* key, const std::string& weight, const std::string& bias) {
      return k.get(key, [&] {
        return e_.dot({ln1, step_.gemm_operand(find(p + weight), w), step_.use(find(p + bias), w)},
                      A({Bm * S, D / c_.tp}, cd), fmt::format("{}/{}/dot_general", w, key), "activations");
      });
    };
    q = projection("q", bp_.wq, bp_.bq);
    kk = projection("k", bp_.wk, bp_.bk);
    v = projection("v", bp_.wv, bp_.bv);
  }
  attention_forward(k, w, q, kk, v);
  const T av = k.b.t.at("av");
  // flax's out projection contracts the heads of the attention's output as it lies.
  T at = !bp_.transposes_attention ? av : k.get("attn_t", [&] {
    return e_.loop({av}, A({Bm, S, Hl, hd}, cd), w + "/transpose", "activations");
  });
  T o = k.get("o", [&] {
    std::vector<T> in{at, step_.gemm_operand(find(p + bp_.wo), w)};
    if (!bp_.bo.empty()) in.push_back(step_.use(find(p + bp_.bo), w));
    return e_.dot(in, A({Bm * S, D}, cd), w + "/out/dot_general", "activations");
  });
  T ln2 = k.get("ln2", [&] {
    return e_.loop({x, o, step_.use(find(p + bp_.ln2_g), w), step_.use(find(p + bp_.ln2_b), w)},
                   A({Bm, S, D}, cd), w + "/ln2/mul", "activations");
  });
  T h1 = k.get("h1", [&] {
    return e_.dot({ln2, step_.gemm_operand(find(p + bp_.w1), w), step_.use(find(p + bp_.b1), w)},
                  A({Bm * S, Fl}, cd), w + "/mlp/dot_general", "activations");
  });
  // GELU in the GEMM's row-major [tokens, width] shape, as XLA's loop fusion writes it: when nothing else
  // reads h1 (inference) the fusion writes over h1's buffer (an elementwise user of the same shape,
  // HloDataflowAnalysis::CanShareOperandBufferWithUser) - vit_b16_infer_b256's live set at its peak is then
  // XLA's own to the byte.
  T g0 = k.get("g0", [&] { return e_.loop({h1}, A({Bm * S, Fl}, cd), w + "/gelu/mul", "activations"); });
  // GELU's second output is its derivative's factor, for the backward pass only.
  if (step_.train())
    k.get("g1", [&] { return e_.loop({h1}, A({Bm, S, Fl}, cd), w + "/gelu/mul", "activations"); });
  // XLA:CPU fuses less: unfused f32 residuals its backward reads, in a recomputed block too (under
  // remat the backward pass reads them from the recomputation; no policy saves them).
  if (c_.cpu) {
    for (int extra = 0; extra < 7; ++extra)
      k.get(fmt::format("cpu{}", extra), [&] {
        return e_.loop({x, o}, A({Bm, S, D}, f32_), w + "/unfused", "activations");
      });
  }
  if (recompute) return k.b;
  T h2 = k.get("h2", [&] {
    return e_.dot({g0, step_.gemm_operand(find(p + bp_.w2), w)}, A({Bm * S, D}, cd),
                  w + "/mlp_out/dot_general", "temporaries");
  });
  if (s_.scan) {
    // Inside a scan body XLA fuses less across the saved boundary: the dump of gpt_fp32_donate_scan keeps
    // one more MLP-width and two more model-width residuals per layer than the unrolled program.
    k.get("scan_f", [&] { return e_.loop({h1}, A({Bm, S, Fl}, cd), w + "/scan/residual", "activations"); });
    k.get("scan_d0", [&] { return e_.loop({x, o}, A({Bm, S, D}, cd), w + "/scan/residual", "activations"); });
    k.get("scan_d1", [&] {
      return e_.loop({x, ln2}, A({Bm, S, D}, cd), w + "/scan/residual", "activations");
    });
  }
  k.b.t["out"] =
      e_.loop({x, o, h2, step_.use(find(p + bp_.b2), w)}, A({Bm, S, D}, cd), w + "/add", "activations");
  return k.b;
}

void TransformerStepWriter::attention_forward(BlockTensors& k, const std::string& w, const T& q, const T& kk,
                                              const T& v) {
  const uint64_t Bm = Bm_, S = S_, Hl = Hl_, hd = hd_;
  const PrimitiveType cd = cd_;
  if (s_.attn == AttentionKind::kCudnn) {
    // __cudnn$fmhaSoftmax: the output [B,H,S,hd], the softmax statistics (one f32 per row, which the
    // backward kernel uses instead of the probabilities) and a small workspace - as XLA compiles
    // jax.nn.dot_product_attention(implementation='cudnn') (gpt_mixed_donate_cudnn's module).
    if (!k.reuse.contains("av")) {
      std::vector<T> fmha = e_.custom_call("__cudnn$fmhaSoftmax", {q, kk, v},
                                           {A({Bm, Hl, S, hd}, cd), A({Bm, Hl, S}, f32_),
                                            A({kCudnnForwardWorkspaceBytes}, PrimitiveType::kU8)},
                                           w + "/dot_product_attention", "activations");
      k.b.t["av"] = fmha[0];
      k.b.t["stats"] = fmha[1];
    } else {
      k.b.t["av"] = k.reuse.at("av");
      k.b.t["stats"] = k.reuse.at("stats");
    }
    return;
  }
  T scores = k.get("scores", [&] {
    return e_.dot({q, kk}, A({Bm * Hl, S, S}, cd), w + "/attention_scores/dot_general", "activations");
  });
  if (c_.cpu)
    k.get("exp", [&] {
      return e_.loop({scores}, A({Bm, Hl, S, S}, f32_), w + "/softmax/exp", "activations");
    });
  T probs = k.get("probs", [&] {
    return e_.loop({scores}, A({Bm, Hl, S, S}, cd), w + "/softmax/div", "activations");
  });
  if (c_.cpu)
    k.get("probs2", [&] {
      return e_.loop({probs}, A({Bm, Hl, S, S}, f32_), w + "/softmax/div", "activations");
    });
  k.get("av", [&] {
    return e_.dot({probs, v}, A({Bm * Hl, S, hd}, cd), w + "/attention/dot_general", "activations");
  });
}

T TransformerStepWriter::backward(uint64_t l, const Block& b, const T& dy) {
  const std::string p = family_.layer_prefix(l);
  const std::string w = "jit(step)/transpose(jvp())";
  const uint64_t Bm = Bm_, S = S_, D = D_, Fl = Fl_, Hl = Hl_, hd = hd_;
  const PrimitiveType cd = cd_;
  auto t = [&](const char* key) { return b.t.at(key); };
  auto grad = [&](const std::string& name, std::vector<T> in, const char* what) {
    Param& q = find(p + name);
    step_.set_grad(q, e_.dot(in, step_.grad_shape(q), w + what, "gradients"), w);
  };
  auto vgrad = [&](const std::string& name, std::vector<T> in) {
    Param& q = find(p + name);
    step_.set_grad(q, e_.reduce(in, step_.grad_shape(q), w + "/reduce_sum", "gradients"), w);
  };
  grad(bp_.w2, {t("g0"), dy}, "/dot_general");
  vgrad(bp_.b2, {dy});
  T dg = e_.dot({dy, step_.gemm_operand(find(p + bp_.w2), w)}, A({Bm * S, Fl}, cd), w + "/mlp/dot_general",
                "temporaries");
  T dpre = e_.loop({dg, t("g1"), t("g0"), t("h1")}, A({Bm, S, Fl}, cd), w + "/gelu/mul", "temporaries");
  vgrad(bp_.b1, {dpre});
  grad(bp_.w1, {t("ln2"), dpre}, "/dot_general");
  T dln2 = e_.dot({dpre, step_.gemm_operand(find(p + bp_.w1), w)}, A({Bm * S, D}, cd), w + "/ln2/dot_general",
                  "temporaries");
  T dx2 = e_.loop({dln2, t("ln2"), b.x, t("o"), dy}, A({Bm, S, D}, cd), w + "/ln2/add_any", "temporaries");
  vgrad(bp_.ln2_g, {dln2, b.x});
  vgrad(bp_.ln2_b, {dln2});
  grad(bp_.wo, {bp_.transposes_attention ? t("attn_t") : t("av"), dx2}, "/dot_general");
  if (!bp_.bo.empty()) vgrad(bp_.bo, {dx2});
  T dattn = e_.dot({dx2, step_.gemm_operand(find(p + bp_.wo), w)}, A({Bm * S, D / c_.tp}, cd),
                   w + "/out/dot_general", "temporaries");
  T dat = !bp_.transposes_attention
              ? dattn
              : e_.loop({dattn}, A({Bm, Hl, S, hd}, cd), w + "/transpose", "temporaries");
  T dq, dk, dv;
  attention_backward(w, b, dat, dq, dk, dv);
  T dln1;
  if (!bp_.wqkv.empty()) {
    T dqkv = e_.loop({dq, dk, dv}, A({Bm * S, 3 * D / c_.tp}, cd), w + "/concatenate", "temporaries");
    grad(bp_.wqkv, {t("ln1"), dqkv}, "/dot_general");
    dln1 = e_.dot({dqkv, step_.gemm_operand(find(p + bp_.wqkv), w)}, A({Bm * S, D}, cd),
                  w + "/ln1/dot_general", "temporaries");
  } else {
    // Three projections: three weight gradients, and the input's gradient accumulated GEMM by GEMM (each
    // adds the previous one as its output's addend, gemm_rewriter.cc's beta = 1).
    const std::array<std::pair<const T*, const std::string*>, 3> parts = {
        {{&dq, &bp_.wq}, {&dk, &bp_.wk}, {&dv, &bp_.wv}}};
    const std::array<const std::string*, 3> biases = {&bp_.bq, &bp_.bk, &bp_.bv};
    for (size_t part = 0; part < parts.size(); ++part) {
      const auto [d, weight] = parts[part];
      grad(*weight, {t("ln1"), *d}, "/dot_general");
      vgrad(*biases[part], {*d});
      std::vector<T> in{*d, step_.gemm_operand(find(p + *weight), w)};
      if (part > 0) in.push_back(dln1);
      dln1 = e_.dot(in, A({Bm * S, D}, cd), w + "/ln1/dot_general", "temporaries");
    }
  }
  std::vector<T> ln1_in{dln1, b.x};
  for (const char* key : {"scan_f", "scan_d0", "scan_d1"})
    if (b.t.contains(key)) ln1_in.push_back(t(key));
  if (c_.cpu)
    for (int extra = 0; extra < 7; ++extra) ln1_in.push_back(t(fmt::format("cpu{}", extra).c_str()));
  vgrad(bp_.ln1_g, ln1_in);
  vgrad(bp_.ln1_b, {dln1});
  return e_.loop({dln1, t("ln1"), b.x, dx2}, A({Bm, S, D}, cd), w + "/ln1/add_any", "temporaries");
}

void TransformerStepWriter::attention_backward(const std::string& w, const Block& b, const T& dat, T& dq,
                                               T& dk, T& dv) {
  const uint64_t Bm = Bm_, S = S_, Hl = Hl_, hd = hd_;
  const PrimitiveType cd = cd_;
  auto t = [&](const char* key) { return b.t.at(key); };
  if (s_.attn == AttentionKind::kCudnn) {
    // __cudnn$fmhaSoftmaxBackward reads q, k, v, the forward's output and statistics and the output's
    // gradient. Its workspace is taken as dq's f32 accumulator plus one f32 per row (dO . O), as cuDNN's
    // flash-attention backward keeps them: a decomposition inferred from the one size seen,
    // gpt_mixed_donate_cudnn's u8[34078976] for 8 x 16 x 1024 x 64 (other shapes unverified).
    const uint64_t rows = Bm * Hl * S;
    const uint64_t workspace = rows * hd * 4 + rows * 4;
    std::vector<T> grads =
        e_.custom_call("__cudnn$fmhaSoftmaxBackward", {t("q"), t("k"), t("v"), t("av"), t("stats"), dat},
                       {A({Bm, Hl, S, hd}, cd), A({Bm, Hl, S, hd}, cd), A({Bm, Hl, S, hd}, cd),
                        A({workspace}, PrimitiveType::kU8)},
                       w + "/dot_product_attention", "temporaries");
    dq = grads[0];
    dk = grads[1];
    dv = grads[2];
    return;
  }
  T dprobs = e_.dot({dat, t("v")}, A({Bm * Hl, S, S}, cd), w + "/attention/dot_general", "temporaries");
  dv = e_.dot({t("probs"), dat}, A({Bm * Hl, S, hd}, cd), w + "/attention/dot_general", "temporaries");
  std::vector<T> softmax_in{dprobs, t("probs")};
  if (!c_.cpu) softmax_in.push_back(t("scores"));  // XLA:GPU keeps the raw scores for the softmax backward
  if (c_.cpu) {  // XLA:CPU keeps the exponentials and a second copy of the probabilities for this
    softmax_in.push_back(t("exp"));
    softmax_in.push_back(t("probs2"));
  }
  T dscores = e_.loop(softmax_in, A({Bm, Hl, S, S}, cd), w + "/softmax/mul", "temporaries");
  dq = e_.dot({dscores, t("k")}, A({Bm * Hl, S, hd}, cd), w + "/scores/dot_general", "temporaries");
  dk = e_.dot({dscores, t("q")}, A({Bm * Hl, S, hd}, cd), w + "/scores/dot_general", "temporaries");
}

T TransformerStepWriter::microbatch(const T& whole) {
  std::vector<uint64_t> d = whole.shape.dims;
  d[0] = Bm_;
  return e_.op("dynamic-slice", {whole}, array(whole.shape.type, d), "jit(step)/microbatch", "activations");
}

T TransformerStepWriter::forward_pass(const T& x, std::vector<Block>& kept,
                                      std::map<std::string, T>& stacked) {
  // With scan the kept tensors go into stacked buffers, one slice per layer, and the program holds one
  // layer: the body of a while loop (Emitter::loop) that runs once per layer.
  const uint64_t emitted = s_.scan ? 1 : L_;
  kept.assign(emitted, Block{});
  T h = x;
  // stacked[key] = dynamic-update-slice(stacked[key], t): XLA allocates each stack at the start.
  auto put = [&](const std::string& key, const T& t) {
    auto it = stacked.find(key);
    if (it == stacked.end()) {
      std::vector<uint64_t> d{L_};
      d.insert(d.end(), t.shape.dims.begin(), t.shape.dims.end());
      it = stacked
               .emplace(key,
                        e_.loop({}, array(t.shape.type, d), "jit(step)/scan/broadcast_in_dim", "activations"))
               .first;
    }
    it->second = e_.op("dynamic-update-slice", {it->second, t}, it->second.shape,
                       "jit(step)/scan/dynamic_update_slice", "activations");
  };
  const size_t forward_begin = e_.mark();
  for (uint64_t l = 0; l < emitted; ++l) {
    // The layer's input is stacked before the layer's output is made: the loop writes the output over it.
    if (s_.scan && step_.train()) put("x", h);
    Block b = forward(l, h, {}, false);
    h = b.t.at("out");
    const RematPolicy policy = step_.train() ? remat_of(l) : RematPolicy::kFull;
    Block keep;
    keep.x = b.x;
    for (const auto& [key, t] : b.t)
      if (key != "out" && saveable(policy, key)) keep.t[key] = t;
    if (s_.scan && step_.train())
      for (const auto& [key, t] : keep.t) put(key, t);
    kept[l] = keep;
  }
  if (s_.scan) {
    std::vector<T> results{h};
    for (const auto& [key, t] : stacked) results.push_back(t);
    auto after = e_.loop(forward_begin, {{h, x}}, results, "jit(step)/while");
    h = after.at(h.name);
    for (auto& [key, t] : stacked) t = after.at(t.name);
  }
  return h;
}

T TransformerStepWriter::backward_pass(T dh, const std::vector<Block>& kept,
                                       const std::map<std::string, T>& stacked) {
  auto& P = step_.params();
  const size_t backward_begin = e_.mark();
  const T dh_in = dh;
  for (uint64_t l = kept.size(); l-- > 0;) {
    Block b = kept[l];
    std::map<std::string, T> have = b.t;
    if (s_.scan) {
      // Each layer's tensors come back out of the stacks (copies).
      auto slice = [&](const std::string& key, const T& like) {
        return e_.op("dynamic-slice", {stacked.at(key)}, like.shape, "jit(step)/scan/dynamic_slice",
                     "activations");
      };
      b.x = slice("x", b.x);
      for (auto& [key, t] : have) t = slice(key, t);
    }
    const RematPolicy policy = remat_of(l);
    if (policy == RematPolicy::kOffloadDotsNoBatch) {
      // Host offload of the saved dots, as XLA:GPU compiles it (gpt_mixed_donate_offload_dots_nb's
      // module): each is copied to pinned host memory (S(5)) and straight back into a device buffer just
      // before this block's backward pass reads it - the scheduler puts the copy to the host there, not
      // after the forward pass, so the device keeps the value until then and the host holds about one
      // block's worth at a time. The block's input stays on the device (jax.checkpoint keeps arguments).
      // All of the block's go over before any comes back, as the module's copies are ordered.
      std::map<std::string, T> on_host;
      for (const auto& [key, t] : have) {
        Shape host = t.shape;
        host.memory_space = kHostMemorySpace;
        on_host[key] =
            e_.op("copy", {t}, host, "jit(step)/transpose(jvp())/offload/copy_to_host", "activations");
      }
      for (auto& [key, t] : have)
        t = e_.op("copy", {on_host.at(key)}, t.shape, "jit(step)/transpose(jvp())/offload/copy_to_device",
                  "activations");
    }
    if (policy != RematPolicy::kNone) {
      std::vector<Param*> weights;
      for (const std::string* key : {&bp_.wqkv, &bp_.wq, &bp_.wk, &bp_.wv, &bp_.wo, &bp_.w1, &bp_.w2})
        if (!key->empty()) weights.push_back(&find(family_.layer_prefix(l) + *key));
      step_.recompute_weights(weights);
    }
    Block full = policy == RematPolicy::kNone ? Block{b.x, have} : forward(l, b.x, have, true);
    dh = backward(l, full, dh);
  }
  if (s_.scan) {
    // The backward loop reads the stacks and writes each stacked weight's gradient, layer by layer.
    std::vector<T> results{dh};
    for (Param& p : P)
      if (!p.grad.name.empty()) results.push_back(p.grad);
    auto after = e_.loop(backward_begin, {{dh, dh_in}}, results, "jit(step)/while");
    dh = after.at(dh.name);
    for (Param& p : P)
      if (auto it = after.find(p.grad.name); it != after.end()) p.grad = it->second;
  }
  return dh;
}

void TransformerStepWriter::run_microbatch(uint64_t micro, T& loss, T& out_logits) {
  T tok = tokens_, lab = labels_;
  if (k_ > 1) {
    tok = microbatch(tokens_);
    if (step_.train()) lab = microbatch(labels_);
  }
  const T x = family_.embed(*build_, tok);
  std::vector<Block> kept;
  std::map<std::string, T> stacked;
  const T h = forward_pass(x, kept, stacked);
  T lnf = e_.loop({h, find(bp_.lnf_g).value, find(bp_.lnf_b).value}, A({Bm_, S_, D_}, cd_),
                  "jit(step)/jvp()/lnf/mul", "activations");
  if (!step_.train()) {
    out_logits = family_.infer_head(*build_, lnf);
    return;
  }
  T dh = family_.train_head(*build_, h, lnf, lab, micro, loss);
  for (const std::string* name : {&bp_.lnf_g, &bp_.lnf_b})
    step_.set_grad(find(*name),
                   e_.reduce({dh}, step_.grad_shape(find(*name)), "jit(step)/transpose/lnf", "gradients"),
                   "jit(step)/lnf");
  dh = backward_pass(dh, kept, stacked);
  family_.embed_backward(*build_, tok, dh);
}

void TransformerStepWriter::build(HloModule& module) {
  // Tensor parallelism shards a tied embedding by vocabulary (reference_programs.py's spec_for): each device
  // computes, and backpropagates through, its own slice of the logits.
  uint64_t outputs = family_.outputs(s_);
  if (c_.tp > 1 && family_.logits_follow_embedding() && outputs % c_.tp == 0) outputs /= c_.tp;
  add_params();
  build_ = std::make_unique<TransformerBuild>(
      TransformerBuild{c_, e_, step_, [this](const std::string& name) -> Param& { return find(name); }, D_,
                       S_, outputs, Bm_, cd_});
  family_.add_batch(*build_, s_.batch / c_.data, tokens_, labels_);
  step_.accumulating_ = k_ > 1;
  family_.before_microbatches(*build_);
  T loss;
  T out_logits;
  for (uint64_t micro = 0; micro < k_; ++micro) {
    run_microbatch(micro, loss, out_logits);
    if (!step_.train()) break;
  }
  if (!step_.train()) {
    e_.root_array(out_logits);
    return;
  }
  step_.optimize_and_finish({loss}, &module);
}

}  // namespace

void build_transformer(const Ctx& c, Step& step, HloModule& module, TransformerFamily& family) {
  TransformerStepWriter(c, step, family).build(module);
}

}  // namespace memfit::zoo
