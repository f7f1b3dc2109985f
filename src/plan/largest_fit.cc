#include "memfit/plan/largest_fit.h"

#include <fmt/format.h>

#include "memfit/core/bytes.h"

namespace memfit {

namespace {

// Doubling stops here: 2^40 sequences or tokens is past any device.
constexpr uint64_t kLargestValue = uint64_t{1} << 40;

}  // namespace

Expected<LargestFit> largest_fitting(const ModelSpec& spec, const std::string& key, uint64_t capacity_bytes,
                                     double memory_fraction,
                                     const std::function<void(const std::string&)>& progress) {
  MEMFIT_RETURN_IF_ERROR(validate_model_spec(spec));
  LargestFit result;
  result.key = key;
  const bool has_sequence = spec.model == ModelFamily::kGpt || spec.model == ModelFamily::kFlaxEncoder;
  if (key == "batch") {
    // The batch splits into accumulation microbatches, each over the data axis.
    result.step = spec.accum * spec.axis_size("data");
  } else if (key == "seq" && has_sequence) {
    result.step = 1;
  } else if (key == "seq") {
    return invalid_argument(
        fmt::format("--largest seq: the {} has no sequence (try batch)", to_string(spec.model)));
  } else {
    return invalid_argument(
        fmt::format("--largest {}: not a size fit can search (batch, or seq for gpt and flax_encoder)", key));
  }
  auto with = [&](uint64_t value) {
    ModelSpec s = spec;
    (key == "batch" ? s.batch : s.seq) = value;
    return s;
  };
  // The plan at `value`: nullopt when it cannot be built (a size past 64 bits, a spec budget), which counts
  // as not fitting; other errors are the caller's.
  struct Tried {
    std::optional<StepPlan> plan;
    std::string refused;
    bool fits() const { return plan && plan->fits; }
  };
  auto attempt = [&](uint64_t value) -> Expected<Tried> {
    if (progress) progress(fmt::format("{} {}", key, value));
    const ModelSpec s = with(value);
    Tried t;
    if (Status valid = validate_model_spec(s); !valid.ok()) {
      if (valid.error().code() != ErrorCode::kInvalidArgument) return valid.error();
      t.refused = valid.error().message();
      return t;
    }
    // The first value's plan may be the answer's (none fits): exact. After it, a plan that fits is exact
    // anyway, and one that does not needs only its verdict.
    auto plan = plan_step_extended(s, capacity_bytes, memory_fraction,
                                   /*verdict_only=*/result.programs_planned > 0);
    ++result.programs_planned;
    if (!plan.ok()) {
      if (plan.error().code() != ErrorCode::kInvalidArgument) return plan.error();
      t.refused = plan.error().message();
      return t;
    }
    t.plan = std::move(*plan);
    return t;
  };
  auto take_next = [&](uint64_t value, Tried& t) {
    result.next_value = value;
    result.next_refused = std::move(t.refused);
    if (t.plan) {
      result.next_peak_bytes = t.plan->peak_bytes;
      result.next_peak_approximate = peak_is_estimate(*t.plan);
    }
  };
  // Values are counted in steps: `lo` fits, `hi` does not.
  MEMFIT_ASSIGN_OR_RETURN(Tried first, attempt(result.step));
  if (!first.fits()) {
    if (!first.plan) return invalid_argument(fmt::format("{} {}: {}", key, result.step, first.refused));
    // Not even the smallest fits: it is also the first value that does not.
    result.plan = std::move(*first.plan);
    result.next_value = result.step;
    result.next_peak_bytes = result.plan.peak_bytes;
    return result;
  }
  StepPlan best = std::move(*first.plan);
  uint64_t lo = 1, hi = 0;
  Tried above;
  while (hi == 0) {
    if (lo * result.step > kLargestValue / 2) {
      // Fits at every size up to the doubling's end: the answer is that size.
      result.value = lo * result.step;
      result.plan = std::move(best);
      return result;
    }
    MEMFIT_ASSIGN_OR_RETURN(Tried t, attempt(2 * lo * result.step));
    if (t.fits()) {
      lo *= 2;
      best = std::move(*t.plan);
    } else {
      hi = 2 * lo;
      above = std::move(t);
    }
  }
  while (hi - lo > 1) {
    const uint64_t mid = lo + (hi - lo) / 2;
    MEMFIT_ASSIGN_OR_RETURN(Tried t, attempt(mid * result.step));
    if (t.fits()) {
      lo = mid;
      best = std::move(*t.plan);
    } else {
      hi = mid;
      above = std::move(t);
    }
  }
  result.value = lo * result.step;
  result.plan = std::move(best);
  take_next(hi * result.step, above);
  return result;
}

}  // namespace memfit
