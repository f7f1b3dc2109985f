// step decode of the model zoo (reference_programs.py's mode "decode"): one new token per sequence against a
// KV cache of `seq` positions per layer. The cache is an argument, donated, and each layer's keys and values
// are written into it in place at `pos` (a dynamic-update-slice over a donated parameter: XLA aliases the
// output to it, so the cache is held once); attention reads the whole cache with the positions after `pos`
// masked. What the step allocates beyond its arguments is one token's activations, a row of scores per head
// and the logits - an LLM server's memory is the parameters and the cache.
#include <fmt/format.h>

#include "zoo_transformer.h"

namespace memfit::zoo {

void build_decode(TransformerBuild& x, const TransformerFamily& family, const BlockParams& bp,
                  HloModule& module) {
  const ModelSpec& s = x.c.s;
  Emitter& e = x.e;
  Step& step = x.step;
  const uint64_t B = s.batch, D = x.D, S = x.S, H = s.heads, hd = D / H, F = 4 * D, L = s.layers;
  const PrimitiveType cd = x.cd, f32 = PrimitiveType::kF32;
  auto A = [](std::vector<uint64_t> d, PrimitiveType t) { return array(t, std::move(d)); };
  // Arguments after the parameters, in jax's order: the cache [(k, v) per layer], the tokens, the position.
  std::vector<T> cache;
  for (uint64_t l = 0; l < L; ++l)
    for (const char* kv : {"k", "v"})
      cache.push_back(step.kv_cache_argument(A({B, H, S, hd}, cd), fmt::format("cache[{}][{}]", l, kv)));
  const T tok = e.param(A({B, 1}, PrimitiveType::kS32), "tok", "activations");
  const T pos = e.param(A({}, PrimitiveType::kS32), "pos", "activations");
  step.count_batch(tok);
  step.count_batch(pos);

  const std::string w = "jit(step)/decode";
  T h = e.loop({step.use(x.find("['embed']"), w), x.find("['pos']").value, tok, pos}, A({B, 1, D}, cd),
               w + "/embed", "activations");
  std::vector<T> new_cache;
  for (uint64_t l = 0; l < L; ++l) {
    const std::string p = family.layer_prefix(l);
    auto weight = [&](const std::string& key) { return step.gemm_operand(x.find(p + key), w); };
    auto vector = [&](const std::string& key) { return step.use(x.find(p + key), w); };
    T ln1 = e.loop({h, vector(bp.ln1_g), vector(bp.ln1_b)}, A({B, 1, D}, cd), w + "/ln1", "activations");
    T qkv = e.dot({ln1, weight(bp.wqkv)}, A({B, 3 * D}, cd), w + "/qkv/dot_general", "activations");
    T kc = e.op("dynamic-update-slice", {cache[2 * l], qkv, pos}, cache[2 * l].shape,
                w + "/dynamic_update_slice", "kv_cache");
    T vc = e.op("dynamic-update-slice", {cache[2 * l + 1], qkv, pos}, cache[2 * l + 1].shape,
                w + "/dynamic_update_slice", "kv_cache");
    new_cache.push_back(kc);
    new_cache.push_back(vc);
    T q = e.loop({qkv}, A({B * H, 1, hd}, cd), w + "/split", "activations");
    T scores = e.dot({q, kc}, A({B * H, 1, S}, cd), w + "/attention_scores/dot_general", "activations");
    T probs = e.loop({scores, pos}, A({B, H, 1, S}, cd), w + "/softmax", "activations");
    T av = e.dot({probs, vc}, A({B * H, 1, hd}, cd), w + "/attention/dot_general", "activations");
    T at = e.loop({av}, A({B, 1, D}, cd), w + "/transpose", "activations");
    T o = e.dot({at, weight(bp.wo)}, A({B, D}, cd), w + "/out/dot_general", "activations");
    T ln2 = e.loop({h, o, vector(bp.ln2_g), vector(bp.ln2_b)}, A({B, 1, D}, cd), w + "/ln2", "activations");
    T h1 = e.dot({ln2, weight(bp.w1), vector(bp.b1)}, A({B, F}, cd), w + "/mlp/dot_general", "activations");
    T h2 = e.dot({h1, weight(bp.w2)}, A({B, D}, cd), w + "/mlp_out/dot_general", "activations");
    h = e.loop({h, o, h2, vector(bp.b2)}, A({B, 1, D}, cd), w + "/add", "activations");
  }
  T lnf = e.loop({h, x.find(bp.lnf_g).value, x.find(bp.lnf_b).value}, A({B, 1, D}, cd), w + "/lnf",
                 "activations");
  T logits = e.dot({lnf, step.gemm_operand(x.find("['embed']"), w)}, A({B, 1, x.V}, f32),
                   w + "/logits/dot_general", "activations");
  Step::Outputs outs;
  outs.add(logits, T{});  // new
  for (size_t k = 0; k < new_cache.size(); ++k) outs.add(new_cache[k], cache[k]);
  step.finish(outs, {}, &module, /*donated=*/true);  // donate_argnums=(1,): the cache is written over
}

}  // namespace memfit::zoo
