// memfit/program/model_spec.h - what a step of a model people train is: the keys of the `config` objects
// in ../shared/data/xla/programs.json (reference_programs.py), read once into typed fields.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "memfit/core/json_fwd.h"
#include "memfit/core/status.h"

namespace memfit {

// flax_encoder: reference_programs.py's flax.linen encoder - token embedding, pre-norm blocks with
// bidirectional nn.MultiHeadDotProductAttention (q, k, v and out projections with biases), a final norm and
// an untied dense head; trained with optax.adafactor unless the config names another optimizer.
// flax_cnn: its conv net - per width two 3x3 convolutions with relu and a 2x2 average pool, a dense head;
// trained with optax.adamw unless the config names another optimizer.
enum class ModelFamily : uint8_t { kGpt, kMlp, kVit, kFlaxEncoder, kFlaxCnn };
enum class Precision : uint8_t { kFp32, kMixed, kBf16 };  // mixed: fp32 parameters, bf16 compute
// jax.checkpoint policies: nothing_saveable, dots_saveable, dots_with_no_batch_dims_saveable, and
// offload_dot_with_no_batch_dims("device", "pinned_host"): the same dots kept, in host memory.
enum class RematPolicy : uint8_t { kNone, kFull, kDots, kDotsNoBatch, kOffloadDotsNoBatch };
// adam and adamw (optax.adamw: adam's moments plus decoupled weight decay, no state of its own) keep two
// fp32 moments per parameter; sgd none; adafactor (optax.adafactor) a row and a column statistic per matrix
// and a full second moment for the rest (program/adafactor.h).
enum class OptimizerKind : uint8_t { kAdam, kSgd, kAdamW, kAdafactor };
// decode: one new token per sequence against a KV cache of `seq` positions per layer, donated and written in
// place (reference_programs.py's step="decode", GPT only): what an LLM server holds per batch of requests.
enum class StepKind : uint8_t { kTrain, kInfer, kVmapGrads, kDecode };
enum class ShardingKind : uint8_t { kReplicated, kFsdp, kTp };
enum class Backend : uint8_t { kGpu, kCpu };  // XLA:CPU keeps more unfused tensors
// jax.nn.dot_product_attention's implementation: XLA's (scores and probabilities materialized) or cuDNN's
// fused kernel (custom calls __cudnn$fmhaSoftmax / __cudnn$fmhaSoftmaxBackward: no [S,S] tensor at all).
enum class AttentionKind : uint8_t { kXla, kCudnn };

// The names the JSON and the command line use ("gpt", "mixed", "dots_no_batch", ...).
std::string_view to_string(ModelFamily v);
std::string_view to_string(Precision v);
std::string_view to_string(RematPolicy v);
std::string_view to_string(OptimizerKind v);
std::string_view to_string(StepKind v);
std::string_view to_string(ShardingKind v);
std::string_view to_string(Backend v);
std::string_view to_string(AttentionKind v);

// The keys of programs.json's `config`; absent = its default.
struct ModelSpec {
  ModelFamily model = ModelFamily::kGpt;
  // gpt, flax_encoder (and vit's encoder)
  uint64_t vocab = 32000, d_model = 1024, heads = 16, layers = 8, seq = 1024, batch = 8;
  // step decode: the key/value heads of grouped-query attention (Llama's n_kv_heads), each shared by
  // heads / kv_heads query heads; 0 = heads (multi-head attention).
  uint64_t kv_heads = 0;
  // The hidden width of each block's MLP (Llama's intermediate_size); 0 = 4 x d_model, as GPT-2, ViT and
  // BERT have it. A gated MLP (SwiGLU: three matrices) is not built: 1.5 x its width gives its weights.
  uint64_t d_ff = 0;
  // mlp
  uint64_t din = 1024, width = 4096, depth = 8, dout = 1024;
  // vit and flax_cnn: image side, patch side, channels, classes
  uint64_t image = 224, patch = 16, channels = 3, classes = 1000;
  // flax_cnn: each block's width (two 3x3 convolutions and a 2x2 average pool), as reference_programs.py
  std::vector<uint64_t> widths = {64, 128, 256, 512};
  Precision precision = Precision::kFp32;
  RematPolicy remat = RematPolicy::kNone;
  std::vector<uint64_t> remat_layers;  // per-layer policy: only these layers use `remat` (empty = all)
  OptimizerKind optimizer = OptimizerKind::kAdam;
  StepKind step = StepKind::kTrain;
  bool donate = false;
  bool scan = false;
  uint64_t accum = 1;
  ShardingKind sharding = ShardingKind::kReplicated;
  std::vector<uint64_t> mesh;          // device mesh sizes, e.g. {8} or {2, 4}
  std::vector<std::string> mesh_axes;  // their names, e.g. {"data"} or {"data", "model"}
  Backend backend = Backend::kGpu;
  AttentionKind attn = AttentionKind::kXla;  // gpt and vit

  uint64_t devices() const;
  uint64_t axis_size(const std::string& name) const;  // 1 when the mesh has no such axis
  // The repeated blocks of the model: an MLP's hidden layers (`depth`), a transformer's `layers`; and the
  // key that names them.
  uint64_t blocks() const { return model == ModelFamily::kMlp ? depth : layers; }
  // A transformer block's MLP width: d_ff, or 4 x d_model when none is given.
  uint64_t ffn_width() const { return d_ff != 0 ? d_ff : 4 * d_model; }
  uint64_t& blocks() { return model == ModelFamily::kMlp ? depth : layers; }
  const char* blocks_key() const { return model == ModelFamily::kMlp ? "depth" : "layers"; }
};

// Budgets on the program a spec asks for: an unrolled program holds every layer (the largest built whole,
// 512 layers, plans in a few seconds; a deeper step is planned at smaller depths and extrapolated, see
// plan/step_plan.h); a scanned one holds one layer in a loop, whatever the count (its stacks grow).
inline constexpr uint64_t kMaxUnrolledLayers = 512;
inline constexpr uint64_t kMaxScannedLayers = 1000000;
inline constexpr uint64_t kMaxExtrapolatedLayers = 100000;

// Whether build_step_module builds the spec's program: not an unrolled stack (no scan) deeper than
// kMaxUnrolledLayers. A flax_cnn's blocks are its widths, always built.
inline bool builds_whole(const ModelSpec& spec) {
  return spec.scan || spec.model == ModelFamily::kFlaxCnn || spec.blocks() <= kMaxUnrolledLayers;
}

// From a programs.json `config` object (or a spec file); unknown values and nonsense sizes are errors
// naming the key (heads must divide d_model, batch must split into accum microbatches and the data axis...).
// JAX's own policy names are read as memfit's (nothing_saveable is full).
Expected<ModelSpec> model_spec_from_json(const Json& config);
Status validate_model_spec(const ModelSpec& spec);
Json model_spec_to_json(const ModelSpec& spec);

}  // namespace memfit
