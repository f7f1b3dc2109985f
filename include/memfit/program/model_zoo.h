// memfit/program/model_zoo.h - the program of a training (or inference) step of a model people train, built
// the way XLA:GPU compiles it, so that the same buffer model and heap that plan a real HLO module plan it.
//
// The step is emitted as an HloModule: entry parameters (parameters, optimizer state, batch), fused ops
// with the shapes XLA materializes (the tensors a real dump of ../shared/data/xla/reference_programs.py
// keeps: per GPT layer the layer-norm outputs, q/k/v, attention scores and probabilities, the MLP's matmul
// and GELU pieces, the residual), the backward pass, the optimizer update, donation as input_output_alias.
// Each instruction carries a category (parameters, optimizer_state, gradients, activations, temporaries).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "memfit/core/json.h"
#include "memfit/core/status.h"
#include "memfit/program/hlo_module.h"

namespace memfit {

// The keys of the `config` objects in programs.json (reference_programs.py); absent = its default.
struct ModelSpec {
  std::string model = "gpt";  // gpt | mlp | vit
  // gpt (and vit's encoder)
  uint64_t vocab = 32000, d_model = 1024, heads = 16, layers = 8, seq = 1024, batch = 8;
  // mlp
  uint64_t din = 1024, width = 4096, depth = 8, dout = 1024;
  // vit: image side, patch side, channels, classes
  uint64_t image = 224, patch = 16, channels = 3, classes = 1000;
  std::string precision = "fp32";      // fp32 | mixed (fp32 parameters, bf16 compute) | bf16
  std::string remat = "none";          // none | full | dots | dots_no_batch
  std::vector<uint64_t> remat_layers;  // per-layer policy: only these layers use `remat` (empty = all)
  std::string optimizer = "adam";      // adam (fp32 moments) | sgd
  std::string step = "train";          // train | infer | vmap_grads
  bool donate = false;
  bool scan = false;
  uint64_t accum = 1;
  std::string sharding = "replicated";  // replicated | fsdp | tp
  std::vector<uint64_t> mesh;           // device mesh sizes, e.g. {8} or {2, 4}
  std::vector<std::string> mesh_axes;   // their names, e.g. {"data"} or {"data", "model"}
  std::string backend = "gpu";          // gpu | cpu (XLA:CPU keeps more unfused tensors)

  uint64_t devices() const;
  uint64_t axis_size(const std::string& name) const;  // 1 when the mesh has no such axis
};

// Budgets on the program a spec asks for (a plan of the largest takes a few seconds).
inline constexpr uint64_t kMaxUnrolledLayers = 512;
inline constexpr uint64_t kMaxScannedLayers = 4096;

// From a programs.json `config` object (or a spec file); unknown values and nonsense sizes are errors
// naming the key (heads must divide d_model, batch must split into accum microbatches and the data axis...).
Expected<ModelSpec> model_spec_from_json(const Json& config);
Status validate_model_spec(const ModelSpec& spec);
Json model_spec_to_json(const ModelSpec& spec);

// Parameter count (logical, whole model) and bytes per device of each argument group.
struct StepArguments {
  uint64_t parameter_count = 0;
  uint64_t parameter_bytes = 0;        // per device
  uint64_t optimizer_state_bytes = 0;  // per device
  uint64_t batch_bytes = 0;            // per device
};

// The per-device program of one step, as XLA would compile it for `spec`.
Expected<HloModule> build_step_module(const ModelSpec& spec, StepArguments* arguments = nullptr);

}  // namespace memfit
