// memfit plan against what the H200 measured for every GPU program in programs.json, and against XLA's
// per-device argument and temp bytes for the 8-device CPU compiles.
#include "memfit/plan/step_plan.h"

#include "memfit/plan/hlo_plan.h"
#include "memfit/plan/xla_gpu_model.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "memfit/core/file_io.h"
#include "memfit/core/json.h"
#include "memfit/program/hlo_module.h"
#include "memfit/program/model_zoo.h"

namespace memfit {
namespace {

// The programs of `list` that the zoo does not yet plan within 5% of the measured peak, each with why;
// they are planned and printed, not held. Every other measured program is held to 5%.
const std::map<std::string, std::string> kNotHeld = {
    // None now. (Host offload, -33% while the copies' order was not XLA's latency-hiding scheduler's and
    // +6.8% while its weight gradients' GELU was not computed with the input gradient by a multi-output
    // fusion, is held since 2026-12-07. ViT inference, -7.8% while the softmax's row statistics were buffers
    // of their own, is held since they are inside its fusion: -0.7%.)
};

void expect_zoo_plans(const std::string& list) {
  auto text = read_file(std::string(MEMFIT_TEST_DATA_DIR) + "/xla/" + list);
  ASSERT_TRUE(text.ok());
  auto programs = parse_json(*text, list);
  ASSERT_TRUE(programs.ok());
  std::printf("%-32s %14s %14s %8s %14s %14s %8s\n", list.c_str(), "measured peak", "predicted", "error",
              "xla temp", "our temp", "error");
  for (const Json& p : (*programs)["programs"]) {
    const std::string name = p["name"];
    SCOPED_TRACE(name);
    const auto why = kNotHeld.find(name);
    auto spec = model_spec_from_json(p["config"]);
    if (!spec.ok()) {
      // Only a program listed as not held may be refused, and then with the key that is not built.
      ASSERT_NE(why, kNotHeld.end()) << spec.error().message();
      EXPECT_NE(spec.error().message().find(why->second), std::string::npos) << spec.error().message();
      std::printf("%-32s refused: %s\n", name.c_str(), spec.error().message().c_str());
      continue;
    }
    auto plan = plan_step(*spec);
    ASSERT_TRUE(plan.ok()) << plan.error().message();
    const Json& xla = p["xla_memory_analysis"];
    EXPECT_EQ(plan->hlo.argument_bytes, xla["argument_size_in_bytes"].get<uint64_t>());
    EXPECT_EQ(plan->hlo.output_bytes, xla["output_size_in_bytes"].get<uint64_t>());
    EXPECT_EQ(plan->hlo.alias_bytes, xla["alias_size_in_bytes"].get<uint64_t>());
    const double xla_temp = xla["temp_size_in_bytes"].get<double>();
    const double temp_error = (static_cast<double>(plan->hlo.temp_bytes) - xla_temp) / xla_temp;
    double peak_error = 0;
    double measured = 0;
    if (!p["measured"].is_null()) {
      measured = p["measured"]["peak_bytes_in_use_after_step"].get<double>();
      peak_error = (static_cast<double>(plan->peak_bytes) - measured) / measured;
      if (why == kNotHeld.end()) {
        EXPECT_LE(std::abs(peak_error), 0.05);
      }
      // The range XLA's order spans: the step's peak in the program's own order is at or above the H200's
      // (within 5%) on every program (per-example gradients too, since their Adam updates are written apart
      // as XLA's transpose fusions write them).
      EXPECT_GE(plan->peak_upper_bytes, plan->peak_bytes);
      EXPECT_GE(1.05 * static_cast<double>(plan->peak_upper_bytes), measured);
    } else {
      EXPECT_LE(std::abs(temp_error), 0.10);  // the CPU compiles: temp within 10% of XLA's
    }
    const auto& b = plan->breakdown;
    EXPECT_EQ(b.parameters + b.optimizer_state + b.gradients + b.activations + b.temporaries,
              plan->peak_bytes);
    std::printf("%-32s %14.0f %14llu %+7.2f%% %14.0f %14llu %+7.2f%%%s\n", name.c_str(), measured,
                static_cast<unsigned long long>(plan->peak_bytes), 100 * peak_error, xla_temp,
                static_cast<unsigned long long>(plan->hlo.temp_bytes), 100 * temp_error,
                why == kNotHeld.end() ? "" : "  (not held)");
  }
}

TEST(StepPlan, PredictsEverySharedProgram) { expect_zoo_plans("programs.json"); }

// Fifteen more GPU programs, bundled for their lowered forms: mixed and bf16 precision, cuDNN attention,
// remat (with a scan too), accumulation, GPT and ViT inference, small-batch MLPs (mean and per-example
// gradients), ViT and the flax encoder (its own family since optax.adafactor and flax's layers were built:
// refused before, +0.17% as the fused guess, +0.8% written lowered).
TEST(StepPlan, PredictsTheLoweredProgramsConfigs) { expect_zoo_plans("lowered_programs.json"); }

// Host offload sends to the host exactly what JAX's policy marks: the values the lowered program annotates
// for pinned host memory (annotate_device_placement), three dots per block, byte for byte; the device keeps
// what remat dots_no_batch keeps.
TEST(StepPlan, OffloadSendsTheDotsJaxMarksForTheHost) {
  auto text = read_file(std::string(MEMFIT_TEST_DATA_DIR) +
                        "/xla/gpt_mixed_donate_offload_dots_nb.lowered.hlo.txt.gz");
  ASSERT_TRUE(text.ok());
  auto lowered = parse_hlo_module(*text);
  ASSERT_TRUE(lowered.ok());
  uint64_t marked_bytes = 0;
  for (const HloComputation& c : lowered->computations)
    for (const HloInstruction& x : c.instructions)
      if (x.buffer_placement() == "pinned_host") marked_bytes += x.shape.own_bytes();
  ASSERT_GT(marked_bytes, 0u);
  auto plan_with = [&](const std::string& remat) {
    auto spec = model_spec_from_json(Json::parse(
        R"({"model": "gpt", "vocab": 32000, "d_model": 1024, "heads": 16, "layers": 8, "seq": 1024,
            "batch": 8, "donate": true, "precision": "mixed", "remat": ")" +
        remat + R"("})"));
    EXPECT_TRUE(spec.ok());
    return plan_step(*spec);
  };
  auto offload = plan_with("offload_dots_no_batch");
  auto kept = plan_with("dots_no_batch");
  ASSERT_TRUE(offload.ok()) << offload.error().message();
  ASSERT_TRUE(kept.ok());
  EXPECT_EQ(offload->offloaded_bytes, marked_bytes);
  EXPECT_EQ(offload->host_peak_bytes, offload->hlo.host_temp_bytes);
  EXPECT_GT(offload->host_peak_bytes, 0u);
  EXPECT_LT(offload->host_peak_bytes, marked_bytes);  // a block at a time, not the whole step's
  EXPECT_GE(offload->peak_bytes, kept->peak_bytes);
  EXPECT_EQ(kept->offloaded_bytes, 0u);
}

// ViT inference, written as the program JAX lowers and planned through the model of XLA:GPU: the zoo's
// peak is that of XLA's compiled module, hole for hole: the softmax's row maximum and sum are inside its
// Triton fusion in both (they were buffers of the model's once, 4.8 MB, and the heap packed round them
// without XLA's 8% hole: -7.8% then).
TEST(StepPlan, VitInferenceHoldsWhatXlaHolds) {
  auto spec = model_spec_from_json(Json::parse(
      R"({"model": "vit", "d_model": 768, "heads": 12, "layers": 12, "batch": 256, "step": "infer"})"));
  ASSERT_TRUE(spec.ok());
  auto plan = plan_step(*spec);
  ASSERT_TRUE(plan.ok()) << plan.error().message();
  auto text = read_file(std::string(MEMFIT_TEST_DATA_DIR) + "/xla/vit_b16_infer_b256.hlo.txt.gz");
  ASSERT_TRUE(text.ok());
  auto compiled = parse_hlo_module(*text);
  ASSERT_TRUE(compiled.ok());
  auto xla = plan_hlo(*compiled);
  ASSERT_TRUE(xla.ok());
  EXPECT_NEAR(static_cast<double>(plan->peak_bytes), static_cast<double>(xla->peak_bytes),
              0.005 * static_cast<double>(xla->peak_bytes));
  EXPECT_GT(xla->peak_bytes, xla->lower_bound_bytes + xla->peak_bytes / 20) << "XLA's heap leaves a hole";
}

// The zoo's program takes the arguments JAX passed: the entry parameters of its module are, shape for
// shape, those of the program jax.jit(step).lower() gave for the same config (the lowered HLO bundled in
// tests/data) - parameters, optimizer state (adam's moments, adafactor's factored statistics), batch.
TEST(StepPlan, TakesTheArgumentsJaxPassed) {
  for (const char* name : {"flax_encoder_adafactor_b32", "gpt_fp32_donate", "mlp_fp32_donate",
                           "vit_b16_fp32_donate", "gpt_mixed_donate", "vit_b16_infer_b256"}) {
    SCOPED_TRACE(name);
    Json config;
    for (const char* list : {"programs.json", "lowered_programs.json"}) {
      auto text = read_file(std::string(MEMFIT_TEST_DATA_DIR) + "/xla/" + list);
      ASSERT_TRUE(text.ok());
      auto programs = parse_json(*text, list);
      ASSERT_TRUE(programs.ok());
      for (const Json& p : (*programs)["programs"])
        if (p["name"] == name) config = p["config"];
    }
    ASSERT_FALSE(config.is_null());
    auto spec = model_spec_from_json(config);
    ASSERT_TRUE(spec.ok()) << spec.error().message();
    auto built = build_step_module(*spec);
    ASSERT_TRUE(built.ok()) << built.error().message();
    auto text = read_file(std::string(MEMFIT_TEST_DATA_DIR) + "/xla/" + name + ".lowered.hlo.txt.gz");
    ASSERT_TRUE(text.ok());
    auto lowered = parse_hlo_module(*text);
    ASSERT_TRUE(lowered.ok()) << lowered.error().message();
    auto parameter_shapes = [](const HloModule& m) {
      std::multiset<std::string> shapes;
      for (const HloInstruction& i : m.entry()->instructions)
        if (i.opcode == HloOpcode::kParameter) shapes.insert(i.shape.to_string());
      return shapes;
    };
    const std::multiset<std::string> ours = parameter_shapes(*built), jax = parameter_shapes(*lowered);
    EXPECT_GT(jax.size(), 3u);
    EXPECT_EQ(ours, jax);
  }
}

// What the model of XLA:GPU runs of a lowered program, in the program's order: each instruction making an
// array of >= `min_bytes` as "opcode shape", and each loop, call or barrier by its opcode (their tuples'
// element order is the writer's own). Parameters, tuple elements and bitcasts hold no buffer of their own.
std::vector<std::string> modeled_order(const HloModule& lowered, uint64_t min_bytes) {
  auto modeled = model_xla_gpu(HloModule(lowered));
  EXPECT_TRUE(modeled.ok()) << modeled.error().message();
  std::vector<std::string> order;
  if (!modeled.ok()) return order;
  for (const HloInstruction& i : modeled->entry()->instructions) {
    if (i.opcode == HloOpcode::kParameter || i.opcode == HloOpcode::kGetTupleElement ||
        i.opcode == HloOpcode::kBitcast || i.opcode == HloOpcode::kTuple)
      continue;
    if (i.opcode == HloOpcode::kFusion && i.shape.is_tuple()) {
      // A multi-output fusion: large if its outputs are (JAX's decode clamps each cache index on its own,
      // a scalar the zoo's program has no need of; XLA writes the sixteen in one fusion).
      if (i.shape.leaf_bytes() >= min_bytes)
        order.push_back(fmt::format("{} {}", i.opcode_name(), i.shape.to_string()));
    } else if (i.shape.is_tuple()) {
      order.emplace_back(i.opcode_name());
    } else if (i.shape.own_bytes() >= min_bytes) {
      order.push_back(fmt::format("{} {}", i.opcode_name(), i.shape.to_string()));
    }
  }
  return order;
}

// For every shared program whose name starts with `prefix` (and whose config `also` accepts), the zoo's
// program for its config is the one JAX lowers: the same temp buffers of >= `min_bytes`, shape for shape, in
// the plans of both through the model of XLA:GPU, with argument and alias bytes equal and temp and peak
// within 0.5%; and the model runs those values in JAX's order (the order XLA keeps where its list schedule
// would need more: each nested jit a call, nothing written that the step does not read). Returns how many
// programs were compared.
int expect_zoo_writes_jaxs_program(const std::string& prefix, const std::function<bool(const Json&)>& also,
                                   uint64_t min_bytes = 1u << 20,
                                   const std::vector<std::string>& lists = {"programs.json",
                                                                            "lowered_programs.json"}) {
  int compared = 0;
  for (const std::string& list : lists) {
    auto text = read_file(std::string(MEMFIT_TEST_DATA_DIR) + "/xla/" + list);
    EXPECT_TRUE(text.ok());
    if (!text.ok()) return compared;
    auto programs = parse_json(*text, list);
    EXPECT_TRUE(programs.ok());
    if (!programs.ok()) return compared;
    for (const Json& p : (*programs)["programs"]) {
      const std::string name = p["name"];
      if (name.rfind(prefix, 0) != 0 || !also(p["config"])) continue;
      SCOPED_TRACE(name);
      auto spec = model_spec_from_json(p["config"]);
      EXPECT_TRUE(spec.ok()) << spec.error().message();
      if (!spec.ok()) continue;
      auto built = build_step_module(*spec);
      EXPECT_TRUE(built.ok()) << built.error().message();
      if (!built.ok()) continue;
      EXPECT_FALSE(built->is_scheduled) << "the zoo wrote XLA's fused program, not the lowered one";
      auto jax_text = read_file(std::string(MEMFIT_TEST_DATA_DIR) + "/xla/" + name + ".lowered.hlo.txt.gz");
      EXPECT_TRUE(jax_text.ok());
      if (!jax_text.ok()) continue;
      auto jax = parse_hlo_module(*jax_text);
      EXPECT_TRUE(jax.ok()) << jax.error().message();
      auto ours_plan = plan_hlo(*built);
      auto jax_plan = jax.ok() ? plan_hlo(*jax) : Expected<HloPlan>(jax.error());
      EXPECT_TRUE(ours_plan.ok() && jax_plan.ok());
      if (!ours_plan.ok() || !jax_plan.ok()) continue;
      auto large = [&](const HloPlan& plan) {
        std::multiset<std::string> shapes;
        for (const PlannedBuffer& b : plan.buffers)
          if (b.kind == BufferKind::kTemp && b.bytes >= min_bytes) shapes.insert(b.shape);
        return shapes;
      };
      EXPECT_EQ(large(*ours_plan), large(*jax_plan));
      EXPECT_EQ(ours_plan->argument_bytes, jax_plan->argument_bytes);
      EXPECT_EQ(ours_plan->alias_bytes, jax_plan->alias_bytes);
      EXPECT_NEAR(static_cast<double>(ours_plan->temp_bytes), static_cast<double>(jax_plan->temp_bytes),
                  0.005 * static_cast<double>(jax_plan->temp_bytes));
      EXPECT_NEAR(static_cast<double>(ours_plan->peak_bytes), static_cast<double>(jax_plan->peak_bytes),
                  0.005 * static_cast<double>(jax_plan->peak_bytes));
      const std::vector<std::string> ours = modeled_order(*built, min_bytes),
                                     theirs = modeled_order(*jax, min_bytes);
      EXPECT_EQ(ours.size(), theirs.size());
      for (size_t k = 0; k < std::min(ours.size(), theirs.size()); ++k) {
        if (ours[k] == theirs[k]) continue;
        ADD_FAILURE() << "value " << k << " of " << theirs.size() << ": the zoo runs " << ours[k]
                      << " where JAX's program runs " << theirs[k];
        break;
      }
      ++compared;
    }
  }
  return compared;
}

// The zoo writes the MLP as JAX lowers it (program/zoo_lowered.h) and the GPU model plans it: for every
// bundled MLP program it plans, the zoo's program materializes what JAX's own lowered program does - the
// same buffers of 1 MiB and more, shape for shape, and the same temp and peak.
TEST(StepPlan, TheZoosMlpIsTheProgramJaxLowers) {
  // fp32, donated, remat full, mixed, vmap, mean, accumulation
  EXPECT_EQ(expect_zoo_writes_jaxs_program("mlp_", [](const Json&) { return true; }), 7);
}

TEST(StepPlan, TheZoosTransformersAreTheProgramsJaxLowers) {
  auto infer = [](const Json& c) { return c.contains("step") && c["step"] == "infer"; };
  EXPECT_EQ(expect_zoo_writes_jaxs_program("gpt_", infer), 1);  // gpt_fp32_infer_b32
  EXPECT_EQ(expect_zoo_writes_jaxs_program("vit_", infer), 1);  // vit_b16_infer_b256
  // ViT training (fp32, adam, donated): the forward pass, the loss, every transpose and the update - down to
  // 128 KiB, so that the small values are held too: the loss's [64,1000] logits, exp and gradient, and the
  // positions' [197,768] gradient summed twice as jnp's broadcast transposes.
  EXPECT_EQ(expect_zoo_writes_jaxs_program(
                "vit_", [&](const Json& c) { return !infer(c); }, 128u << 10),
            1);
  // GPT training (adam): the loss over [B,S,vocab] op for op, the tied table's two gradients (the
  // logits' GEMM and the lookup's scatter-add), accumulation as JAX's scan over microbatches, and
  // jax.checkpoint's barrier and recomputation under nothing_saveable and dots_saveable, and jax.lax.scan
  // over the layers (the forward loop stacking 27 residuals per block, GPT's broadcast mask a loop operand,
  // the reversed loop stacking the gradients; with full remat the inputs stacked and each body a barrier and
  // a recomputation) - the programs whose lowered text is bundled (gpt_fp32, gpt_fp32_donate,
  // gpt_fp32_donate_remat_full, gpt_fp32_donate_remat_dots, gpt_fp32_donate_scan,
  // gpt_fp32_donate_scan_remat_full, gpt_fp32_donate_accum4_b32).
  // Mixed and bf16 precision too: each cast's transpose a cast back (the softmax's transpose in f32, the
  // weights' bf16 copies read by the backward GEMMs, the gradients cast to the parameters' type) -
  // gpt_mixed_donate, gpt_bf16_donate and gpt_mixed_donate_offload_dots_nb (remat offloading its saved
  // GEMMs to the pinned host) - and cuDNN's fused attention, one custom call each way
  // (gpt_mixed_donate_cudnn).
  auto gpt_training = [&](const Json& c) { return !infer(c); };
  EXPECT_EQ(expect_zoo_writes_jaxs_program("gpt_", gpt_training, 128u << 10), 11);
}

// Every program captured on the H200 after the planner was written (tests/data/xla/captured_programs.json):
// the zoo writes the program JAX lowered for its config, its buffers of 128 KiB and more in JAX's order -
// bf16 GPT with remat dots; jax.lax.scan over the layers in mixed precision (the forward loop stacks each
// weight's bf16 copy beside the 27 residuals of an fp32 scan, the backward loop reads the copies; written as
// the fused guess before, -16.3% of the H200's peak); mixed inference; decode; GPT-2's dimensions; the bf16
// MLP with remat full; per-example gradients; the mixed ViT with remat dots; and the flax conv net
// (optax.adamw: each convolution's bias and relu with its derivative's compare, the pools' window sums, the
// head, the loss, every transpose - the input's gradient by the flipped kernel, the kernel's a convolution
// of the input by the output's gradient, the pools' window sums over the padded gradient - and the update).
TEST(StepPlan, TheZoosProgramsAreTheCapturedProgramsJaxLowered) {
  EXPECT_EQ(expect_zoo_writes_jaxs_program("", [](const Json&) { return true; }, 128u << 10,
                                           {"captured_programs.json"}),
            9);
}

// The flax encoder (optax.adafactor, donated) as the shared flax_encoder_adafactor_b32's lowered program has
// it: flax's LayerNorm (the mean and the mean of squares), MultiHeadDotProductAttention's [B,S,H,hd]
// projections with their biases and the scores' batch dimensions among the operands', the untied head,
// optax's integer-label cross-entropy, every transpose and the factored update - down to 128 KiB.
TEST(StepPlan, TheZoosFlaxEncoderIsTheProgramJaxLowers) {
  EXPECT_EQ(expect_zoo_writes_jaxs_program(
                "flax_encoder_", [](const Json&) { return true; }, 128u << 10),
            1);
}

// The peak's parts of a model of billions of parameters: the new values split between parameters and adam's
// moments in proportion (1 : 2), not wrapped - their product (14 GB x 10 GB) is beyond 64 bits.
TEST(StepPlan, TheBreakdownOfABillionParameterStepDoesNotWrap) {
  auto spec = model_spec_from_json(
      Json::parse(R"({"model": "gpt", "d_model": 2048, "heads": 16, "layers": 24, "seq": 256, "batch": 1})"));
  ASSERT_TRUE(spec.ok());
  auto plan = plan_step(*spec);
  ASSERT_TRUE(plan.ok()) << plan.error().message();
  const StepArguments& a = plan->arguments;
  ASSERT_EQ(a.optimizer_state_bytes, 2 * a.parameter_bytes + 4);  // mu, nu and the step count
  const uint64_t new_values = plan->hlo.output_bytes - plan->hlo.alias_bytes;
  ASSERT_GT(static_cast<double>(new_values) * static_cast<double>(a.optimizer_state_bytes), 0x1p64);
  EXPECT_EQ(plan->breakdown.parameters + plan->breakdown.optimizer_state,
            a.parameter_bytes + a.optimizer_state_bytes + new_values);
  EXPECT_NEAR(
      static_cast<double>(plan->breakdown.optimizer_state) / static_cast<double>(plan->breakdown.parameters),
      2.0, 1e-6);
}

// A step unrolled deeper than memfit builds whole is planned at three smaller depths and extended: for a
// stack of identical layers the line through them is the whole plan's, to the byte (here from 16, 32 and 48
// layers to 100, planned whole too), and plan_step's 10^4-layer plan lies on the line of its 64- and
// 128-layer ones.
TEST(StepPlan, ADeepStackIsExtrapolatedFromSmallerDepthsToTheByte) {
  auto spec_of = [](uint64_t layers, const char* extra) {
    auto spec = model_spec_from_json(Json::parse(
        fmt::format(R"({{"model": "gpt", "d_model": 256, "heads": 4, "seq": 128, "batch": 4, "vocab": 8000,
                        "layers": {}{}}})",
                    layers, extra)));
    EXPECT_TRUE(spec.ok()) << spec.error().message();
    return *spec;
  };
  for (const char* extra : {"", R"(, "remat": "full", "donate": true)"}) {
    SCOPED_TRACE(extra);
    auto whole = plan_step(spec_of(100, extra), 16ull << 30);
    auto line = extrapolate_step_plan(spec_of(100, extra), 16, 16ull << 30);
    ASSERT_TRUE(whole.ok()) << whole.error().message();
    ASSERT_TRUE(line.ok()) << line.error().message();
    EXPECT_TRUE(whole->extrapolated_from.empty());
    EXPECT_EQ(line->extrapolated_from, (std::vector<uint64_t>{16, 32, 48}));
    EXPECT_TRUE(line->extrapolation_exact);
    EXPECT_EQ(line->arguments.parameter_count, whole->arguments.parameter_count);
    EXPECT_EQ(line->hlo.argument_bytes, whole->hlo.argument_bytes);
    EXPECT_EQ(line->hlo.output_bytes, whole->hlo.output_bytes);
    EXPECT_EQ(line->hlo.alias_bytes, whole->hlo.alias_bytes);
    EXPECT_EQ(line->hlo.temp_bytes, whole->hlo.temp_bytes);
    EXPECT_EQ(line->hlo.lower_bound_bytes, whole->hlo.lower_bound_bytes);
    EXPECT_EQ(line->peak_bytes, whole->peak_bytes);
    EXPECT_EQ(line->fits, whole->fits);
    // The program's own order is extended on a line of its own: never below the prediction.
    EXPECT_GE(line->peak_upper_bytes, line->peak_bytes);
    EXPECT_EQ(line->hlo.peak_upper_bytes - line->hlo.temp_upper_bytes,
              line->hlo.peak_bytes - line->hlo.temp_bytes);
    EXPECT_EQ(line->breakdown.parameters, whole->breakdown.parameters);
    EXPECT_EQ(line->breakdown.optimizer_state, whole->breakdown.optimizer_state);
    EXPECT_EQ(line->breakdown.gradients, whole->breakdown.gradients);
    EXPECT_EQ(line->breakdown.activations, whole->breakdown.activations);
    EXPECT_TRUE(line->hlo.buffers.empty()) << "no program was built at 100 layers";
  }
  // 10^4 layers: the line through the whole plans of 64 and 128 layers.
  std::vector<uint64_t> peak;
  for (uint64_t layers : {64, 128, 10000}) {
    auto p = plan_step(spec_of(layers, ""));
    ASSERT_TRUE(p.ok()) << p.error().message();
    EXPECT_EQ(p->extrapolated_from.empty(), layers <= kMaxUnrolledLayers);
    peak.push_back(p->peak_bytes);
  }
  EXPECT_EQ(peak[2] - peak[1], (peak[1] - peak[0]) / 64 * (10000 - 128));
  EXPECT_EQ((peak[1] - peak[0]) % 64, 0u) << "each layer adds the same bytes";
  // Not extrapolated: a scan (already one layer in a loop), a step built whole.
  auto scanned = spec_of(10000, "");
  scanned.scan = true;
  EXPECT_FALSE(plan_is_extrapolated(scanned));
  EXPECT_FALSE(plan_is_extrapolated(spec_of(kMaxUnrolledLayers, "")));
  // Refused: the program itself at that depth, and layers rematerialized one by one (they would differ).
  StepArguments args;
  auto built = build_step_module(spec_of(kMaxUnrolledLayers + 1, ""), &args);
  ASSERT_FALSE(built.ok());
  EXPECT_NE(built.error().message().find("extrapolates"), std::string::npos) << built.error().message();
  auto uneven = model_spec_from_json(
      Json::parse(R"({"model": "gpt", "layers": 1000, "remat": "full", "remat_layers": [3]})"));
  ASSERT_FALSE(uneven.ok());
  EXPECT_EQ(uneven.error().message().rfind("remat_layers", 0), 0u) << uneven.error().message();
}

// Three depths on one line say nothing of a deeper step whose peak moves to another pass. With mixed
// precision and full remat the forward pass holds each layer's bf16 weights and its input, the backward pass
// one layer's recomputation: the backward pass leads at 8, 16 and 24 layers, the forward pass, growing three
// times as fast, overtakes it before 96. The extension then is flagged, not passed off as exact - and it is
// wrong (the whole plan's temp block is the forward pass's line).
TEST(StepPlan, AnExtensionPastAPassThatOvertakesIsNotExact) {
  auto spec = model_spec_from_json(Json::parse(
      R"({"model": "gpt", "batch": 8, "seq": 512, "precision": "mixed", "remat": "full", "donate": true,
          "layers": 96})"));
  ASSERT_TRUE(spec.ok()) << spec.error().message();
  auto line = extrapolate_step_plan(*spec, 8);
  auto whole = plan_step(*spec);
  ASSERT_TRUE(line.ok()) << line.error().message();
  ASSERT_TRUE(whole.ok()) << whole.error().message();
  EXPECT_FALSE(line->extrapolation_exact);
  EXPECT_EQ(line->extrapolation_wobble_bytes, UINT64_MAX) << "the line itself is in doubt";
  EXPECT_LT(line->peak_bytes, whole->peak_bytes);
  // The passes' own lines are the whole plan's: the forward pass leads it.
  EXPECT_EQ(line->hlo.pass_peaks.forward_bytes, whole->hlo.pass_peaks.forward_bytes);
  EXPECT_EQ(line->hlo.pass_peaks.backward_bytes, whole->hlo.pass_peaks.backward_bytes);
  EXPECT_GT(whole->hlo.pass_peaks.forward_bytes, whole->hlo.pass_peaks.backward_bytes);
  EXPECT_EQ(whole->hlo.temp_lower_bound_bytes, whole->hlo.pass_peaks.forward_bytes);
  // In fp32 the backward pass leads at every depth: exact, and the whole plan's to the byte.
  spec->precision = Precision::kFp32;
  auto fp32_line = extrapolate_step_plan(*spec, 8);
  auto fp32_whole = plan_step(*spec);
  ASSERT_TRUE(fp32_line.ok() && fp32_whole.ok());
  EXPECT_TRUE(fp32_line->extrapolation_exact);
  EXPECT_EQ(fp32_line->peak_bytes, fp32_whole->peak_bytes);
}

// A fit of a deep unrolled GPT plans its changes at 16, 32 and 48 layers and extends them where that is
// exact: the same rows as whole plans, for a fraction of the work.
TEST(StepPlan, AFitOfADeepStepExtendsItsPlansExactly) {
  auto spec = model_spec_from_json(Json::parse(
      R"({"model": "gpt", "d_model": 256, "heads": 4, "seq": 128, "batch": 4, "vocab": 8000,
          "layers": 128})"));
  ASSERT_TRUE(spec.ok()) << spec.error().message();
  auto fit = fit_step(*spec, 4ull << 30);
  ASSERT_TRUE(fit.ok()) << fit.error().message();
  EXPECT_GT(fit->programs_extrapolated, fit->programs_planned / 2);
  EXPECT_EQ(fit->baseline.extrapolated_from, (std::vector<uint64_t>{16, 32, 48}));
  auto whole = plan_step(*spec, 4ull << 30);
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(fit->baseline.peak_bytes, whole->peak_bytes);
  // Rows against their changes planned whole: remat full, and FSDP over 2.
  int compared = 0;
  for (const FitCandidate& c : fit->candidates) {
    ModelSpec changed = *spec;
    if (c.change == "remat full") {
      changed.remat = RematPolicy::kFull;
    } else if (c.change == "FSDP over 2 devices") {
      changed.sharding = ShardingKind::kFsdp;
      changed.mesh = {2};
      changed.mesh_axes = {"data"};
    } else {
      continue;
    }
    SCOPED_TRACE(c.change);
    auto p = plan_step(changed, 4ull << 30);
    ASSERT_TRUE(p.ok()) << p.error().message();
    EXPECT_EQ(c.peak_bytes, p->peak_bytes);
    ++compared;
  }
  EXPECT_EQ(compared, 2);
}

// The whole plan of `changed`, the change a fit kept an estimate for (`row`): the estimate's verdict holds -
// planned whole it does not fit either, and holds at least the bytes that decided it. Empty (the failure
// reported) if it cannot be planned.
std::optional<StepPlan> whole_plan_behind_estimate(const FitCandidate& row, const ModelSpec& changed,
                                                   uint64_t capacity) {
  auto whole = plan_step(changed, capacity);
  EXPECT_TRUE(whole.ok()) << whole.error().message();
  if (!whole.ok()) return std::nullopt;
  EXPECT_TRUE(whole->extrapolated_from.empty());
  EXPECT_FALSE(whole->fits);
  EXPECT_LE(row.peak_at_least_bytes, whole->hlo.lower_bound_bytes);
  return std::move(*whole);
}

// A change whose line wobbles more than a search takes (64 KiB per 16 layers) is planned whole - unless it
// cannot fit: when the bytes live at once in its deepest small plan are already over the pool (a deeper
// stack holds at least those), the fit keeps the extension and marks its figure approximate. Here, in a
// 48 MiB pool, nine of 23 changes are kept so; against their whole plans each figure is within 2% (the
// larger growth taken: mostly above), and no whole plan lies under the bound that decided it (four
// microbatches and batch 1 hold 1 MiB less at 128 layers than their passes' exact lines from 16-48 say, so
// the bound is the deepest plan's temporaries beside the step's arguments, not those lines). Donation
// grows exactly and is planned whole. The step's own peak (and the larger pool's, the same program) is never
// an estimate.
TEST(StepPlan, AFitOfADeepStepEstimatesOnlyTheChangesThatCannotFit) {
  auto spec = model_spec_from_json(Json::parse(
      R"({"model": "gpt", "d_model": 256, "heads": 4, "seq": 128, "batch": 4, "vocab": 8000,
          "layers": 128})"));
  ASSERT_TRUE(spec.ok()) << spec.error().message();
  const uint64_t capacity = 64ull << 20;
  auto fit = fit_step(*spec, capacity);
  ASSERT_TRUE(fit.ok()) << fit.error().message();
  EXPECT_GE(fit->programs_approximate, 4u);
  EXPECT_LE(fit->programs_approximate, fit->programs_extrapolated);
  size_t approximate_rows = 0;
  int compared = 0;
  for (const FitCandidate& c : fit->candidates) {
    SCOPED_TRACE(c.change);
    if (c.change == "XLA_CLIENT_MEM_FRACTION=.95") {
      EXPECT_FALSE(c.peak_approximate);
    }
    if (!c.peak_approximate) continue;
    ++approximate_rows;
    EXPECT_FALSE(c.fits);
    EXPECT_GT(c.peak_at_least_bytes, c.limit_bytes);
    ModelSpec changed = *spec;
    if (c.change == "gradient accumulation over 4 microbatches") {
      changed.accum = 4;
    } else if (c.change == "batch 1 instead of 4") {
      changed.batch = 1;
    } else if (c.change == "mixed precision (fp32 parameters, bf16 compute)") {
      changed.precision = Precision::kMixed;
    } else {
      continue;
    }
    const std::optional<StepPlan> whole = whole_plan_behind_estimate(c, changed, capacity);
    if (!whole) continue;
    const double error = (static_cast<double>(c.peak_bytes) - static_cast<double>(whole->peak_bytes)) /
                         static_cast<double>(whole->peak_bytes);
    EXPECT_LT(std::abs(error), 0.02) << c.peak_bytes << " against " << whole->peak_bytes;
    ++compared;
  }
  EXPECT_EQ(approximate_rows, fit->programs_approximate);
  EXPECT_EQ(compared, 3);
  EXPECT_LE(fit->baseline.extrapolation_wobble_bytes, 64u << 10);
  auto baseline_whole = plan_step(*spec, capacity);
  ASSERT_TRUE(baseline_whole.ok());
  EXPECT_EQ(fit->baseline.peak_bytes, baseline_whole->peak_bytes);
  // In a pool it may fit, the same change is planned whole.
  ModelSpec four = *spec;
  four.accum = 4;
  auto roomy = plan_step_extended(four, 64ull << 30, 0.75, /*verdict_only=*/true);
  ASSERT_TRUE(roomy.ok()) << roomy.error().message();
  EXPECT_TRUE(roomy->extrapolated_from.empty()) << "planned whole";
}

// The flax encoder's 16/32/48-layer lines are not taken as its figures (its whole plans are the slow ones:
// optax.adafactor's per-parameter scalars are thousands of small buffers the heap places one by one; adam
// here, to keep the test's own whole plans short), but a change whose 48 layers already hold more than the
// pool cannot fit deeper either: in a pool nothing fits, every change but the step is kept so, marked an
// estimate, and its whole plan does not fit and holds at least the bytes that decided it - the offload pair's
// too, whose comparison (describe_offload) their whole plans then agree with.
TEST(StepPlan, AFitOfADeepStepOfTheFlaxEncoderEstimatesOnlyWhatCannotFit) {
  auto spec = model_spec_from_json(Json::parse(
      R"({"model": "flax_encoder", "d_model": 128, "heads": 2, "seq": 64, "batch": 4, "vocab": 1000,
          "layers": 128, "optimizer": "adam"})"));
  ASSERT_TRUE(spec.ok()) << spec.error().message();
  const uint64_t capacity = 8ull << 20;
  auto fit = fit_step(*spec, capacity);
  ASSERT_TRUE(fit.ok()) << fit.error().message();
  EXPECT_FALSE(fit->baseline.fits);
  EXPECT_TRUE(fit->baseline.extrapolated_from.empty()) << "the step itself is planned whole";
  EXPECT_EQ(fit->programs_approximate, fit->programs_extrapolated) << "no line taken as exact";
  EXPECT_GE(fit->programs_approximate, 8u);
  int compared = 0;
  std::optional<StepPlan> offload, kept;  // the offload pair's whole plans
  std::optional<bool> only_moves_to_host;
  for (const FitCandidate& c : fit->candidates) {
    SCOPED_TRACE(c.change);
    if (!c.peak_approximate) continue;
    EXPECT_FALSE(c.fits);
    EXPECT_GT(c.peak_at_least_bytes, c.limit_bytes);
    ModelSpec changed = *spec;
    std::optional<StepPlan>* keep = nullptr;
    if (c.change == "remat full") {
      changed.remat = RematPolicy::kFull;
    } else if (c.change == "mixed precision (fp32 parameters, bf16 compute)") {
      changed.precision = Precision::kMixed;
    } else if (c.change.starts_with("offload")) {
      changed.remat = RematPolicy::kOffloadDotsNoBatch;
      keep = &offload;
      only_moves_to_host = c.only_moves_to_host;
    } else if (c.change == "remat dots_no_batch") {
      changed.remat = RematPolicy::kDotsNoBatch;
      keep = &kept;
    } else {
      continue;
    }
    std::optional<StepPlan> whole = whole_plan_behind_estimate(c, changed, capacity);
    compared += whole.has_value();
    if (keep != nullptr) *keep = std::move(whole);
  }
  EXPECT_EQ(compared, 4);
  // The offload pair cannot fit, so both are estimates (the bytes live at once, on lines), compared as the
  // note compares them: the offload holds more on the device (XLA's latency-hiding scheduler runs later
  // layers' weight gradients in the copies' windows), and its whole plan does too.
  ASSERT_TRUE(offload && kept && only_moves_to_host);
  EXPECT_TRUE(*only_moves_to_host);
  EXPECT_GT(offload->peak_bytes, kept->peak_bytes);
  EXPECT_GT(offload->hlo.lower_bound_bytes, kept->hlo.lower_bound_bytes);
}

// A line that is not exact can end under the bytes known live at once: the flax encoder in mixed precision
// with full remat, whose forward pass overtakes its backward pass deeper down, extends from 16, 32 and 48
// layers to 3.4% under its whole plan at 300 (the line of the pass that led at 48). Its figure is raised to
// the bytes live at once on the passes' lines: within 1% of the whole plan.
TEST(StepPlan, AFitOfADeepStepNeverEstimatesUnderTheBytesLiveAtOnce) {
  auto spec = model_spec_from_json(Json::parse(
      R"({"model": "flax_encoder", "layers": 300, "optimizer": "adam", "precision": "mixed",
          "remat": "full"})"));
  ASSERT_TRUE(spec.ok()) << spec.error().message();
  const uint64_t capacity = 16ull << 30;
  auto estimate = plan_step_extended(*spec, capacity, 0.75, /*verdict_only=*/true);
  ASSERT_TRUE(estimate.ok()) << estimate.error().message();
  ASSERT_TRUE(peak_is_estimate(*estimate));
  EXPECT_GE(estimate->peak_bytes, estimate->peak_at_least_bytes);
  const PeakBreakdown& b = estimate->breakdown;
  EXPECT_EQ(b.parameters + b.optimizer_state + b.gradients + b.activations + b.kv_cache + b.temporaries,
            estimate->peak_bytes);
  auto whole = plan_step(*spec, capacity);
  ASSERT_TRUE(whole.ok()) << whole.error().message();
  EXPECT_TRUE(whole->extrapolated_from.empty());
  const double error = (static_cast<double>(estimate->peak_bytes) - static_cast<double>(whole->peak_bytes)) /
                       static_cast<double>(whole->peak_bytes);
  EXPECT_LT(std::abs(error), 0.01) << estimate->peak_bytes << " against " << whole->peak_bytes;
}

// A heap that left holes at the shallowest depth alone: GPT in mixed precision with full remat, cuDNN
// attention and FSDP over 8 devices packs 16 layers with 5 MB the bytes live at once do not need, 32 and 48
// layers with none - its temp grows 5 MB more from 32 to 48 than from 16 to 32 while the bytes live at once
// grow alike. The line through the deeper growth (the larger) is the whole plan's at 128 layers to the byte,
// and a search takes it (a fit of 300 layers planned three such steps whole: 14 s, 8 s with their lines).
TEST(StepPlan, ALineWhoseShallowestHeapAloneHadHolesIsTaken) {
  auto spec = model_spec_from_json(Json::parse(
      R"({"model": "gpt", "layers": 128, "donate": true, "precision": "mixed", "remat": "full", "attn": "cudnn",
          "sharding": "fsdp", "mesh": [8], "mesh_axes": ["data"]})"));
  ASSERT_TRUE(spec.ok()) << spec.error().message();
  auto line = extrapolate_step_plan(*spec, kFitExtrapolationLayers);
  ASSERT_TRUE(line.ok()) << line.error().message();
  EXPECT_FALSE(line->extrapolation_exact);
  EXPECT_GT(line->extrapolation_wobble_bytes, 64u << 10);
  EXPECT_LT(line->extrapolation_wobble_bytes, 8u << 20);
  // The packed block's wobble is set aside (the packing settled), and the other figures lie within 64 KiB.
  EXPECT_LT(line->extrapolation_line_wobble_bytes, line->extrapolation_wobble_bytes);
  EXPECT_LE(line->extrapolation_line_wobble_bytes, 64u << 10);
  auto whole = plan_step(*spec);
  ASSERT_TRUE(whole.ok()) << whole.error().message();
  EXPECT_EQ(line->hlo.temp_bytes, whole->hlo.temp_bytes);
  EXPECT_EQ(line->peak_bytes, whole->peak_bytes);
  auto searched = plan_step_extended(*spec);
  ASSERT_TRUE(searched.ok()) << searched.error().message();
  EXPECT_EQ(searched->extrapolated_from, (std::vector<uint64_t>{16, 32, 48}));
  EXPECT_EQ(searched->peak_bytes, whole->peak_bytes);
  // On one device the same stack packs every depth alike: exact.
  auto one_device = model_spec_from_json(Json::parse(
      R"({"model": "gpt", "layers": 128, "donate": true, "precision": "mixed", "remat": "full", "attn": "cudnn"})"));
  ASSERT_TRUE(one_device.ok()) << one_device.error().message();
  auto one = extrapolate_step_plan(*one_device, kFitExtrapolationLayers);
  ASSERT_TRUE(one.ok()) << one.error().message();
  EXPECT_TRUE(one->extrapolation_exact);
}

// The heap's packing can move a few bytes between depths: this ViT's peak grows by 39,424 bytes less from 32
// to 48 layers than from 16 to 32 (a few of its tiny fusions differ between depths: 2,012 modeled
// instructions from 16 to 32 layers, 2,020 from 32 to 48). A search takes that line on its larger growth -
// not exact, and said so - so the figure errs high: here by 290,560 bytes at 128 layers (the packing does not
// repeat exactly: less than the 64 KiB per 16 layers a search accepts); a larger wobble (GPT with four
// microbatches) is planned whole. (Until 2026-12-04 GPT with two microbatches wobbled by 160 bytes; once a
// mean's division by a constant fused as XLA's multiply by its inverse, its line is exact.)
TEST(StepPlan, ASearchTakesALineThatWobblesByAFewBytesOnItsLargerGrowth) {
  auto vit = model_spec_from_json(Json::parse(
      R"({"model": "vit", "d_model": 128, "heads": 4, "batch": 4, "image": 64, "patch": 16, "classes": 10,
          "layers": 128})"));
  ASSERT_TRUE(vit.ok()) << vit.error().message();
  auto searched = plan_step_extended(*vit);
  ASSERT_TRUE(searched.ok()) << searched.error().message();
  EXPECT_EQ(searched->extrapolated_from, (std::vector<uint64_t>{16, 32, 48}));
  EXPECT_FALSE(searched->extrapolation_exact);
  const uint64_t wobble = searched->extrapolation_wobble_bytes;
  EXPECT_GT(wobble, 0u);
  EXPECT_LE(wobble, 64u << 10);
  auto whole = plan_step(*vit);
  ASSERT_TRUE(whole.ok()) << whole.error().message();
  EXPECT_GE(searched->peak_bytes, whole->peak_bytes);
  EXPECT_LE(searched->peak_bytes - whole->peak_bytes, (64u << 10) * (128 - 48) / 16);
  std::printf("ViT: wobble %llu bytes per 16 layers, %llu bytes over the whole plan at 128 layers\n",
              static_cast<unsigned long long>(wobble),
              static_cast<unsigned long long>(searched->peak_bytes - whole->peak_bytes));
  EXPECT_EQ(searched->hlo.argument_bytes, whole->hlo.argument_bytes);
  auto spec = model_spec_from_json(Json::parse(
      R"({"model": "gpt", "d_model": 256, "heads": 4, "seq": 128, "batch": 4, "vocab": 8000, "accum": 2,
          "layers": 128})"));
  ASSERT_TRUE(spec.ok()) << spec.error().message();
  spec->accum = 4;
  auto four = plan_step_extended(*spec);
  ASSERT_TRUE(four.ok()) << four.error().message();
  EXPECT_TRUE(four->extrapolated_from.empty()) << "planned whole";
  auto line = extrapolate_step_plan(*spec, kFitExtrapolationLayers);
  ASSERT_TRUE(line.ok()) << line.error().message();
  EXPECT_GT(line->extrapolation_wobble_bytes, 64u << 10);
  // The peak's parts count too. Mixed precision with two microbatches of 8: a buffer at the peak changes
  // part between 16, 32 and 48 layers (the peak is moving) - and that line is not the whole plan's at 128
  // layers (524,288 bytes over it). Planned whole.
  spec->precision = Precision::kMixed;
  spec->accum = 2;
  spec->batch = 8;
  auto parts = extrapolate_step_plan(*spec, kFitExtrapolationLayers);
  ASSERT_TRUE(parts.ok()) << parts.error().message();
  EXPECT_GT(parts->extrapolation_wobble_bytes, 64u << 10);
  auto mixed = plan_step_extended(*spec);
  auto mixed_whole = plan_step(*spec);
  ASSERT_TRUE(mixed.ok() && mixed_whole.ok());
  EXPECT_TRUE(mixed->extrapolated_from.empty()) << "planned whole";
  EXPECT_NE(parts->peak_bytes, mixed_whole->peak_bytes);
  std::printf("mixed, 2 microbatches: the line %llu, the whole plan %llu at 128 layers\n",
              static_cast<unsigned long long>(parts->peak_bytes),
              static_cast<unsigned long long>(mixed_whole->peak_bytes));
}

}  // namespace
}  // namespace memfit
