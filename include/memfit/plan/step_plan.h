// memfit/plan/step_plan.h - plan a model-zoo step (memfit plan): the program model_zoo builds, planned by the
// same buffer model and heap as an XLA module, with the peak broken down by what holds it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "memfit/core/status.h"
#include "memfit/plan/hlo_plan.h"
#include "memfit/program/model_zoo.h"

namespace memfit {

// What holds the peak, per device; the parts add up to peak_bytes.
struct PeakBreakdown {
  uint64_t parameters = 0;       // parameters, and their new values where not donated
  uint64_t optimizer_state = 0;  // Adam moments and step count, likewise
  uint64_t gradients = 0;        // gradients live at the peak
  uint64_t activations = 0;      // the batch and the forward tensors kept for the backward pass
  uint64_t temporaries = 0;      // everything else live at the peak, fragmentation and outputs included
};

struct StepPlan {
  ModelSpec spec;
  StepArguments arguments;
  HloPlan hlo;  // argument/output/alias/temp/peak as memory_analysis() would report for the step
  PeakBreakdown breakdown;
  uint64_t peak_bytes = 0;
  std::optional<uint64_t> capacity_bytes;
  bool fits = true;
};

Expected<StepPlan> plan_step(const ModelSpec& spec, std::optional<uint64_t> capacity_bytes = std::nullopt);

}  // namespace memfit
