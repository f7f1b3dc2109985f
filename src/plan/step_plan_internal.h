// Internal to memfit_plan: the plan of a step's program built whole (plan_step's path up to
// kMaxUnrolledLayers unrolled layers, and each depth an extrapolated plan is made from).
#pragma once

#include <cstdint>
#include <optional>

#include "memfit/plan/step_plan.h"

namespace memfit::step_plan_internal {

Expected<StepPlan> plan_whole_step(const ModelSpec& spec, std::optional<uint64_t> capacity_bytes,
                                   double memory_fraction);

// The pool and the verdict, once the peak is known.
void set_capacity(StepPlan& plan, std::optional<uint64_t> capacity_bytes, double memory_fraction);

}  // namespace memfit::step_plan_internal
