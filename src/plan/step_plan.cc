#include "memfit/plan/step_plan.h"

namespace memfit {

Expected<StepPlan> plan_step(const ModelSpec& spec, std::optional<uint64_t> capacity_bytes) {
  StepPlan plan;
  plan.spec = spec;
  MEMFIT_ASSIGN_OR_RETURN(HloModule module, build_step_module(spec, &plan.arguments));
  HloPlanOptions options;
  options.top = 8;
  MEMFIT_ASSIGN_OR_RETURN(plan.hlo, plan_hlo(module, options));
  plan.peak_bytes = plan.hlo.peak_bytes;
  // Arguments by group; outputs not written over a donated argument count with what they replace.
  PeakBreakdown& b = plan.breakdown;
  b.parameters = plan.arguments.parameter_bytes;
  b.optimizer_state = plan.arguments.optimizer_state_bytes;
  b.activations = plan.arguments.batch_bytes;
  const uint64_t new_values = plan.hlo.output_bytes - plan.hlo.alias_bytes;
  const uint64_t opt_share =
      plan.arguments.parameter_bytes + plan.arguments.optimizer_state_bytes == 0
          ? 0
          : new_values * plan.arguments.optimizer_state_bytes /
                (plan.arguments.parameter_bytes + plan.arguments.optimizer_state_bytes);
  b.optimizer_state += opt_share;
  b.parameters += new_values - opt_share;
  // The temp block at its fullest moment, by category.
  uint64_t live = 0;
  for (uint32_t i : plan.hlo.live_at_peak) {
    const PlannedBuffer& row = plan.hlo.buffers[i];
    live += row.bytes;
    if (row.category == "gradients") {
      b.gradients += row.bytes;
    } else if (row.category == "activations") {
      b.activations += row.bytes;
    } else {
      b.temporaries += row.bytes;
    }
  }
  b.temporaries += plan.hlo.temp_bytes > live ? plan.hlo.temp_bytes - live : 0;
  const uint64_t sum = b.parameters + b.optimizer_state + b.gradients + b.activations + b.temporaries;
  if (sum > plan.peak_bytes) b.temporaries -= std::min(b.temporaries, sum - plan.peak_bytes);
  plan.capacity_bytes = capacity_bytes;
  plan.fits = !capacity_bytes || plan.peak_bytes <= *capacity_bytes;
  return plan;
}

}  // namespace memfit
