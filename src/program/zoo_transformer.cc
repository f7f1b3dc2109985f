// The transformer blocks of the model zoo, shared by its GPT and ViT families (zoo_gpt.cc, zoo_vit.cc): the
// step's parameters and microbatches, each block's forward with the tensors its remat policy keeps (stacked
// under scan), the backward pass with recomputation, and the optimizer.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <map>

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

void build_transformer(const Ctx& c, Step& step, HloModule& module, TransformerFamily& family) {
  const ModelSpec& s = c.s;
  Emitter& e = c.e;
  const uint64_t D = s.d_model, H = s.heads, F = s.ffn_width(), L = s.layers;
  const uint64_t S = family.sequence(s);
  // Tensor parallelism shards a tied embedding by vocabulary (reference_programs.py's spec_for): each device
  // computes, and backpropagates through, its own slice of the logits.
  uint64_t V = family.outputs(s);
  if (c.tp > 1 && family.logits_follow_embedding() && V % c.tp == 0) V /= c.tp;
  // Parameters in jax's flattening order (dict keys sorted).
  family.add_leading_params(step, s);
  const BlockParams bp = family.block_params(s);
  const auto& layer_params = bp.shapes;
  if (s.scan) {  // jax.lax.scan over stacked layers: one parameter per key, [layers, ...]
    for (const auto& [key, dims] : layer_params) {
      std::vector<uint64_t> d{L};
      d.insert(d.end(), dims.begin(), dims.end());
      step.add_param("['layers']" + key, d);
    }
  } else {
    for (uint64_t l = 0; l < L; ++l) {
      for (const auto& [key, dims] : layer_params) {
        Param& p = step.add_param(family.layer_prefix(l) + key, dims);
        p.bias_of_column_split = key == bp.b1;  // w1 is split by columns (local_dims)
      }
    }
  }
  family.add_trailing_params(step, s);
  step.declare_arguments();
  auto& P = step.params();
  // scan: each layer's view of the stacked parameters (sliced where used, gradients written back).
  std::map<std::string, Param> views;
  std::unordered_map<std::string, size_t> by_name;  // P is complete: its addresses stay
  for (size_t k = 0; k < P.size(); ++k) by_name.emplace(P[k].name, k);
  auto find = [&](const std::string& name) -> Param& {
    if (auto it = by_name.find(name); it != by_name.end()) return P[it->second];
    auto v = views.find(name);
    if (v != views.end()) return v->second;
    // "['layers'][3]['w1']" -> the stacked "['layers']['w1']"
    const size_t close = name.find(']', 10);
    const std::string stacked = "['layers']" + name.substr(close + 1);
    if (auto it = by_name.find(stacked); it != by_name.end()) {
      Param& p = P[it->second];
      Param view;
      view.name = name;
      view.dims.assign(p.dims.begin() + 1, p.dims.end());
      view.local = view.dims;
      view.stacked = &p;
      return views.emplace(name, std::move(view)).first->second;
    }
    return P.front();
  };
  const uint64_t B = s.batch / c.data;
  const uint64_t Hl = H / c.tp, Fl = F / c.tp, hd = D / H;
  const uint64_t k = s.accum, Bm = B / k;
  TransformerBuild build{c, e, step, find, D, S, V, Bm, c.cdt};
  T tokens, labels;
  family.add_batch(build, B, tokens, labels);
  step.accumulating_ = k > 1;
  const PrimitiveType f32 = PrimitiveType::kF32, cd = c.cdt;
  auto A = [&](std::vector<uint64_t> d, PrimitiveType t) { return array(t, std::move(d)); };
  const bool scan = s.scan;

  auto remat_of = [&](uint64_t l) {
    if (!s.remat_layers.empty() && !std::count(s.remat_layers.begin(), s.remat_layers.end(), l))
      return RematPolicy::kNone;
    return c.remat;
  };
  // Which forward tensors a policy keeps for the backward pass (the rest is recomputed there).
  auto saveable = [&](RematPolicy policy, const std::string& key) {
    // The MLP's second dot feeds only the residual sum, whose gradient needs no operand: no backward pass
    // reads it, so JAX saves no residual for it under any policy (the lowered offload program sends three
    // dots per block to the host - qkv, out, h1 - and a scan stacks none of it).
    if (key == "h2") return false;
    if (policy == RematPolicy::kNone) return true;
    if (policy == RematPolicy::kFull) return false;
    // Separate q/k/v projections are dots; a fused one's q, k and v are slices of its dot.
    const bool qkv_dot = bp.wqkv.empty() && (key == "q" || key == "k" || key == "v");
    const bool weight_dot = key == "qkv" || key == "o" || key == "h1" || qkv_dot;
    // cuDNN's attention is a custom call, not a dot: JAX's dot policies recompute it.
    if (s.attn == AttentionKind::kCudnn && (key == "av" || key == "stats")) return false;
    const bool batch_dot = key == "scores" || key == "av";
    if (policy == RematPolicy::kDots) return weight_dot || batch_dot;
    return weight_dot;  // dots_no_batch, and offload_dots_no_batch (the same dots, kept on the host)
  };

  // One block's forward. `reuse`: tensors kept from the forward pass (recomputation takes them as is).
  // `recompute`: rematerialization in the backward pass, which needs neither the output nor h2.
  auto forward = [&](uint64_t l, const T& x, const std::map<std::string, T>& reuse, bool recompute) {
    Block b;
    b.x = x;
    const std::string p = family.layer_prefix(l);
    const std::string w = "jit(step)/jvp()";
    auto get = [&](const std::string& key, auto make) {
      auto it = reuse.find(key);
      T t = it != reuse.end() ? it->second : make();
      b.t[key] = t;
      return t;
    };
    T ln1 = get("ln1", [&] {
      return e.loop({x, step.use(find(p + bp.ln1_g), w), step.use(find(p + bp.ln1_b), w)}, A({Bm, S, D}, cd),
                    w + "/ln1/mul", "activations");
    });
    T q, kk, v;
    if (!bp.wqkv.empty()) {
      T qkv = get("qkv", [&] {
        return e.dot({ln1, step.gemm_operand(find(p + bp.wqkv), w)}, A({Bm * S, 3 * D / c.tp}, cd),
                     w + "/qkv/dot_general", "activations");
      });
      q = get("q", [&] { return e.loop({qkv}, A({Bm, S, D / c.tp}, cd), w + "/split", "activations"); });
      kk = get("k", [&] { return e.loop({qkv}, A({Bm, S, D / c.tp}, cd), w + "/split", "activations"); });
      v = get("v", [&] { return e.loop({qkv}, A({Bm, S, D / c.tp}, cd), w + "/split", "activations"); });
    } else {
      // Each projection a GEMM with its bias as the epilogue (gemm_rewriter.cc).
      auto projection = [&](const char* key, const std::string& weight, const std::string& bias) {
        return get(key, [&] {
          return e.dot({ln1, step.gemm_operand(find(p + weight), w), step.use(find(p + bias), w)},
                       A({Bm * S, D / c.tp}, cd), fmt::format("{}/{}/dot_general", w, key), "activations");
        });
      };
      q = projection("q", bp.wq, bp.bq);
      kk = projection("k", bp.wk, bp.bk);
      v = projection("v", bp.wv, bp.bv);
    }
    if (s.attn == AttentionKind::kCudnn) {
      // __cudnn$fmhaSoftmax: the output [B,H,S,hd], the softmax statistics (one f32 per row, which the
      // backward kernel uses instead of the probabilities) and a small workspace - as XLA compiles
      // jax.nn.dot_product_attention(implementation='cudnn') (gpt_mixed_donate_cudnn's module).
      if (!reuse.contains("av")) {
        std::vector<T> fmha = e.custom_call("__cudnn$fmhaSoftmax", {q, kk, v},
                                            {A({Bm, Hl, S, hd}, cd), A({Bm, Hl, S}, f32),
                                             A({kCudnnForwardWorkspaceBytes}, PrimitiveType::kU8)},
                                            w + "/dot_product_attention", "activations");
        b.t["av"] = fmha[0];
        b.t["stats"] = fmha[1];
      } else {
        b.t["av"] = reuse.at("av");
        b.t["stats"] = reuse.at("stats");
      }
    } else {
      T scores = get("scores", [&] {
        return e.dot({q, kk}, A({Bm * Hl, S, S}, cd), w + "/attention_scores/dot_general", "activations");
      });
      if (c.cpu)
        get("exp", [&] {
          return e.loop({scores}, A({Bm, Hl, S, S}, f32), w + "/softmax/exp", "activations");
        });
      T probs = get("probs", [&] {
        return e.loop({scores}, A({Bm, Hl, S, S}, cd), w + "/softmax/div", "activations");
      });
      if (c.cpu)
        get("probs2", [&] {
          return e.loop({probs}, A({Bm, Hl, S, S}, f32), w + "/softmax/div", "activations");
        });
      get("av", [&] {
        return e.dot({probs, v}, A({Bm * Hl, S, hd}, cd), w + "/attention/dot_general", "activations");
      });
    }
    const T av = b.t.at("av");
    // flax's out projection contracts the heads of the attention's output as it lies.
    T at = !bp.transposes_attention ? av : get("attn_t", [&] {
      return e.loop({av}, A({Bm, S, Hl, hd}, cd), w + "/transpose", "activations");
    });
    T o = get("o", [&] {
      std::vector<T> in{at, step.gemm_operand(find(p + bp.wo), w)};
      if (!bp.bo.empty()) in.push_back(step.use(find(p + bp.bo), w));
      return e.dot(in, A({Bm * S, D}, cd), w + "/out/dot_general", "activations");
    });
    T ln2 = get("ln2", [&] {
      return e.loop({x, o, step.use(find(p + bp.ln2_g), w), step.use(find(p + bp.ln2_b), w)},
                    A({Bm, S, D}, cd), w + "/ln2/mul", "activations");
    });
    T h1 = get("h1", [&] {
      return e.dot({ln2, step.gemm_operand(find(p + bp.w1), w), step.use(find(p + bp.b1), w)},
                   A({Bm * S, Fl}, cd), w + "/mlp/dot_general", "activations");
    });
    // GELU in the GEMM's row-major [tokens, width] shape, as XLA's loop fusion writes it: when nothing else
    // reads h1 (inference) the fusion writes over h1's buffer (an elementwise user of the same shape,
    // HloDataflowAnalysis::CanShareOperandBufferWithUser) - vit_b16_infer_b256's live set at its peak is then
    // XLA's own to the byte.
    T g0 = get("g0", [&] { return e.loop({h1}, A({Bm * S, Fl}, cd), w + "/gelu/mul", "activations"); });
    // GELU's second output is its derivative's factor, for the backward pass only.
    if (step.train())
      get("g1", [&] { return e.loop({h1}, A({Bm, S, Fl}, cd), w + "/gelu/mul", "activations"); });
    // XLA:CPU fuses less: unfused f32 residuals its backward reads, in a recomputed block too (under
    // remat the backward pass reads them from the recomputation; no policy saves them).
    if (c.cpu) {
      for (int extra = 0; extra < 7; ++extra)
        get(fmt::format("cpu{}", extra), [&] {
          return e.loop({x, o}, A({Bm, S, D}, f32), w + "/unfused", "activations");
        });
    }
    if (recompute) return b;
    T h2 = get("h2", [&] {
      return e.dot({g0, step.gemm_operand(find(p + bp.w2), w)}, A({Bm * S, D}, cd),
                   w + "/mlp_out/dot_general", "temporaries");
    });
    if (scan && !recompute) {
      // Inside a scan body XLA fuses less across the saved boundary: the dump of gpt_fp32_donate_scan keeps
      // one more MLP-width and two more model-width residuals per layer than the unrolled program.
      get("scan_f", [&] { return e.loop({h1}, A({Bm, S, Fl}, cd), w + "/scan/residual", "activations"); });
      get("scan_d0", [&] { return e.loop({x, o}, A({Bm, S, D}, cd), w + "/scan/residual", "activations"); });
      get("scan_d1", [&] {
        return e.loop({x, ln2}, A({Bm, S, D}, cd), w + "/scan/residual", "activations");
      });
    }
    b.t["out"] =
        e.loop({x, o, h2, step.use(find(p + bp.b2), w)}, A({Bm, S, D}, cd), w + "/add", "activations");
    return b;
  };

  // One block's backward from the gradient of its output; returns the gradient of its input.
  auto backward = [&](uint64_t l, const Block& b, const T& dy) {
    const std::string p = family.layer_prefix(l);
    const std::string w = "jit(step)/transpose(jvp())";
    auto t = [&](const char* key) { return b.t.at(key); };
    auto grad = [&](const std::string& name, std::vector<T> in, const char* what) {
      Param& q = find(p + name);
      step.set_grad(q, e.dot(in, step.grad_shape(q), w + what, "gradients"), w);
    };
    auto vgrad = [&](const std::string& name, std::vector<T> in) {
      Param& q = find(p + name);
      step.set_grad(q, e.reduce(in, step.grad_shape(q), w + "/reduce_sum", "gradients"), w);
    };
    grad(bp.w2, {t("g0"), dy}, "/dot_general");
    vgrad(bp.b2, {dy});
    T dg = e.dot({dy, step.gemm_operand(find(p + bp.w2), w)}, A({Bm * S, Fl}, cd), w + "/mlp/dot_general",
                 "temporaries");
    T dpre = e.loop({dg, t("g1"), t("g0"), t("h1")}, A({Bm, S, Fl}, cd), w + "/gelu/mul", "temporaries");
    vgrad(bp.b1, {dpre});
    grad(bp.w1, {t("ln2"), dpre}, "/dot_general");
    T dln2 = e.dot({dpre, step.gemm_operand(find(p + bp.w1), w)}, A({Bm * S, D}, cd), w + "/ln2/dot_general",
                   "temporaries");
    T dx2 = e.loop({dln2, t("ln2"), b.x, t("o"), dy}, A({Bm, S, D}, cd), w + "/ln2/add_any", "temporaries");
    vgrad(bp.ln2_g, {dln2, b.x});
    vgrad(bp.ln2_b, {dln2});
    grad(bp.wo, {bp.transposes_attention ? t("attn_t") : t("av"), dx2}, "/dot_general");
    if (!bp.bo.empty()) vgrad(bp.bo, {dx2});
    T dattn = e.dot({dx2, step.gemm_operand(find(p + bp.wo), w)}, A({Bm * S, D / c.tp}, cd),
                    w + "/out/dot_general", "temporaries");
    T dat = !bp.transposes_attention
                ? dattn
                : e.loop({dattn}, A({Bm, Hl, S, hd}, cd), w + "/transpose", "temporaries");
    T dq, dk, dv;
    if (s.attn == AttentionKind::kCudnn) {
      // __cudnn$fmhaSoftmaxBackward reads q, k, v, the forward's output and statistics and the output's
      // gradient. Its workspace is taken as dq's f32 accumulator plus one f32 per row (dO . O), as cuDNN's
      // flash-attention backward keeps them: a decomposition inferred from the one size seen,
      // gpt_mixed_donate_cudnn's u8[34078976] for 8 x 16 x 1024 x 64 (other shapes unverified).
      const uint64_t rows = Bm * Hl * S;
      const uint64_t workspace = rows * hd * 4 + rows * 4;
      std::vector<T> grads =
          e.custom_call("__cudnn$fmhaSoftmaxBackward", {t("q"), t("k"), t("v"), t("av"), t("stats"), dat},
                        {A({Bm, Hl, S, hd}, cd), A({Bm, Hl, S, hd}, cd), A({Bm, Hl, S, hd}, cd),
                         A({workspace}, PrimitiveType::kU8)},
                        w + "/dot_product_attention", "temporaries");
      dq = grads[0];
      dk = grads[1];
      dv = grads[2];
    } else {
      T dprobs = e.dot({dat, t("v")}, A({Bm * Hl, S, S}, cd), w + "/attention/dot_general", "temporaries");
      dv = e.dot({t("probs"), dat}, A({Bm * Hl, S, hd}, cd), w + "/attention/dot_general", "temporaries");
      std::vector<T> softmax_in{dprobs, t("probs")};
      if (!c.cpu) softmax_in.push_back(t("scores"));  // XLA:GPU keeps the raw scores for the softmax backward
      if (c.cpu) {  // XLA:CPU keeps the exponentials and a second copy of the probabilities for this
        softmax_in.push_back(t("exp"));
        softmax_in.push_back(t("probs2"));
      }
      T dscores = e.loop(softmax_in, A({Bm, Hl, S, S}, cd), w + "/softmax/mul", "temporaries");
      dq = e.dot({dscores, t("k")}, A({Bm * Hl, S, hd}, cd), w + "/scores/dot_general", "temporaries");
      dk = e.dot({dscores, t("q")}, A({Bm * Hl, S, hd}, cd), w + "/scores/dot_general", "temporaries");
    }
    T dln1;
    if (!bp.wqkv.empty()) {
      T dqkv = e.loop({dq, dk, dv}, A({Bm * S, 3 * D / c.tp}, cd), w + "/concatenate", "temporaries");
      grad(bp.wqkv, {t("ln1"), dqkv}, "/dot_general");
      dln1 = e.dot({dqkv, step.gemm_operand(find(p + bp.wqkv), w)}, A({Bm * S, D}, cd),
                   w + "/ln1/dot_general", "temporaries");
    } else {
      // Three projections: three weight gradients, and the input's gradient accumulated GEMM by GEMM (each
      // adds the previous one as its output's addend, gemm_rewriter.cc's beta = 1).
      const std::array<std::pair<const T*, const std::string*>, 3> parts = {
          {{&dq, &bp.wq}, {&dk, &bp.wk}, {&dv, &bp.wv}}};
      const std::array<const std::string*, 3> biases = {&bp.bq, &bp.bk, &bp.bv};
      for (size_t part = 0; part < parts.size(); ++part) {
        const auto [d, weight] = parts[part];
        grad(*weight, {t("ln1"), *d}, "/dot_general");
        vgrad(*biases[part], {*d});
        std::vector<T> in{*d, step.gemm_operand(find(p + *weight), w)};
        if (part > 0) in.push_back(dln1);
        dln1 = e.dot(in, A({Bm * S, D}, cd), w + "/ln1/dot_general", "temporaries");
      }
    }
    std::vector<T> ln1_in{dln1, b.x};
    for (const char* key : {"scan_f", "scan_d0", "scan_d1"})
      if (b.t.contains(key)) ln1_in.push_back(t(key));
    if (c.cpu)
      for (int extra = 0; extra < 7; ++extra) ln1_in.push_back(t(fmt::format("cpu{}", extra).c_str()));
    vgrad(bp.ln1_g, ln1_in);
    vgrad(bp.ln1_b, {dln1});
    return e.loop({dln1, t("ln1"), b.x, dx2}, A({Bm, S, D}, cd), w + "/ln1/add_any", "temporaries");
  };

  family.before_microbatches(build);
  T loss;
  T out_logits;
  // A microbatch's rows of a batch argument (gradient accumulation).
  auto microbatch = [&](const T& whole) {
    std::vector<uint64_t> d = whole.shape.dims;
    d[0] = Bm;
    return e.op("dynamic-slice", {whole}, array(whole.shape.type, d), "jit(step)/microbatch", "activations");
  };
  for (uint64_t micro = 0; micro < k; ++micro) {
    T tok = tokens, lab = labels;
    if (k > 1) {
      tok = microbatch(tokens);
      if (step.train()) lab = microbatch(labels);
    }
    const T x = family.embed(build, tok);
    // Forward; with scan the kept tensors go into stacked buffers, one slice per layer, and the program
    // holds one layer: the body of a while loop (Emitter::loop) that runs once per layer.
    const uint64_t emitted = scan ? 1 : L;
    std::vector<Block> kept(emitted);
    std::map<std::string, T> stacked;
    T h = x;
    // stacked[key] = dynamic-update-slice(stacked[key], t): XLA allocates each stack at the start.
    auto put = [&](const std::string& key, const T& t) {
      auto it = stacked.find(key);
      if (it == stacked.end()) {
        std::vector<uint64_t> d{L};
        d.insert(d.end(), t.shape.dims.begin(), t.shape.dims.end());
        it = stacked
                 .emplace(key, e.loop({}, array(t.shape.type, d), "jit(step)/scan/broadcast_in_dim",
                                      "activations"))
                 .first;
      }
      it->second = e.op("dynamic-update-slice", {it->second, t}, it->second.shape,
                        "jit(step)/scan/dynamic_update_slice", "activations");
    };
    const size_t forward_begin = e.mark();
    for (uint64_t l = 0; l < emitted; ++l) {
      // The layer's input is stacked before the layer's output is made: the loop writes the output over it.
      if (scan && step.train()) put("x", h);
      Block b = forward(l, h, {}, false);
      h = b.t.at("out");
      const RematPolicy policy = step.train() ? remat_of(l) : RematPolicy::kFull;
      Block keep;
      keep.x = b.x;
      for (const auto& [key, t] : b.t)
        if (key != "out" && saveable(policy, key)) keep.t[key] = t;
      if (scan && step.train())
        for (const auto& [key, t] : keep.t) put(key, t);
      kept[l] = keep;
    }
    if (scan) {
      std::vector<T> results{h};
      for (const auto& [key, t] : stacked) results.push_back(t);
      auto after = e.loop(forward_begin, {{h, x}}, results, "jit(step)/while");
      h = after.at(h.name);
      for (auto& [key, t] : stacked) t = after.at(t.name);
    }
    T lnf = e.loop({h, find(bp.lnf_g).value, find(bp.lnf_b).value}, A({Bm, S, D}, cd),
                   "jit(step)/jvp()/lnf/mul", "activations");
    if (!step.train()) {
      out_logits = family.infer_head(build, lnf);
      break;
    }
    T dh = family.train_head(build, h, lnf, lab, micro, loss);
    for (const std::string* name : {&bp.lnf_g, &bp.lnf_b})
      step.set_grad(find(*name),
                    e.reduce({dh}, step.grad_shape(find(*name)), "jit(step)/transpose/lnf", "gradients"),
                    "jit(step)/lnf");
    const size_t backward_begin = e.mark();
    const T dh_in = dh;
    for (uint64_t l = emitted; l-- > 0;) {
      Block b = kept[l];
      std::map<std::string, T> have = b.t;
      if (scan) {
        // Each layer's tensors come back out of the stacks (copies).
        auto slice = [&](const std::string& key, const T& like) {
          return e.op("dynamic-slice", {stacked.at(key)}, like.shape, "jit(step)/scan/dynamic_slice",
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
              e.op("copy", {t}, host, "jit(step)/transpose(jvp())/offload/copy_to_host", "activations");
        }
        for (auto& [key, t] : have)
          t = e.op("copy", {on_host.at(key)}, t.shape, "jit(step)/transpose(jvp())/offload/copy_to_device",
                   "activations");
      }
      if (policy != RematPolicy::kNone) {
        std::vector<Param*> weights;
        for (const std::string* key : {&bp.wqkv, &bp.wq, &bp.wk, &bp.wv, &bp.wo, &bp.w1, &bp.w2})
          if (!key->empty()) weights.push_back(&find(family.layer_prefix(l) + *key));
        step.recompute_weights(weights);
      }
      Block full = policy == RematPolicy::kNone ? Block{b.x, have} : forward(l, b.x, have, true);
      dh = backward(l, full, dh);
    }
    if (scan) {
      // The backward loop reads the stacks and writes each stacked weight's gradient, layer by layer.
      std::vector<T> results{dh};
      for (Param& p : P)
        if (!p.grad.name.empty()) results.push_back(p.grad);
      auto after = e.loop(backward_begin, {{dh, dh_in}}, results, "jit(step)/while");
      dh = after.at(dh.name);
      for (Param& p : P)
        if (auto it = after.find(p.grad.name); it != after.end()) p.grad = it->second;
    }
    family.embed_backward(build, tok, dh);
  }
  if (!step.train()) {
    e.root_array(out_logits);
    return;
  }
  step.optimize_and_finish({loss}, &module);
}

}  // namespace memfit::zoo
