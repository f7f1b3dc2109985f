// The flax conv net written as JAX lowers its step (reference_programs.py's flax_cnn; the captured
// flax_cnn_adamw_b32.lowered.hlo.txt is what this follows, op for op where memory is concerned): per width
// two flax.linen Conv 3x3 (SAME padding, a bias), each followed by relu, a 2x2 average pool, then the mean
// over the image and a dense head; softmax cross-entropy; optax.adamw. The backward pass as JAX's
// transpose rules write it - relu's derivative a select on the compare the forward pass made, each
// convolution's input gradient a convolution by the flipped kernel and its kernel gradient a convolution
// of its input by the output's gradient, the pool's transpose a reduce-window over the padded gradient -
// planned through the model of XLA:GPU like any user's lowered program (what XLA fuses around the cuDNN
// calls is the model's to say, not this file's). In mixed precision (flax's dtype=jnp.bfloat16 on every
// module, not a reference program) each module casts its input and parameters to bf16 and computes in bf16;
// the mean sums in f32, as jnp.mean does a bf16 array; each parameter's gradient is cast back to fp32.
#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

#include "memfit/program/model_zoo.h"
#include "zoo_lowered.h"

namespace memfit::zoo {
namespace {

using V = LoweredEmitter::V;

class CnnStep {
 public:
  CnnStep(const ModelSpec& s, HloModule& m) : s_(s), e_(m) {
    convs_ = 2 * s.widths.size();
    train_ = s.step != StepKind::kInfer;
    batch_ = s.batch;
    compute_ = s.precision == Precision::kFp32 ? kF32 : PrimitiveType::kBF16;
  }

  void build(StepArguments& args) {
    declare(args);
    const V logits = s_.accum == 1 ? forward() : V{};
    if (!train_) {
      e_.root_array(logits);  // (inference takes no accumulation: model_spec refuses it)
      e_.finish();
      return;
    }
    std::vector<V> grads(params_.size());
    V loss;
    if (s_.accum == 1) {
      V dlogits;
      loss = write_cross_entropy(e_, logits, labels_, dlogits);
      backward(dlogits, grads);
    } else {
      // Gradient accumulation as the zoo's other families write it (accumulate_gradients): the body runs the
      // forward and backward passes on its microbatch's images and labels, reading the parameters as the
      // loop carries them.
      const V whole_image = image_, whole_labels = labels_;
      const std::vector<V> whole_params = params_;
      loss = accumulate_gradients(
          e_, s_.accum, params_, {image_, labels_},
          [&](const std::vector<V>& rows, const std::vector<V>& carried, std::vector<V>& g) {
            image_ = rows[0];
            labels_ = rows[1];
            params_ = carried;
            batch_ = s_.batch / s_.accum;
            V dlogits;
            const V micro_loss = write_cross_entropy(e_, forward(), labels_, dlogits);
            backward(dlogits, g);
            return micro_loss;
          },
          grads);
      image_ = whole_image;
      labels_ = whole_labels;
      params_ = whole_params;
      batch_ = s_.batch;
    }
    write_update(e_, s_, params_, grads, keeps_optimizer_state(s_) ? &state_ : nullptr, {loss});
    e_.finish();
  }

 private:
  // What each convolution reads and writes, kept for the backward pass.
  struct Conv {
    V in, kernel, z, mask, out;  // out: relu(z); kernel: the parameter as the convolution reads it
    uint64_t side = 0, in_channels = 0, out_channels = 0;
  };

  // flax.linen's names ('Conv_3' 'kernel', 'Dense_0' 'bias'), flattened by jax in sorted key order (so
  // 'Conv_10' before 'Conv_2', 'bias' before 'kernel'); then optax.adamw's state; then the batch.
  void declare(StepArguments& args) {
    struct Named {
      std::string name;
      std::vector<uint64_t> dims;
      size_t layer;  // which convolution, or convs_ for the head
      bool kernel;
    };
    std::vector<Named> named;
    uint64_t in = s_.channels;
    for (size_t k = 0; k < convs_; ++k) {
      const uint64_t out = s_.widths[k / 2];
      named.push_back({fmt::format("params['Conv_{}']['bias']", k), {out}, k, false});
      named.push_back({fmt::format("params['Conv_{}']['kernel']", k), {3, 3, in, out}, k, true});
      in = out;
    }
    named.push_back({"params['Dense_0']['bias']", {s_.classes}, convs_, false});
    named.push_back({"params['Dense_0']['kernel']", {in, s_.classes}, convs_, true});
    std::sort(named.begin(), named.end(), [](const Named& a, const Named& b) { return a.name < b.name; });
    kernel_of_.assign(convs_ + 1, 0);
    bias_of_.assign(convs_ + 1, 0);
    std::vector<std::string> names;
    for (size_t i = 0; i < named.size(); ++i) {
      params_.push_back(model_parameter(e_, LoweredEmitter::array(kF32, named[i].dims), named[i].name, args));
      names.push_back(named[i].name);
      (named[i].kernel ? kernel_of_ : bias_of_)[named[i].layer] = i;
    }
    if (train_ && keeps_optimizer_state(s_)) state_ = declare_optimizer_state(e_, s_, params_, names, args);
    image_ = e_.parameter(LoweredEmitter::array(kF32, {s_.batch, s_.image, s_.image, s_.channels}),
                          "batch[0]", "activations");
    args.batch_bytes += image_.shape.own_bytes();
    if (train_) {  // inference never reads the labels: jax.jit drops them from the program
      labels_ =
          e_.parameter(LoweredEmitter::array(PrimitiveType::kS32, {s_.batch}), "batch[1]", "activations");
      args.batch_bytes += labels_.shape.own_bytes();
    }
  }

  // A scalar constant broadcast like `like` (0 for relu and its mask, 4 for a pool, the pixel count for the
  // mean): the emitter writes constants by shape, not value.
  V splat(const V& like) { return e_.splat(like.shape.type, like.shape.dims); }

  // flax's promote_dtype: with dtype=jnp.bfloat16 (mixed precision) a module casts its input, kernel and
  // bias to bf16 before computing; its parameters stay fp32 (param_dtype). A value of that type is as it is.
  V computed(const V& x) { return e_.astype(x, compute_); }
  // The transpose of that cast: a parameter's gradient comes back to fp32.
  V as_parameter(const V& g) { return e_.astype(g, kF32); }

  V forward() {
    e_.set_category("activations");
    e_.set_op_name("jit(step)/jvp(CNN)");
    V a = computed(image_);
    uint64_t side = s_.image, in = s_.channels;
    convs_kept_.assign(convs_, Conv{});
    for (size_t k = 0; k < convs_; ++k) {
      Conv& c = convs_kept_[k];
      c.in = a;
      c.side = side;
      c.in_channels = in;
      c.out_channels = s_.widths[k / 2];
      const std::vector<uint64_t> dims = {batch_, side, side, c.out_channels};
      c.kernel = computed(params_[kernel_of_[k]]);
      const V conv = e_.convolution(a, c.kernel, dims);
      c.z = e_.binary("add", conv, write_vector_broadcast(e_, computed(params_[bias_of_[k]]), dims));
      // jax.nn.relu: its derivative's compare is made in the forward pass (the jvp), read by the backward.
      if (train_) c.mask = e_.compare(c.z, splat(c.z));
      c.out = e_.binary("maximum", c.z, splat(c.z));
      a = c.out;
      in = c.out_channels;
      if (k % 2 == 1) {  // nn.avg_pool(x, (2, 2), strides=(2, 2)): a window sum, divided by 4
        side /= 2;
        const V sum = e_.reduce_window_sum(a, {batch_, side, side, in});
        a = e_.binary("divide", sum, splat(sum));
      }
    }
    pool_side_ = side;
    // x.mean(axis=(1, 2)) - jnp.mean sums a bf16 array in f32 and casts the mean back - then the dense head.
    const V mean =
        e_.binary("divide", e_.reduce_sum(e_.astype(a, kF32), {1, 2}), e_.splat(kF32, {batch_, in}));
    pooled_ = computed(mean);
    const std::vector<uint64_t> logit_dims = {batch_, s_.classes};
    e_.set_op_name("jit(step)/jvp(CNN)/Dense_0");
    head_kernel_ = computed(params_[kernel_of_[convs_]]);
    const V product = e_.dot(pooled_, head_kernel_, logit_dims, compute_);
    const V logits = e_.binary("add", product,
                               write_vector_broadcast(e_, computed(params_[bias_of_[convs_]]), logit_dims));
    // The loss is written in f32 (approximated: optax takes flax's bf16 logits as they are; [batch, classes]
    // holds no memory that matters beside the convolutions').
    return e_.astype(logits, kF32);
  }

  // The transpose of a 2x2 average pool of stride 2: the cotangent divided by 4, padded (a zero between
  // and around its entries) and summed over 2x2 windows of stride 1, shaped as the pool's input.
  V pool_transpose(const V& d) {
    const std::vector<uint64_t>& dims = d.shape.dims;
    const V quarter = e_.binary("divide", d, splat(d));
    const V padded = e_.pad(quarter, {dims[0], 2 * dims[1] + 1, 2 * dims[2] + 1, dims[3]});
    return e_.reduce_window_sum(padded, {dims[0], 2 * dims[1], 2 * dims[2], dims[3]});
  }

  void backward(const V& dlogits, std::vector<V>& grads) {
    e_.set_category("gradients");
    e_.set_op_name("jit(step)/transpose(jvp(CNN))/Dense_0");
    const Conv& last = convs_kept_.back();
    const V dy = computed(dlogits);
    grads[kernel_of_[convs_]] =
        as_parameter(e_.transpose(e_.dot(dy, pooled_, {s_.classes, last.out_channels}, compute_), {1, 0}));
    grads[bias_of_[convs_]] = as_parameter(e_.reduce_sum(dy, {0}));
    e_.set_category("temporaries");
    const V dpooled = e_.dot(dy, head_kernel_, {batch_, last.out_channels}, compute_);
    // The mean's transpose: divided by the pixel count (in f32, as the mean was taken) and broadcast over the
    // last pool's output.
    e_.set_op_name("jit(step)/transpose(jvp(CNN))");
    const V dmean32 = e_.astype(dpooled, kF32);
    const V dmean = computed(e_.binary("divide", dmean32, splat(dmean32)));
    V d = e_.broadcast(dmean, {batch_, pool_side_, pool_side_, last.out_channels}, {0, 3});
    for (size_t k = convs_; k-- > 0;) {
      const Conv& c = convs_kept_[k];
      e_.set_category("temporaries");
      e_.set_op_name(fmt::format("jit(step)/transpose(jvp(CNN))/Conv_{}", k));
      const V upstream = k % 2 == 1 ? pool_transpose(d) : d;
      const V dz = e_.select(c.mask, upstream, splat(upstream));
      e_.set_category("gradients");
      grads[kernel_of_[k]] = as_parameter(e_.convolution(c.in, dz, {3, 3, c.in_channels, c.out_channels}));
      grads[bias_of_[k]] = as_parameter(e_.reduce_sum(dz, {0, 1, 2}));
      if (k == 0) break;  // the image is not differentiated
      e_.set_category("temporaries");
      const V flipped = e_.unary("reverse", c.kernel);
      d = e_.convolution(dz, flipped, {batch_, c.side, c.side, c.in_channels});
    }
  }

  static constexpr PrimitiveType kF32 = PrimitiveType::kF32;
  const ModelSpec& s_;
  LoweredEmitter e_;
  size_t convs_ = 0;
  bool train_ = true;
  uint64_t batch_ = 0;            // the images forward() and backward() see: the batch, or one microbatch
  PrimitiveType compute_ = kF32;  // the modules' dtype: bf16 in mixed precision
  V head_kernel_;                 // the dense head's kernel as its dot reads it
  std::vector<V> params_;         // jax's order
  std::vector<size_t> kernel_of_, bias_of_;
  OptimizerState state_;
  V image_, labels_, pooled_;
  uint64_t pool_side_ = 0;
  std::vector<Conv> convs_kept_;
};

}  // namespace

bool flax_cnn_lowers(const ModelSpec& s) {
  return s.model == ModelFamily::kFlaxCnn && s.backend == Backend::kGpu && s.devices() == 1 &&
         s.sharding == ShardingKind::kReplicated;
}

void build_flax_cnn_lowered(const ModelSpec& s, HloModule& module, StepArguments& args) {
  CnnStep(s, module).build(args);
}

}  // namespace memfit::zoo
