// The MLP family of the model zoo (reference_programs.py's mlp): dense layers, GELU, a regression loss,
// written as XLA's fused program for the configurations the lowered writer (zoo_mlp_lowered.cc, planned
// through the model of XLA:GPU) does not take yet: several devices, XLA:CPU, host offload.
#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "zoo_step.h"

namespace memfit::zoo {

void build_mlp(const Ctx& c, Step& step, HloModule& module) {
  const ModelSpec& s = c.s;
  Emitter& e = c.e;
  std::vector<uint64_t> sizes{s.din};
  for (uint64_t i = 0; i < s.depth; ++i) sizes.push_back(s.width);
  sizes.push_back(s.dout);
  const size_t n = sizes.size() - 1;
  for (size_t l = 0; l < n; ++l) {
    step.add_param(fmt::format("[{}][0]", l), {sizes[l], sizes[l + 1]});
    step.add_param(fmt::format("[{}][1]", l), {sizes[l + 1]});
  }
  step.declare_arguments();
  auto& P = step.params();
  const uint64_t B = s.batch / c.data;
  const T x_in = e.param(array(PrimitiveType::kF32, {B, s.din}), "batch[0]", "activations");
  step.count_batch(x_in);
  T y_in;
  if (s.step != StepKind::kInfer) {
    y_in = e.param(array(PrimitiveType::kF32, {B, s.dout}), "batch[1]", "activations");
    step.count_batch(y_in);
  }
  const uint64_t k = s.accum;
  const uint64_t mb = B / k;
  step.accumulating_ = k > 1;
  T loss;
  for (uint64_t micro = 0; micro < k; ++micro) {
    T x = x_in;
    if (k > 1)
      x = e.op("dynamic-slice", {x_in}, array(PrimitiveType::kF32, {mb, s.din}), "jit(step)/microbatch",
               "activations");
    if (c.cdt != PrimitiveType::kF32)
      x = e.loop({x}, array(c.cdt, {mb, s.din}), "jit(step)/convert", "activations");
    struct Saved {
      T in, h, g0, g1;
    };
    std::vector<Saved> saved(n);
    // Recomputed in the backward pass, only the matmul is kept: XLA fuses GELU's derivative into its user.
    auto forward_layer = [&](size_t l, const T& in, bool recompute) {
      Saved sv;
      sv.in = in;
      const std::string where = "jit(step)/jvp()";
      sv.h = e.dot({in, step.gemm_operand(P[2 * l], where), P[2 * l + 1].value},
                   array(c.cdt, {mb, sizes[l + 1]}), where + "/dot_general", "activations");
      if (l + 1 < n && !recompute) {
        auto gelu = e.loop_multi({sv.h}, {array(c.cdt, {mb, sizes[l + 1]}), array(c.cdt, {mb, sizes[l + 1]})},
                                 "jit(step)/jvp()/gelu", "activations");
        sv.g0 = gelu[0];
        sv.g1 = gelu[1];
      }
      return sv;
    };
    T a = x;
    const bool remat_all = c.remat == RematPolicy::kFull;
    for (size_t l = 0; l < n; ++l) {
      saved[l] = forward_layer(l, a, false);
      a = l + 1 < n ? saved[l].g0 : saved[l].h;
    }
    if (s.step == StepKind::kInfer) {
      loss = a;
      break;
    }
    // loss = mean((out - y)^2)
    T out = a;
    T ym = y_in;
    if (k > 1)
      ym = e.op("dynamic-slice", {y_in}, array(PrimitiveType::kF32, {mb, s.dout}), "jit(step)/microbatch",
                "activations");
    // vmap(grad(loss_one)) computes no loss value, and the step returns none.
    if (s.step != StepKind::kVmapGrads) {
      T l2 = e.reduce({out, ym}, array(PrimitiveType::kF32, {}), "jit(step)/reduce_sum", "temporaries");
      loss = k > 1 && micro > 0 ? e.loop({loss, l2}, l2.shape, "jit(step)/add", "temporaries") : l2;
    }
    T d = e.loop({out, ym}, array(c.cdt, {mb, s.dout}), "jit(step)/transpose(jvp())/mul", "temporaries");
    for (size_t l = n; l-- > 0;) {
      const std::string where = "jit(step)/transpose(jvp())";
      Saved sv = saved[l];
      const bool recompute =
          remat_all && l + 1 < n &&
          (s.remat_layers.empty() || std::count(s.remat_layers.begin(), s.remat_layers.end(), l));
      if (recompute) {
        step.recompute_weights({&P[2 * l]});
        sv = forward_layer(l, sv.in, true);
      }
      T dpre = d;
      if (l + 1 < n) {
        std::vector<T> in{d, sv.h};
        if (!recompute) in.push_back(sv.g1);
        dpre = e.loop(in, array(c.cdt, {mb, sizes[l + 1]}), "jit(step)/transpose(jvp())/mul", "temporaries");
      }
      // Per-example gradients and their mean (vmap_grads) plan as one weight gradient: XLA's algebraic
      // simplifier folds the sum over the per-example dot's batch dimension into a dot that contracts it
      // (xla/hlo/transforms/simplifiers/algebraic_simplifier.cc, reduce of dot), so the [batch, in, out]
      // per-example gradients are never materialized - the compiled mlp_vmap_grads_b128 has none. vmap's
      // per-example dot comes out [batch, out, in] and is transposed before the mean, so the folded dot
      // writes [out, in] and the transpose is a copy of its own (plan/xla_gpu_fusion.cc models the same
      // fold).
      const Shape grad = step.grad_shape(P[2 * l]);
      T g;
      if (s.step == StepKind::kVmapGrads) {
        T out_in = e.dot({sv.in, dpre}, array(PrimitiveType::kF32, {grad.dims[1], grad.dims[0]}),
                         where + "/dot_general", "temporaries");
        g = e.loop({out_in}, grad, where + "/transpose", "gradients");
      } else {
        g = e.dot({sv.in, dpre}, grad, where + "/dot_general", "gradients");
      }
      step.set_grad(P[2 * l], g, where);
      step.set_grad(P[2 * l + 1],
                    e.reduce({dpre}, step.grad_shape(P[2 * l + 1]), where + "/reduce_sum", "gradients"),
                    where);
      if (l > 0)
        d = e.dot({dpre, step.gemm_operand(P[2 * l], where)}, array(c.cdt, {mb, sizes[l]}),
                  where + "/dot_general", "temporaries");
    }
  }
  if (s.step == StepKind::kInfer) {
    // forward(params, x) returns one f32 array; in fp32 its astype is no op at all.
    e.root_array(c.cdt == PrimitiveType::kF32 ? loss
                                              : e.loop({loss}, array(PrimitiveType::kF32, loss.shape.dims),
                                                       "jit(step)/convert", "activations"));
    return;
  }
  step.optimize_and_finish(s.step == StepKind::kVmapGrads ? std::vector<T>{} : std::vector<T>{loss}, &module);
}

}  // namespace memfit::zoo
