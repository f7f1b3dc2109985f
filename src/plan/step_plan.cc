#include "memfit/plan/step_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <new>
#include <numeric>
#include <optional>
#include <string_view>
#include <thread>

#include "memfit/core/bytes.h"
#include "memfit/core/checked.h"
#include "memfit/core/xla_env.h"
#include "step_plan_internal.h"

namespace memfit {

Expected<StepPlan> plan_step(const ModelSpec& spec, std::optional<uint64_t> capacity_bytes,
                             double memory_fraction) {
  MEMFIT_RETURN_IF_ERROR(validate_pool_fraction(memory_fraction));
  if (plan_is_extrapolated(spec))
    return extrapolate_step_plan(spec, kExtrapolationLayers, capacity_bytes, memory_fraction);
  return step_plan_internal::plan_whole_step(spec, capacity_bytes, memory_fraction);
}

// A deep unrolled GPT or ViT step is planned at kFitExtrapolationLayers, twice and three times
// that, and extended (extrapolate_step_plan) when the extension holds - each figure grew alike at the
// three depths (to a few KiB, below) and the pass leading them still leads at the step's depth - else as
// plan_step plans it. A
// whole plan of 300 layers is ~700 instructions a layer and 1.5 s of one core; a fit plans twenty of them.
// The three small plans cost 96 layers' worth, and agreed with the whole plans of 300 and 200 layers to the
// byte (within 160 bytes with accumulation) on every GPT and ViT change tried except those flagged (mixed
// precision with full remat, whose forward pass overtakes its backward pass past ~190 layers). The flax
// encoder's and the MLP's small plans are flagged or wobble (the MLP by 0.1% at 200 layers): those are
// planned whole. A line whose growths differ by no more than kFitWobbleBytes per 16 layers (in any figure,
// the peak's parts too: a buffer changing part means the peak is moving) is taken as well, on the larger
// growth, and not called exact: the heap's packing moves a few KiB between depths (GPT fp32's base step by
// 32 KiB: at the backward pass's peak one layer's norm statistics are half freed). Against the same fits
// with exact lines only (2026-12-04, alternate runs): GPT fp32 at 300 layers one whole plan fewer, 1-2 s
// less CPU but no clear gain in time (6.8-9.1 s against 7.6-8.6), its base row 328 KB (0.00006%) high; ViT
// at 240 four fewer, 4.1-4.8 s against 6.6-7.2, rows within 0.0001%; bf16 GPT at 300 two fewer, 5.2-5.8 s
// against 10.0-11.0, and at 160 likewise, the accumulation rows 0.05-0.08% high (their peak moves again
// past 48 layers); mixed precision unchanged. Tried and not kept
// (2026-12-04): where 16, 32 and 48 layers are not on a line, planning 64 (and 80) and extending from the
// last three. It halved `fit --model gpt --layers 300` (all 6 flagged plans - a 32 KiB packing wobble,
// accumulation, FSDP - lay on a line from 32 or 48 on, within 330 KB of their whole plans), but three deeper
// depths on a line are no evidence: a ViT of batch 16 grows alike from 32 to 48 and 48 to 64 layers, by 25 KB
// less to 80 and 245 MB more to 96, and its 240-layer peak came out 0.27% low; and where no window is on a
// line (bf16 with accumulation) the extra depths are wasted.
// A line whose wobble is the shallowest depth's heap holes alone is taken too (line_taken,
// StepPlan::extrapolation_line_wobble_bytes): the bytes live at once on an exact line, the packed block
// growing by them from 32 to 48 layers, every other figure within kFitWobbleBytes. With sibling multi-output
// fusion, GPT's stacked change (donation, mixed precision, full remat, cuDNN attention) over 8 and 16
// devices packed 16 layers with 5.2 and 5.7 MB of holes, 32 and 48 layers with none and 0.5 MB; the lines
// through the deeper growth gave the 300-layer plans' peaks to the byte (10.24 and 7.39 GB), and `memfit
// fit --model gpt --layers 300 --capacity 16GiB` went from 14 s (three plans whole) to 8 s (one)
// (2026-12-07). Holes that grow with depth are no such case: the default GPT's and bf16 ViT's steps hold
// 33/67/134 MB and 48/280/280 MB of them at 16/32/48 layers and 335 MB and 2.97 GB at 300, so those steps
// are planned whole. A line that wobbles more is still taken for a change that cannot fit (verdict_only):
// the bytes live at once at 48 layers, or on the passes' exact lines at the step's depth, are over the pool,
// and no packing goes under them - the search needs its verdict, and the figure is shown as an estimate.
// `memfit fit --model vit --precision bf16 --layers 300 --capacity 16GiB` (2026-12-05): 7 of its 18 plans so,
// the baseline the only one whole; their figures 0.0-1.8% from their whole plans (+0.38% donation, +1.77%
// cuDNN attention, +0.98% two microbatches, -0.04% eight), the fit 9.2-11.2 s -> 3.7-4.8 s (alternating runs,
// a quiet hour).
constexpr uint64_t kFitExtrapolationFromLayers = 128;
constexpr uint64_t kFitWobbleBytes = 64 << 10;

namespace {
// Whose 16/32/48-layer lines are taken as the step's figures: GPT's and ViT's, checked against their whole
// plans. The flax encoder's never are - it takes the verdict-only extension alone: a change whose 48 layers
// already hold more than the pool cannot fit at any depth beyond. Its whole plans are the slow ones:
// optax.adafactor's per-parameter scalars (each parameter's RMS, computed where the list scheduler finds
// them cheapest, at the start) are thousands of small buffers living through the step, each of which fits
// in every hole of the heap (`memfit plan --model flax_encoder --layers 300`: 3.1 s, against 0.5 s for
// GPT's and 1.1 s with adam).
bool lines_extend(const ModelSpec& spec) {
  return spec.model == ModelFamily::kGpt || spec.model == ModelFamily::kVit;
}
// Whether an extended plan's line is taken as the step's figures: it wobbles by at most kFitWobbleBytes,
// its packed temp block's wobble aside where that is the shallowest depth's heap holes alone
// (StepPlan::extrapolation_line_wobble_bytes).
bool line_taken(const StepPlan& p) { return p.extrapolation_line_wobble_bytes <= kFitWobbleBytes; }
}  // namespace

Expected<StepPlan> plan_step_extended(const ModelSpec& spec, std::optional<uint64_t> capacity_bytes,
                                      double memory_fraction, bool verdict_only) {
  MEMFIT_RETURN_IF_ERROR(validate_pool_fraction(memory_fraction));
  // Deeper than memfit builds whole, the fallback is plan_step's extension from 64, 128 and 192 layers.
  // A flax encoder's small plans serve only a verdict (lines_extend): planned for nothing where a figure is
  // wanted, and unpacked where they are (their bytes live at once are all the verdict reads).
  const bool verdict_line =
      spec.model == ModelFamily::kFlaxEncoder && verdict_only && capacity_bytes.has_value();
  if ((lines_extend(spec) || verdict_line) && !spec.scan && spec.remat_layers.empty() &&
      spec.blocks() >= kFitExtrapolationFromLayers) {
    Expected<StepPlan> p = step_plan_internal::extrapolate(spec, kFitExtrapolationLayers, capacity_bytes,
                                                           memory_fraction, /*pack=*/!verdict_line);
    if (p.ok() && lines_extend(spec) && line_taken(*p)) return p;
    // Over the pool whatever the packing: the bytes live at once already are (see the header).
    if (p.ok() && verdict_only && capacity_bytes && p->peak_at_least_bytes > p->limit_bytes) return p;
  }
  return plan_step(spec, capacity_bytes, memory_fraction);
}

bool peak_is_estimate(const StepPlan& p) {
  return !p.extrapolated_from.empty() && p.extrapolated_from.front() == kFitExtrapolationLayers &&
         (!line_taken(p) || !lines_extend(p.spec));
}

namespace step_plan_internal {

void set_capacity(StepPlan& plan, std::optional<uint64_t> capacity_bytes, double memory_fraction) {
  plan.capacity_bytes = capacity_bytes;
  plan.memory_fraction = memory_fraction;
  if (capacity_bytes) plan.limit_bytes = bfc_memory_limit(memory_fraction, *capacity_bytes);
  plan.fits = !capacity_bytes || plan.peak_bytes <= plan.limit_bytes;
  plan.fits_in_every_order = !capacity_bytes || plan.peak_upper_bytes <= plan.limit_bytes;
}

Expected<StepPlan> plan_whole_step(const ModelSpec& spec, std::optional<uint64_t> capacity_bytes,
                                   double memory_fraction, bool pack) {
  StepPlan plan;
  plan.spec = spec;
  MEMFIT_ASSIGN_OR_RETURN(HloModule module, build_step_module(spec, &plan.arguments));
  HloPlanOptions options;
  options.top = 8;
  options.pack = pack;
  if (capacity_bytes) options.device_memory_bytes = *capacity_bytes;  // the GPU XLA schedules for
  MEMFIT_ASSIGN_OR_RETURN(plan.hlo, plan_hlo(std::move(module), options));
  plan.peak_bytes = plan.hlo.peak_bytes;
  plan.peak_upper_bytes = plan.hlo.peak_upper_bytes;
  plan.host_peak_bytes = plan.hlo.host_temp_bytes;
  plan.offloaded_bytes = plan.hlo.host_value_bytes;
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
            // In 128 bits: a 64-layer GPT's 10 GB of new values times 7 GB of state wraps 64.
            : static_cast<uint64_t>(uint128_t{new_values} * plan.arguments.optimizer_state_bytes /
                                    (plan.arguments.parameter_bytes + plan.arguments.optimizer_state_bytes));
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
  set_capacity(plan, capacity_bytes, memory_fraction);
  return plan;
}

}  // namespace step_plan_internal

namespace {

// A change to try: its row of the table, the spec it makes, and the family it belongs to (a family - more
// accumulation, a smaller batch, more devices - stops at its first member that fits).
struct Trial {
  FitCandidate row;
  ModelSpec spec;
  double memory_fraction = 0.75;
  int family = 0;  // 0: a change of its own
  // The trial whose program this one is (only XLA's pool differs): planned once, its limit taken anew.
  size_t same_program_as = SIZE_MAX;
  int stack_group = 0;  // a change a combined round may stack (kStack*), 0: none
  // Its figure is the step's own: never an estimate (plan_step_extended's verdict_only).
  bool exact_figure = false;
};

// The groups of changes a combined round stacks, one of each at most.
constexpr int kStackDonation = 1;
constexpr int kStackPrecision = 2;
constexpr int kStackRemat = 3;
constexpr int kStackAttention = 4;
constexpr size_t kStackGroups = 5;

// bf16 compute, offered alone and as part of cuDNN's attention on an fp32 step: its JAX and its cost.
constexpr std::string_view kMixedPrecisionCode =
    "x @ W.astype(jnp.bfloat16)  # compute in bfloat16, keep fp32 parameters";
// flax.linen's modules say it themselves: their dtype is the computation's, param_dtype the parameters'.
constexpr std::string_view kFlaxMixedPrecisionCode =
    "nn.Dense(features, dtype=jnp.bfloat16)  # each flax layer: compute in bfloat16, param_dtype stays fp32";
constexpr double kMixedPrecisionCost = 0.02;
constexpr std::string_view kFlaxConvMixedPrecisionCode =
    "nn.Conv(features, (3, 3), dtype=jnp.bfloat16); nn.Dense(classes, dtype=jnp.bfloat16)  # compute in "
    "bfloat16, param_dtype stays fp32";
std::string_view mixed_precision_code(const ModelSpec& spec) {
  if (spec.model == ModelFamily::kFlaxCnn) return kFlaxConvMixedPrecisionCode;
  return spec.model == ModelFamily::kFlaxEncoder ? kFlaxMixedPrecisionCode : kMixedPrecisionCode;
}

// A remat policy as the user's code applies it: jax.checkpoint around a block, or flax's nn.remat around the
// Layer module (the flax encoder's blocks).
std::string remat_code(const ModelSpec& spec, std::string_view policy) {
  if (spec.model == ModelFamily::kFlaxEncoder)
    return fmt::format(
        "RematLayer = nn.remat(Layer, policy=jax.checkpoint_policies.{})  # the Encoder calls it", policy);
  return fmt::format("jax.checkpoint(block, policy=jax.checkpoint_policies.{})", policy);
}

// cuDNN's fused attention, offered alone or with bf16 compute, and stacked after bf16 compute by itself.
constexpr std::string_view kCudnnAttentionNote =
    "a fused kernel, usually faster; cuDNN 8.9+ on an Ampere or newer GPU";
constexpr double kCudnnAttentionCost = 0.01;
std::string cudnn_attention_code(const ModelSpec& spec) {
  return fmt::format("jax.nn.dot_product_attention(q, k, v, {}implementation='cudnn')  # q, k, v in bfloat16",
                     spec.model == ModelFamily::kGpt ? "is_causal=True, " : "");
}

// Changes made before the one a row tries: the row names them all, its code applies them all, and it
// costs their sum.
struct OnTop {
  std::string changes, code, notes;
  double cost = 0;
  void push(const FitCandidate& row, int group) {
    // Donation and bf16 compute by short names: the row names every change it stacks.
    const std::string name = group == kStackDonation    ? "donation"
                             : group == kStackPrecision ? "mixed precision"
                                                        : row.change;
    push(name, row.code, row.cost_note, row.cost);
  }
  void push(const std::string& name, const std::string& line, const std::string& note, double more) {
    changes += (changes.empty() ? "" : " + ") + name;
    code += (code.empty() ? "" : "\n") + line;
    notes += (notes.empty() ? "" : "; ") + note;
    cost += more;
  }
};

// The order trials are taken in: the one planned whole whatever the depth (the step itself: exact_figure)
// first, then the longest family, each family's members in order, then the other changes
// of their own in the seed's order (a 300-layer flax encoder's fit: its step, taken last as it was, ran alone
// at the end - 10.3 s, 9.3-9.6 s so). A member waits for the one before it, and is not planned at
// all when that one (or an earlier one) fits - it would not be shown. A thread takes the first trial in
// this order that is not waiting, so the longest chain of plans that must follow one another starts first
// and the rest fill the other threads beside it (a 300-layer bf16 ViT's accumulation family is four whole
// plans in a row: taken after every family's first member, as it was, it ran alone at the end). The worst
// case (nothing fits) plans every trial.
struct PlanningOrder {
  std::vector<size_t> order;     // trials to plan (those with a program of their own), in taking order
  std::vector<size_t> previous;  // per trial, its family's member before it (SIZE_MAX: none)
};
PlanningOrder planning_order(const std::vector<Trial>& trials) {
  std::vector<std::vector<size_t>> chains;  // a change alone, or a family's members in order
  std::vector<size_t> chain_of_family;
  for (size_t i = 0; i < trials.size(); ++i) {
    if (trials[i].same_program_as != SIZE_MAX) continue;  // planned with the trial it copies
    const auto f = static_cast<size_t>(trials[i].family);
    if (f == 0) {
      chains.push_back({i});
      continue;
    }
    if (f >= chain_of_family.size()) chain_of_family.resize(f + 1, SIZE_MAX);
    if (chain_of_family[f] == SIZE_MAX) {
      chain_of_family[f] = chains.size();
      chains.emplace_back();
    }
    chains[chain_of_family[f]].push_back(i);
  }
  auto whole = [&](const std::vector<size_t>& c) { return c.size() == 1 && trials[c.front()].exact_figure; };
  std::stable_sort(chains.begin(), chains.end(), [&](const auto& a, const auto& b) {
    return std::make_tuple(!whole(a), -static_cast<int64_t>(a.size())) <
           std::make_tuple(!whole(b), -static_cast<int64_t>(b.size()));
  });
  PlanningOrder p{{}, std::vector<size_t>(trials.size(), SIZE_MAX)};
  for (const std::vector<size_t>& c : chains) {
    for (size_t k = 0; k < c.size(); ++k) {
      p.order.push_back(c[k]);
      if (k > 0) p.previous[c[k]] = c[k - 1];
    }
  }
  return p;
}

bool extended_from_fit_depths(const StepPlan& p) {
  return !p.extrapolated_from.empty() && p.extrapolated_from.front() == kFitExtrapolationLayers;
}

// A family of changes stops once a member (peak `last_bytes`) lowers the peak by less than a tenth more than
// the member before it (`before_bytes`): FSDP past the point where the unsharded activations dominate, say.
bool stops_helping(uint64_t last_bytes, uint64_t before_bytes) {
  return last_bytes / 10 * 10 > before_bytes / 10 * 9;
}

// Plans the trials, on as many threads as the machine has: each plan builds and plans its own program and
// shares nothing, and a fit of a 300-layer model is a dozen such plans of a second each. A family member
// after one that fits is not planned (nullopt). `run_ahead`: a member does not wait for the one before it
// to finish, only for the one before that (it is planned, and not shown, if the one before it fits) - for a
// round with little else to plan.
Expected<std::vector<std::optional<StepPlan>>> plan_trials(
    const std::vector<Trial>& trials, uint64_t capacity_bytes,
    const std::function<void(size_t, size_t)>& progress, bool run_ahead = false) {
  std::vector<std::optional<Expected<StepPlan>>> plans(trials.size());
  const PlanningOrder planned = planning_order(trials);
  const std::vector<size_t>& order = planned.order;  // references, not a structured binding: lambdas use them
  const std::vector<size_t>& previous = planned.previous;
  enum class State { kWaiting, kPlanning, kDone };
  std::vector<State> state(trials.size(), State::kWaiting);
  // It, or a member before it, fits - or the family stopped helping (below): its later members are not
  // planned.
  std::vector<bool> family_over(trials.size(), false);
  size_t finished = 0;
  std::mutex mutex;
  std::condition_variable changed;
  // The next trial to plan, under the lock; SIZE_MAX when none is left. Marks the ones it passes over.
  // Whether its family stops before member `i`: a member before it that is done fits (or was itself not
  // planned), or two done members one after the other stop helping (stops_helping) - looked for all the way
  // back, as a member that ran ahead can finish before the one it ran beside.
  auto stopped_before = [&](size_t i) {
    for (size_t j = previous[i]; j != SIZE_MAX; j = previous[j]) {
      if (state[j] != State::kDone) continue;
      if (family_over[j]) return true;
      const size_t k = previous[j];
      if (k == SIZE_MAX || state[k] != State::kDone) continue;
      const auto& last = plans[j];
      const auto& before = plans[k];
      if (last && before && last->ok() && before->ok() &&
          stops_helping((*last)->peak_bytes, (*before)->peak_bytes))
        return true;
    }
    return false;
  };
  // A member planned ahead may be planned for nothing (the one before it fits), so one is taken only when
  // no other trial can be: with the longest family first in `order`, its second member would otherwise
  // be taken before every other family's first.
  auto take = [&](std::unique_lock<std::mutex>& lock) -> size_t {
    for (;;) {
      bool waiting = false;
      size_t ahead = SIZE_MAX;  // the first member that may be planned beside the one before it
      for (size_t i : order) {
        if (state[i] != State::kWaiting) continue;
        const size_t p = previous[i];
        if (stopped_before(i)) {
          state[i] = State::kDone;  // not shown: a member before it fits, or the family stopped helping
          family_over[i] = true;
          ++finished;
          if (progress) progress(finished, order.size());
          changed.notify_all();
          continue;
        }
        // Its family's member before it is being planned: wait for it - or, running ahead, plan beside it
        // when the one before that is done (one member ahead at most: a member that fits stops the rest).
        if (p != SIZE_MAX && state[p] != State::kDone) {
          if (run_ahead && ahead == SIZE_MAX &&
              (previous[p] == SIZE_MAX || state[previous[p]] == State::kDone))
            ahead = i;
          waiting = true;
          continue;
        }
        // The member before it ran ahead of its own predecessor, which is still being planned: whether that
        // one fits, or the family stops helping, is not known yet. Without this wait (and stopped_before's
        // look all the way back) a family ran on past a long plan one member after another: the 300-layer
        // flax encoder's data-parallel stack planned all six device counts where two are shown.
        if (p != SIZE_MAX && previous[p] != SIZE_MAX && state[previous[p]] != State::kDone) {
          waiting = true;
          continue;
        }
        state[i] = State::kPlanning;
        return i;
      }
      if (ahead != SIZE_MAX) {
        state[ahead] = State::kPlanning;
        return ahead;
      }
      if (!waiting) return SIZE_MAX;
      changed.wait(lock);
    }
  };
  auto work = [&] {
    std::unique_lock<std::mutex> lock(mutex);
    for (size_t i = take(lock); i != SIZE_MAX; i = take(lock)) {
      lock.unlock();
      Expected<StepPlan> plan = internal_error("not planned");
      // An exception must not leave a worker thread (that would end the process): it becomes this
      // trial's error, as the CLI would make it on the main thread.
      try {
        plan = plan_step_extended(trials[i].spec, capacity_bytes, trials[i].memory_fraction,
                                  /*verdict_only=*/!trials[i].exact_figure);
      } catch (const std::bad_alloc&) {
        plan = resource_exhausted("out of host memory while planning a change");
      } catch (const std::exception& e) {
        plan = internal_error(fmt::format("internal error: {} (please report it)", e.what()));
      }
      lock.lock();
      family_over[i] = plan.ok() && plan->fits;
      plans[i].emplace(std::move(plan));
      state[i] = State::kDone;
      ++finished;
      if (progress) progress(finished, order.size());
      changed.notify_all();
    }
  };
  const size_t threads =
      std::min<size_t>(order.size(), std::max<unsigned>(1, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  for (size_t i = 0; i < trials.size(); ++i) {
    const size_t from = trials[i].same_program_as;
    if (from == SIZE_MAX) continue;
    plans[i] = plans[from];
    if (!plans[i]->ok()) continue;
    // The same program in another pool: its verdicts are set_capacity's, as every plan's are.
    step_plan_internal::set_capacity(**plans[i], capacity_bytes, trials[i].memory_fraction);
  }
  std::vector<std::optional<StepPlan>> out(trials.size());
  for (size_t i = 0; i < trials.size(); ++i) {
    if (!plans[i]) continue;                        // after a member of its family that fits
    if (!plans[i]->ok()) return plans[i]->error();  // the first failure in the seed's order
    out[i] = std::move(**plans[i]);
  }
  return out;
}

// PCIe 5.0 x16, the host link of an H100 or H200: 64 GB/s each way. The link's rate, not a measurement,
// so the time it gives is the least the copies can take.
constexpr double kHostLinkBytesPerSecond = 64e9;

// The offload trial's note, once planned: what it moves over PCIe, and whether the device gains anything.
// XLA:GPU's latency-hiding scheduler copies each saved value to the host only just before the backward pass
// reads it back, so the device holds it as long as remat dots_no_batch would, and it runs later layers'
// weight gradients inside the copies' windows, so what they read lives longer (plan/xla_gpu_model.h,
// latency_hiding_scheduled): the candidate is then host memory spent for nothing, or for more device memory,
// and the note says so (on the H200, gpt_mixed_donate_offload_dots_nb peaked at 6.75 GB against
// dots_no_batch's 4.54 GB).
void describe_offload(std::vector<Trial>& trials, const std::vector<std::optional<StepPlan>>& plans,
                      size_t offload, size_t kept, const StepPlan& baseline) {
  const StepPlan& p = *plans[offload];
  FitCandidate& row = trials[offload].row;
  row.host_peak_bytes = p.host_peak_bytes;
  const double ms = 2.0 * static_cast<double>(p.offloaded_bytes) / kHostLinkBytesPerSecond * 1e3;
  row.cost_note =
      fmt::format("{} to the host and back each step (>= {:.0f} ms of PCIe at 64 GB/s), {} pinned",
                  format_bytes(p.offloaded_bytes), ms, format_bytes(p.host_peak_bytes));
  // The same step keeping those values on the device: the baseline if it already is, else its trial.
  // Either may be an estimate (it cannot fit: peak_is_estimate). Where one could fit, its figure is under
  // the pool and the other's estimate over it, so the comparison stands. Where neither can, both are
  // estimates from the same depths (a flax encoder's the bytes live at once), and they compare what the
  // device holds: planned whole, the two differ by the heap's packing alone (a 128-layer flax encoder's
  // offload 96 KB under of 462 MB, the same bytes live at once; tests/plan/step_plan_test.cc). The note marks
  // an estimate as the rows do.
  const StepPlan* kept_plan = nullptr;
  if (baseline.spec.remat == RematPolicy::kDotsNoBatch && baseline.spec.remat_layers.empty()) {
    kept_plan = &baseline;
  } else if (kept != SIZE_MAX) {
    kept_plan = &*plans[kept];
  }
  if (kept_plan != nullptr && p.peak_bytes >= kept_plan->peak_bytes) {
    row.only_moves_to_host = true;
    const std::string kept_peak =
        fmt::format("remat dots_no_batch's ({}{})", peak_is_estimate(*kept_plan) ? "~" : "",
                    format_bytes(kept_plan->peak_bytes));
    row.cost_note += p.peak_bytes == kept_plan->peak_bytes
                         ? fmt::format(
                               "; only moves memory to the host: XLA copies each value just before the "
                               "backward pass reads it, so the device peak is no lower than {}",
                               kept_peak)
                         : fmt::format(
                               "; raises the device peak over {}: XLA copies each value just before "
                               "the backward pass reads it and runs later layers' weight gradients "
                               "while the copies come back",
                               kept_peak);
  }
}

// The search fit_step runs: the seed's changes as trials, planned together; then, when none fits alone, the
// ones that lowered the peak stacked and tried over the families that scale the step down.
class FitSearch {
 public:
  FitSearch(const ModelSpec& spec, uint64_t capacity_bytes, double memory_fraction,
            const std::function<void(size_t, size_t)>& progress)
      : spec_(spec),
        capacity_bytes_(capacity_bytes),
        memory_fraction_(memory_fraction),
        progress_(progress),
        serving_(spec.step == StepKind::kInfer || spec.step == StepKind::kDecode) {}

  Expected<FitResult> run();

 private:
  void add(const char* step, std::string change, std::string code, double cost, std::string note,
           const ModelSpec& changed, double fraction, bool in_family = false, int stack_group = 0);
  // The families of changes with a size (more accumulation, a smaller batch, more devices), each tried on
  // `base`.
  void add_accumulation(const ModelSpec& base);
  void add_smaller_batch(const ModelSpec& base);
  void add_fsdp(const ModelSpec& base);
  void add_tensor_parallel(const ModelSpec& base);
  void add_data_parallel(const ModelSpec& base);
  void add_data_axis(const ModelSpec& base, ShardingKind sharding, const char* change, const char* placed);
  // 4. sharding: FSDP over more devices (parameters, gradients and optimizer state split; batch split).
  static bool fsdp_applies(const ModelSpec& base) {
    return base.sharding == ShardingKind::kReplicated && base.devices() <= 1 && base.step == StepKind::kTrain;
  }
  // The first round's changes, in the seed's order: allocation, location, shapes, sharding.
  void add_allocation();
  void add_location();
  void add_shapes();
  // The stack for a combined round from the first round's plans; the number of changes in it.
  size_t stack_best_changes(const std::vector<std::optional<StepPlan>>& plans, ModelSpec& stacked);
  // The rows of `planned` that are shown, with their plans' figures.
  void take_rows(std::vector<Trial>& planned, const std::vector<std::optional<StepPlan>>& their_plans);
  Status combined_round(const ModelSpec& stacked, size_t stacked_changes);

  const ModelSpec& spec_;
  const uint64_t capacity_bytes_;
  const double memory_fraction_;
  const std::function<void(size_t, size_t)>& progress_;
  const bool serving_;
  FitResult result_;
  std::vector<Trial> trials_;
  int family_ = 0;
  // The changes every trial is made on top of: none in the first round, the stack in the combined one.
  OnTop on_top_;
  size_t larger_pool_trial_ = SIZE_MAX;  // the step as it is, in a larger pool
  size_t offload_trial_ = SIZE_MAX;
  size_t dots_no_batch_trial_ = SIZE_MAX;
};

void FitSearch::add(const char* step, std::string change, std::string code, double cost, std::string note,
                    const ModelSpec& changed, double fraction, bool in_family, int stack_group) {
  if (!validate_model_spec(changed).ok()) return;  // not applicable to this model
  FitCandidate row;
  row.step = on_top_.changes.empty() ? step : "combined";
  row.change = on_top_.changes.empty() ? std::move(change) : on_top_.changes + " + " + change;
  row.code = on_top_.code.empty() ? std::move(code) : on_top_.code + "\n" + code;
  row.cost = on_top_.cost + cost;
  row.cost_note = on_top_.notes.empty() ? std::move(note) : on_top_.notes + "; " + note;
  trials_.push_back({std::move(row), changed, fraction, in_family ? family_ : 0, SIZE_MAX, stack_group});
}

void FitSearch::add_accumulation(const ModelSpec& base) {
  if (base.step != StepKind::kTrain) return;
  ++family_;
  for (uint64_t k : {2, 4, 8, 16}) {
    ModelSpec s = base;
    s.accum = base.accum * k;
    add("shapes", fmt::format("gradient accumulation over {} microbatches", s.accum),
        fmt::format("optax.MultiSteps(optimizer, every_k_schedule={})  # or scan over {} microbatches",
                    s.accum, s.accum),
        0.05 * static_cast<double>(k),
        fmt::format("{} sequential microbatches: less parallel work per kernel", k), s, memory_fraction_,
        true);
  }
}

void FitSearch::add_smaller_batch(const ModelSpec& base) {
  ++family_;
  // A server can go down to one sequence at a time; a training run is offered a half and a quarter.
  const uint64_t most = serving_ ? 64 : 4;
  for (uint64_t div = 2; div <= most && div <= base.batch; div *= 2) {
    ModelSpec s = base;
    if (s.batch % div != 0) continue;
    s.batch /= div;
    add("shapes", fmt::format("batch {} instead of {}", s.batch, base.batch),
        fmt::format("batch_size = {}", s.batch), 0.5 * static_cast<double>(div),
        // Only training learns from the batch; an inference or decode step serves fewer sequences at once.
        serving_ ? "fewer sequences per step: the same requests take more steps"
                 : "changes the optimization: retune the learning rate",
        s, memory_fraction_, true);
  }
}

// Whether the model is built with `sharding` over two devices on `axis` - asked of the model alone: twice
// the batch always splits its microbatches over two devices.
bool builds_sharded(const ModelSpec& base, ShardingKind sharding, const char* axis) {
  ModelSpec s = base;
  s.sharding = sharding;
  s.mesh = {2};
  s.mesh_axes = {axis};
  if (base.batch <= UINT64_MAX / 2) s.batch = 2 * base.batch;  // (a batch that large is refused anyway)
  return validate_model_spec(s).ok();
}

// A family over more devices on the data axis, each holding its share of the batch (the global batch
// rounded up to split): FSDP (`kFsdp`), or plain data parallelism (`kReplicated`) for a model memfit builds
// without FSDP or tensor parallelism (the conv net) - the parameters and optimizer state replicated, each
// device holding its share of the activations, which are most of a conv net's step. `placed` is the JAX
// that follows the mesh in the row's code.
void FitSearch::add_data_axis(const ModelSpec& base, ShardingKind sharding, const char* change,
                              const char* placed) {
  ++family_;
  for (uint64_t n : {2, 4, 8, 16, 32, 64}) {
    ModelSpec s = base;
    s.sharding = sharding;
    s.mesh = {n};
    s.mesh_axes = {"data"};
    if (s.batch % n != 0) s.batch = (s.batch + n - 1) / n * n;  // the global batch must split
    add("sharding", fmt::format("{} over {} devices", change, n),
        fmt::format("mesh = Mesh(np.array(jax.devices()[:{}]), ('data',)); {}", n, placed),
        static_cast<double>(n - 1), fmt::format("{} GPUs", n), s, memory_fraction_, true);
  }
}

void FitSearch::add_data_parallel(const ModelSpec& base) {
  add_data_axis(base, ShardingKind::kReplicated, "data parallel",
                "batch = jax.device_put(batch, NamedSharding(mesh, P('data')))  # parameters replicated");
}

// A server's sharding: tensor parallel over more devices (each holds its share of the heads, the hidden
// units and the KV cache); data parallel where the model is not built for it.
void FitSearch::add_tensor_parallel(const ModelSpec& base) {
  if (!serving_ || base.sharding != ShardingKind::kReplicated || base.devices() > 1) return;
  if (!builds_sharded(base, ShardingKind::kTp, "model")) {
    add_data_parallel(base);
    return;
  }
  ++family_;
  for (uint64_t n : {2, 4, 8}) {
    ModelSpec s = base;
    s.sharding = ShardingKind::kTp;
    s.mesh = {n};
    s.mesh_axes = {"model"};
    add("sharding", fmt::format("tensor parallel over {} devices", n),
        fmt::format("mesh = Mesh(np.array(jax.devices()[:{}]), ('model',))  # wqkv, w1 by columns; wo, w2 "
                    "by rows{}",
                    n,
                    base.step == StepKind::kDecode
                        ? "; the KV cache by heads: NamedSharding(mesh, P(None, 'model'))"
                        : ""),
        static_cast<double>(n - 1), fmt::format("{} GPUs", n), s, memory_fraction_, true);
  }
}

// FSDP over more devices; data parallel where the model is not built for it.
void FitSearch::add_fsdp(const ModelSpec& base) {
  if (!fsdp_applies(base)) return;
  if (!builds_sharded(base, ShardingKind::kFsdp, "data")) {
    add_data_parallel(base);
    return;
  }
  add_data_axis(base, ShardingKind::kFsdp, "FSDP",
                "jax.device_put(params, NamedSharding(mesh, P('data')))  # largest axis of each array");
}

// 1. allocation: a larger pool, then donation.
void FitSearch::add_allocation() {
  if (memory_fraction_ < 0.95) {
    larger_pool_trial_ = trials_.size();
    add("allocation", "XLA_CLIENT_MEM_FRACTION=.95",
        "os.environ['XLA_CLIENT_MEM_FRACTION'] = '.95'  # before importing jax", 0,
        "free, if nothing else shares the GPU", spec_, 0.95);
  }
  if (!spec_.donate && spec_.step == StepKind::kTrain) {
    ModelSpec s = spec_;
    s.donate = true;
    add("allocation", "donate parameters and optimizer state", "jax.jit(step, donate_argnums=(0, 1))", 0.01,
        "free; the old arrays are gone after the call", s, memory_fraction_, false, kStackDonation);
  }
}

// 2. location: the activations saved for the backward pass kept in pinned host memory instead.
void FitSearch::add_location() {
  if (spec_.step != StepKind::kTrain || spec_.remat == RematPolicy::kOffloadDotsNoBatch) return;
  ModelSpec s = spec_;
  s.remat = RematPolicy::kOffloadDotsNoBatch;
  s.remat_layers.clear();
  const size_t before = trials_.size();
  add("location", "offload saved activations to pinned host memory",
      remat_code(spec_, "offload_dot_with_no_batch_dims('device', 'pinned_host')"), 0.25, "", s,
      memory_fraction_);
  // Compared with remat dots_no_batch's (describe_offload), as planned: a figure where either could fit,
  // where neither can, two estimates.
  if (trials_.size() > before) offload_trial_ = before;
}

// 3. shapes: precision, rematerialization, accumulation, batch.
void FitSearch::add_shapes() {
  if (spec_.precision == Precision::kFp32) {
    ModelSpec s = spec_;
    s.precision = Precision::kMixed;
    add("shapes", "mixed precision (fp32 parameters, bf16 compute)", std::string(mixed_precision_code(spec_)),
        kMixedPrecisionCost,
        serving_ ? "faster on tensor cores; check the outputs against fp32"
                 : "faster on tensor cores; check the loss curve",
        s, memory_fraction_, false, kStackPrecision);
  }
  // cuDNN's fused attention: the scores and probabilities (batch x heads x seq x seq each) are never
  // materialized, forward or backward. The kernel computes in bf16 or fp16: an fp32 step takes it with
  // bf16 compute, one change of two parts.
  if (spec_.attn == AttentionKind::kXla) {
    ModelSpec s = spec_;
    s.attn = AttentionKind::kCudnn;
    const bool with_precision = s.precision == Precision::kFp32;
    if (with_precision) s.precision = Precision::kMixed;
    const std::string note(kCudnnAttentionNote);
    add("shapes", with_precision ? "mixed precision + cuDNN fused attention" : "cuDNN fused attention",
        with_precision ? fmt::format("{}\n{}", mixed_precision_code(spec_), cudnn_attention_code(spec_))
                       : cudnn_attention_code(spec_),
        kCudnnAttentionCost + (with_precision ? kMixedPrecisionCost : 0.0),
        with_precision ? (serving_ ? "check the outputs against fp32; " : "check the loss curve; ") + note
                       : note,
        s, memory_fraction_, false, kStackAttention);
  }
  if (spec_.step == StepKind::kTrain) {
    const struct {
      RematPolicy policy;
      const char* jax_policy;
      double cost;
      const char* note;
    } remats[] = {
        {RematPolicy::kDotsNoBatch, "dots_with_no_batch_dims_saveable", 0.2,
         "~20% more compute: attention and elementwise ops run twice"},
        {RematPolicy::kDots, "dots_saveable", 0.15, "~15% more compute: elementwise ops run twice"},
        {RematPolicy::kFull, "nothing_saveable", 0.33, "~33% more compute: the forward pass runs twice"},
    };
    for (const auto& r : remats) {
      if (spec_.remat == r.policy && spec_.remat_layers.empty()) continue;
      ModelSpec s = spec_;
      s.remat = r.policy;
      s.remat_layers.clear();
      const size_t before = trials_.size();
      add("shapes", fmt::format("remat {}", to_string(r.policy)), remat_code(spec_, r.jax_policy), r.cost,
          r.note, s, memory_fraction_, false, kStackRemat);
      if (r.policy == RematPolicy::kDotsNoBatch && trials_.size() > before) dots_no_batch_trial_ = before;
    }
  }
  add_accumulation(spec_);
  add_smaller_batch(spec_);
}

size_t FitSearch::stack_best_changes(const std::vector<std::optional<StepPlan>>& plans, ModelSpec& stacked) {
  size_t stacked_changes = 0;
  std::vector<size_t> best(kStackGroups, SIZE_MAX);  // per group, the trial that lowered the peak most
  for (size_t i = 0; i < trials_.size(); ++i) {
    const int g = trials_[i].stack_group;
    if (g == 0 || !plans[i] || plans[i]->peak_bytes >= result_.baseline.peak_bytes) continue;
    if (best[g] == SIZE_MAX || plans[i]->peak_bytes < plans[best[g]]->peak_bytes) best[g] = i;
  }
  for (size_t i : best) {
    if (i == SIZE_MAX) continue;
    const Trial& t = trials_[i];
    stacked.donate = t.spec.donate || stacked.donate;
    if (t.stack_group == kStackPrecision) stacked.precision = t.spec.precision;
    if (t.stack_group == kStackRemat) {
      stacked.remat = t.spec.remat;
      stacked.remat_layers = t.spec.remat_layers;
    }
    if (t.stack_group == kStackAttention) {
      stacked.attn = t.spec.attn;
      // Its bf16 compute is stacked already when mixed precision is: the kernel alone is added.
      if (best[kStackPrecision] != SIZE_MAX && t.spec.precision != spec_.precision) {
        on_top_.push("cuDNN fused attention", cudnn_attention_code(spec_), std::string(kCudnnAttentionNote),
                     kCudnnAttentionCost);
        ++stacked_changes;
        continue;
      }
      stacked.precision = t.spec.precision;
    }
    on_top_.push(t.row, t.stack_group);
    ++stacked_changes;
  }
  return stacked_changes;
}

void FitSearch::take_rows(std::vector<Trial>& planned,
                          const std::vector<std::optional<StepPlan>>& their_plans) {
  // A family shows its members up to the first that fits, and stops where stops_helping says plan_trials
  // stops planning it. A member planned beside the one before it (run-ahead) was planned before that could
  // be known; it is not shown when the rule would not have planned it, so that what is shown does not depend
  // on which plan finished first. Per family: whether a member fitted, and the peaks of its last two.
  struct Shown {
    bool fits = false;
    uint64_t before_bytes = 0, last_bytes = 0;
  };
  std::vector<Shown> families(static_cast<size_t>(family_) + 1);
  for (size_t i = 0; i < planned.size(); ++i) {
    Trial& t = planned[i];
    if (!their_plans[i]) continue;  // not planned: a member before it fits, or its family stopped helping
    const StepPlan& p = *their_plans[i];
    if (t.family != 0) {
      Shown& f = families[static_cast<size_t>(t.family)];
      if (f.fits || (f.before_bytes != 0 && stops_helping(f.last_bytes, f.before_bytes))) continue;
      f.before_bytes = f.last_bytes;
      f.last_bytes = p.peak_bytes;
      f.fits = p.fits;
    }
    t.row.peak_bytes = p.peak_bytes;
    t.row.peak_upper_bytes = p.peak_upper_bytes;
    t.row.limit_bytes = p.limit_bytes;
    t.row.fits = p.fits;
    t.row.fits_in_every_order = p.fits_in_every_order;
    t.row.peak_approximate = peak_is_estimate(p);
    t.row.peak_at_least_bytes = p.peak_at_least_bytes;
    result_.candidates.push_back(std::move(t.row));
  }
}

// 5. combined: no single change fits. The seed's steps are meant to be taken together, in its order: the
// changes that lowered the peak are stacked (donation, bf16 compute, the remat policy that saved most:
// allocation and shapes), and the stack is tried alone and then over more devices (sharding, the last
// step; a step that cannot be sharded so: more accumulation or a smaller batch; a server: a smaller
// batch, or tensor parallel), each family stopping at its first member that fits. A member is planned
// beside the one before it on an idle core (a 300-layer fit would otherwise wait on them one by one).
Status FitSearch::combined_round(const ModelSpec& stacked, size_t stacked_changes) {
  auto planned_so_far = [&, offset = result_.programs_planned](size_t done, size_t total) {
    if (progress_) progress_(offset + done, offset + total);
  };
  trials_.clear();
  if (stacked_changes > 1) {
    // The stack alone heads the first family's chain: when it fits, nothing more is planned or shown.
    FitCandidate row;
    row.step = "combined";
    row.change = on_top_.changes;
    row.code = on_top_.code;
    row.cost = on_top_.cost;
    row.cost_note = on_top_.notes;
    trials_.push_back({std::move(row), stacked, memory_fraction_, family_ + 1});
  }
  if (serving_) {
    add_smaller_batch(stacked);
    add_tensor_parallel(stacked);
  } else if (fsdp_applies(stacked)) {
    add_fsdp(stacked);
  } else {
    add_accumulation(stacked);
    add_smaller_batch(stacked);
  }
  MEMFIT_ASSIGN_OR_RETURN(std::vector<std::optional<StepPlan>> on_stack,
                          plan_trials(trials_, capacity_bytes_, planned_so_far, /*run_ahead=*/true));
  for (const std::optional<StepPlan>& p : on_stack) {
    result_.programs_planned += p.has_value();
    result_.programs_extrapolated += p.has_value() && extended_from_fit_depths(*p);
    result_.programs_approximate += p.has_value() && peak_is_estimate(*p);
  }
  take_rows(trials_, on_stack);
  return ok_status();
}

Expected<FitResult> FitSearch::run() {
  add_allocation();
  add_location();
  add_shapes();
  add_fsdp(spec_);
  add_tensor_parallel(spec_);
  // The baseline is planned with the trials (taken first: planning_order); the larger pool is the same
  // program.
  trials_.push_back({FitCandidate{}, spec_, memory_fraction_, 0});
  trials_.back().exact_figure = true;  // the step's peak, as memfit plan gives it
  if (larger_pool_trial_ < trials_.size() - 1)
    trials_[larger_pool_trial_].same_program_as = trials_.size() - 1;
  MEMFIT_ASSIGN_OR_RETURN(std::vector<std::optional<StepPlan>> plans,
                          plan_trials(trials_, capacity_bytes_, progress_));
  for (size_t i = 0; i < trials_.size(); ++i) {
    if (!plans[i] || trials_[i].same_program_as != SIZE_MAX) continue;
    ++result_.programs_planned;
    result_.programs_extrapolated += extended_from_fit_depths(*plans[i]);
    result_.programs_approximate += peak_is_estimate(*plans[i]);
  }
  result_.baseline = std::move(*plans.back());
  trials_.pop_back();
  if (offload_trial_ != SIZE_MAX)
    describe_offload(trials_, plans, offload_trial_, dots_no_batch_trial_, result_.baseline);
  // The stack for a combined round, taken before the rows move into the result.
  ModelSpec stacked = spec_;
  const size_t stacked_changes = stack_best_changes(plans, stacked);
  take_rows(trials_, plans);
  const bool any_fits = std::any_of(result_.candidates.begin(), result_.candidates.end(),
                                    [](const FitCandidate& c) { return c.fits && !c.only_moves_to_host; });
  if (!result_.baseline.fits && !any_fits && stacked_changes > 0)
    MEMFIT_RETURN_IF_ERROR(combined_round(stacked, stacked_changes));
  // A change that only moves memory to the host is not offered: remat dots_no_batch does as well for less.
  for (size_t i = 0; i < result_.candidates.size(); ++i)
    if (result_.candidates[i].fits && !result_.candidates[i].only_moves_to_host) result_.ranked.push_back(i);
  std::stable_sort(result_.ranked.begin(), result_.ranked.end(), [&](size_t a, size_t b) {
    return std::tie(result_.candidates[a].cost, result_.candidates[a].peak_bytes) <
           std::tie(result_.candidates[b].cost, result_.candidates[b].peak_bytes);
  });
  return std::move(result_);
}

}  // namespace

Expected<FitResult> fit_step(const ModelSpec& spec, uint64_t capacity_bytes, double memory_fraction,
                             const std::function<void(size_t, size_t)>& progress) {
  MEMFIT_RETURN_IF_ERROR(validate_pool_fraction(memory_fraction));
  return FitSearch(spec, capacity_bytes, memory_fraction, progress).run();
}

}  // namespace memfit
