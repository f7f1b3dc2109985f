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

#include "memfit/core/status.h"
#include "memfit/program/hlo_module.h"
#include "memfit/program/model_spec.h"

namespace memfit {

// Parameter count (logical, whole model) and bytes per device of each argument group.
struct StepArguments {
  uint64_t parameter_count = 0;
  uint64_t parameter_bytes = 0;        // per device
  uint64_t optimizer_state_bytes = 0;  // per device
  uint64_t batch_bytes = 0;            // per device
  uint64_t kv_cache_bytes = 0;         // step decode: every layer's keys and values, per device
};

// The per-device program of one step, as XLA would compile it for `spec`.
Expected<HloModule> build_step_module(const ModelSpec& spec, StepArguments* arguments = nullptr);

}  // namespace memfit
