// memfit plan on a 96-layer model over 4096 devices, and memfit hlo's planner on the real GPT step (1.5 MB of
// HLO) and on that module ten times over (15 MB): parse + buffer model + heap, side by side. Targets: 1x
// under 0.5 s, 10x under 5 s; the ratio line says how the cost grows with the module (10 would be linear).
#include <benchmark/benchmark.h>

#include <fmt/format.h>

#include <map>
#include <string>
#include <tuple>

#include "memfit/core/file_io.h"
#include "memfit/core/json.h"
#include "memfit/core/process_memory.h"
#include "memfit/plan/hlo_plan.h"
#include "memfit/plan/step_plan.h"
#include "memfit/program/stablehlo_module.h"
#include "scaled_hlo.h"
#include "timing_reporter.h"

namespace memfit {
namespace {

// Two sizes, each run once (large programs: one run is seconds), in milliseconds.
template <int64_t kSmall, int64_t kLarge>
void at_two_sizes_once(benchmark::internal::Benchmark* b) {
  b->Arg(kSmall)->Arg(kLarge)->Unit(benchmark::kMillisecond)->Iterations(1);
}

// Ends the benchmark with the error when `result` failed.
template <typename R>
bool failed(benchmark::State& state, const R& result) {
  if (result.ok()) return false;
  state.SkipWithError(result.error().message().c_str());
  return true;
}

const std::string& gpt_text(int copies) {
  static std::map<int, std::string> cache;
  auto it = cache.find(copies);
  if (it == cache.end()) {
    auto real = read_file(std::string(MEMFIT_SOURCE_DIR) + "/tests/data/xla/gpt_fp32_donate.hlo.txt.gz");
    if (!real.ok()) return cache[copies];
    it = cache.emplace(copies, copies == 1 ? *real : testing::scaled_module(*real, copies)).first;
  }
  return it->second;
}

void BM_PlanGpt(benchmark::State& state) {
  const std::string& text = gpt_text(static_cast<int>(state.range(0)));
  if (text.empty()) {
    state.SkipWithError("tests/data/xla/gpt_fp32_donate.hlo.txt.gz is missing");
    return;
  }
  for (auto _ : state) {
    auto module = parse_hlo_module(text);
    auto plan = plan_hlo(*module);
    benchmark::DoNotOptimize(plan->temp_bytes);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
  state.counters["text_MB"] = static_cast<double>(text.size()) / 1e6;
}
BENCHMARK(BM_PlanGpt)->Arg(1)->Arg(10)->Unit(benchmark::kMillisecond);

// memfit plan of a GPT-3-sized step (96 layers, d_model 12288, 1.7e11 parameters) over a 4096-device FSDP
// mesh: building the per-device program and planning it (target: under a second).
void BM_PlanGpt96LayersOver4096Devices(benchmark::State& state) {
  ModelSpec spec;
  spec.model = ModelFamily::kGpt;
  spec.layers = 96;
  spec.d_model = 12288;
  spec.heads = 96;
  spec.vocab = 50304;
  spec.seq = 2048;
  spec.batch = 4096;
  spec.precision = Precision::kMixed;
  spec.remat = RematPolicy::kFull;
  spec.donate = true;
  spec.sharding = ShardingKind::kFsdp;
  spec.mesh = {4096};
  spec.mesh_axes = {"data"};
  for (auto _ : state) {
    auto plan = plan_step(spec);
    if (failed(state, plan)) return;
    benchmark::DoNotOptimize(plan->peak_bytes);
    state.counters["parameters"] = static_cast<double>(plan->arguments.parameter_count);
  }
}
BENCHMARK(BM_PlanGpt96LayersOver4096Devices)->Unit(benchmark::kMillisecond);

// memfit plan of the default GPT as its layers grow, unrolled (jax.jit over a Python loop) and under scan,
// and memfit fit of the 300-layer step (its 22 plans on every core, 19 of them extended from 16, 32 and 48
// layers). Targets: fit under 10 s; the summary
// says how each grows with the layers (2 = linear per doubling).
void BM_PlanLayers(benchmark::State& state, bool scan) {
  ModelSpec spec;
  spec.layers = static_cast<uint64_t>(state.range(0));
  spec.scan = scan;
  for (auto _ : state) {
    auto plan = plan_step(spec);
    if (failed(state, plan)) return;
    benchmark::DoNotOptimize(plan->peak_bytes);
  }
}
BENCHMARK_CAPTURE(BM_PlanLayers, unrolled, false)->Apply(at_two_sizes_once<256, 512>);
// Deeper than 512 unrolled layers the step is planned at 64, 128 and 192 and extrapolated (target: 10^4
// layers < 5 s, linear in the layers: the same three plans at any depth).
BENCHMARK_CAPTURE(BM_PlanLayers, deep, false)->Apply(at_two_sizes_once<10000, 100000>);
// A scan is one layer in a while loop: the program is the same at any count (target: 10^4 layers < 5 s).
BENCHMARK_CAPTURE(BM_PlanLayers, scan, true)->Apply(at_two_sizes_once<10000, 100000>);

// The flax encoder trained with optax's Adafactor, unrolled, as its layers grow: every parameter and
// factored moment is donated, and aliasing that many arrays was once O(n^2) (512 layers: 9.8 s).
void BM_PlanEncoderLayers(benchmark::State& state) {
  auto spec = model_spec_from_json(Json{{"model", "flax_encoder"}, {"layers", state.range(0)}});
  if (failed(state, spec)) return;
  for (auto _ : state) {
    auto plan = plan_step(*spec);
    if (failed(state, plan)) return;
    benchmark::DoNotOptimize(plan->peak_bytes);
  }
}
BENCHMARK(BM_PlanEncoderLayers)->Apply(at_two_sizes_once<256, 512>);

// A fit of a 300-layer step (issue #18: under 10 s): the default GPT, and a bf16 ViT - the fit whose
// changes are most often planned whole (8 of 18: their lines at 16, 32 and 48 layers do not hold), with a
// family of four whole plans that must follow one another (accumulation over 2, 4, 8, 16 microbatches).
// The spec as `memfit fit --model M --precision P --layers 300` reads it (a ViT's batch is 64).
void BM_Fit300Layers(benchmark::State& state, const char* model, const char* precision) {
  auto spec = model_spec_from_json(Json{{"model", model}, {"precision", precision}, {"layers", 300}});
  if (failed(state, spec)) return;
  for (auto _ : state) {
    auto fit = fit_step(*spec, uint64_t{16} << 30);
    if (failed(state, fit)) return;
    benchmark::DoNotOptimize(fit->candidates.size());
  }
}
BENCHMARK_CAPTURE(BM_Fit300Layers, gpt, "gpt", "fp32")->Unit(benchmark::kMillisecond)->Iterations(1);
BENCHMARK_CAPTURE(BM_Fit300Layers, vit_bf16, "vit", "bf16")->Unit(benchmark::kMillisecond)->Iterations(1);
// The flax encoder with optax.adafactor: its whole plans are the slowest (thousands of per-parameter scalars
// the heap places one by one) and its other changes are estimated only when they cannot fit.
BENCHMARK_CAPTURE(BM_Fit300Layers, flax_encoder, "flax_encoder", "fp32")
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);

// What a fit or a --largest search plans each change with, side by side: the 300-layer GPT step whole
// (plan_step) and extended exactly from 16, 32 and 48 layers (plan_step_extended, the same figures). The
// ratio is the fit's speed-up per plan.
void BM_PlanGpt300Layers(benchmark::State& state, bool extended) {
  ModelSpec spec;
  spec.layers = 300;
  for (auto _ : state) {
    auto plan = extended ? plan_step_extended(spec) : plan_step(spec);
    if (failed(state, plan)) return;
    benchmark::DoNotOptimize(plan->peak_bytes);
  }
}
BENCHMARK_CAPTURE(BM_PlanGpt300Layers, whole, false)->Unit(benchmark::kMillisecond)->Iterations(3);
BENCHMARK_CAPTURE(BM_PlanGpt300Layers, extended, true)->Unit(benchmark::kMillisecond)->Iterations(3);

// The lowered-program planner (parse, model of XLA:GPU, list schedule, buffer model, heap) on lowered
// programs of 10^4 and 10^5 instructions, StableHLO and HLO text. Target: 10^5 under 10 s.
void BM_PlanLowered(benchmark::State& state, bool stablehlo) {
  const int n = static_cast<int>(state.range(0));
  const std::string text = testing::lowered_chain(n, stablehlo);
  for (auto _ : state) {
    auto module = parse_program_text(text);
    if (failed(state, module)) return;
    auto plan = plan_hlo(*module);
    if (failed(state, plan)) return;
    benchmark::DoNotOptimize(plan->temp_bytes);
  }
  state.counters["instructions"] = n;
}
BENCHMARK_CAPTURE(BM_PlanLowered, stablehlo, true)->Apply(at_two_sizes_once<10000, 100000>);
BENCHMARK_CAPTURE(BM_PlanLowered, hlo, false)->Apply(at_two_sizes_once<10000, 100000>);

class ScalingReporter : public TimingReporter {
  void summarize(std::ostream& out, const std::map<std::string, double>& times) override {
    const auto one = times.find("BM_PlanGpt/1");
    const auto ten = times.find("BM_PlanGpt/10");
    if (one != times.end() && ten != times.end() && one->second > 0)
      out << "\n10x module / 1x module time: " << ten->second / one->second << "x (10 = linear)\n";
    for (const auto& [form, name, small, large, expect] :
         {std::tuple{"unrolled", "BM_PlanLayers/unrolled", 256, 512, "2 = linear"},
          std::tuple{"unrolled, extrapolated", "BM_PlanLayers/deep", 10000, 100000, "1 = three plans"},
          std::tuple{"scan", "BM_PlanLayers/scan", 10000, 100000, "1 = one loop"},
          std::tuple{"encoder", "BM_PlanEncoderLayers", 256, 512, "2 = linear"}}) {
      const auto a = times.find(fmt::format("{}/{}/iterations:1", name, small));
      const auto b = times.find(fmt::format("{}/{}/iterations:1", name, large));
      if (a == times.end() || b == times.end() || a->second <= 0) continue;
      out << "plan " << form << ": " << large << " layers " << b->second / 1e3 << " s, "
          << b->second / a->second << "x the time of " << small << " (" << expect << ")\n";
    }
    for (const auto& [model, name] : {std::pair{"GPT", "gpt"}, std::pair{"bf16 ViT", "vit_bf16"},
                                      std::pair{"flax encoder", "flax_encoder"}})
      if (auto fit = times.find(fmt::format("BM_Fit300Layers/{}/iterations:1", name)); fit != times.end())
        out << "fit of the 300-layer " << model << ": " << fit->second / 1e3 << " s (target < 10 s)\n";
    for (const char* form : {"stablehlo", "hlo"}) {
      const auto small = times.find(std::string("BM_PlanLowered/") + form + "/10000/iterations:1");
      const auto large = times.find(std::string("BM_PlanLowered/") + form + "/100000/iterations:1");
      if (small == times.end() || large == times.end() || small->second <= 0) continue;
      out << "lowered " << form << ": 10^5 instructions " << large->second / 1e3 << " s (target < 10 s), "
          << large->second / small->second << "x the time of 10^4 (10 = linear)\n";
    }
  }
};

}  // namespace
}  // namespace memfit

int main(int argc, char** argv) {
  memfit::keep_freed_memory_in_heap();  // as the CLI plans (tools/memfit/main.cc)
  return memfit::run_benchmarks<memfit::ScalingReporter>(argc, argv);
}
