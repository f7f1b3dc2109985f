// memfit/plan/step_plan.h - plan a model-zoo step (memfit plan): the program model_zoo builds, planned by the
// same buffer model and heap as an XLA module, with the peak broken down by what holds it.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

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
  uint64_t kv_cache = 0;         // step decode: every layer's cached keys and values
  uint64_t temporaries = 0;      // everything else live at the peak, fragmentation and outputs included
};

struct StepPlan {
  ModelSpec spec;
  StepArguments arguments;
  HloPlan hlo;  // argument/output/alias/temp/peak as memory_analysis() would report for the step
  PeakBreakdown breakdown;
  uint64_t peak_bytes = 0;
  // The most XLA's memory scheduler would keep: the step's peak in the program's own order
  // (HloPlan::peak_upper_bytes). peak_bytes is the prediction of the order XLA picks.
  uint64_t peak_upper_bytes = 0;
  // remat offload_dots_no_batch: pinned host memory at its fullest (XLA's host_temp), and the bytes copied
  // to the host (and back) each step.
  uint64_t host_peak_bytes = 0;
  uint64_t offloaded_bytes = 0;
  std::optional<uint64_t> capacity_bytes;  // the device's memory
  double memory_fraction = 0.75;           // of it, XLA's BFC pool (XLA_CLIENT_MEM_FRACTION)
  uint64_t limit_bytes = 0;                // the pool: what the step must fit in
  bool fits = true;
  bool fits_in_every_order = true;  // peak_upper_bytes fits too: no order XLA keeps can push it over
  // A step unrolled deeper than kMaxUnrolledLayers: the depths it was planned at, whole, before each figure
  // was extended to its own depth (see extrapolate_step_plan); empty when it was planned whole.
  std::vector<uint64_t> extrapolated_from;
  // Every figure grew by the same bytes at each of those depths: the plan is that straight line's.
  bool extrapolation_exact = true;
  // The largest difference between a figure's two growths (each figure is extended on its larger one); 0
  // when exact, UINT64_MAX when the line itself is in doubt - a figure shrank, or the pass leading at those
  // depths is overtaken deeper down. A figure can still grow otherwise past the deepest depth planned.
  // plan_step_extended takes a line that wobbles by up to 64 KiB (see step_plan.cc for what that cost).
  uint64_t extrapolation_wobble_bytes = 0;
  // The wobble a search weighs (plan_step_extended): extrapolation_wobble_bytes, less the packed temp
  // block's where that is the shallowest depth's heap holes alone - the bytes live at once lie on an exact
  // line and the block grows by them from the second depth to the third, so its larger growth is theirs.
  uint64_t extrapolation_line_wobble_bytes = 0;
  // A peak no packing of the step's buffers goes under: what is live at once at the fullest moment, beside
  // the arguments and outputs (HloPlan::lower_bound_bytes). An extended plan's is its deepest depth's, or
  // where the arguments and outputs lie on exact lines, the deepest depth's temporaries at their fullest
  // moment beside the arguments and outputs at the step's own depth (a deeper stack of the same layers
  // holds at least that). 0 for a whole plan (its hlo.lower_bound_bytes is exact).
  uint64_t peak_at_least_bytes = 0;
};

// `memory_fraction`: JAX preallocates 75% of the device unless XLA_CLIENT_MEM_FRACTION says otherwise.
// A step unrolled deeper than kMaxUnrolledLayers is extrapolated (plan_is_extrapolated).
Expected<StepPlan> plan_step(const ModelSpec& spec, std::optional<uint64_t> capacity_bytes = std::nullopt,
                             double memory_fraction = 0.75);

// The depths a step too deep to build whole is planned at: kExtrapolationLayers, twice and three times that.
inline constexpr uint64_t kExtrapolationLayers = 64;
// plan_step_extended's: a deep step's plan from these small depths, where that is exact.
inline constexpr uint64_t kFitExtrapolationLayers = 16;

// plan_step, for a search over many changes of one step (fit_step, largest_fitting): an unrolled GPT or ViT
// step of 128 or more layers is planned at kFitExtrapolationLayers, twice and three times that, and extended
// when the extension holds - every figure grew alike (to 64 KiB of heap packing, the larger growth taken:
// extrapolation_wobble_bytes) and the pass leading at those depths (HloPlan::pass_peaks) still leads at the
// step's own - else as plan_step plans it. The figures are plan_step's; an extended plan has no buffers
// (nothing is drawn from a search).
//
// `verdict_only`: a search that needs the verdict, not the figure, of this change. Where the line wobbles
// more (or is a flax encoder's, whose lines are never taken as its figures) but peak_at_least_bytes is
// already over the pool, no plan of the step fits it: the extended plan is kept rather than planning the
// step whole.
Expected<StepPlan> plan_step_extended(const ModelSpec& spec,
                                      std::optional<uint64_t> capacity_bytes = std::nullopt,
                                      double memory_fraction = 0.75, bool verdict_only = false);

// A plan plan_step_extended kept for its verdict alone: extended over a line that wobbled (or a flax
// encoder's), its figure an estimate, and over the pool whatever the packing.
bool peak_is_estimate(const StepPlan& plan);

// Whether plan_step extrapolates the step: unrolled (no scan) and deeper than kMaxUnrolledLayers, where the
// program would hold ~700 instructions a layer (7 x 10^6 at 10^4 layers). Its plan has figures, not buffers:
// no timeline is drawn for it.
bool plan_is_extrapolated(const ModelSpec& spec);

// The plan of `spec` from the plans of the same step `layers`, 2 x `layers` and 3 x `layers` deep (in
// parallel): each figure is the deepest one's plus, per `layers` more, the larger of its two growths. A stack
// of identical layers grows by the same bytes per layer once the first and last layers' effects are behind
// (checked: extrapolation_exact says whether both growths were equal for every figure - the heap's packing
// can wobble by a fraction of a percent). Not drawn: the buffers and the groups are those of no program; the
// groups at the peak that grow alike at each depth are extended, the rest dropped.
Expected<StepPlan> extrapolate_step_plan(const ModelSpec& spec, uint64_t layers,
                                         std::optional<uint64_t> capacity_bytes = std::nullopt,
                                         double memory_fraction = 0.75);

// One change the seed suggests, tried on the step.
struct FitCandidate {
  std::string step;    // allocation | location | shapes | sharding (the seed's order) | combined
  std::string change;  // "XLA_CLIENT_MEM_FRACTION=.95", "remat full", "donate ... + remat full + FSDP ..."
  std::string code;    // the JAX that applies it (a combined change: one line per change)
  double cost = 0;     // extra compute, more steps, devices: lower is cheaper
  std::string cost_note;
  uint64_t peak_bytes = 0;
  uint64_t peak_upper_bytes = 0;  // in the program's own order (StepPlan::peak_upper_bytes)
  uint64_t limit_bytes = 0;
  bool fits = false;
  bool fits_in_every_order = false;  // fits whatever order XLA's memory scheduler keeps
  uint64_t host_peak_bytes = 0;      // pinned host memory it takes (location: offloaded activations)
  bool only_moves_to_host = false;   // host memory taken, and the device's peak no lower for it
  // The peak is an estimate (peak_is_estimate): the change was planned at 16, 32 and 48 layers and extended
  // over a line not taken as exact, because the bytes live at once are already over the pool there
  // (peak_at_least_bytes): it does not fit whatever the packing. Never a change that fits.
  bool peak_approximate = false;
  uint64_t peak_at_least_bytes = 0;  // StepPlan::peak_at_least_bytes (0: not known)
};

struct FitResult {
  StepPlan baseline;
  std::vector<FitCandidate> candidates;  // every change tried, in the seed's order
  std::vector<size_t> ranked;  // the ones that fit, cheapest first (none that only moves to the host)
  // Programs built and planned, the baseline's among them: a family (more accumulation, a smaller batch,
  // more devices) stops at its first member that fits, and the larger pool reuses the baseline's plan.
  size_t programs_planned = 0;
  // Of those, the ones planned at kFitExtrapolationLayers, twice and three times that and extended (see
  // fit_step): a deep unrolled GPT, ViT or flax encoder step's.
  size_t programs_extrapolated = 0;
  // Of those, the ones extended over a line not taken as exact because they cannot fit
  // (FitCandidate::peak_approximate).
  size_t programs_approximate = 0;
};

// Tries the seed's fixes in its order - allocation (a larger pool, donation), location (saved activations
// offloaded to pinned host memory), shapes (bf16, cuDNN's fused attention, remat policies, gradient
// accumulation, a smaller batch), sharding (FSDP over more devices) - and ranks those that fit by their cost.
// When none fits alone, the ones that lowered the peak (donation, bf16 compute, the best remat policy,
// cuDNN's attention) are stacked and tried alone, then under more accumulation, a smaller batch or more
// devices: step "combined", costs summed. A GPT or ViT step of 128 or more unrolled layers is planned at
// 16, 32 and 48 layers and extended where that is exact (each figure grows alike and the leading pass stays
// ahead) or, a flax encoder's too, where the change cannot fit whatever the packing (peak_approximate), else
// as plan_step plans it (whole, or past 512 layers from 64, 128 and 192); the step itself is never
// approximate. The plans run on
// every core; `progress` (may be empty) hears each one finish (done, total), from one thread at a time.
Expected<FitResult> fit_step(const ModelSpec& spec, uint64_t capacity_bytes, double memory_fraction = 0.75,
                             const std::function<void(size_t, size_t)>& progress = {});

}  // namespace memfit
