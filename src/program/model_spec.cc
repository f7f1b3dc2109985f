#include "memfit/program/model_spec.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <limits>
#include <set>
#include <string_view>
#include <utility>
#include <vector>

#include "memfit/core/checked.h"
#include "memfit/core/json.h"
#include "memfit/core/text.h"

namespace memfit {
namespace {

// Each enum's names, in the enum's order.
constexpr std::array<std::pair<ModelFamily, std::string_view>, 5> kModelFamilyNames = {{
    {ModelFamily::kGpt, "gpt"},
    {ModelFamily::kMlp, "mlp"},
    {ModelFamily::kVit, "vit"},
    {ModelFamily::kFlaxEncoder, "flax_encoder"},
    {ModelFamily::kFlaxCnn, "flax_cnn"},
}};
constexpr std::array<std::pair<Precision, std::string_view>, 3> kPrecisionNames = {{
    {Precision::kFp32, "fp32"},
    {Precision::kMixed, "mixed"},
    {Precision::kBf16, "bf16"},
}};
constexpr std::array<std::pair<RematPolicy, std::string_view>, 5> kRematPolicyNames = {{
    {RematPolicy::kNone, "none"},
    {RematPolicy::kFull, "full"},
    {RematPolicy::kDots, "dots"},
    {RematPolicy::kDotsNoBatch, "dots_no_batch"},
    {RematPolicy::kOffloadDotsNoBatch, "offload_dots_no_batch"},
}};
constexpr std::array<std::pair<OptimizerKind, std::string_view>, 4> kOptimizerKindNames = {{
    {OptimizerKind::kAdam, "adam"},
    {OptimizerKind::kSgd, "sgd"},
    {OptimizerKind::kAdamW, "adamw"},
    {OptimizerKind::kAdafactor, "adafactor"},
}};
constexpr std::array<std::pair<StepKind, std::string_view>, 4> kStepKindNames = {{
    {StepKind::kTrain, "train"},
    {StepKind::kInfer, "infer"},
    {StepKind::kVmapGrads, "vmap_grads"},
    {StepKind::kDecode, "decode"},
}};
constexpr std::array<std::pair<ShardingKind, std::string_view>, 3> kShardingKindNames = {{
    {ShardingKind::kReplicated, "replicated"},
    {ShardingKind::kFsdp, "fsdp"},
    {ShardingKind::kTp, "tp"},
}};
constexpr std::array<std::pair<Backend, std::string_view>, 2> kBackendNames = {{
    {Backend::kGpu, "gpu"},
    {Backend::kCpu, "cpu"},
}};
constexpr std::array<std::pair<AttentionKind, std::string_view>, 2> kAttentionKindNames = {{
    {AttentionKind::kXla, "xla"},
    {AttentionKind::kCudnn, "cudnn"},
}};

template <typename E, size_t N>
std::string_view name_of(const std::array<std::pair<E, std::string_view>, N>& names, E v) {
  for (const auto& [e, n] : names)
    if (e == v) return n;
  return "?";
}

// `key`'s value as one of `names` (`extra`: more accepted spellings); the error lists the choices.
template <typename E, size_t N>
Status read_enum(const Json& config, const char* key,
                 const std::array<std::pair<E, std::string_view>, N>& names, E& out,
                 std::initializer_list<std::pair<std::string_view, E>> extra = {}) {
  if (!config.contains(key)) return Status();
  if (!config[key].is_string()) return invalid_argument(fmt::format("{}: expected a string", key));
  const std::string value = config[key].get<std::string>();
  for (const auto& [e, n] : names) {
    if (n == value) {
      out = e;
      return Status();
    }
  }
  for (const auto& [n, e] : extra) {
    if (n == value) {
      out = e;
      return Status();
    }
  }
  std::string list;
  for (const auto& [e, n] : names) list += (list.empty() ? "" : ", ") + std::string(n);
  for (const auto& [n, e] : extra) list += ", " + std::string(n);
  return invalid_argument(fmt::format("{}: {} is not one of {}", key, excerpt(value), list));
}

Expected<uint64_t> positive(const Json& config, const char* key, uint64_t fallback) {
  if (!config.contains(key)) return fallback;
  const Json& v = config[key];
  if (!v.is_number_integer() || v.get<int64_t>() <= 0)
    return invalid_argument(
        fmt::format("{}: expected a positive integer, got {}", key, excerpt(json_text(v))));
  return v.get<uint64_t>();
}

// A list of whole numbers of at least `least` each (`what` names them in the error); absent: `fallback`.
Expected<std::vector<uint64_t>> whole_numbers(const Json& config, const char* key, int64_t least,
                                              const char* what, std::vector<uint64_t> fallback = {}) {
  if (!config.contains(key)) return fallback;
  if (!config[key].is_array()) return invalid_argument(fmt::format("{}: expected a list of {}", key, what));
  std::vector<uint64_t> out;
  for (const Json& v : config[key]) {
    if (!v.is_number_integer() || v.get<int64_t>() < least)
      return invalid_argument(fmt::format("{}: expected {}, got {}", key, what, excerpt(json_text(v))));
    out.push_back(v.get<uint64_t>());
  }
  return out;
}

}  // namespace

std::string_view to_string(ModelFamily v) { return name_of(kModelFamilyNames, v); }
std::string_view to_string(Precision v) { return name_of(kPrecisionNames, v); }
std::string_view to_string(RematPolicy v) { return name_of(kRematPolicyNames, v); }
std::string_view to_string(OptimizerKind v) { return name_of(kOptimizerKindNames, v); }
std::string_view to_string(StepKind v) { return name_of(kStepKindNames, v); }
std::string_view to_string(ShardingKind v) { return name_of(kShardingKindNames, v); }
std::string_view to_string(Backend v) { return name_of(kBackendNames, v); }
std::string_view to_string(AttentionKind v) { return name_of(kAttentionKindNames, v); }

uint64_t ModelSpec::devices() const {
  uint64_t n = 1;
  for (uint64_t m : mesh) n *= m;
  return n;
}

uint64_t ModelSpec::axis_size(const std::string& name) const {
  for (size_t i = 0; i < mesh_axes.size() && i < mesh.size(); ++i)
    if (mesh_axes[i] == name) return mesh[i];
  return 1;
}

namespace {

// The shape keys a family is built from; the others (batch, precision, remat, ...) apply to every family or
// are refused with their own reason in validate_model_spec (d_ff, kv_heads, attn).
struct FamilyKeys {
  ModelFamily model;
  std::vector<std::string_view> keys;
};
const std::vector<FamilyKeys>& family_shape_keys() {
  static const std::vector<FamilyKeys> kKeys = {
      {ModelFamily::kGpt, {"vocab", "d_model", "heads", "layers", "seq"}},
      {ModelFamily::kFlaxEncoder, {"vocab", "d_model", "heads", "layers", "seq"}},
      {ModelFamily::kVit, {"d_model", "heads", "layers", "image", "patch", "channels", "classes"}},
      {ModelFamily::kMlp, {"din", "width", "depth", "dout"}},
      {ModelFamily::kFlaxCnn, {"image", "channels", "classes", "widths"}},
  };
  return kKeys;
}

const std::vector<std::string_view>& shape_keys_of(ModelFamily model) {
  for (const FamilyKeys& f : family_shape_keys())
    if (f.model == model) return f.keys;
  static const std::vector<std::string_view> kNone;
  return kNone;
}

// A shape key's value in the spec: what model_spec_to_json writes under it.
Json shape_value(const ModelSpec& s, std::string_view key) {
  if (key == "widths") return s.widths;
  const std::pair<std::string_view, uint64_t> values[] = {
      {"vocab", s.vocab},     {"d_model", s.d_model}, {"heads", s.heads}, {"layers", s.layers},
      {"seq", s.seq},         {"image", s.image},     {"patch", s.patch}, {"channels", s.channels},
      {"classes", s.classes}, {"din", s.din},         {"width", s.width}, {"depth", s.depth},
      {"dout", s.dout}};
  for (const auto& [name, value] : values)
    if (name == key) return value;
  return nullptr;
}

// A shape key of another family is refused, not ignored: `--seq 4096` on a ViT planned the ViT unchanged.
Status check_shape_keys(const Json& config, ModelFamily model) {
  const std::vector<std::string_view>& own = shape_keys_of(model);
  for (const FamilyKeys& f : family_shape_keys()) {
    for (std::string_view key : f.keys) {
      if (!config.contains(std::string(key)) || std::find(own.begin(), own.end(), key) != own.end()) continue;
      return invalid_argument(fmt::format("{}: the {} has no {} (it is shaped by {})", key, to_string(model),
                                          key, fmt::join(own, ", ")));
    }
  }
  return Status();
}

}  // namespace

Expected<ModelSpec> model_spec_from_json(const Json& config) {
  if (!config.is_object()) return invalid_argument("a model spec is a JSON object of config keys");
  static const std::set<std::string> kKeys = {
      "model",        "vocab",     "d_model",  "heads",        "layers",    "seq",     "batch",
      "din",          "width",     "depth",    "dout",         "image",     "patch",   "channels",
      "classes",      "precision", "remat",    "remat_layers", "optimizer", "step",    "donate",
      "scan",         "accum",     "sharding", "mesh",         "mesh_axes", "backend", "name",
      "compile_only", "cpu8",      "attn",     "widths",       "kv_heads",  "d_ff"};
  for (const auto& [key, value] : config.items())
    if (!kKeys.contains(key))
      return invalid_argument(fmt::format("unknown key {} in the model spec", excerpt(key)));
  ModelSpec s;
  auto flag = [&](const char* key, bool& out) -> Status {
    if (!config.contains(key)) return Status();
    if (!config[key].is_boolean()) return invalid_argument(fmt::format("{}: expected true or false", key));
    out = config[key].get<bool>();
    return Status();
  };
  MEMFIT_RETURN_IF_ERROR(read_enum(config, "model", kModelFamilyNames, s.model));
  MEMFIT_RETURN_IF_ERROR(check_shape_keys(config, s.model));
  MEMFIT_ASSIGN_OR_RETURN(s.vocab, positive(config, "vocab", s.vocab));
  MEMFIT_ASSIGN_OR_RETURN(s.d_model, positive(config, "d_model", s.d_model));
  MEMFIT_ASSIGN_OR_RETURN(s.heads, positive(config, "heads", s.heads));
  MEMFIT_ASSIGN_OR_RETURN(s.kv_heads, positive(config, "kv_heads", 0));
  MEMFIT_ASSIGN_OR_RETURN(s.d_ff, positive(config, "d_ff", 0));
  MEMFIT_ASSIGN_OR_RETURN(s.layers, positive(config, "layers", s.layers));
  MEMFIT_ASSIGN_OR_RETURN(s.seq, positive(config, "seq", s.seq));
  // The reference programs' batch: 8 sequences for the GPT, 2048 rows for the MLP, 64 images for the ViT.
  const bool images = s.model == ModelFamily::kVit || s.model == ModelFamily::kFlaxCnn;
  s.batch = s.model == ModelFamily::kMlp ? 2048 : images ? 64 : 8;
  MEMFIT_ASSIGN_OR_RETURN(s.batch, positive(config, "batch", s.batch));
  MEMFIT_ASSIGN_OR_RETURN(s.din, positive(config, "din", s.din));
  MEMFIT_ASSIGN_OR_RETURN(s.width, positive(config, "width", s.width));
  MEMFIT_ASSIGN_OR_RETURN(s.depth, positive(config, "depth", s.depth));
  MEMFIT_ASSIGN_OR_RETURN(s.dout, positive(config, "dout", s.dout));
  MEMFIT_ASSIGN_OR_RETURN(s.image, positive(config, "image", s.image));
  MEMFIT_ASSIGN_OR_RETURN(s.patch, positive(config, "patch", s.patch));
  MEMFIT_ASSIGN_OR_RETURN(s.channels, positive(config, "channels", s.channels));
  MEMFIT_ASSIGN_OR_RETURN(s.classes, positive(config, "classes", s.classes));
  MEMFIT_ASSIGN_OR_RETURN(s.accum, positive(config, "accum", s.accum));
  MEMFIT_RETURN_IF_ERROR(read_enum(config, "precision", kPrecisionNames, s.precision));
  // JAX's own names for the policies are accepted too.
  MEMFIT_RETURN_IF_ERROR(read_enum(config, "remat", kRematPolicyNames, s.remat,
                                   {{"nothing_saveable", RematPolicy::kFull},
                                    {"dots_saveable", RematPolicy::kDots},
                                    {"dots_with_no_batch_dims_saveable", RematPolicy::kDotsNoBatch},
                                    {"offload_dot_with_no_batch_dims", RematPolicy::kOffloadDotsNoBatch},
                                    {"everything_saveable", RematPolicy::kNone}}));
  // reference_programs.py trains its flax encoder with optax.adafactor and its conv net with optax.adamw,
  // parameters and state donated (build_flax's donate_argnums (0, 1)).
  if (s.model == ModelFamily::kFlaxEncoder || s.model == ModelFamily::kFlaxCnn) {
    s.optimizer = s.model == ModelFamily::kFlaxCnn ? OptimizerKind::kAdamW : OptimizerKind::kAdafactor;
    s.donate = true;
  }
  MEMFIT_RETURN_IF_ERROR(read_enum(config, "optimizer", kOptimizerKindNames, s.optimizer));
  MEMFIT_RETURN_IF_ERROR(read_enum(config, "step", kStepKindNames, s.step));
  MEMFIT_RETURN_IF_ERROR(read_enum(config, "sharding", kShardingKindNames, s.sharding));
  MEMFIT_RETURN_IF_ERROR(read_enum(config, "backend", kBackendNames, s.backend));
  MEMFIT_RETURN_IF_ERROR(read_enum(config, "attn", kAttentionKindNames, s.attn));
  MEMFIT_RETURN_IF_ERROR(flag("donate", s.donate));
  MEMFIT_RETURN_IF_ERROR(flag("scan", s.scan));
  bool cpu8 = false;
  MEMFIT_RETURN_IF_ERROR(flag("cpu8", cpu8));
  if (cpu8) s.backend = Backend::kCpu;
  MEMFIT_ASSIGN_OR_RETURN(s.mesh, whole_numbers(config, "mesh", 1, "positive axis sizes"));
  if (config.contains("mesh_axes")) {
    if (!config["mesh_axes"].is_array()) return invalid_argument("mesh_axes: expected a list of names");
    for (const Json& m : config["mesh_axes"]) {
      if (!m.is_string()) return invalid_argument("mesh_axes: expected a list of names");
      s.mesh_axes.push_back(m.get<std::string>());
    }
  }
  MEMFIT_ASSIGN_OR_RETURN(s.widths, whole_numbers(config, "widths", 1, "positive block widths", s.widths));
  if (s.widths.empty()) return invalid_argument("widths: expected a list of block widths");
  MEMFIT_ASSIGN_OR_RETURN(s.remat_layers, whole_numbers(config, "remat_layers", 0, "layer numbers"));
  MEMFIT_RETURN_IF_ERROR(validate_model_spec(s));
  return s;
}

Status validate_model_spec(const ModelSpec& s) {
  if (s.model != ModelFamily::kMlp && s.d_model % s.heads != 0)
    return invalid_argument(fmt::format("heads: {} heads do not divide d_model {}", s.heads, s.d_model));
  if (s.model == ModelFamily::kVit && s.image % s.patch != 0)
    return invalid_argument(fmt::format("patch: {} does not divide the image side {}", s.patch, s.image));
  if (s.model == ModelFamily::kVit) {
    // The writers take the token count ((image / patch)^2 patches and the class token) and a patch's
    // values (patch^2 x channels) as plain products: a spec whose products wrap would plan a wrong model.
    const uint64_t side = s.image / s.patch;
    const auto patches = checked_mul(side, side);
    const auto patch_values = checked_mul(s.patch, s.patch);
    if (!patches || *patches == std::numeric_limits<uint64_t>::max())
      return invalid_argument(fmt::format("image: ({} / {})^2 patches overflow 64 bits", s.image, s.patch));
    if (!patch_values || !checked_mul(*patch_values, s.channels))
      return invalid_argument(
          fmt::format("patch: a {}x{} patch of {} channels overflows 64 bits", s.patch, s.patch, s.channels));
  }
  if (s.batch % s.accum != 0)
    return invalid_argument(
        fmt::format("accum: batch {} does not split into {} microbatches", s.batch, s.accum));
  if (s.accum > 1 && s.step != StepKind::kTrain) return invalid_argument("accum applies to step train only");
  // reference_programs.py scans the transformers' layers; the MLP's are a Python loop.
  if (s.model == ModelFamily::kMlp && s.scan) return invalid_argument("scan: the MLP is built unrolled only");
  // A scan runs one body for every layer: jax.checkpoint inside it applies to all of them.
  if (s.scan && !s.remat_layers.empty())
    return invalid_argument("remat_layers: a scan's layers share one body, and so one remat policy");
  if (s.model == ModelFamily::kFlaxEncoder) {
    // What reference_programs.py builds of it; the rest is not modeled.
    if (s.scan) return invalid_argument("scan: the flax_encoder is built unrolled only");
    if (s.attn == AttentionKind::kCudnn)
      return invalid_argument("attn: the flax_encoder uses flax's attention");
    if (s.sharding == ShardingKind::kTp)
      return invalid_argument("sharding: tp is not built for the flax_encoder");
  }
  if (s.model == ModelFamily::kFlaxCnn) {
    // What reference_programs.py builds of it: fp32 flax layers, one device or data parallel, no remat; and
    // on one GPU gradient accumulation, written as for the other families, and mixed precision as flax's
    // dtype=jnp.bfloat16 computes (the lowered writer's; the fused one, which data parallelism and XLA:CPU
    // take, has neither).
    if (s.precision == Precision::kBf16)
      return invalid_argument(
          "precision: the flax_cnn is built in fp32 or mixed (bf16 compute, fp32 parameters)");
    if (s.precision == Precision::kMixed && (s.devices() > 1 || s.backend != Backend::kGpu))
      return invalid_argument("precision: the flax_cnn computes in bf16 on one GPU only");
    if (s.remat != RematPolicy::kNone) return invalid_argument("remat: the flax_cnn is built without remat");
    if (s.scan) return invalid_argument("scan: the flax_cnn has no repeated layers to scan");
    if (s.accum > 1 && (s.devices() > 1 || s.backend != Backend::kGpu))
      return invalid_argument(
          "accum: the flax_cnn accumulates gradients on one GPU (over several, data "
          "parallel splits the batch instead)");
    if (s.sharding != ShardingKind::kReplicated)
      return invalid_argument("sharding: the flax_cnn is built replicated (data parallel) only");
    if (s.step != StepKind::kTrain && s.step != StepKind::kInfer)
      return invalid_argument("step: the flax_cnn is built for train and infer");
    if (s.widths.size() > 16) return invalid_argument("widths: at most 16 blocks");
    if ((s.image >> s.widths.size()) == 0)
      return invalid_argument(
          fmt::format("image: {} pixels do not survive {} 2x2 pools", s.image, s.widths.size()));
  }
  if (s.d_ff != 0 && (s.model == ModelFamily::kMlp || s.model == ModelFamily::kFlaxCnn))
    return invalid_argument(fmt::format(
        "d_ff: the {} has no transformer blocks (its widths are its own keys)", to_string(s.model)));
  // 4 x d_model, the default, as a product that does not wrap.
  if (s.d_ff == 0 && s.d_model > std::numeric_limits<uint64_t>::max() / 4)
    return invalid_argument(fmt::format("d_model: 4 x {} (the MLP's width) overflows 64 bits", s.d_model));
  if (s.kv_heads != 0 && s.kv_heads != s.heads &&
      (s.step != StepKind::kDecode || s.model != ModelFamily::kGpt))
    return invalid_argument("kv_heads: grouped-query attention is built for the gpt's step decode");
  if (s.step == StepKind::kDecode) {
    // As reference_programs.py builds it: the GPT, unrolled, on one device - or split over a tensor-parallel
    // group (sharding tp, a mesh of the 'model' axis alone), as a server spreads a model too large for one.
    if (s.model != ModelFamily::kGpt) return invalid_argument("step decode is built for the gpt");
    if (s.scan) return invalid_argument("step decode is built without scan");
    const bool tensor_parallel = s.sharding == ShardingKind::kTp && s.devices() == s.axis_size("model");
    if (!tensor_parallel && (s.sharding != ShardingKind::kReplicated || s.devices() > 1))
      return invalid_argument(
          "step decode is built for one device, or tensor parallel (sharding tp over a mesh of 'model' "
          "only)");
    if (s.backend != Backend::kGpu) return invalid_argument("step decode is built for one GPU (backend gpu)");
    if (s.attn == AttentionKind::kCudnn) return invalid_argument("step decode attends with XLA's attention");
    if (s.kv_heads != 0 && s.heads % s.kv_heads != 0)
      return invalid_argument(
          fmt::format("kv_heads: {} key/value heads do not group {} query heads", s.kv_heads, s.heads));
    if (s.kv_heads != 0 && s.kv_heads % s.axis_size("model") != 0)
      return invalid_argument(
          fmt::format("kv_heads: {} key/value heads do not split over the model axis of {}", s.kv_heads,
                      s.axis_size("model")));
  }
  if (s.remat == RematPolicy::kOffloadDotsNoBatch) {
    // As reference_programs.py uses it: a transformer's blocks or an MLP's hidden layers, unrolled, trained
    // on a GPU (host memory spaces are XLA:GPU's; a scan's stacked residuals are not offloaded the same
    // way). An MLP's is written as JAX lowers it, on one GPU.
    if (s.model == ModelFamily::kMlp && (s.devices() != 1 || s.sharding != ShardingKind::kReplicated))
      return invalid_argument("remat offload_dots_no_batch: an MLP's is built on one GPU");
    if (s.scan) return invalid_argument("remat offload_dots_no_batch is built without scan");
    if (s.backend == Backend::kCpu)
      return invalid_argument("remat offload_dots_no_batch needs a GPU (backend gpu)");
  }
  if (s.step == StepKind::kVmapGrads && s.model != ModelFamily::kMlp)
    return invalid_argument("step vmap_grads is built for the mlp");
  if (s.attn == AttentionKind::kCudnn) {
    // cuDNN's fused attention runs in 16-bit floats on a GPU: jax.nn.dot_product_attention(...,
    // implementation='cudnn') refuses float32 inputs and XLA:CPU has no cuDNN.
    if (s.model == ModelFamily::kMlp || s.model == ModelFamily::kFlaxCnn)
      return invalid_argument(fmt::format("attn: the {} has no attention", to_string(s.model)));
    if (s.precision == Precision::kFp32)
      return invalid_argument(
          "attn: cudnn needs bf16 compute (precision mixed or bf16), as cuDNN's kernel does");
    if (s.backend == Backend::kCpu) return invalid_argument("attn: cudnn runs on a GPU only (backend cpu)");
  }
  // adafactor's statistics of a sharded parameter follow its sharding in ways memfit does not model.
  if (s.optimizer == OptimizerKind::kAdafactor && s.sharding != ShardingKind::kReplicated)
    return invalid_argument(fmt::format("optimizer: adafactor is planned without sharding only (sharding {})",
                                        to_string(s.sharding)));
  if (s.mesh.size() != s.mesh_axes.size())
    return invalid_argument(
        fmt::format("mesh has {} axes but mesh_axes names {}", s.mesh.size(), s.mesh_axes.size()));
  if (s.sharding != ShardingKind::kReplicated && s.mesh.empty())
    return invalid_argument(fmt::format("sharding {} needs a mesh", to_string(s.sharding)));
  // An axis of one device splits nothing: say so, rather than that the axis is missing (`--mesh data=1`).
  if (s.sharding == ShardingKind::kTp && s.axis_size("model") == 1)
    return invalid_argument(
        "sharding tp needs a 'model' mesh axis of 2 or more devices (on one device: sharding replicated)");
  if ((s.sharding == ShardingKind::kFsdp) && s.axis_size("data") == 1)
    return invalid_argument(
        "sharding fsdp needs a 'data' mesh axis of 2 or more devices (on one device: sharding replicated)");
  // reference_programs.py's tensor parallelism splits a transformer's wqkv, wo, w1, w2 and embedding by name;
  // an MLP has none of them, so every device would hold all of it - a plan that reads as split and is not.
  if (s.model == ModelFamily::kMlp && s.sharding == ShardingKind::kTp)
    return invalid_argument(
        "sharding: tp is not built for the mlp (tensor parallelism splits a transformer's attention and MLP "
        "weights; an MLP's layers would stay whole on every device): shard it with fsdp");
  const uint64_t data = s.axis_size("data");
  if ((s.batch / s.accum) % data != 0)
    return invalid_argument(fmt::format("batch: {} per microbatch does not split over the data axis of {}",
                                        s.batch / s.accum, data));
  const uint64_t tp = s.axis_size("model");
  if (s.model != ModelFamily::kMlp && s.heads % tp != 0)
    return invalid_argument(
        fmt::format("heads: {} heads do not split over the model axis of {}", s.heads, tp));
  if (s.d_ff % tp != 0)  // a tensor-parallel block splits its MLP's hidden units
    return invalid_argument(
        fmt::format("d_ff: {} hidden units do not split over the model axis of {}", s.d_ff, tp));
  for (uint64_t l : s.remat_layers) {
    if (l >= s.blocks())
      return invalid_argument(
          fmt::format("remat_layers: layer {} does not exist (0..{})", l, s.blocks() - 1));
  }
  if (s.devices() > (1u << 20)) return invalid_argument("mesh: more than 2^20 devices");
  // Budgets, so that a typo (--layers 100000000) is an error in a millisecond, not minutes and gigabytes.
  // Without scan the program holds every layer, as jax.jit unrolls a Python loop; the largest models have
  // ~100-200, and one deeper than kMaxUnrolledLayers is planned at smaller depths and extrapolated.
  const uint64_t blocks = s.blocks();
  if (!s.scan && blocks > kMaxExtrapolatedLayers)
    return invalid_argument(fmt::format("{}: {} is more than memfit plans (at most {})", s.blocks_key(),
                                        blocks, kMaxExtrapolatedLayers));
  if (!builds_whole(s) && !s.remat_layers.empty())
    return invalid_argument(fmt::format(
        "remat_layers: with {} unrolled layers memfit extrapolates from identical layers (more than {} are "
        "not built whole); rematerializing only some of them makes the layers differ",
        blocks, kMaxUnrolledLayers));
  if (s.scan && blocks > kMaxScannedLayers)
    return invalid_argument(fmt::format("layers: {} is more than memfit plans (at most {} with scan)", blocks,
                                        kMaxScannedLayers));
  return Status();
}

Json model_spec_to_json(const ModelSpec& s) {
  Json j;
  j["model"] = to_string(s.model);
  for (std::string_view key : shape_keys_of(s.model)) {
    j[std::string(key)] = shape_value(s, key);
    // After the heads, where set (validate_model_spec refuses them in a family without heads).
    if (key != "heads") continue;
    if (s.kv_heads != 0) j["kv_heads"] = s.kv_heads;
    if (s.d_ff != 0) j["d_ff"] = s.d_ff;
  }
  j["batch"] = s.batch;
  j["precision"] = to_string(s.precision);
  j["remat"] = to_string(s.remat);
  if (!s.remat_layers.empty()) j["remat_layers"] = s.remat_layers;
  j["optimizer"] = to_string(s.optimizer);
  j["step"] = to_string(s.step);
  j["donate"] = s.donate;
  j["scan"] = s.scan;
  j["accum"] = s.accum;
  j["sharding"] = to_string(s.sharding);
  if (!s.mesh.empty()) {
    j["mesh"] = s.mesh;
    j["mesh_axes"] = s.mesh_axes;
  }
  j["backend"] = to_string(s.backend);
  if (s.model != ModelFamily::kMlp && s.model != ModelFamily::kFlaxCnn) j["attn"] = to_string(s.attn);
  return j;
}

}  // namespace memfit
