// The flax conv net of the model zoo (reference_programs.py's flax_cnn): per width two flax.linen Conv 3x3
// (SAME padding, a bias) each followed by relu, a 2x2 average pool, then the mean over the image and a dense
// head; softmax cross-entropy; optax.adamw.
//
// As XLA:GPU compiles it on a Hopper GPU (H100, H200):
// - Convolutions are cuDNN calls, each writing its own buffer. On Hopper every 2-D convolution that is not
//   f64 runs NHWC (HeuristicLayoutAssignment in xla/service/gpu/transforms/layout_assignment.cc), flax's own
//   layout, so activations take no layout copies; the kernel is read as OHWI (filter layout
//   kOutputYXInput), so each HWIO kernel is copied once, and the copy is read again by the backward pass.
// - The bias is the call's epilogue (cudnn_fused_conv_rewriter.cc, FuseBiasOrSideInput). relu joins it
//   only where the convolution's result has one use (FuseRelu's WithOneUse): in inference. In training
//   jax.nn.relu's derivative, select(x > 0, g, 0), reads the pre-activation too, so the call writes z, the
//   relu is a fusion of its own, and z stays live until the backward pass (the compare fuses into the
//   backward select that reads it). A relu that only feeds the average pool fuses into the pool.
// - The backward pass of each convolution is two cuDNN calls (the input's gradient, the kernel's gradient
//   in OHWI, copied back to HWIO) after the relu mask; average pooling's gradient (pad and reduce_window)
//   fuses with the mask of the convolution before it.
// Approximated: cuDNN's scratch buffers are left out - their size is whatever algorithm autotuning picks on
// the device, and no convolution program was measured to size them.
#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

#include "zoo_step.h"

namespace memfit::zoo {

void build_flax_cnn(const Ctx& c, Step& step, HloModule& module) {
  const ModelSpec& s = c.s;
  Emitter& e = c.e;
  const PrimitiveType f32 = PrimitiveType::kF32;
  const size_t convs = 2 * s.widths.size();
  // flax.linen names: params['Conv_3']['kernel'], params['Dense_0']['bias']; jax flattens a dict in sorted
  // key order (so 'Conv_10' comes before 'Conv_2').
  struct Named {
    std::string name;
    std::vector<uint64_t> dims;
    size_t conv;  // which convolution, or `convs` for the head
    bool kernel;
  };
  std::vector<Named> named;
  uint64_t in_channels = s.channels;
  for (size_t k = 0; k < convs; ++k) {
    const uint64_t out_channels = s.widths[k / 2];
    const std::string prefix = fmt::format("['Conv_{}']", k);
    named.push_back({prefix + "['bias']", {out_channels}, k, false});
    named.push_back({prefix + "['kernel']", {3, 3, in_channels, out_channels}, k, true});
    in_channels = out_channels;
  }
  named.push_back({"['Dense_0']['bias']", {s.classes}, convs, false});
  named.push_back({"['Dense_0']['kernel']", {in_channels, s.classes}, convs, true});
  std::sort(named.begin(), named.end(), [](const Named& a, const Named& b) { return a.name < b.name; });
  std::vector<size_t> kernel_of(convs + 1), bias_of(convs + 1);
  for (size_t i = 0; i < named.size(); ++i) {
    step.add_param(named[i].name, named[i].dims);
    (named[i].kernel ? kernel_of : bias_of)[named[i].conv] = i;
  }
  step.declare_arguments();
  auto& P = step.params();
  const uint64_t B = s.batch / c.data;
  const T image = e.param(array(f32, {B, s.image, s.image, s.channels}), "batch[0]", "activations");
  step.count_batch(image);
  T labels;
  if (step.train()) {
    labels = e.param(array(PrimitiveType::kS32, {B}), "batch[1]", "activations");
    step.count_batch(labels);
  }

  // Forward: what each convolution reads and writes (`out`: z in training, relu(z) in inference), kept for
  // the backward pass.
  struct Conv {
    T in, kernel_ohwi, out;
    uint64_t side, in_channels, out_channels;
  };
  const bool train = step.train();
  std::vector<Conv> kept(convs);
  const std::string fwd = "jit(step)/jvp(Conv)";
  T a = image;
  uint64_t side = s.image;
  in_channels = s.channels;
  for (size_t k = 0; k < convs; ++k) {
    const uint64_t out_channels = s.widths[k / 2];
    Conv& cv = kept[k];
    cv.in = a;
    cv.side = side;
    cv.in_channels = in_channels;
    cv.out_channels = out_channels;
    cv.kernel_ohwi = e.loop({step.use(P[kernel_of[k]], fwd)}, array(f32, {out_channels, 3, 3, in_channels}),
                            fwd + "/conv_general_dilated/copy", "temporaries");
    const Shape out_shape = array(f32, {B, side, side, out_channels});
    cv.out = e.op("convolution", {a, cv.kernel_ohwi, P[bias_of[k]].value}, out_shape,
                  fwd + (train ? "/conv_general_dilated" : "/conv_general_dilated+relu"), "activations");
    a = cv.out;
    in_channels = out_channels;
    if (k % 2 == 1) {  // the block's average pool (VALID, stride 2), the relu fused into it in training
      side /= 2;
      a = e.reduce({a}, array(f32, {B, side, side, out_channels}), "jit(step)/jvp()/avg_pool/reduce_window",
                   "activations");
    } else if (train) {
      a = e.loop({a}, out_shape, "jit(step)/jvp()/relu/max", "activations");
    }
  }
  const T pooled = e.reduce({a}, array(f32, {B, in_channels}), "jit(step)/jvp()/mean", "activations");
  Param& head = P[kernel_of[convs]];
  const T logits = e.dot({pooled, step.gemm_operand(head, "jit(step)/head"), P[bias_of[convs]].value},
                         array(f32, {B, s.classes}), "jit(step)/jvp(Dense)/dot_general", "activations");
  if (!train) {
    e.root_array(logits);
    return;
  }
  const T loss = e.reduce({logits, labels}, array(f32, {}), "jit(step)/reduce_sum", "temporaries");
  const T dlogits = e.loop({logits, labels}, logits.shape, "jit(step)/transpose(jvp())/softmax_cross_entropy",
                           "temporaries");
  const std::string bwd = "jit(step)/transpose(jvp())";
  step.set_grad(
      head, e.dot({pooled, dlogits}, step.grad_shape(head), bwd + "/Dense/dot_general", "gradients"), bwd);
  step.set_grad(
      P[bias_of[convs]],
      e.reduce({dlogits}, step.grad_shape(P[bias_of[convs]]), bwd + "/Dense/reduce_sum", "gradients"), bwd);
  const T dpooled =
      e.dot({dlogits, step.gemm_operand(head, bwd)}, pooled.shape, bwd + "/Dense/dot_general", "temporaries");
  // The mean's gradient, broadcast over the last pool's output.
  T d = e.loop({dpooled}, a.shape, bwd + "/mean/broadcast_in_dim", "temporaries");
  for (size_t k = convs; k-- > 0;) {
    const Conv& cv = kept[k];
    const Shape out_shape = cv.out.shape;
    // Through relu (and, after a pool, the pool's gradient fused with it): select(z > 0, d, 0).
    const T dpre = e.loop({d, cv.out}, out_shape,
                          bwd + (k % 2 == 1 ? "/avg_pool/reduce_window+relu/select_n" : "/relu/select_n"),
                          "temporaries");
    Param& kernel = P[kernel_of[k]];
    const T dkernel_ohwi =
        e.op("convolution", {cv.in, dpre}, array(f32, {cv.out_channels, 3, 3, cv.in_channels}),
             bwd + "/conv_general_dilated", "gradients");
    step.set_grad(
        kernel,
        e.loop({dkernel_ohwi}, step.grad_shape(kernel), bwd + "/conv_general_dilated/copy", "gradients"),
        bwd);
    step.set_grad(P[bias_of[k]],
                  e.reduce({dpre}, step.grad_shape(P[bias_of[k]]), bwd + "/Conv/reduce_sum", "gradients"),
                  bwd);
    if (k > 0)
      d = e.op("convolution", {dpre, cv.kernel_ohwi}, cv.in.shape, bwd + "/conv_general_dilated",
               "temporaries");
  }
  step.optimize_and_finish({loss}, &module);
}

}  // namespace memfit::zoo
