#include "memfit/plan/step_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "memfit/core/xla_env.h"

namespace memfit {
Expected<StepPlan> plan_step(const ModelSpec& spec, std::optional<uint64_t> capacity_bytes,
                             double memory_fraction) {
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
  b.kv_cache = plan.arguments.kv_cache_bytes;  // donated: its new values are written over it
  const uint64_t new_values = plan.hlo.output_bytes - plan.hlo.alias_bytes;
  if (spec.step == StepKind::kInfer || spec.step == StepKind::kDecode) {
    // No training: what the step returns beside the cache it writes over is the logits.
    b.activations += new_values;
  } else {
    const uint64_t opt_share =
        plan.arguments.parameter_bytes + plan.arguments.optimizer_state_bytes == 0
            ? 0
            : new_values * plan.arguments.optimizer_state_bytes /
                  (plan.arguments.parameter_bytes + plan.arguments.optimizer_state_bytes);
    b.optimizer_state += opt_share;
    b.parameters += new_values - opt_share;
  }
  // The temp block at its fullest moment, by category.
  uint64_t live = 0;
  for (uint32_t i : plan.hlo.live_at_peak) {
    const PlannedBuffer& row = plan.hlo.buffers[i];
    live += row.bytes;
    if (row.category == "gradients") {
      b.gradients += row.bytes;
    } else if (row.category == "kv_cache") {
      b.kv_cache += row.bytes;
    } else if (row.category == "activations") {
      b.activations += row.bytes;
    } else {
      b.temporaries += row.bytes;
    }
  }
  b.temporaries += plan.hlo.temp_bytes > live ? plan.hlo.temp_bytes - live : 0;
  const uint64_t sum =
      b.parameters + b.optimizer_state + b.gradients + b.activations + b.kv_cache + b.temporaries;
  if (sum > plan.peak_bytes) b.temporaries -= std::min(b.temporaries, sum - plan.peak_bytes);
  plan.capacity_bytes = capacity_bytes;
  plan.memory_fraction = memory_fraction;
  if (capacity_bytes) plan.limit_bytes = bfc_memory_limit(memory_fraction, *capacity_bytes);
  plan.fits = !capacity_bytes || plan.peak_bytes <= plan.limit_bytes;
  return plan;
}

Expected<FitResult> fit_step(const ModelSpec& spec, uint64_t capacity_bytes, double memory_fraction) {
  FitResult result;
  MEMFIT_ASSIGN_OR_RETURN(result.baseline, plan_step(spec, capacity_bytes, memory_fraction));
  // Returns whether the change fits (families stop at their first size that does).
  bool last_fits = false;
  auto try_change = [&](const char* step, std::string change, std::string code, double cost, std::string note,
                        const ModelSpec& changed, double fraction) -> Status {
    last_fits = false;
    if (!validate_model_spec(changed).ok()) return Status();  // not applicable to this model
    MEMFIT_ASSIGN_OR_RETURN(StepPlan p, plan_step(changed, capacity_bytes, fraction));
    FitCandidate c{step,         std::move(change), std::move(code), cost, std::move(note),
                   p.peak_bytes, p.limit_bytes,     p.fits};
    result.candidates.push_back(std::move(c));
    last_fits = p.fits;
    return Status();
  };
  // 1. allocation: a larger pool, then donation.
  if (memory_fraction < 0.95) {
    MEMFIT_RETURN_IF_ERROR(try_change("allocation", "XLA_CLIENT_MEM_FRACTION=.95",
                                      "os.environ['XLA_CLIENT_MEM_FRACTION'] = '.95'  # before importing jax",
                                      0, "free, if nothing else shares the GPU", spec, 0.95));
  }
  if (!spec.donate && spec.step == StepKind::kTrain) {
    ModelSpec s = spec;
    s.donate = true;
    MEMFIT_RETURN_IF_ERROR(try_change("allocation", "donate parameters and optimizer state",
                                      "jax.jit(step, donate_argnums=(0, 1))", 0.01,
                                      "free; the old arrays are gone after the call", s, memory_fraction));
  }
  // 2. shapes: precision, rematerialization, accumulation, batch.
  if (spec.precision == Precision::kFp32) {
    ModelSpec s = spec;
    s.precision = Precision::kMixed;
    MEMFIT_RETURN_IF_ERROR(
        try_change("shapes", "mixed precision (fp32 parameters, bf16 compute)",
                   "x @ W.astype(jnp.bfloat16)  # compute in bfloat16, keep fp32 parameters", 0.02,
                   "faster on tensor cores; check the loss curve", s, memory_fraction));
  }
  if (spec.step == StepKind::kTrain) {
    const struct {
      RematPolicy policy;
      const char* jax;
      double cost;
      const char* note;
    } remats[] = {
        {RematPolicy::kDotsNoBatch,
         "jax.checkpoint(block, policy=jax.checkpoint_policies.dots_with_no_batch_dims_saveable)", 0.2,
         "~20% more compute: attention and elementwise ops run twice"},
        {RematPolicy::kDots, "jax.checkpoint(block, policy=jax.checkpoint_policies.dots_saveable)", 0.15,
         "~15% more compute: elementwise ops run twice"},
        {RematPolicy::kFull, "jax.checkpoint(block, policy=jax.checkpoint_policies.nothing_saveable)", 0.33,
         "~33% more compute: the forward pass runs twice"},
    };
    for (const auto& r : remats) {
      if (spec.remat == r.policy) continue;
      ModelSpec s = spec;
      s.remat = r.policy;
      s.remat_layers.clear();
      MEMFIT_RETURN_IF_ERROR(try_change("shapes", fmt::format("remat {}", to_string(r.policy)), r.jax, r.cost,
                                        r.note, s, memory_fraction));
    }
    for (uint64_t k : {2, 4, 8, 16}) {
      ModelSpec s = spec;
      s.accum = spec.accum * k;
      MEMFIT_RETURN_IF_ERROR(try_change(
          "shapes", fmt::format("gradient accumulation over {} microbatches", s.accum),
          fmt::format("optax.MultiSteps(optimizer, every_k_schedule={})  # or scan over {} microbatches",
                      s.accum, s.accum),
          0.05 * static_cast<double>(k),
          fmt::format("{} sequential microbatches: less parallel work per kernel", k), s, memory_fraction));
      if (last_fits) break;
    }
  }
  for (uint64_t div : {2, 4}) {
    ModelSpec s = spec;
    if (s.batch % div != 0) continue;
    s.batch /= div;
    MEMFIT_RETURN_IF_ERROR(try_change("shapes", fmt::format("batch {} instead of {}", s.batch, spec.batch),
                                      fmt::format("batch_size = {}", s.batch), 0.5 * static_cast<double>(div),
                                      "changes the optimization: retune the learning rate", s,
                                      memory_fraction));
    if (last_fits) break;
  }
  // 3. sharding: FSDP over more devices (parameters, gradients and optimizer state split; batch split).
  if (spec.sharding == ShardingKind::kReplicated && spec.devices() <= 1 && spec.step == StepKind::kTrain) {
    for (uint64_t n : {2, 4, 8, 16, 32, 64}) {
      ModelSpec s = spec;
      s.sharding = ShardingKind::kFsdp;
      s.mesh = {n};
      s.mesh_axes = {"data"};
      if (s.batch % n != 0) s.batch = (s.batch + n - 1) / n * n;  // the global batch must split
      MEMFIT_RETURN_IF_ERROR(try_change(
          "sharding", fmt::format("FSDP over {} devices", n),
          fmt::format("mesh = Mesh(np.array(jax.devices()[:{}]), ('data',)); "
                      "jax.device_put(params, NamedSharding(mesh, P('data')))  # largest axis of each array",
                      n),
          static_cast<double>(n - 1), fmt::format("{} GPUs", n), s, memory_fraction));
      if (last_fits) break;
    }
  }
  for (size_t i = 0; i < result.candidates.size(); ++i)
    if (result.candidates[i].fits) result.ranked.push_back(i);
  std::stable_sort(result.ranked.begin(), result.ranked.end(), [&](size_t a, size_t b) {
    return std::tie(result.candidates[a].cost, result.candidates[a].peak_bytes) <
           std::tie(result.candidates[b].cost, result.candidates[b].peak_bytes);
  });
  return result;
}

}  // namespace memfit
