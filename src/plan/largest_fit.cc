#include "memfit/plan/largest_fit.h"

#include <fmt/format.h>

#include <algorithm>

#include "memfit/core/bytes.h"
#include "memfit/core/xla_env.h"

namespace memfit {

namespace {

// Doubling stops here: 2^40 sequences or tokens is past any device.
constexpr uint64_t kLargestValue = uint64_t{1} << 40;

}  // namespace

Expected<LargestFit> largest_fitting(const ModelSpec& spec, const std::string& key, uint64_t capacity_bytes,
                                     double memory_fraction,
                                     const std::function<void(const std::string&)>& progress) {
  MEMFIT_RETURN_IF_ERROR(validate_model_spec(spec));
  MEMFIT_RETURN_IF_ERROR(validate_pool_fraction(memory_fraction));
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
  // The search keeps a bracket - `lo` fits, `hi` does not (0: none found yet) - and probes where the line
  // through the two planned values nearest the boundary crosses the pool: the peak grows nearly linearly
  // with the batch (and with the sequence, but for attention's scores), so a probe lands on the boundary or
  // next to it, and the value after it confirms it. The line is followed for kLineProbes probes at most,
  // then the bracket is bisected (with none yet, doubled; a probe that fits short of twice the last value
  // doubles too), so a peak far from any line costs a few plans more than bisection alone. `memfit fit
  // --model flax_encoder --layers 300 --capacity 80GiB --precision mixed --remat full --largest batch`: 12
  // plans by doubling and bisecting (1, 2, 4, ... 64, 48, 56, 60, 58, 57), 38 s; 6 so (1, 2, 32, 65, 57,
  // 58: batch 1 and 2 peak in the optimizer's update, not on the activations' line - the line through them
  // guessed 509, kFurthest held it to 32). A 2-layer GPT's training sequence (attention's scores: the peak
  // curves) in 1 GiB: 21 plans
  // -> 7; in 4 GiB 23 -> 10; a decode step's sequence in 2 GiB (its KV cache: a line) 33 -> 8.
  struct Known {
    uint64_t value = 0;  // in steps; 0: none
    std::optional<uint64_t> peak_bytes;
  };
  StepPlan best = std::move(*first.plan);
  const uint64_t limit_bytes = best.limit_bytes;
  Known lo{1, best.peak_bytes}, hi, below;  // below: a value under lo that fits, planned before it
  Tried above;
  // The largest value on the line through `a` and `b` under the pool, each one's distance from the pool
  // weighed by its weight; nullopt where the line gives none.
  auto on_line = [&](const Known& a, double a_weight, const Known& b,
                     double b_weight) -> std::optional<uint64_t> {
    if (a.value == 0 || b.value == 0 || a.value == b.value || !a.peak_bytes || !b.peak_bytes)
      return std::nullopt;
    const double limit = static_cast<double>(limit_bytes);
    const double fa = (static_cast<double>(*a.peak_bytes) - limit) * a_weight;
    const double fb = (static_cast<double>(*b.peak_bytes) - limit) * b_weight;
    const double va = static_cast<double>(a.value), vb = static_cast<double>(b.value);
    const double per_step = (fb - fa) / (vb - va);
    if (!(per_step > 0)) return std::nullopt;  // flat or falling: no crossing to aim at
    const double guess = va - fa / per_step;
    if (!(guess >= 1)) return std::nullopt;
    if (!(guess < static_cast<double>(kLargestValue))) return kLargestValue;
    return static_cast<uint64_t>(guess);
  };
  // A bracket's end kept while the other moves twice has its distance halved (the Illinois rule): a peak
  // that curves (attention's scores grow with the sequence squared) otherwise has the line land on the same
  // side every time, a step from where it landed before.
  double lo_weight = 1, hi_weight = 1;
  int last_moved = 0;  // +1: lo, -1: hi
  constexpr int kLineProbes = 12;
  constexpr uint64_t kFurthest = 16;
  int line_probes = 0;
  bool doubling = false;  // with no bracket yet, the line fell short: double next
  const uint64_t most = kLargestValue / result.step;
  for (;;) {
    if (hi.value != 0 && hi.value - lo.value <= 1) break;
    if (hi.value == 0 && lo.value > most / 2) {
      // Fits at every size up to the search's end: the answer is that size.
      result.value = lo.value * result.step;
      result.plan = std::move(best);
      return result;
    }
    std::optional<uint64_t> guess =
        hi.peak_bytes ? on_line(lo, lo_weight, hi, hi_weight) : on_line(below, 1, lo, 1);
    if (doubling || line_probes >= kLineProbes) guess.reset();
    line_probes += guess.has_value();
    uint64_t probe = 0;
    if (hi.value == 0) {
      // A line from the smallest values can be nearly flat (a sequence of 1 and 2: the parameters'
      // bytes): it reaches no further than kFurthest times the value that fits.
      probe = guess ? std::clamp<uint64_t>(*guess, lo.value + 1, std::min(most, kFurthest * lo.value))
                    : 2 * lo.value;
    } else {
      const uint64_t mid = lo.value + (hi.value - lo.value) / 2;
      probe = guess ? std::clamp<uint64_t>(*guess, lo.value + 1, hi.value - 1) : mid;
    }
    const uint64_t was = lo.value;
    MEMFIT_ASSIGN_OR_RETURN(Tried t, attempt(probe * result.step));
    const bool fitted = t.fits();
    if (fitted) {
      below = lo;
      lo = Known{probe, t.plan->peak_bytes};
      best = std::move(*t.plan);
      lo_weight = 1;
      if (last_moved == 1) hi_weight /= 2;
      last_moved = 1;
    } else {
      hi = Known{probe, t.plan ? std::optional<uint64_t>(t.plan->peak_bytes) : std::nullopt};
      above = std::move(t);
      hi_weight = 1;
      if (last_moved == -1) lo_weight /= 2;
      last_moved = -1;
    }
    doubling = hi.value == 0 && fitted && probe < 2 * was;
  }
  result.value = lo.value * result.step;
  result.plan = std::move(best);
  take_next(hi.value * result.step, above);
  return result;
}

}  // namespace memfit
