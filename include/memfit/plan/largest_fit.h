// memfit/plan/largest_fit.h - the largest batch (or sequence) at which a step still fits a device: a
// server's concurrent sequences or context length, a training run's batch before accumulation is needed.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "memfit/core/status.h"
#include "memfit/plan/step_plan.h"

namespace memfit {

struct LargestFit {
  std::string key;     // "batch" or "seq"
  uint64_t step = 1;   // the values tried are its multiples (a batch splits into microbatches and devices)
  uint64_t value = 0;  // the largest that fits; 0 when not even `step` does
  StepPlan plan;       // at `value` (at `step` when none fits)
  // The first value that does not fit (value + step), and its peak; its reason when it could not be built
  // at all (a size past 64 bits, a spec budget) rather than planned too large.
  uint64_t next_value = 0;
  std::optional<uint64_t> next_peak_bytes;
  // That peak is an estimate (peak_is_estimate): a deep step extended over a line not taken as exact,
  // already over the pool at the bytes live at once (plan_step_extended's verdict_only, which every value
  // after the first is planned with: only the verdict of a value that does not fit matters).
  bool next_peak_approximate = false;
  std::string next_refused;
  size_t programs_planned = 0;
};

// The boundary between the values of `key` whose step fits XLA's pool of `capacity_bytes` and those whose
// does not: the peak grows with the batch and with the sequence. Each value is planned where the line
// through the values planned nearest the boundary crosses the pool (the Illinois rule where the peak
// curves), bisecting after a dozen such values (doubling with no value over the pool yet): 4-8 plans where
// the peak grows linearly, 7-10 where it curves (doubling and bisecting took 10-33). `key` is "batch", or
// "seq" for a model with a sequence (gpt, flax_encoder). `progress` (may be empty) hears each value as it is
// planned.
Expected<LargestFit> largest_fitting(const ModelSpec& spec, const std::string& key, uint64_t capacity_bytes,
                                     double memory_fraction = 0.75,
                                     const std::function<void(const std::string&)>& progress = {});

}  // namespace memfit
