// A step unrolled deeper than memfit builds whole, planned from the same step at three smaller depths.
//
// Why extrapolate: the unrolled program holds ~700 instructions a layer, so 10^4 layers are 7 x 10^6 - more
// than any real XLA compile takes, and minutes of planning. Its layers are identical, and so is what XLA
// does with each: the parameters, optimizer state and gradients grow by one layer's worth, the saved
// activations by one layer's residuals, and the heap by what one more layer adds at the peak. Planned at
// 64, 128 and 192 layers a GPT step's argument, output, temp and peak grow by exactly the same bytes from
// the first depth to the second as from the second to the third, and the line they draw gives the whole
// 512-layer plan's peak to the byte (GPT, ViT, the flax encoder, every remat policy, precision, inference,
// decode; tests/plan/step_plan_test.cc checks 16, 32 and 48 layers against 100 planned whole). Where the
// heap's packing wobbles between depths (the MLP: 0.006% at 512 layers), the larger growth is taken and the
// plan says it is not exact.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <exception>
#include <initializer_list>
#include <map>
#include <new>
#include <optional>
#include <thread>
#include <tuple>

#include "memfit/core/checked.h"
#include "step_plan_internal.h"

namespace memfit {
namespace {

// Extends figures measured at depths d, 2d and 3d to depth `to`; remembers whether every one grew
// alike and whether one overflowed.
class Extender {
 public:
  Extender(uint64_t d, uint64_t to) : d_(d), to_(to) {}

  uint64_t operator()(uint64_t a, uint64_t b, uint64_t c) {
    if (b < a || c < b)
      doubtful_ = true;
    else
      wobble_ = std::max(wobble_, c - b >= b - a ? (c - b) - (b - a) : (b - a) - (c - b));
    // Per d_ layers; a figure that shrank with depth (none does) is held where it was.
    const uint64_t growth = std::max(b >= a ? b - a : 0, c >= b ? c - b : 0);
    // c + growth x (to - 3d) / d, checked: growth x q + growth x r / d with (to - 3d) = q d + r.
    const uint64_t beyond = to_ - 3 * d_;
    const std::optional<uint64_t> whole = checked_mul(growth, beyond / d_);
    const std::optional<uint64_t> part = checked_mul(growth, beyond % d_);
    const std::optional<uint64_t> sum = whole && part ? checked_add(*whole, *part / d_) : std::nullopt;
    const std::optional<uint64_t> value = sum ? checked_add(c, *sum) : std::nullopt;
    if (!value) {
      overflow_ = true;
      return UINT64_MAX;
    }
    return *value;
  }
  // Each of `fields` of `out` from the same field of a, b and c.
  template <typename S>
  void fields(S& out, const S& a, const S& b, const S& c, std::initializer_list<uint64_t S::*> members) {
    for (uint64_t S::*m : members) out.*m = (*this)(a.*m, b.*m, c.*m);
  }
  // Whether the three values lie on one line (for what is kept only when they do).
  static bool on_a_line(uint64_t a, uint64_t b, uint64_t c) { return b >= a && c >= b && b - a == c - b; }

  bool exact() const { return !doubtful_ && wobble_ == 0; }
  // The largest difference between a figure's two growths; UINT64_MAX when the line is in doubt.
  uint64_t wobble_bytes() const { return doubtful_ ? UINT64_MAX : wobble_; }
  void mark_doubtful() { doubtful_ = true; }
  bool overflow() const { return overflow_; }

 private:
  uint64_t d_, to_;
  uint64_t wobble_ = 0;
  bool doubtful_ = false;  // a figure shrank, or the line was found not to be the deep step's
  bool overflow_ = false;
};

// The three whole plans, side by side on as many threads: none shares anything with another.
Expected<std::array<StepPlan, 3>> plan_depths(const ModelSpec& spec, uint64_t layers, bool pack) {
  std::array<std::optional<Expected<StepPlan>>, 3> plans;
  auto plan_at = [&](size_t k) {
    ModelSpec s = spec;
    s.blocks() = layers * (k + 1);
    // An exception must not leave a thread (that ends the process): it becomes this depth's error.
    try {
      plans[k].emplace(step_plan_internal::plan_whole_step(s, std::nullopt, 0.75, pack));
    } catch (const std::bad_alloc&) {
      plans[k].emplace(resource_exhausted("out of host memory while planning"));
    } catch (const std::exception& e) {
      plans[k].emplace(internal_error(fmt::format("internal error: {} (please report it)", e.what())));
    }
  };
  // The deepest plan costs what the other two do together: on two cores it runs beside them.
  const unsigned cores = std::max<unsigned>(1, std::thread::hardware_concurrency());
  std::vector<std::thread> threads;
  if (cores >= 2) threads.emplace_back(plan_at, 2);
  if (cores >= 3) threads.emplace_back(plan_at, 1);
  plan_at(0);
  if (cores < 3) plan_at(1);
  for (std::thread& t : threads) t.join();
  if (cores < 2) plan_at(2);
  std::array<StepPlan, 3> out;
  for (size_t k = 0; k < 3; ++k) {
    if (!plans[k]->ok()) return plans[k]->error();
    out[k] = std::move(**plans[k]);
  }
  return out;
}

}  // namespace

bool plan_is_extrapolated(const ModelSpec& spec) { return !builds_whole(spec); }

Expected<StepPlan> extrapolate_step_plan(const ModelSpec& spec, uint64_t layers,
                                         std::optional<uint64_t> capacity_bytes, double memory_fraction) {
  return step_plan_internal::extrapolate(spec, layers, capacity_bytes, memory_fraction, /*pack=*/true);
}

Expected<StepPlan> step_plan_internal::extrapolate(const ModelSpec& spec, uint64_t layers,
                                                   std::optional<uint64_t> capacity_bytes,
                                                   double memory_fraction, bool pack) {
  MEMFIT_RETURN_IF_ERROR(validate_model_spec(spec));
  if (spec.scan || spec.model == ModelFamily::kFlaxCnn)
    return invalid_argument("extrapolation: only an unrolled stack of layers grows layer by layer");
  if (layers == 0 || spec.blocks() < 3 * layers)
    return invalid_argument(
        fmt::format("extrapolation: {} layers is not beyond the depths planned ({}, {}, {})", spec.blocks(),
                    layers, 2 * layers, 3 * layers));
  if (!spec.remat_layers.empty())
    return invalid_argument("extrapolation: remat_layers makes the layers differ");
  using Plans = std::array<StepPlan, 3>;  // the macro takes no comma in its declaration
  MEMFIT_ASSIGN_OR_RETURN(Plans at, plan_depths(spec, layers, pack));
  Extender extend(layers, spec.blocks());

  StepPlan plan = at[2];  // the deepest plan's kind of program, its figures replaced below
  plan.spec = spec;
  plan.extrapolated_from = {layers, 2 * layers, 3 * layers};
  using A = StepArguments;
  extend.fields(plan.arguments, at[0].arguments, at[1].arguments, at[2].arguments,
                {&A::parameter_count, &A::parameter_bytes, &A::optimizer_state_bytes, &A::batch_bytes,
                 &A::kv_cache_bytes});
  HloPlan& h = plan.hlo;
  extend.fields(h, at[0].hlo, at[1].hlo, at[2].hlo,
                {&HloPlan::instructions, &HloPlan::argument_bytes, &HloPlan::output_bytes,
                 &HloPlan::alias_bytes, &HloPlan::temp_lower_bound_bytes, &HloPlan::host_argument_bytes,
                 &HloPlan::host_output_bytes, &HloPlan::host_alias_bytes, &HloPlan::host_temp_bytes,
                 &HloPlan::host_value_bytes, &HloPlan::constant_bytes});
  // The packed temp block (and the peak on it) on a line of its own: its growths can differ where the bytes
  // live at once do not - the heap left holes at one depth it did not at the others.
  Extender packed(layers, spec.blocks());
  h.temp_bytes = packed(at[0].hlo.temp_bytes, at[1].hlo.temp_bytes, at[2].hlo.temp_bytes);
  // The packing settled: the bytes live at once lie on an exact line, and the packed block grows by them
  // from the second depth to the third - the first depth's heap alone had holes the deeper ones did not
  // (GPT in mixed precision with full remat, cuDNN attention and FSDP over 8 devices: 5 MB at 16 layers, none
  // at 32 and 48, and the line through them is the 300-layer plan's peak to the byte).
  auto lb = [&](size_t k) { return at[k].hlo.temp_lower_bound_bytes; };
  auto tb = [&](size_t k) { return at[k].hlo.temp_bytes; };
  const bool packing_settles = Extender::on_a_line(lb(0), lb(1), lb(2)) && tb(0) <= tb(1) && tb(1) <= tb(2) &&
                               tb(2) - tb(1) == lb(2) - lb(1) && tb(1) - tb(0) <= tb(2) - tb(1);
  // Where the peak is: each pass's bytes grow on a line of their own, and the temp block's on the line of
  // the pass that leads at the three depths. A pass growing faster can overtake it deeper down - mixed
  // precision with full remat, whose forward pass holds each layer's bf16 weights and input, leads its
  // backward pass beyond ~190 layers - and then the temp block's line is not the deep step's: not exact.
  using P = PassPeaks;
  constexpr std::array<uint64_t P::*, 3> kPasses{&P::forward_bytes, &P::backward_bytes, &P::other_bytes};
  std::array<bool, 3> pass_on_line{};  // whether the pass's three figures lie on an exact line
  for (size_t k = 0; k < kPasses.size(); ++k) {
    Extender line(layers, spec.blocks());
    h.pass_peaks.*kPasses[k] = line(at[0].hlo.pass_peaks.*kPasses[k], at[1].hlo.pass_peaks.*kPasses[k],
                                    at[2].hlo.pass_peaks.*kPasses[k]);
    pass_on_line[k] = line.exact() && !line.overflow();
  }
  auto leading = [](const PassPeaks& p) {
    if (p.forward_bytes >= p.backward_bytes && p.forward_bytes >= p.other_bytes) return &P::forward_bytes;
    return p.backward_bytes >= p.other_bytes ? &P::backward_bytes : &P::other_bytes;
  };
  if (h.pass_peaks.*leading(h.pass_peaks) > h.pass_peaks.*leading(at[2].hlo.pass_peaks))
    extend.mark_doubtful();
  // The peak as plan_hlo defines it, from the extended parts (so that the parts still add up to it).
  const uint64_t io = h.argument_bytes + h.output_bytes;
  const uint64_t fixed = io >= h.alias_bytes ? io - h.alias_bytes : 0;
  h.peak_bytes = fixed + h.temp_bytes;
  h.lower_bound_bytes = fixed + h.temp_lower_bound_bytes;
  // The post order's temp (the top of the range) need not grow evenly - the program's own order is no
  // packing the layers repeat - so it is extended on a line of its own, the larger growth taken, and does not
  // make the prediction inexact.
  Extender upper_line(layers, spec.blocks());
  h.temp_upper_bytes =
      std::max(upper_line(at[0].hlo.temp_upper_bytes, at[1].hlo.temp_upper_bytes, at[2].hlo.temp_upper_bytes),
               h.temp_bytes);
  h.peak_upper_bytes = fixed + h.temp_upper_bytes;
  if (extend.overflow() || packed.overflow() || upper_line.overflow() || io < h.argument_bytes ||
      h.peak_bytes < fixed || h.lower_bound_bytes < fixed || h.peak_upper_bytes < fixed)
    return invalid_argument(
        fmt::format("layers: the step's memory at {} layers overflows 64 bits", spec.blocks()));
  // Buffers belong to a program; this plan has none. The peak's op stays when every depth peaks at it.
  h.buffers.clear();
  h.live_at_peak.clear();
  h.peak_time = 0;
  h.peak_instruction.clear();
  if (at[0].hlo.peak_op_name != at[2].hlo.peak_op_name || at[1].hlo.peak_op_name != at[2].hlo.peak_op_name)
    h.peak_op_name.clear();
  // Groups at the peak: those of one op and shape whose count grows alike at each depth, extended.
  using GroupKey = std::tuple<std::string, std::string, uint64_t>;
  std::array<std::map<GroupKey, const BufferGroup*>, 2> shallower;
  for (size_t k = 0; k < 2; ++k)
    for (const BufferGroup& g : at[k].hlo.groups) shallower[k][{g.op_name, g.shape, g.bytes_each}] = &g;
  std::vector<BufferGroup> groups;
  for (const BufferGroup& g : at[2].hlo.groups) {
    const GroupKey key{g.op_name, g.shape, g.bytes_each};
    auto a = shallower[0].find(key);
    auto b = shallower[1].find(key);
    if (a == shallower[0].end() || b == shallower[1].end()) continue;
    if (!Extender::on_a_line(a->second->count, b->second->count, g.count) ||
        !Extender::on_a_line(a->second->total_bytes, b->second->total_bytes, g.total_bytes))
      continue;
    BufferGroup e = g;
    Extender exact_line(layers, spec.blocks());
    e.count = exact_line(a->second->count, b->second->count, g.count);
    e.total_bytes = exact_line(a->second->total_bytes, b->second->total_bytes, g.total_bytes);
    e.names.clear();  // instructions of a program never built
    groups.push_back(std::move(e));
  }
  std::stable_sort(groups.begin(), groups.end(),
                   [](const BufferGroup& x, const BufferGroup& y) { return x.total_bytes > y.total_bytes; });
  h.groups = std::move(groups);

  plan.peak_bytes = h.peak_bytes;
  plan.peak_upper_bytes = h.peak_upper_bytes;
  extend.fields(plan, at[0], at[1], at[2], {&StepPlan::host_peak_bytes, &StepPlan::offloaded_bytes});
  PeakBreakdown& b = plan.breakdown;
  using B = PeakBreakdown;
  extend.fields(b, at[0].breakdown, at[1].breakdown, at[2].breakdown,
                {&B::parameters, &B::optimizer_state, &B::gradients, &B::activations, &B::kv_cache});
  // The rest of the peak: the parts add up to it, as in a whole plan.
  const uint64_t named = b.parameters + b.optimizer_state + b.gradients + b.activations + b.kv_cache;
  b.temporaries = plan.peak_bytes > named ? plan.peak_bytes - named : 0;
  plan.extrapolation_exact = extend.exact() && packed.exact();
  plan.extrapolation_wobble_bytes = std::max(extend.wobble_bytes(), packed.wobble_bytes());
  plan.extrapolation_line_wobble_bytes =
      packing_settles ? extend.wobble_bytes() : plan.extrapolation_wobble_bytes;
  // The bytes live at once, at the least (the fit's verdict that a change cannot fit whatever the
  // packing): the deepest plan's temporaries at their fullest moment - a deeper stack of the same layers
  // holds all that a shallower one does then - beside the arguments and outputs at the step's own depth,
  // which are live throughout when they lie on exact lines. The passes' lines are no bound: GPT (d_model
  // 256) over 4 microbatches grows exactly from 16 to 48 layers and holds 1 MiB less than its lines at 128
  // (its list order's fullest moment holds other microbatch values at each depth).
  const bool io_on_lines =
      Extender::on_a_line(at[0].hlo.argument_bytes, at[1].hlo.argument_bytes, at[2].hlo.argument_bytes) &&
      Extender::on_a_line(at[0].hlo.output_bytes, at[1].hlo.output_bytes, at[2].hlo.output_bytes) &&
      Extender::on_a_line(at[0].hlo.alias_bytes, at[1].hlo.alias_bytes, at[2].hlo.alias_bytes);
  plan.peak_at_least_bytes = at[2].hlo.lower_bound_bytes;
  if (io_on_lines)
    if (const auto at_least = checked_add(fixed, at[2].hlo.temp_lower_bound_bytes))
      plan.peak_at_least_bytes = std::max(plan.peak_at_least_bytes, *at_least);
  // The figure itself is never under the line of any pass whose fullest moment lies on one (a pass off its
  // line is left out, the others still count: the flax encoder's mixed-precision, full-remat step over 2
  // devices holds its backward pass's most at 16 layers where it holds its forward pass's at 32 and 48, and
  // its forward pass's line, 402,655,232 B per 16 layers at each depth, put it 9.4 MB under its whole
  // 300-layer plan).
  uint64_t live_on_lines_bytes = plan.peak_at_least_bytes;
  for (size_t k = 0; k < kPasses.size() && io_on_lines; ++k) {
    if (!pass_on_line[k]) continue;
    if (const auto on_line = checked_add(fixed, h.pass_peaks.*kPasses[k]))
      live_on_lines_bytes = std::max(live_on_lines_bytes, *on_line);
  }
  // A line that is not exact can end under those bytes (a pass overtaking the one that led at 48 layers: the
  // flax encoder in mixed precision with full remat at 300 layers extended to 25.03 GiB, 26.71 GiB live at
  // once on its forward pass's line, 26.77 GiB planned whole): the figure is raised to the lines, the
  // difference counted as temporaries.
  if (plan.peak_bytes < live_on_lines_bytes) {
    const uint64_t raise = live_on_lines_bytes - plan.peak_bytes;
    h.temp_bytes += raise;
    h.peak_bytes += raise;
    h.temp_upper_bytes = std::max(h.temp_upper_bytes, h.temp_bytes);
    h.peak_upper_bytes = std::max(h.peak_upper_bytes, h.peak_bytes);
    plan.peak_bytes = h.peak_bytes;
    plan.peak_upper_bytes = std::max(plan.peak_upper_bytes, plan.peak_bytes);
    b.temporaries += raise;
  }
  step_plan_internal::set_capacity(plan, capacity_bytes, memory_fraction);
  return plan;
}

}  // namespace memfit
