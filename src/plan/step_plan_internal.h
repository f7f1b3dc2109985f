// Internal to memfit_plan: the plan of a step's program built whole (plan_step's path up to
// kMaxUnrolledLayers unrolled layers, and each depth an extrapolated plan is made from).
#pragma once

#include <cstdint>
#include <optional>

#include "memfit/plan/step_plan.h"

namespace memfit::step_plan_internal {

// `pack`: HloPlanOptions::pack - false for a plan that serves only to show a step cannot fit.
Expected<StepPlan> plan_whole_step(const ModelSpec& spec, std::optional<uint64_t> capacity_bytes,
                                   double memory_fraction, bool pack = true);

// extrapolate_step_plan, its depths planned with `pack` (false: each depth's temp the bytes live at once, the
// extended figures then a lower bound's line: for plan_step_extended's verdicts).
Expected<StepPlan> extrapolate(const ModelSpec& spec, uint64_t layers, std::optional<uint64_t> capacity_bytes,
                               double memory_fraction, bool pack);

// The pool and the verdict, once the peak is known.
void set_capacity(StepPlan& plan, std::optional<uint64_t> capacity_bytes, double memory_fraction);

}  // namespace memfit::step_plan_internal
