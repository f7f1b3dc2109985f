// The model zoo's options move the peak the way the seed says they do, and nonsense specs are refused.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>

#include "memfit/core/json.h"
#include "memfit/plan/largest_fit.h"
#include "memfit/plan/step_plan.h"
#include "memfit/program/model_zoo.h"

namespace memfit {
namespace {

StepPlan plan(const std::string& json) {
  auto spec = model_spec_from_json(Json::parse(json));
  EXPECT_TRUE(spec.ok()) << json << ": " << spec.error().message();
  auto p = plan_step(*spec);
  EXPECT_TRUE(p.ok()) << json << ": " << p.error().message();
  return *p;
}

// The program the spec `json` builds, which must be the lowered one (the program JAX traces), not the
// fused writer's guess of XLA's; an empty module (the failure reported) if it cannot be built.
HloModule lowered_step_module(const std::string& json) {
  auto spec = model_spec_from_json(Json::parse(json));
  EXPECT_TRUE(spec.ok()) << json << ": " << spec.error().message();
  if (!spec.ok()) return {};
  auto built = build_step_module(*spec, nullptr);
  EXPECT_TRUE(built.ok()) << json << ": " << built.error().message();
  if (!built.ok()) return {};
  EXPECT_FALSE(built->is_scheduled) << json << ": the zoo wrote XLA's fused program, not the lowered one";
  return std::move(*built);
}

// `json` (an object's keys without its closing brace) with `key` set to `value`, as a spec.
ModelSpec spec_with(const std::string& json, const char* key, uint64_t value) {
  return *model_spec_from_json(Json::parse(json + ", \"" + key + "\": " + std::to_string(value) + "}"));
}

// The while loops in the entry of the program `spec` builds.
size_t entry_loops(const ModelSpec& spec) {
  auto module = build_step_module(spec, nullptr);
  EXPECT_TRUE(module.ok()) << module.error().message();
  if (!module.ok()) return 0;
  size_t loops = 0;
  for (const HloInstruction& i : module->entry()->instructions) loops += i.opcode == HloOpcode::kWhile;
  return loops;
}

TEST(ModelZoo, EachFixLowersThePeakAsTheSeedSays) {
  const StepPlan base = plan(R"({"model": "gpt", "donate": true})");
  // bf16 compute: about half the activation memory.
  const StepPlan mixed = plan(R"({"model": "gpt", "donate": true, "precision": "mixed"})");
  EXPECT_LT(mixed.hlo.temp_bytes, 0.6 * static_cast<double>(base.hlo.temp_bytes));
  EXPECT_GT(mixed.hlo.temp_bytes, 0.4 * static_cast<double>(base.hlo.temp_bytes));
  // Rematerialization: full < dots_no_batch < dots < none.
  const StepPlan full = plan(R"({"model": "gpt", "donate": true, "remat": "full"})");
  const StepPlan nb = plan(R"({"model": "gpt", "donate": true, "remat": "dots_no_batch"})");
  const StepPlan dots = plan(R"({"model": "gpt", "donate": true, "remat": "dots"})");
  EXPECT_LT(full.peak_bytes, nb.peak_bytes);
  EXPECT_LT(nb.peak_bytes, dots.peak_bytes);
  EXPECT_LT(dots.peak_bytes, base.peak_bytes);
  // JAX's own policy names mean the same.
  EXPECT_EQ(plan(R"({"model": "gpt", "donate": true, "remat": "nothing_saveable"})").peak_bytes,
            full.peak_bytes);
  // Remat of some layers only lands between none and all.
  const StepPlan half =
      plan(R"({"model": "gpt", "donate": true, "remat": "full", "remat_layers": [0, 1, 2, 3]})");
  EXPECT_LT(half.peak_bytes, base.peak_bytes);
  EXPECT_GT(half.peak_bytes, full.peak_bytes);
  // Accumulation over 4 microbatches of a 4x batch needs about what the 1x batch needs.
  const StepPlan accum = plan(R"({"model": "gpt", "donate": true, "accum": 4, "batch": 32})");
  EXPECT_LT(accum.peak_bytes, 1.3 * static_cast<double>(base.peak_bytes));
  // Donation saves the new parameters and optimizer state.
  const StepPlan kept = plan(R"({"model": "gpt"})");
  EXPECT_GT(kept.peak_bytes, base.peak_bytes + base.arguments.parameter_bytes);
  // Inference keeps nothing for a backward pass.
  const StepPlan infer = plan(R"({"model": "gpt", "step": "infer"})");
  EXPECT_LT(infer.hlo.temp_bytes, base.hlo.temp_bytes / 4);
  EXPECT_EQ(infer.arguments.optimizer_state_bytes, 0u);
}

TEST(ModelZoo, ShardingSplitsWhatItShould) {
  const StepPlan single = plan(R"({"model": "gpt", "donate": true, "vocab": 8192, "d_model": 512, "heads": 8,
                                   "layers": 4, "seq": 512, "batch": 16})");
  const StepPlan dp =
      plan(R"({"model": "gpt", "donate": true, "vocab": 8192, "d_model": 512, "heads": 8, "layers": 4,
                               "seq": 512, "batch": 16, "sharding": "replicated", "mesh": [8], "mesh_axes": ["data"]})");
  const StepPlan fsdp = plan(R"({"model": "gpt", "donate": true, "vocab": 8192, "d_model": 512, "heads": 8,
                                 "layers": 4, "seq": 512, "batch": 16, "sharding": "fsdp", "mesh": [8],
                                 "mesh_axes": ["data"]})");
  const StepPlan tp =
      plan(R"({"model": "gpt", "donate": true, "vocab": 8192, "d_model": 512, "heads": 8, "layers": 4,
                               "seq": 512, "batch": 16, "sharding": "tp", "mesh": [2, 4], "mesh_axes": ["data", "model"]})");
  // Data parallel (pmap-style replication): every device holds every parameter and optimizer state.
  EXPECT_EQ(dp.arguments.parameter_bytes, single.arguments.parameter_bytes);
  EXPECT_EQ(dp.arguments.optimizer_state_bytes, single.arguments.optimizer_state_bytes);
  EXPECT_EQ(dp.arguments.batch_bytes * 8, single.arguments.batch_bytes);
  // FSDP: an eighth of every parameter whose largest axis divides by 8 (all of them here).
  EXPECT_EQ(fsdp.arguments.parameter_bytes * 8, single.arguments.parameter_bytes);
  // TP over 4: the big matrices split, the vectors replicated.
  EXPECT_LT(tp.arguments.parameter_bytes, single.arguments.parameter_bytes / 2);
  EXPECT_GT(tp.arguments.parameter_bytes, single.arguments.parameter_bytes / 4);
  EXPECT_LT(tp.peak_bytes, single.peak_bytes);
}

TEST(ModelZoo, VitAndMlpFamiliesPlan) {
  const StepPlan vit = plan(R"({"model": "vit", "layers": 12, "d_model": 768, "heads": 12, "batch": 64})");
  EXPECT_GT(vit.arguments.parameter_count, 85000000u);  // ViT-B/16: 86M parameters
  EXPECT_LT(vit.arguments.parameter_count, 88000000u);
  const StepPlan vit2 = plan(R"({"model": "vit", "layers": 12, "d_model": 768, "heads": 12, "batch": 128})");
  EXPECT_GT(vit2.hlo.temp_bytes, vit.hlo.temp_bytes * 3 / 2);
  const StepPlan sgd = plan(R"({"model": "mlp", "optimizer": "sgd", "donate": true})");
  const StepPlan adam = plan(R"({"model": "mlp", "donate": true})");
  EXPECT_EQ(sgd.arguments.optimizer_state_bytes, 0u);
  // optax.adamw is adam's state and one more elementwise term in the same update.
  const StepPlan adamw = plan(R"({"model": "mlp", "optimizer": "adamw", "donate": true})");
  EXPECT_EQ(adamw.arguments.optimizer_state_bytes, adam.arguments.optimizer_state_bytes);
  EXPECT_EQ(adamw.arguments.optimizer_state_bytes,
            2 * adam.arguments.parameter_bytes + 4);  // m, v, s32 count
  EXPECT_EQ(adamw.peak_bytes, adam.peak_bytes);
  EXPECT_LT(sgd.peak_bytes, adam.peak_bytes);
  // Per-example gradients by vmap never exist whole: XLA folds their mean into one weight-gradient GEMM
  // (mlp_vmap_grads_b128's compiled module has no [batch, in, out] tensor). The zoo writes the program JAX
  // traces and the GPU model folds it the same way; what XLA then adds (the update run in the gradients'
  // transposed layout, so the donated weights are copied: 27.3 MB of temp against 19.7 MB for the mean) is
  // not modeled, and the plan holds about the same temp for both (step_plan_test's kNotHeld): the same
  // buffers, in orders a few hundred KiB apart (vmap 21.2 MB, the mean 22.0 MB).
  const StepPlan vmap =
      plan(R"({"model": "mlp", "din": 512, "width": 1024, "depth": 4, "dout": 512, "batch": 128,
                                 "step": "vmap_grads", "donate": true})");
  const StepPlan mean =
      plan(R"({"model": "mlp", "din": 512, "width": 1024, "depth": 4, "dout": 512, "batch": 128,
                                 "donate": true})");
  const uint64_t weight_gradient_bytes = 1024ull * 1024 * 4;  // the largest: f32[1024,1024]
  for (const PlannedBuffer& b : vmap.hlo.buffers) {
    if (b.kind == BufferKind::kTemp) {
      EXPECT_LE(b.bytes, weight_gradient_bytes) << b.name << " " << b.shape;
    }
  }
  EXPECT_GE(vmap.hlo.temp_bytes, mean.hlo.temp_bytes / 10 * 9);
  EXPECT_LT(vmap.hlo.temp_bytes, 2 * mean.hlo.temp_bytes);
}

// The MLP is written as JAX lowers it, jax.checkpoint included: each checkpointed layer's backward reads
// its input, weights and cotangent through an optimization barrier (nothing_saveable), and the dots
// policies put the layer's GEMM result through it too - saved, not run again. Donated, both policies keep
// less than no remat (the GELU's values are not held from the forward to the backward pass).
TEST(ModelZoo, MlpRematPoliciesAreJaxsBarriers) {
  auto barriers = [](const char* remat) {
    Json config = {{"model", "mlp"}, {"depth", 4},   {"width", 1024},  {"din", 512},
                   {"dout", 512},    {"batch", 256}, {"donate", true}, {"remat", remat}};
    auto spec = model_spec_from_json(config);
    EXPECT_TRUE(spec.ok());
    auto built = build_step_module(*spec);
    EXPECT_TRUE(built.ok());
    EXPECT_FALSE(built->is_scheduled);  // the lowered program
    std::vector<size_t> widths;         // elements through each barrier
    std::vector<bool> first_is_a_dot;
    const HloComputation& entry = *built->entry();
    for (const HloInstruction& i : entry.instructions) {
      if (i.opcode != HloOpcode::kOptimizationBarrier) continue;
      widths.push_back(i.shape.elements.size());
      const HloInstruction* tuple = nullptr;
      for (const HloInstruction& t : entry.instructions)
        if (t.name == i.operands[0]) tuple = &t;
      bool dot = false;
      for (const HloInstruction& t : entry.instructions)
        if (tuple != nullptr && t.name == tuple->operands[0]) dot = t.opcode == HloOpcode::kDot;
      first_is_a_dot.push_back(dot);
    }
    return std::make_pair(widths, first_is_a_dot);
  };
  EXPECT_TRUE(barriers("none").first.empty());
  const auto full = barriers("full");
  EXPECT_EQ(full.first, std::vector<size_t>(4, 4));  // the 4 hidden layers: input, W, b, cotangent
  EXPECT_EQ(full.second, std::vector<bool>(4, false));
  for (const char* policy : {"dots", "dots_no_batch"}) {
    const auto dots = barriers(policy);
    EXPECT_EQ(dots.first, std::vector<size_t>(4, 5)) << policy;  // and the GEMM's result, first
    EXPECT_EQ(dots.second, std::vector<bool>(4, true)) << policy;
  }
  const char* mlp = R"({"model": "mlp", "depth": 4, "width": 1024, "din": 512, "dout": 512, "batch": 256,
                        "donate": true, "remat": ")";
  const StepPlan none = plan(std::string(mlp) + "none\"}");
  const StepPlan dots = plan(std::string(mlp) + "dots\"}");
  const StepPlan full_plan = plan(std::string(mlp) + "full\"}");
  EXPECT_LT(dots.peak_bytes, none.peak_bytes);
  EXPECT_LE(full_plan.peak_bytes, dots.peak_bytes);
}

// optax.adafactor: a matrix whose two dimensions are both at least 128 keeps a row and a column statistic,
// anything else a full second moment (program/adafactor.h, checked on the flax encoder's real arguments).
TEST(ModelZoo, AdafactorKeepsFactoredStatistics) {
  const char* mlp = R"({"model": "mlp", "din": 512, "width": 1024, "depth": 1, "dout": 64, "batch": 256,
                        "donate": true, "optimizer": "%s"})";
  auto with = [&](const char* optimizer) {
    char text[512];
    std::snprintf(text, sizeof text, mlp, optimizer);
    return plan(text);
  };
  const StepPlan adafactor = with("adafactor");
  const StepPlan adam = with("adam");
  // [512,1024]: 512 + 1024 statistics; its bias 1024; [1024,64] (64 < 128): 65536; its bias 64; the count.
  EXPECT_EQ(adafactor.arguments.optimizer_state_bytes, (512 + 1024 + 1024 + 65536 + 64) * 4 + 4);
  EXPECT_EQ(adafactor.arguments.parameter_bytes, adam.arguments.parameter_bytes);
  // Every argument but the batch is donated and written over; the step also returns the loss and seven
  // f32[1] placeholders (one per factored matrix, two per other parameter) that no argument holds, and the
  // output's tuple table has 4 parameters + 1 count + 3 x 4 statistics + the loss = 18 pointers.
  EXPECT_EQ(adafactor.hlo.alias_bytes, adafactor.hlo.argument_bytes - adafactor.arguments.batch_bytes);
  EXPECT_EQ(adafactor.hlo.output_bytes - adafactor.hlo.alias_bytes, 7 * 4 + 4 + 18 * 8);
  EXPECT_LT(adafactor.peak_bytes, adam.peak_bytes);
  // Sharded adafactor state is not modeled: refused with the reason.
  auto sharded = model_spec_from_json(Json::parse(
      R"({"model": "mlp", "optimizer": "adafactor", "sharding": "fsdp", "mesh": [8], "mesh_axes": ["data"]})"));
  ASSERT_FALSE(sharded.ok());
  EXPECT_NE(sharded.error().message().find("adafactor"), std::string::npos);
}

// flax.linen's encoder (reference_programs.py): its parameters are flax's - separate q/k/v/out projections
// with biases, two norms and two dense layers per block, an embedding, a final norm and an untied head -
// trained with optax.adafactor and donated unless the config says otherwise; the seed's fixes apply to it.
TEST(ModelZoo, FlaxEncoderFamilyPlans) {
  const char* base = R"({"model": "flax_encoder", "vocab": 8000, "d_model": 256, "heads": 4, "layers": 3,
                         "seq": 256, "batch": 16)";
  auto with = [&](const std::string& extra) { return plan(std::string(base) + extra + "}"); };
  const StepPlan enc = with("");
  const uint64_t D = 256, F = 4 * D, V = 8000;
  const uint64_t block = 2 * D /*norm*/ + 3 * (D * D + D) /*q,k,v*/ + (D * D + D) /*out*/ + 2 * D /*norm*/ +
                         (D * F + F) + (F * D + D);
  EXPECT_EQ(enc.arguments.parameter_count, V * D /*embedding*/ + 3 * block + 2 * D + (D * V + V) /*head*/);
  EXPECT_EQ(enc.hlo.alias_bytes, enc.hlo.argument_bytes - enc.arguments.batch_bytes);  // donated
  EXPECT_LT(enc.arguments.optimizer_state_bytes, enc.arguments.parameter_bytes / 4);   // adafactor's
  const StepPlan adam = with(R"(, "optimizer": "adam")");
  EXPECT_EQ(adam.arguments.optimizer_state_bytes, 2 * adam.arguments.parameter_bytes + 4);
  EXPECT_LT(with(R"(, "remat": "full")").peak_bytes, enc.peak_bytes);
  EXPECT_LT(with(R"(, "precision": "mixed")").peak_bytes, enc.peak_bytes);
  EXPECT_LT(with(R"(, "step": "infer")").peak_bytes, enc.peak_bytes);
  for (const char* refused : {R"(, "scan": true)", R"(, "precision": "mixed", "attn": "cudnn")",
                              R"(, "sharding": "tp", "mesh": [2], "mesh_axes": ["model"])"}) {
    auto spec = model_spec_from_json(Json::parse(std::string(base) + refused + "}"));
    EXPECT_FALSE(spec.ok()) << refused;
  }
}

// The encoder's lowered program beyond the shared training step (TheZoosFlaxEncoderIsTheProgramJaxLowers
// holds that one against JAX's): inference is model.apply's logits - the parameters and the tokens in, the
// f32 logits out, no labels read; accumulation is JAX's scan over the microbatches, whose peak lies between
// a quarter batch's step (it adds the carried gradient sums) and the whole batch's; a remat policy puts each
// checkpointed layer's recomputation behind an optimization barrier, the peaks in the seed's order (full <
// dots_no_batch < dots < none, some layers between), and the offloading policy, whose saved GEMMs cross to
// pinned host memory, holds more on the device than dots_no_batch: XLA's latency-hiding scheduler copies each
// to the host only as the backward pass comes for it and runs later layers' weight gradients in the copies'
// shadow (plan/xla_gpu_model.h: latency_hiding_scheduled).
TEST(ModelZoo, TheFlaxEncodersOptionsAreLowered) {
  const std::string base =
      R"({"model": "flax_encoder", "vocab": 8000, "d_model": 256, "heads": 4, "layers": 3,
                               "seq": 256)";
  auto entry_count = [&](const std::string& extra, HloOpcode opcode) {
    const HloModule built = lowered_step_module(base + extra + "}");
    size_t n = 0;
    if (const HloComputation* entry = built.entry())
      for (const HloInstruction& i : entry->instructions) n += i.opcode == opcode;
    return n;
  };
  auto with = [&](const std::string& extra) {
    entry_count(extra, HloOpcode::kParameter);  // lowered
    return plan(base + extra + "}");
  };
  const uint64_t B = 16, S = 256, V = 8000;
  const StepPlan infer = with(R"(, "batch": 16, "step": "infer")");
  EXPECT_EQ(infer.arguments.batch_bytes, B * S * 4);  // the tokens only
  EXPECT_EQ(infer.hlo.argument_bytes, infer.arguments.parameter_bytes + B * S * 4);
  EXPECT_EQ(infer.hlo.output_bytes, B * S * V * 4);
  const StepPlan whole = with(R"(, "batch": 16)");
  const StepPlan quarter = with(R"(, "batch": 4)");
  const StepPlan accum = with(R"(, "batch": 16, "accum": 4)");
  EXPECT_EQ(entry_count(R"(, "batch": 16, "accum": 4)", HloOpcode::kWhile), 1u);
  EXPECT_EQ(accum.hlo.argument_bytes, whole.hlo.argument_bytes);
  EXPECT_GT(accum.peak_bytes, quarter.peak_bytes);
  EXPECT_LT(accum.peak_bytes, whole.peak_bytes);
  EXPECT_LT(infer.peak_bytes, whole.peak_bytes);
  // Remat: one barrier per checkpointed layer.
  EXPECT_EQ(entry_count(R"(, "batch": 16)", HloOpcode::kOptimizationBarrier), 0u);
  EXPECT_EQ(entry_count(R"(, "batch": 16, "remat": "full")", HloOpcode::kOptimizationBarrier), 3u);
  EXPECT_EQ(
      entry_count(R"(, "batch": 16, "remat": "dots", "remat_layers": [1])", HloOpcode::kOptimizationBarrier),
      1u);
  const StepPlan full = with(R"(, "batch": 16, "remat": "full")");
  const StepPlan no_batch = with(R"(, "batch": 16, "remat": "dots_no_batch")");
  const StepPlan dots = with(R"(, "batch": 16, "remat": "dots")");
  const StepPlan some = with(R"(, "batch": 16, "remat": "full", "remat_layers": [0])");
  EXPECT_LT(full.peak_bytes, no_batch.peak_bytes);
  EXPECT_LT(no_batch.peak_bytes, dots.peak_bytes);
  EXPECT_LT(dots.peak_bytes, whole.peak_bytes);
  EXPECT_LT(full.peak_bytes, some.peak_bytes);
  EXPECT_LT(some.peak_bytes, whole.peak_bytes);
  const StepPlan offload = with(R"(, "batch": 16, "remat": "offload_dots_no_batch")");
  EXPECT_GT(offload.peak_bytes, no_batch.peak_bytes);
  EXPECT_GT(offload.host_peak_bytes, 0u);
  EXPECT_EQ(no_batch.host_peak_bytes, 0u);
}

// flax_cnn as reference_programs.py builds it: optax.adamw, donated; flax's parameter count; in training each
// convolution keeps its pre-activation (relu's derivative reads it) and the next one its input, so every
// block's are live at once, while inference (relu fused into the call) holds one convolution's input and
// output; the peak grows with the batch, and specs the reference does not build are refused.
TEST(ModelZoo, FlaxCnnFamilyPlans) {
  const uint64_t B = 16, side = 64, C = 3, classes = 100;
  const std::vector<uint64_t> widths = {32, 64, 128};
  const std::string base = R"({"model": "flax_cnn", "image": 64, "classes": 100, "widths": [32, 64, 128],
                               "batch": )";
  auto with = [&](uint64_t batch, const std::string& extra) {
    return plan(base + std::to_string(batch) + extra + "}");
  };
  const StepPlan train = with(B, "");
  uint64_t count = 0, in = C;
  for (uint64_t w : widths) {
    count += (3 * 3 * in * w + w) + (3 * 3 * w * w + w);
    in = w;
  }
  count += in * classes + classes;
  EXPECT_EQ(train.arguments.parameter_count, count);
  EXPECT_EQ(train.arguments.parameter_bytes, 4 * count);
  EXPECT_EQ(train.arguments.optimizer_state_bytes, 2 * 4 * count + 4);  // adamw's moments and count
  EXPECT_EQ(train.arguments.batch_bytes, B * side * side * C * 4 + B * 4);
  EXPECT_EQ(train.hlo.alias_bytes, train.hlo.argument_bytes - train.arguments.batch_bytes);  // donated
  // Kept for the backward pass, in every block but the last: both pre-activations, the first relu's output
  // (the second convolution's input) and the pool's output (the next block's input); all of it is live when
  // the backward pass reaches the last block.
  uint64_t kept = 0, s = side;
  for (size_t b = 0; b + 1 < widths.size(); ++b) {
    kept += 3 * B * s * s * widths[b] * 4 + B * (s / 2) * (s / 2) * widths[b] * 4;
    s /= 2;
  }
  EXPECT_GE(train.peak_bytes, train.hlo.argument_bytes + kept);
  EXPECT_GE(train.breakdown.activations, kept);
  // Inference: the first block's two convolutions (one reads what the other wrote) and little else.
  const StepPlan infer = with(B, R"(, "step": "infer")");
  const uint64_t first_pair = 2 * B * side * side * widths[0] * 4;
  EXPECT_GE(infer.peak_bytes, infer.hlo.argument_bytes + first_pair);
  EXPECT_LE(infer.peak_bytes, infer.hlo.argument_bytes + first_pair + first_pair / 50);
  EXPECT_LT(infer.peak_bytes, train.peak_bytes);
  // Activations scale with the batch: twice the batch, about twice the memory beside parameters and state.
  const StepPlan twice = with(2 * B, "");
  auto per_batch = [](const StepPlan& p) {
    return static_cast<double>(p.peak_bytes - p.arguments.parameter_bytes -
                               p.arguments.optimizer_state_bytes);
  };
  const double growth = per_batch(twice) / per_batch(train);
  EXPECT_NEAR(growth, 2.0, 0.1);
  // Another optimizer than the reference's adamw: sgd keeps no state (its update read adamw's moments it
  // never declared, and crashed, until 2026-12-05), adam the same two moments.
  const StepPlan sgd = with(B, R"(, "optimizer": "sgd")");
  EXPECT_EQ(sgd.arguments.optimizer_state_bytes, 0u);
  EXPECT_LT(sgd.peak_bytes, train.peak_bytes);
  EXPECT_EQ(with(B, R"(, "optimizer": "adam")").arguments.optimizer_state_bytes,
            train.arguments.optimizer_state_bytes);
  // The spec round-trips through its JSON, widths included.
  auto again = model_spec_from_json(model_spec_to_json(train.spec));
  ASSERT_TRUE(again.ok()) << again.error().message();
  EXPECT_EQ(again->widths, widths);
  EXPECT_EQ(plan_step(*again)->peak_bytes, train.peak_bytes);
  for (const char* refused : {R"(, "remat": "full")", R"(, "precision": "bf16")", R"(, "widths": [])",
                              R"(, "widths": [0])", R"(, "widths": ["a"])", R"(, "attn": "cudnn")",
                              R"(, "widths": [8, 8, 8, 8, 8, 8, 8])", R"(, "step": "decode")"}) {
    auto spec = model_spec_from_json(Json::parse(base + "16" + refused + "}"));
    EXPECT_FALSE(spec.ok()) << refused;
  }
}

// step decode (reference_programs.py's mode "decode"): an LLM server's step - one token per sequence
// against a donated KV cache of seq positions per layer, written in place; written as JAX lowers it and
// planned through the model of XLA:GPU.
TEST(ModelZoo, DecodeHoldsTheKvCacheOnce) {
  const uint64_t B = 4, S = 256, L = 2, D = 256, H = 4, V = 1000, F = 4 * D, hd = D / H;
  const char* spec = R"({"model": "gpt", "step": "decode", "batch": 4, "seq": 256, "layers": 2,
                         "d_model": 256, "heads": 4, "vocab": 1000%s})";
  auto with = [&](const char* extra) {
    char text[512];
    std::snprintf(text, sizeof text, spec, extra);
    return plan(text);
  };
  const StepPlan fp32 = with("");
  const uint64_t params = V * D + S * D + 2 * D + L * (D * 3 * D + D * D + D * F + F * D + F + D + 4 * D);
  const uint64_t cache = L * 2 * B * H * S * hd * 4;
  EXPECT_EQ(fp32.arguments.parameter_count, params);
  EXPECT_EQ(fp32.arguments.kv_cache_bytes, cache);
  EXPECT_EQ(fp32.hlo.argument_bytes, params * 4 + cache + B * 4 + 4);     // parameters, cache, tokens, pos
  EXPECT_EQ(fp32.hlo.alias_bytes, cache);                                 // donate_argnums=(1,)
  EXPECT_EQ(fp32.hlo.output_bytes, B * V * 4 + cache + 8 * (1 + 2 * L));  // logits, cache, tuple table
  EXPECT_LT(fp32.hlo.temp_bytes, cache / 4) << "the cache is updated in place, never copied";
  EXPECT_EQ(fp32.breakdown.kv_cache, cache);
  EXPECT_EQ(fp32.breakdown.optimizer_state + fp32.breakdown.gradients, 0u);
  // The cache grows with batch x seq x layers and halves in 16-bit compute.
  EXPECT_EQ(with(R"(, "seq": 512)").arguments.kv_cache_bytes, 2 * cache);
  EXPECT_EQ(with(R"(, "precision": "bf16")").arguments.kv_cache_bytes, cache / 2);
  lowered_step_module(R"({"model": "gpt", "step": "decode"})");
  for (const char* refused :
       {R"({"model": "mlp", "step": "decode"})", R"({"model": "gpt", "step": "decode", "scan": true})",
        R"({"model": "gpt", "step": "decode", "sharding": "fsdp", "mesh": [2], "mesh_axes": ["data"]})",
        R"({"model": "gpt", "step": "decode", "backend": "cpu"})"}) {
    EXPECT_FALSE(model_spec_from_json(Json::parse(refused)).ok()) << refused;
  }
}

// optax.adafactor written as JAX lowers it (the GPU model plans it like any lowered program): its state
// holds the count, each factored parameter's row and column statistics and each other parameter's full
// moment; the step returns that state with a placeholder f32[1] wherever a parameter has none, and donation
// writes every new parameter and state array over the one it replaces. Counted here by hand.
TEST(ModelZoo, AdafactorIsWrittenAsJaxLowersIt) {
  const uint64_t L = 2, D = 256, S = 128, V = 1000, F = 4 * D;
  const std::string spec_text = R"({"model": "gpt", "layers": 2, "d_model": 256, "heads": 4, "seq": 128,
                                    "vocab": 1000, "batch": 4, "donate": true, "optimizer": "adafactor"})";
  auto spec = model_spec_from_json(Json::parse(spec_text));
  ASSERT_TRUE(spec.ok());
  auto built = build_step_module(*spec);
  ASSERT_TRUE(built.ok()) << built.error().message();
  EXPECT_FALSE(built->is_scheduled) << "the zoo wrote XLA's fused program, not the lowered one";
  std::vector<std::vector<uint64_t>> params = {{V, D}, {D}, {D}, {S, D}};  // embed, lnf_b, lnf_g, pos
  for (uint64_t l = 0; l < L; ++l)
    for (const std::vector<uint64_t>& d :
         std::vector<std::vector<uint64_t>>{{F}, {D}, {D}, {D}, {D}, {D}, {D, F}, {F, D}, {D, D}, {D, 3 * D}})
      params.push_back(d);
  uint64_t param_bytes = 0, state_bytes = 4;  // the count
  size_t factored = 0;
  for (const auto& d : params) {
    uint64_t n = 1;
    for (uint64_t x : d) n *= x;
    param_bytes += 4 * n;
    if (d.size() == 2) {  // every matrix here has both sides >= 128: factored
      ++factored;
      state_bytes += 4 * (d[0] + d[1]);
    } else {
      state_bytes += 4 * n;
    }
  }
  const StepPlan p = plan(spec_text);
  EXPECT_EQ(p.arguments.optimizer_state_bytes, state_bytes);
  EXPECT_EQ(p.hlo.alias_bytes, param_bytes + state_bytes);  // donated: every array written over its own
  const uint64_t n = params.size();
  const uint64_t placeholders = 4 * (factored + 2 * (n - factored));  // v for each factored, v_row, v_col
  EXPECT_EQ(p.hlo.output_bytes, param_bytes + state_bytes + placeholders + 4 /* loss */ + 8 * (4 * n + 2));
  EXPECT_EQ(factored, 2 + 4 * L);
  // The MLP's adafactor is lowered too.
  auto mlp =
      model_spec_from_json(Json::parse(R"({"model": "mlp", "optimizer": "adafactor", "donate": true})"));
  ASSERT_TRUE(mlp.ok());
  auto mlp_built = build_step_module(*mlp);
  ASSERT_TRUE(mlp_built.ok()) << mlp_built.error().message();
  EXPECT_FALSE(mlp_built->is_scheduled);
}

// A decode step split over a tensor-parallel group, as a server spreads a model too large for one GPU: each
// device holds its share of the heads (and of the KV cache), of the hidden units and of the vocabulary,
// and sums the split GEMMs' partials over the group (all-reduce) - Megatron's split, per device as XLA's
// SPMD partitioner writes it. The arithmetic below is done by hand from the model's shapes.
TEST(ModelZoo, TensorParallelDecodeHoldsEachDevicesShare) {
  const uint64_t B = 4, S = 256, L = 2, D = 256, H = 4, V = 1000, F = 4 * D, hd = D / H;
  auto with = [&](const std::string& extra) {
    return plan(R"({"model": "gpt", "step": "decode", "batch": 4, "seq": 256, "layers": 2, "d_model": 256,
                    "heads": 4, "vocab": 1000)" +
                extra + "}");
  };
  const StepPlan one = with("");
  for (uint64_t t : {1, 2, 4}) {
    SCOPED_TRACE(t);
    const StepPlan split =
        t == 1
            ? one
            : with(R"(, "sharding": "tp", "mesh": [)" + std::to_string(t) + R"(], "mesh_axes": ["model"])");
    const uint64_t per_layer = D * 3 * D / t + D / t * D + D * F / t + F / t * D + F / t + D + 4 * D;
    const uint64_t params = V / t * D + S * D + 2 * D + L * per_layer;
    const uint64_t cache = L * 2 * B * (H / t) * S * hd * 4;
    EXPECT_EQ(split.arguments.parameter_count, params);
    EXPECT_EQ(split.arguments.kv_cache_bytes, cache);
    EXPECT_EQ(split.hlo.argument_bytes, params * 4 + cache + B * 4 + 4);
    EXPECT_EQ(split.hlo.alias_bytes, cache);
    EXPECT_EQ(split.hlo.output_bytes, B * V / t * 4 + cache + 8 * (1 + 2 * L));  // its rows of the logits
    if (t > 1) {
      EXPECT_LT(split.peak_bytes, one.peak_bytes / t * 2);
    }
    auto spec = model_spec_from_json(Json::parse(
        t == 1 ? std::string(R"({"model": "gpt", "step": "decode", "layers": 2})")
               : R"({"model": "gpt", "step": "decode", "layers": 2, "sharding": "tp", "mesh": [)" +
                     std::to_string(t) + R"(], "mesh_axes": ["model"]})"));
    ASSERT_TRUE(spec.ok()) << spec.error().message();
    auto built = build_step_module(*spec);
    ASSERT_TRUE(built.ok()) << built.error().message();
    size_t all_reduces = 0;
    for (const HloInstruction& i : built->computations.back().instructions)
      all_reduces += i.opcode == HloOpcode::kAllReduce;
    // Two per layer (after the output projection and the MLP) and the table's lookup; none on one device.
    EXPECT_EQ(all_reduces, t == 1 ? 0u : 2 * 2 + 1);
  }
  // Grouped-query attention (kv_heads): 2 key/value heads for 4 query heads halve the cache and the k and v
  // projections; over 2 devices each holds one key/value head.
  for (uint64_t t : {1, 2}) {
    SCOPED_TRACE(t);
    const StepPlan gqa =
        with(R"(, "kv_heads": 2)" +
             (t == 1 ? std::string() : R"(, "sharding": "tp", "mesh": [2], "mesh_axes": ["model"])"));
    const uint64_t kv = 2;
    const uint64_t per_layer =
        D * (D + 2 * kv * hd) / t + D / t * D + D * F / t + F / t * D + F / t + D + 4 * D;
    EXPECT_EQ(gqa.arguments.parameter_count, V / t * D + S * D + 2 * D + L * per_layer);
    EXPECT_EQ(gqa.arguments.kv_cache_bytes, L * 2 * B * (kv / t) * S * hd * 4);
    EXPECT_EQ(gqa.hlo.alias_bytes, gqa.arguments.kv_cache_bytes);
  }
  for (const char* refused :
       {R"({"model": "gpt", "step": "decode", "heads": 4, "d_model": 256, "kv_heads": 3})",
        R"({"model": "gpt", "heads": 4, "d_model": 256, "kv_heads": 2})",
        R"({"model": "gpt", "step": "decode", "heads": 4, "d_model": 256, "kv_heads": 2, "sharding": "tp",
            "mesh": [4], "mesh_axes": ["model"]})"}) {
    EXPECT_FALSE(model_spec_from_json(Json::parse(refused)).ok()) << refused;
  }
  // A data axis, or heads that do not split, are refused.
  for (
      const char* refused :
      {R"({"model": "gpt", "step": "decode", "sharding": "tp", "mesh": [2, 2], "mesh_axes": ["data", "model"]})",
       R"({"model": "gpt", "step": "decode", "heads": 4, "d_model": 256, "sharding": "tp", "mesh": [8],
            "mesh_axes": ["model"]})"}) {
    EXPECT_FALSE(model_spec_from_json(Json::parse(refused)).ok()) << refused;
  }
}

// The largest batch (or context) that fits: the boundary between plans that fit and plans that do not,
// checked here by planning both sides of it again.
// d_ff sets the hidden width of every transformer block's MLP (Llama's intermediate_size), in each writer:
// the lowered GPT, ViT and flax encoder, a decode split over a tensor-parallel group, and a scan in half
// precision (the fused writer). The parameters change by w1, b1 and w2's share, counted by hand; d_ff = 4 x
// d_model is the default to the byte.
TEST(ModelZoo, DffSetsTheWidthOfEveryBlocksMlp) {
  const uint64_t D = 128, L = 2, F = 3 * D;
  struct Case {
    std::string spec;
    uint64_t tp;
  };
  const std::vector<Case> cases = {
      {R"("model": "gpt", "seq": 64, "vocab": 500)", 1},
      {R"("model": "gpt", "seq": 64, "vocab": 500, "step": "decode", "sharding": "tp", "mesh": [2],
          "mesh_axes": ["model"])",
       2},
      {R"("model": "gpt", "seq": 64, "vocab": 500, "scan": true, "precision": "mixed")", 1},
      {R"("model": "vit", "image": 32, "patch": 8)", 1},
      {R"("model": "flax_encoder", "seq": 64, "vocab": 500)", 1}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.spec);
    const std::string once = "{" + c.spec + R"(, "d_model": 128, "heads": 4, "layers": 2, "batch": 4)";
    const StepPlan plain = plan(once + "}");
    const StepPlan four = plan(once + R"(, "d_ff": 512})");
    const StepPlan three = plan(once + R"(, "d_ff": 384})");
    EXPECT_EQ(four.peak_bytes, plain.peak_bytes);
    EXPECT_EQ(four.arguments.parameter_count, plain.arguments.parameter_count);
    // Per layer: w1 [D, F], b1 [F] and w2 [F, D], each device holding 1 / tp of the hidden units.
    EXPECT_EQ(plain.arguments.parameter_count - three.arguments.parameter_count,
              L * (2 * D + 1) * (4 * D - F) / c.tp);
    EXPECT_LT(three.peak_bytes, plain.peak_bytes);
  }
  for (const char* refused :
       {R"({"model": "mlp", "d_ff": 512})",
        R"({"model": "gpt", "heads": 4, "d_model": 128, "d_ff": 302, "step": "decode", "sharding": "tp",
            "mesh": [4], "mesh_axes": ["model"]})"}) {
    EXPECT_FALSE(model_spec_from_json(Json::parse(refused)).ok()) << refused;
  }
}

// The pool's share of the device, as the library takes it (the Python module passes it through): NaN and
// -1 had planned a pool of 0 bytes, 7 one seven times the device that "fits".
TEST(ModelZoo, APoolFractionOutsideZeroToOneIsRefused) {
  auto spec = model_spec_from_json(Json::parse(R"({"model": "mlp"})"));
  ASSERT_TRUE(spec.ok());
  const uint64_t capacity = 80ull << 30;
  for (double bad : {std::nan(""), -1.0, 0.0, 1.5, 7.0, std::numeric_limits<double>::infinity()}) {
    SCOPED_TRACE(bad);
    auto plan = plan_step(*spec, capacity, bad);
    ASSERT_FALSE(plan.ok());
    EXPECT_EQ(plan.error().code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(plan.error().message().find("memory fraction"), std::string::npos) << plan.error().message();
    EXPECT_FALSE(plan_step_extended(*spec, capacity, bad).ok());
    EXPECT_FALSE(fit_step(*spec, capacity, bad).ok());
    EXPECT_FALSE(largest_fitting(*spec, "batch", capacity, bad).ok());
  }
  for (double good : {0.01, 0.75, 1.0}) {
    auto plan = plan_step(*spec, capacity, good);
    ASSERT_TRUE(plan.ok()) << plan.error().message();
    EXPECT_LE(plan->limit_bytes, capacity);
  }
}

TEST(ModelZoo, LargestFitIsTheBoundaryOfWhatFits) {
  auto spec = model_spec_from_json(Json::parse(
      R"({"model": "gpt", "step": "decode", "batch": 1, "seq": 4096, "layers": 4, "d_model": 1024,
          "heads": 16, "precision": "bf16"})"));
  ASSERT_TRUE(spec.ok());
  const uint64_t capacity = 2ull << 30;
  for (const char* key : {"batch", "seq"}) {
    SCOPED_TRACE(key);
    auto found = largest_fitting(*spec, key, capacity);
    ASSERT_TRUE(found.ok()) << found.error().message();
    ASSERT_GT(found->value, 1u);
    EXPECT_EQ(found->next_value, found->value + 1);
    ModelSpec at = *spec, past = *spec;
    (std::string(key) == "batch" ? at.batch : at.seq) = found->value;
    (std::string(key) == "batch" ? past.batch : past.seq) = found->next_value;
    auto fits = plan_step(at, capacity);
    auto too_big = plan_step(past, capacity);
    ASSERT_TRUE(fits.ok() && too_big.ok());
    EXPECT_TRUE(fits->fits);
    EXPECT_FALSE(too_big->fits);
    EXPECT_EQ(found->plan.peak_bytes, fits->peak_bytes);
    ASSERT_TRUE(found->next_peak_bytes.has_value());
    EXPECT_EQ(*found->next_peak_bytes, too_big->peak_bytes);
    // The KV cache grows linearly: the line lands on the boundary (doubling, then bisecting, took 10 plans
    // for the batch and 33 for the sequence; a line from the smallest values reaches 16 times as far).
    EXPECT_LE(found->programs_planned, std::string(key) == "batch" ? 6u : 10u);
  }
  // A training step's peak curves with the sequence (attention's scores grow with its square): the search
  // still ends on the boundary, in fewer plans than bisection's 21 (7).
  auto train = model_spec_from_json(
      Json::parse(R"({"model": "gpt", "layers": 2, "d_model": 256, "heads": 4, "batch": 8, "vocab": 8000})"));
  ASSERT_TRUE(train.ok());
  auto seq = largest_fitting(*train, "seq", 1ull << 30);
  ASSERT_TRUE(seq.ok()) << seq.error().message();
  ModelSpec at_seq = *train, past_seq = *train;
  at_seq.seq = seq->value;
  past_seq.seq = seq->next_value;
  auto seq_fits = plan_step(at_seq, 1ull << 30);
  auto seq_over = plan_step(past_seq, 1ull << 30);
  ASSERT_TRUE(seq_fits.ok() && seq_over.ok());
  EXPECT_TRUE(seq_fits->fits);
  EXPECT_FALSE(seq_over->fits);
  EXPECT_EQ(seq->next_value, seq->value + 1);
  EXPECT_LE(seq->programs_planned, 10u);
  // A training batch moves in whole microbatches.
  auto accum = model_spec_from_json(Json::parse(R"({"model": "gpt", "layers": 2, "accum": 4, "batch": 4})"));
  ASSERT_TRUE(accum.ok());
  auto batches = largest_fitting(*accum, "batch", 8ull << 30);
  ASSERT_TRUE(batches.ok()) << batches.error().message();
  EXPECT_EQ(batches->step, 4u);
  EXPECT_EQ(batches->value % 4, 0u);
  EXPECT_EQ(batches->next_value, batches->value + 4);
  // Nothing fits a device smaller than the parameters: value 0, and the smallest step's plan says why.
  auto none = largest_fitting(*spec, "batch", 64ull << 20);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->value, 0u);
  EXPECT_FALSE(none->plan.fits);
  // A model without a sequence, or a key that is not one, is refused.
  auto vit = model_spec_from_json(Json::parse(R"({"model": "vit"})"));
  ASSERT_TRUE(vit.ok());
  EXPECT_FALSE(largest_fitting(*vit, "seq", capacity).ok());
  EXPECT_FALSE(largest_fitting(*spec, "layers", capacity).ok());
}

// A server that does not fit is offered a smaller batch, down to one sequence, and tensor parallelism.
TEST(ModelZoo, FitOffersAServerTensorParallelism) {
  auto spec = model_spec_from_json(Json::parse(
      R"({"model": "gpt", "step": "decode", "batch": 64, "seq": 4096, "layers": 4, "d_model": 1024,
          "heads": 16, "precision": "bf16"})"));
  ASSERT_TRUE(spec.ok());
  auto fit = fit_step(*spec, 1ull << 30);  // a 768 MiB pool: the step's 4.2 GiB does not fit
  ASSERT_TRUE(fit.ok()) << fit.error().message();
  EXPECT_FALSE(fit->baseline.fits);
  const FitCandidate* tp = nullptr;
  bool small_batch = false;
  for (const FitCandidate& c : fit->candidates) {
    if (c.change.rfind("tensor parallel", 0) == 0 && c.fits) tp = &c;
    small_batch = small_batch || (c.change.rfind("batch 8 instead", 0) == 0);
  }
  ASSERT_NE(tp, nullptr);
  EXPECT_EQ(tp->step, "sharding");
  EXPECT_NE(tp->code.find("'model'"), std::string::npos);
  EXPECT_TRUE(small_batch) << "a server's batch goes below a quarter";
}

// jax.lax.scan is a while loop in the program XLA compiles: one layer's forward and one layer's backward,
// whatever the number of layers, reading and writing stacks of [layers, ...] values. So a scan of ten
// thousand layers is the same program as a scan of eight, and its peak grows only by the stacks and the
// stacked weights and optimizer state - exactly linearly in the layers.
TEST(ModelZoo, AScanIsOneLayerInALoop) {
  auto spec_of = [](uint64_t layers) {
    return spec_with(R"({"model": "gpt", "d_model": 256, "heads": 4, "seq": 128, "batch": 8, "vocab": 1000,
                         "scan": true, "donate": true)",
                     "layers", layers);
  };
  EXPECT_EQ(entry_loops(spec_of(10000)), 2u) << "the forward and the backward pass";
  std::vector<uint64_t> peak, instructions;
  for (uint64_t layers : {8, 16, 24, 10000}) {
    auto p = plan_step(spec_of(layers));
    ASSERT_TRUE(p.ok()) << p.error().message();
    peak.push_back(p->peak_bytes);
    instructions.push_back(p->hlo.instructions);
  }
  EXPECT_EQ(instructions[0], instructions[3]) << "8 and 10000 layers: the same program";
  EXPECT_EQ(peak[1] - peak[0], peak[2] - peak[1]) << "8 more layers add the same bytes each time";
  EXPECT_EQ(peak[3] - peak[0], (peak[1] - peak[0]) * (10000 - 8) / 8);
  // Refused, with the reason: beyond the budget; a remat policy for some layers only (the body is one for
  // all); an MLP (reference_programs.py loops its layers in Python).
  for (const auto& [refused, key] :
       {std::pair{R"({"model": "gpt", "scan": true, "layers": 10000000})", "layers"},
        std::pair{R"({"model": "gpt", "scan": true, "layers": 4, "remat": "full", "remat_layers": [1]})",
                  "remat_layers"},
        std::pair{R"({"model": "mlp", "scan": true})", "scan"}}) {
    auto spec = model_spec_from_json(Json::parse(refused));
    ASSERT_FALSE(spec.ok()) << refused;
    EXPECT_EQ(spec.error().message().rfind(key, 0), 0u) << spec.error().message();
  }
}

// Gradient accumulation as reference_programs.py writes it (jax.lax.scan over the microbatches): one
// microbatch's step in a loop's body, so the program is the same size for 2 microbatches as for 64, and
// the saved activations shrink with the microbatch while the f32 gradient sums stay.
TEST(ModelZoo, AccumulationIsOneMicrobatchInALoop) {
  auto spec_of = [](uint64_t accum) {
    return spec_with(R"({"model": "vit", "image": 64, "patch": 16, "d_model": 256, "heads": 4, "layers": 4,
                         "classes": 100, "batch": 64, "donate": true)",
                     "accum", accum);
  };
  EXPECT_EQ(entry_loops(spec_of(8)), 1u) << "the scan over microbatches";
  std::vector<StepPlan> plans;
  for (uint64_t accum : {1, 2, 8, 64}) {
    auto p = plan_step(spec_of(accum));
    ASSERT_TRUE(p.ok()) << p.error().message();
    plans.push_back(*p);
  }
  // 2 and 64 microbatches: one program, its microbatch's shapes aside. (What XLA fuses of it may differ:
  // a 1-example microbatch's small values are fused for the launches they save.)
  auto emitted = [&](uint64_t accum) {
    auto module = build_step_module(spec_of(accum), nullptr);
    EXPECT_TRUE(module.ok()) << module.error().message();
    size_t count = 0;
    for (const HloComputation& c : module->computations) count += c.instructions.size();
    return count;
  };
  EXPECT_EQ(emitted(2), emitted(64));
  for (size_t k = 1; k < plans.size(); ++k) {
    EXPECT_LT(plans[k].breakdown.activations, plans[k - 1].breakdown.activations) << k;
    // The sums, one f32 array per (f32) parameter, live at the peak beside the microbatch's own gradients.
    EXPECT_GE(plans[k].breakdown.gradients, plans[k].arguments.parameter_bytes) << k;
    // The step still takes the whole batch, as jax passes it: the loop slices it.
    EXPECT_EQ(plans[k].arguments.batch_bytes, plans[0].arguments.batch_bytes) << k;
  }
}

// Accumulation over a scanned model (the layers' scan inside the microbatches' scan, as JAX lowers a
// scanned step under accumulate_gradients): written lowered, its entry one loop whose body runs the two
// layer loops; its peak is one microbatch's scanned step plus the f32 gradient sums the outer loop carries.
TEST(ModelZoo, AccumulationOverAScanNestsTheLoops) {
  const std::string base =
      R"({"model": "gpt", "d_model": 256, "heads": 4, "seq": 128, "vocab": 1000, "layers": 6,
                               "scan": true, "donate": true)";
  auto spec = model_spec_from_json(Json::parse(base + R"(, "batch": 32, "accum": 4})"));
  ASSERT_TRUE(spec.ok());
  auto module = build_step_module(*spec, nullptr);
  ASSERT_TRUE(module.ok()) << module.error().message();
  EXPECT_FALSE(module->is_scheduled) << "the zoo wrote XLA's fused program, not the lowered one";
  EXPECT_EQ(entry_loops(*spec), 1u) << "the scan over microbatches";
  size_t loops = 0;
  for (const HloComputation& c : module->computations)
    for (const HloInstruction& i : c.instructions) loops += i.opcode == HloOpcode::kWhile;
  EXPECT_EQ(loops, 3u) << "the microbatches' loop, and in its body the layers' forward and backward loops";
  const StepPlan accum = plan(base + R"(, "batch": 32, "accum": 4})");
  const StepPlan micro = plan(base + R"(, "batch": 8})");
  const double sums = static_cast<double>(accum.arguments.parameter_bytes);
  EXPECT_NEAR(static_cast<double>(accum.peak_bytes - micro.peak_bytes), sums, 0.01 * sums);
}

// The conv net accumulates gradients as the other families do (accumulate_gradients): one loop over the
// microbatches, its body the microbatch's forward and backward passes. Its peak is the microbatch's step
// plus what the whole batch adds: the f32 gradient sums, the rest of the batch in the arguments - and at
// most a copy of the batch the loop carries and the slice its body reads.
TEST(ModelZoo, TheConvNetAccumulatesGradients) {
  const std::string base = R"({"model": "flax_cnn", "image": 64, "widths": [16, 32], "classes": 10)";
  auto spec = model_spec_from_json(Json::parse(base + R"(, "batch": 32, "accum": 4})"));
  ASSERT_TRUE(spec.ok()) << spec.error().message();
  auto module = build_step_module(*spec, nullptr);
  ASSERT_TRUE(module.ok()) << module.error().message();
  EXPECT_FALSE(module->is_scheduled) << "the zoo wrote XLA's fused program, not the lowered one";
  EXPECT_EQ(entry_loops(*spec), 1u) << "the scan over microbatches";
  const StepPlan accum = plan(base + R"(, "batch": 32, "accum": 4})");
  const StepPlan micro = plan(base + R"(, "batch": 8})");
  const StepPlan whole = plan(base + R"(, "batch": 32})");
  EXPECT_LT(accum.peak_bytes, whole.peak_bytes / 2) << "the activations are a microbatch's";
  const uint64_t sums = accum.arguments.parameter_bytes;
  const uint64_t rest_of_batch = accum.arguments.batch_bytes - micro.arguments.batch_bytes;
  const uint64_t least = sums + rest_of_batch;
  const uint64_t most = least + accum.arguments.batch_bytes + micro.arguments.batch_bytes;
  EXPECT_GE(accum.peak_bytes - micro.peak_bytes, least);
  EXPECT_LE(accum.peak_bytes - micro.peak_bytes, most);
  // Not over several devices (data parallelism splits the batch instead), nor on XLA:CPU: the fused writer
  // those take has no accumulation.
  EXPECT_FALSE(model_spec_from_json(
                   Json::parse(base + R"(, "batch": 32, "accum": 4, "mesh": [2], "mesh_axes": ["data"]})"))
                   .ok());
  EXPECT_FALSE(
      model_spec_from_json(Json::parse(base + R"(, "batch": 32, "accum": 4, "backend": "cpu"})")).ok());
}

// The conv net in mixed precision, as flax's dtype=jnp.bfloat16 on each module computes: the parameters stay
// fp32, each module casts its input and parameters to bf16, so the activations the backward pass keeps are
// bf16 - about half the fp32 step's - and the gradients come back to fp32. One GPU only (the fused writer
// data parallelism takes computes in fp32); fit offers it with flax's own code.
TEST(ModelZoo, TheConvNetComputesInBf16) {
  const std::string base =
      R"({"model": "flax_cnn", "image": 64, "widths": [16, 32], "classes": 10, "batch": 32)";
  const StepPlan fp32 = plan(base + "}");
  const StepPlan mixed = plan(base + R"(, "precision": "mixed"})");
  EXPECT_EQ(mixed.arguments.parameter_bytes, fp32.arguments.parameter_bytes) << "fp32 parameters";
  EXPECT_EQ(mixed.arguments.optimizer_state_bytes, fp32.arguments.optimizer_state_bytes);
  EXPECT_LT(mixed.breakdown.activations, fp32.breakdown.activations * 6 / 10);
  EXPECT_GT(mixed.breakdown.activations, fp32.breakdown.activations * 4 / 10);
  ASSERT_FALSE(mixed.hlo.groups.empty());
  EXPECT_EQ(mixed.hlo.groups.front().shape.rfind("bf16[", 0), 0u) << mixed.hlo.groups.front().shape;
  EXPECT_FALSE(model_spec_from_json(Json::parse(base + R"(, "precision": "bf16"})")).ok());
  EXPECT_FALSE(model_spec_from_json(
                   Json::parse(base + R"(, "precision": "mixed", "mesh": [2], "mesh_axes": ["data"]})"))
                   .ok());
  auto spec = model_spec_from_json(Json::parse(base + "}"));
  ASSERT_TRUE(spec.ok());
  auto fit = fit_step(*spec, 32ull << 20);
  ASSERT_TRUE(fit.ok()) << fit.error().message();
  const FitCandidate* row = nullptr;
  for (const FitCandidate& c : fit->candidates)
    if (c.change == "mixed precision (fp32 parameters, bf16 compute)") row = &c;
  ASSERT_NE(row, nullptr);
  EXPECT_EQ(row->peak_bytes, mixed.peak_bytes);
  EXPECT_EQ(row->code.rfind("nn.Conv(", 0), 0u) << row->code;
}

// The flax encoder in mixed precision, as flax's dtype=jnp.bfloat16 on every module computes (param_dtype
// fp32): the lowered writer's program (not the fused one), every GEMM in bf16 - the projections, the scores,
// the head - the parameters, the optimizer state and the donated update fp32 as in the fp32 step, the
// activations about half the fp32 step's, inference's logits bf16. The same under a remat policy and
// gradient accumulation, whose programs are lowered too; and with bf16 parameters.
TEST(ModelZoo, TheFlaxEncoderComputesInBf16) {
  const std::string base =
      R"({"model": "flax_encoder", "vocab": 8000, "d_model": 256, "heads": 4, "layers": 3,
                              "seq": 256, "batch": 16)";
  auto lowered_dots = [&](const std::string& extra, PrimitiveType type) {
    const HloModule built = lowered_step_module(base + extra + "}");
    size_t dots = 0, typed = 0;
    for (const HloComputation& c : built.computations)
      for (const HloInstruction& i : c.instructions)
        if (i.opcode == HloOpcode::kDot) {
          ++dots;
          typed += i.shape.type == type;
        }
    EXPECT_GT(dots, 0u) << extra;
    return dots == typed;
  };
  const std::string mixed = R"(, "precision": "mixed")";
  EXPECT_TRUE(lowered_dots("", PrimitiveType::kF32));
  for (const char* extra : {"", R"(, "remat": "full")", R"(, "remat": "dots_no_batch")", R"(, "accum": 4)",
                            R"(, "step": "infer")"})
    EXPECT_TRUE(lowered_dots(mixed + extra, PrimitiveType::kBF16)) << extra << ": a GEMM not in bf16";
  const StepPlan fp32 = plan(base + "}");
  const StepPlan bf16 = plan(base + mixed + "}");
  EXPECT_EQ(bf16.arguments.parameter_bytes, fp32.arguments.parameter_bytes) << "fp32 parameters";
  EXPECT_EQ(bf16.arguments.optimizer_state_bytes, fp32.arguments.optimizer_state_bytes);
  EXPECT_EQ(bf16.hlo.alias_bytes, fp32.hlo.alias_bytes) << "the update writes fp32 parameters and state";
  EXPECT_LT(bf16.breakdown.activations, fp32.breakdown.activations * 6 / 10);
  EXPECT_GT(bf16.breakdown.activations, fp32.breakdown.activations * 4 / 10);
  ASSERT_FALSE(bf16.hlo.groups.empty());
  EXPECT_EQ(bf16.hlo.groups.front().shape.rfind("bf16[", 0), 0u) << bf16.hlo.groups.front().shape;
  EXPECT_LT(plan(base + mixed + R"(, "remat": "full"})").peak_bytes, bf16.peak_bytes);
  const StepPlan infer = plan(base + mixed + R"(, "step": "infer"})");
  EXPECT_EQ(infer.hlo.output_bytes, 16ull * 256 * 8000 * 2) << "bf16 logits";
  EXPECT_LT(infer.peak_bytes, plan(base + R"(, "step": "infer"})").peak_bytes);
  // bf16 parameters too (param_dtype=jnp.bfloat16): half the parameter bytes, optax's factored state still
  // f32 (optax/_src/factorized.py makes its zeros in the default dtype), the update written over the bf16
  // parameters; no casts of the parameters, every GEMM bf16.
  const std::string half = R"(, "precision": "bf16")";
  EXPECT_TRUE(lowered_dots(half, PrimitiveType::kBF16));
  const StepPlan bf16_params = plan(base + half + "}");
  EXPECT_EQ(2 * bf16_params.arguments.parameter_bytes, fp32.arguments.parameter_bytes);
  EXPECT_EQ(bf16_params.arguments.optimizer_state_bytes, fp32.arguments.optimizer_state_bytes);
  EXPECT_EQ(fp32.hlo.alias_bytes - bf16_params.hlo.alias_bytes, bf16_params.arguments.parameter_bytes);
  EXPECT_LT(bf16_params.peak_bytes, bf16.peak_bytes);
}

// A scanned model's inference: one while loop over the layers that stacks nothing for a backward pass, so
// its peak grows with the layers by their parameters alone, and holds about one block's values as the
// unrolled step does (GPT's [S, S] mask a loop operand as it is: the first version, which carried the
// mask broadcast to the scores' shape as a training scan does, was 38% above). Not the same bytes: the
// unrolled program's schedule is free to overlap neighbouring layers (the small GPT's peak holds the split-K
// partials of the output projection and of the MLP's second GEMM beside the attention's two score-sized
// values), a loop body's is not: these small models plan 15-18% below their unrolled steps.
TEST(ModelZoo, AScannedInferenceStepHoldsOneLayersValues) {
  for (
      const std::string model :
      {R"("model": "gpt", "d_model": 256, "heads": 4, "seq": 256, "vocab": 1000, "batch": 8)",
       R"("model": "vit", "image": 64, "patch": 8, "d_model": 256, "heads": 4, "classes": 100, "batch": 16)"}) {
    SCOPED_TRACE(model);
    const std::string infer = "{" + model + R"(, "step": "infer", "layers": )";
    auto spec = model_spec_from_json(Json::parse(infer + R"(8, "scan": true})"));
    ASSERT_TRUE(spec.ok());
    auto module = build_step_module(*spec, nullptr);
    ASSERT_TRUE(module.ok()) << module.error().message();
    EXPECT_FALSE(module->is_scheduled) << "the zoo wrote XLA's fused program, not the lowered one";
    EXPECT_EQ(entry_loops(*spec), 1u);
    const StepPlan eight = plan(infer + R"(8, "scan": true})");
    const StepPlan sixteen = plan(infer + R"(16, "scan": true})");
    const StepPlan unrolled = plan(infer + "8}");
    EXPECT_EQ(sixteen.peak_bytes - eight.peak_bytes,
              sixteen.arguments.parameter_bytes - eight.arguments.parameter_bytes);
    EXPECT_NEAR(static_cast<double>(eight.peak_bytes), static_cast<double>(unrolled.peak_bytes),
                0.2 * static_cast<double>(unrolled.peak_bytes));
  }
}

TEST(ModelZoo, CudnnAttentionHoldsNoScores) {
  const char* gpt = R"({"model": "gpt", "layers": 2, "seq": 512, "batch": 8, "precision": "mixed")";
  const StepPlan xla = plan(std::string(gpt) + "}");
  const StepPlan cudnn = plan(std::string(gpt) + R"(, "attn": "cudnn"})");
  // Attention scores and probabilities: [batch, heads, 512, 512] or [batch * heads, 512, 512].
  auto square_buffers = [](const StepPlan& p) {
    uint64_t n = 0;
    for (const PlannedBuffer& b : p.hlo.buffers)
      if (b.kind == BufferKind::kTemp && b.shape.find(",512,512]") != std::string::npos) ++n;
    return n;
  };
  uint64_t fused_calls = 0;
  for (const PlannedBuffer& b : cudnn.hlo.buffers)
    if (b.op_name.find("dot_product_attention") != std::string::npos) ++fused_calls;
  EXPECT_GT(square_buffers(xla), 0u);
  EXPECT_EQ(square_buffers(cudnn), 0u);
  EXPECT_GT(fused_calls, 0u);
  const uint64_t scores_bytes = 8ull * 16 * 512 * 512 * 2;  // bf16[8,16,512,512]
  EXPECT_LT(cudnn.peak_bytes + 2 * scores_bytes, xla.peak_bytes);
  // Scanned too (written lowered): the forward loop stacks the kernel's residuals - q, k, v, its output and
  // the f32 row statistics [layers, batch, heads, seq] - and no scores, in training and in inference; in
  // mixed precision (the weights' bf16 copies stacked beside them) and in bf16 (the weights read from their
  // own stacks, which the backward loop places among the residuals: at XLA attention's places, the first
  // version of this writer read past the stacks and crashed).
  for (const char* scanned :
       {R"(, "attn": "cudnn", "scan": true})", R"(, "attn": "cudnn", "scan": true, "step": "infer"})",
        R"(, "attn": "cudnn", "scan": true, "precision": "bf16"})"}) {
    SCOPED_TRACE(scanned);
    auto spec = model_spec_from_json(Json::parse(std::string(gpt) + scanned));
    ASSERT_TRUE(spec.ok());
    auto module = build_step_module(*spec, nullptr);
    ASSERT_TRUE(module.ok()) << module.error().message();
    EXPECT_FALSE(module->is_scheduled) << "the zoo wrote XLA's fused program, not the lowered one";
    const StepPlan p = plan(std::string(gpt) + scanned);
    EXPECT_EQ(square_buffers(p), 0u);
    bool stacked_statistics = false;
    for (const PlannedBuffer& b : p.hlo.buffers) stacked_statistics |= b.shape == "f32[2,8,16,512]";
    EXPECT_EQ(stacked_statistics, spec->step == StepKind::kTrain);
  }
  // cuDNN's kernel is 16-bit: float32 compute is refused with the reason.
  auto fp32 = model_spec_from_json(parse_json(R"({"model": "gpt", "attn": "cudnn"})", "spec").value());
  ASSERT_FALSE(fp32.ok());
  EXPECT_NE(fp32.error().message().find("bf16"), std::string::npos);
}

// Every remat policy with cuDNN's attention: the kernel is a custom call, not a dot_general, so no dots
// policy saves its output (dots_saveable once asked for the scores GEMM that is not there, and the program
// named an operand that did not exist); the step holds no more than with XLA's attention. And every
// policy on XLA:CPU, whose less fused blocks a recomputation writes too (remat on the CPU backend once
// read a residual the recomputed block never made).
TEST(ModelZoo, EveryRematPolicyPlansWithCudnnAttentionAndOnTheCpu) {
  for (const std::string model : {"gpt", "vit"}) {
    for (const char* policy : {"none", "full", "dots", "dots_no_batch", "offload_dots_no_batch"}) {
      SCOPED_TRACE(model + " " + policy);
      // A ViT's tokens are its patches (a seq would be refused); the GPT's its sequence.
      const std::string shape = R"(", "layers": 2, "d_model": 128, "heads": 4, "batch": 4)" +
                                std::string(model == "gpt" ? R"(, "seq": 256)" : "");
      const std::string base = R"({"model": ")" + model + shape +
                               R"(, "precision": "mixed", "donate": true, "remat": ")" + policy + "\"";
      const StepPlan xla = plan(base + "}");
      const StepPlan cudnn = plan(base + R"(, "attn": "cudnn"})");
      EXPECT_GT(cudnn.peak_bytes, 0u);
      EXPECT_LE(cudnn.peak_bytes, xla.peak_bytes);
      if (std::string(policy) == "offload_dots_no_batch") continue;  // built for XLA:GPU only
      auto on_cpu = [&](const char* sharding) {
        return plan(R"({"model": ")" + model + shape + R"(, "backend": "cpu", "donate": true, "remat": ")" +
                    policy + "\"" + sharding + "}");
      };
      const StepPlan replicated = on_cpu("");
      const StepPlan fsdp = on_cpu(R"(, "sharding": "fsdp", "mesh": [2], "mesh_axes": ["data"])");
      EXPECT_GT(fsdp.peak_bytes, 0u);
      EXPECT_LT(fsdp.peak_bytes, replicated.peak_bytes);  // each device holds half the state and the batch
    }
  }
}

// A few tokens through a deep model: every GEMM is split along its contraction (128 rows leave the GPU's
// cores idle), and the residual stream adds each layer's split sum. Recomputing that stream in every
// consumer from every layer's partials would hold all of them at once (a 48-layer model held 95); XLA
// writes it once, so the step's temp does not grow with the depth.
TEST(ModelZoo, AFewTokensResidualStreamDoesNotGrowWithDepth) {
  auto temp = [](int layers) {
    auto spec = model_spec_from_json(Json::parse(fmt::format(
        R"({{"model": "gpt", "step": "infer", "batch": 1, "seq": 128, "layers": {}, "precision": "bf16"}})",
        layers)));
    EXPECT_TRUE(spec.ok());
    auto p = plan_step(*spec);
    EXPECT_TRUE(p.ok()) << p.error().message();
    return p.ok() ? p->hlo.temp_bytes : 0;
  };
  const uint64_t shallow = temp(8), deep = temp(48);
  EXPECT_GT(shallow, 0u);
  EXPECT_LE(deep, shallow + shallow / 2) << "8 layers: " << shallow << " B, 48 layers: " << deep << " B";
}

TEST(ModelZoo, NonsenseSpecsAreRefusedWithAReason) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"model": "gpt", "layers": -2})", "layers"},
      {R"({"model": "gpt", "batch": 0})", "batch"},
      {R"({"model": "gpt", "d_model": 1000, "heads": 16})", "heads"},
      {R"({"model": "gpt", "remat": "sometimes"})", "remat"},
      {R"({"model": "resnet"})", "model"},
      {R"({"model": "gpt", "precision": "fp8"})", "precision"},
      {R"({"model": "gpt", "accum": 3})", "accum"},
      {R"({"model": "gpt", "sharding": "fsdp"})", "mesh"},
      {R"({"model": "gpt", "mesh": [2, 4], "mesh_axes": ["data"]})", "mesh"},
      {R"({"model": "gpt", "batch": 8, "sharding": "fsdp", "mesh": [16], "mesh_axes": ["data"]})", "batch"},
      // A mesh axis of one device is there but splits nothing: the reason says so, not that it is missing.
      {R"({"model": "gpt", "sharding": "fsdp", "mesh": [1], "mesh_axes": ["data"]})", "2 or more devices"},
      {R"({"model": "gpt", "sharding": "tp", "mesh": [1], "mesh_axes": ["model"]})", "2 or more devices"},
      // Tensor parallelism splits a transformer's weights by name; an MLP's stayed whole on every device
      // while the plan said "tp over 4 devices".
      {R"({"model": "mlp", "sharding": "tp", "mesh": [4], "mesh_axes": ["model"]})",
       "tp is not built for the mlp"},
      // A shape key of another family was ignored: a ViT with "seq" planned the same step as without it.
      {R"({"model": "vit", "seq": 4096})", "seq: the vit has no seq"},
      {R"({"model": "mlp", "layers": 12})",
       "layers: the mlp has no layers (it is shaped by din, width, depth"},
      {R"({"model": "gpt", "widths": [64, 128]})", "widths"},
      {R"({"model": "flax_cnn", "patch": 16})", "patch"},
      {R"({"model": "gpt", "colour": "red"})", "colour"},
      {R"({"model": "gpt", "layers": "eight"})", "layers"},
      {R"({"model": "mlp", "remat_layers": [12]})", "remat_layers"},
      // (image / patch)^2 wraps to 0 (2^40 squared): it planned a ViT of one token.
      {R"({"model": "vit", "image": 1099511627776, "patch": 1, "step": "infer"})", "image"},
      {R"({"model": "vit", "image": 4294967296, "patch": 4294967296, "channels": 3})", "patch"},
  };
  for (const auto& [json, key] : cases) {
    auto spec = model_spec_from_json(Json::parse(json));
    ASSERT_FALSE(spec.ok()) << json;
    EXPECT_NE(spec.error().message().find(key), std::string::npos) << json << ": " << spec.error().message();
  }
  // Sizes that overflow 64 bits are refused, not wrapped.
  auto huge =
      model_spec_from_json(Json::parse(R"({"model": "gpt", "vocab": 4000000000000, "d_model": 4000000000})"));
  ASSERT_TRUE(huge.ok());
  EXPECT_FALSE(build_step_module(*huge).ok());
}

// The combined round plans a family's next member beside the one before it on an idle core (run-ahead), so
// a member may be planned before the rule that stops a family (a member lowering the peak by less than a
// tenth more than the one before it) can be checked. What is shown must not depend on which plan finished
// first: here, on an FSDP-sharded MLP, the stack with a quarter of the batch gains less than a tenth over
// half of it, so an eighth and a sixteenth are never shown.
TEST(ModelZoo, ACombinedFamilyStopsWhereItStopsHelpingWhicheverPlanFinishesFirst) {
  auto spec = model_spec_from_json(Json::parse(
      R"({"model": "mlp", "depth": 8, "width": 4096, "batch": 8192, "sharding": "fsdp", "mesh": [2],
          "mesh_axes": ["data"]})"));
  ASSERT_TRUE(spec.ok()) << spec.error().message();
  for (int run = 0; run < 5; ++run) {
    auto fit = fit_step(*spec, 1ull << 30);
    ASSERT_TRUE(fit.ok()) << fit.error().message();
    std::vector<const FitCandidate*> smaller;
    for (const FitCandidate& c : fit->candidates)
      if (c.step == "combined" && c.change.find("instead of 8192") != std::string::npos)
        smaller.push_back(&c);
    ASSERT_EQ(smaller.size(), 2u) << "run " << run;
    EXPECT_NE(smaller[0]->change.find("batch 4096"), std::string::npos);
    EXPECT_NE(smaller[1]->change.find("batch 2048"), std::string::npos);
    EXPECT_LT(smaller[1]->peak_bytes, smaller[0]->peak_bytes);
    EXPECT_GT(smaller[1]->peak_bytes * 10, smaller[0]->peak_bytes * 9);  // stopped helping
  }
}

TEST(ModelZoo, FitRanksTheChangesThatFit) {
  auto spec = model_spec_from_json(Json::parse(R"({"model": "gpt"})"));
  ASSERT_TRUE(spec.ok());
  auto fit = fit_step(*spec, 16ull << 30);  // a 16 GiB card: a 12 GiB pool
  ASSERT_TRUE(fit.ok()) << fit.error().message();
  EXPECT_FALSE(fit->baseline.fits);
  ASSERT_FALSE(fit->ranked.empty());
  double last = -1;
  for (size_t i : fit->ranked) {
    const FitCandidate& c = fit->candidates[i];
    EXPECT_TRUE(c.fits);
    EXPECT_LE(c.peak_bytes, c.limit_bytes);
    EXPECT_GE(c.cost, last);
    last = c.cost;
    EXPECT_FALSE(c.code.empty());
  }
  // The seed's order: allocation, location, shapes, sharding.
  const std::vector<std::string> order = {"allocation", "location", "shapes", "sharding"};
  size_t at = 0;
  for (const FitCandidate& c : fit->candidates) {
    while (at < order.size() && order[at] != c.step) ++at;
    EXPECT_LT(at, order.size()) << c.step << " out of the seed's order";
  }
  EXPECT_EQ(fit->candidates.front().step, "allocation");
  EXPECT_EQ(fit->candidates.back().step, "sharding");
  // FSDP stops at its first member that fits, and the members after it are not planned at all: every
  // program planned is one shown (the larger pool shows the baseline's program again), or the baseline.
  EXPECT_TRUE(fit->candidates.back().fits);
  size_t shown_programs = 0, sharding_fits = 0;
  for (const FitCandidate& c : fit->candidates) {
    shown_programs += c.change.rfind("XLA_CLIENT_MEM", 0) != 0;
    sharding_fits += c.step == "sharding" && c.fits;
  }
  EXPECT_EQ(sharding_fits, 1u);
  EXPECT_EQ(fit->programs_planned, shown_programs + 1);
}

// A flax model's changes are written as flax code: remat (and offload) as nn.remat of the Layer module, bf16
// compute as the modules' dtype; a hand-written model's as jax.checkpoint around a block and a cast.
TEST(ModelZoo, FitWritesAFlaxModelsChangesInFlax) {
  auto codes = [](const char* json) {
    auto spec = model_spec_from_json(Json::parse(json));
    EXPECT_TRUE(spec.ok());
    auto fit = fit_step(*spec, 1ull << 30);
    EXPECT_TRUE(fit.ok()) << fit.error().message();
    std::map<std::string, std::string> code;  // change -> its code
    for (const FitCandidate& c : fit->candidates) code[c.change] = c.code;
    return code;
  };
  const std::string small =
      R"("layers": 2, "d_model": 128, "heads": 4, "seq": 128, "vocab": 1000, "batch": 8})";
  auto flax = codes((R"({"model": "flax_encoder", )" + small).c_str());
  auto gpt = codes((R"({"model": "gpt", )" + small).c_str());
  for (const char* change : {"remat full", "remat dots", "offload saved activations to pinned host memory"}) {
    SCOPED_TRACE(change);
    ASSERT_EQ(flax.count(change), 1u);
    ASSERT_EQ(gpt.count(change), 1u);
    EXPECT_EQ(flax[change].rfind("RematLayer = nn.remat(Layer, policy=jax.checkpoint_policies.", 0), 0u);
    EXPECT_EQ(gpt[change].rfind("jax.checkpoint(block, policy=jax.checkpoint_policies.", 0), 0u);
  }
  const std::string mixed = "mixed precision (fp32 parameters, bf16 compute)";
  EXPECT_NE(flax[mixed].find("dtype=jnp.bfloat16"), std::string::npos);
  EXPECT_NE(gpt[mixed].find(".astype(jnp.bfloat16)"), std::string::npos);
}

// A conv net, which memfit builds replicated only (no FSDP), is offered plain data parallelism: the batch
// split over more devices, the parameters replicated - each device's activations shrink with its share.
TEST(ModelZoo, FitOffersAConvNetDataParallelism) {
  auto spec = model_spec_from_json(
      Json::parse(R"({"model": "flax_cnn", "batch": 32, "image": 64, "widths": [16, 32], "classes": 10})"));
  ASSERT_TRUE(spec.ok()) << spec.error().message();
  auto fit = fit_step(*spec, 32ull << 20);  // a 24 MiB pool: the step's ~40 MiB does not fit
  ASSERT_TRUE(fit.ok()) << fit.error().message();
  EXPECT_FALSE(fit->baseline.fits);
  const FitCandidate* two = nullptr;
  for (const FitCandidate& c : fit->candidates) {
    EXPECT_EQ(c.change.find("FSDP"), std::string::npos) << c.change;
    if (c.change == "data parallel over 2 devices") two = &c;
  }
  ASSERT_NE(two, nullptr);
  EXPECT_TRUE(two->fits);
  EXPECT_NE(two->code.find("P('data')"), std::string::npos);
  // Each device holds half the batch's activations: about half the step, the replicated parameters
  // (66 KiB) and their optimizer state on each.
  EXPECT_LT(two->peak_bytes, fit->baseline.peak_bytes * 6 / 10);
  EXPECT_GT(two->peak_bytes, fit->baseline.peak_bytes * 4 / 10);
  ModelSpec dp = *spec;
  dp.mesh = {2};
  dp.mesh_axes = {"data"};
  auto plan = plan_step(dp);
  ASSERT_TRUE(plan.ok()) << plan.error().message();
  EXPECT_EQ(two->peak_bytes, plan->peak_bytes);
  // Serving it (no tensor parallelism is built for a conv net): replicas that each take a share of the
  // images, as far as a smaller batch would take one device.
  ModelSpec serving = *spec;
  serving.step = StepKind::kInfer;
  serving.batch = 1024;
  auto served = fit_step(serving, 32ull << 20);
  ASSERT_TRUE(served.ok()) << served.error().message();
  std::map<std::string, uint64_t> peak_of;
  for (const FitCandidate& c : served->candidates) {
    EXPECT_EQ(c.change.find("tensor parallel"), std::string::npos) << c.change;
    peak_of[c.change] = c.peak_bytes;
  }
  ASSERT_EQ(peak_of.count("data parallel over 4 devices"), 1u);
  ASSERT_EQ(peak_of.count("batch 256 instead of 1024"), 1u);
  EXPECT_EQ(peak_of["data parallel over 4 devices"], peak_of["batch 256 instead of 1024"]);
}

// Long sequences: fit offers cuDNN's fused attention (no scores held), causal for GPT; an fp32 step takes it
// with bf16 compute, one change of two lines; a decode step, which attends with XLA's attention, is not
// offered it.
TEST(ModelZoo, FitOffersCudnnAttention) {
  const std::string gpt =
      R"({"model": "gpt", "layers": 2, "d_model": 256, "heads": 4, "seq": 2048, "batch": 4)";
  auto find = [](const FitResult& fit, const std::string& change) -> const FitCandidate* {
    for (const FitCandidate& c : fit.candidates)
      if (c.change == change) return &c;
    return nullptr;
  };
  auto mixed = model_spec_from_json(Json::parse(gpt + R"(, "precision": "mixed"})"));
  ASSERT_TRUE(mixed.ok());
  auto fit = fit_step(*mixed, 3ull << 30);  // a 2.25 GiB pool: the step's 2.3 GiB does not fit
  ASSERT_TRUE(fit.ok()) << fit.error().message();
  EXPECT_FALSE(fit->baseline.fits);
  const FitCandidate* cudnn = find(*fit, "cuDNN fused attention");
  ASSERT_NE(cudnn, nullptr);
  EXPECT_EQ(cudnn->step, "shapes");
  EXPECT_TRUE(cudnn->fits);
  EXPECT_LT(cudnn->peak_bytes, fit->baseline.peak_bytes);
  EXPECT_NE(cudnn->code.find("implementation='cudnn'"), std::string::npos) << cudnn->code;
  EXPECT_NE(cudnn->code.find("is_causal=True"), std::string::npos) << cudnn->code;
  EXPECT_TRUE(std::any_of(fit->ranked.begin(), fit->ranked.end(),
                          [&](size_t i) { return &fit->candidates[i] == cudnn; }));
  ModelSpec by_hand = *mixed;
  by_hand.attn = AttentionKind::kCudnn;
  EXPECT_EQ(plan_step(by_hand)->peak_bytes, cudnn->peak_bytes);

  auto fp32 = model_spec_from_json(Json::parse(gpt + "}"));
  ASSERT_TRUE(fp32.ok());
  auto fit32 = fit_step(*fp32, 3ull << 30);
  ASSERT_TRUE(fit32.ok()) << fit32.error().message();
  EXPECT_EQ(find(*fit32, "cuDNN fused attention"), nullptr);
  const FitCandidate* both = find(*fit32, "mixed precision + cuDNN fused attention");
  ASSERT_NE(both, nullptr);
  EXPECT_EQ(std::count(both->code.begin(), both->code.end(), '\n'), 1);
  EXPECT_NE(both->code.find("astype(jnp.bfloat16)"), std::string::npos);

  auto vit = model_spec_from_json(Json::parse(
      R"({"model": "vit", "layers": 2, "d_model": 256, "heads": 4, "batch": 64, "precision": "mixed"})"));
  ASSERT_TRUE(vit.ok());
  auto fitv = fit_step(*vit, 1ull << 30);
  ASSERT_TRUE(fitv.ok()) << fitv.error().message();
  const FitCandidate* bidirectional = find(*fitv, "cuDNN fused attention");
  ASSERT_NE(bidirectional, nullptr);
  EXPECT_EQ(bidirectional->code.find("is_causal"), std::string::npos) << bidirectional->code;

  auto decode = model_spec_from_json(Json::parse(gpt + R"(, "precision": "mixed", "step": "decode"})"));
  ASSERT_TRUE(decode.ok());
  auto fitd = fit_step(*decode, 1ull << 30);
  ASSERT_TRUE(fitd.ok()) << fitd.error().message();
  for (const FitCandidate& c : fitd->candidates) EXPECT_EQ(c.change.find("cuDNN"), std::string::npos);
}

// jax.checkpoint leaves a function nobody differentiates as it is (no optimization barrier), so a remat
// policy changes nothing in an inference step: the zoo writes the same lowered program for each.
TEST(ModelZoo, RematLeavesAnInferenceStepAsItIs) {
  for (const std::string model : {"gpt", "vit"}) {
    SCOPED_TRACE(model);
    const std::string base = R"({"model": ")" + model + R"(", "step": "infer", "layers": 2)";
    const StepPlan none = plan(base + "}");
    for (const char* policy : {"full", "dots", "dots_no_batch", "offload_dots_no_batch"}) {
      SCOPED_TRACE(policy);
      const std::string spec = base + R"(, "remat": ")" + policy + R"("})";
      auto parsed = model_spec_from_json(Json::parse(spec));
      ASSERT_TRUE(parsed.ok());
      auto built = build_step_module(*parsed);
      ASSERT_TRUE(built.ok()) << built.error().message();
      EXPECT_FALSE(built->is_scheduled);  // the lowered program JAX traces
      const StepPlan with = plan(spec);
      EXPECT_EQ(with.peak_bytes, none.peak_bytes);
      EXPECT_EQ(with.hlo.temp_bytes, none.hlo.temp_bytes);
      EXPECT_EQ(with.host_peak_bytes, 0u);
    }
  }
}

// No single change fits a 4-layer GPT step into a 1 GiB card: fit stacks the ones that lowered the peak
// (donation, bf16 compute, the best remat policy, cuDNN's attention - its bf16 compute stacked once) and
// shards the stack over more devices, and the combination it offers plans to the byte as the same spec
// written by hand.
TEST(ModelZoo, FitStacksTheChangesThatHelpWhenNoneFitsAlone) {
  auto spec = model_spec_from_json(Json::parse(R"({"model": "gpt", "layers": 4})"));
  ASSERT_TRUE(spec.ok());
  auto fit = fit_step(*spec, 1ull << 30);
  ASSERT_TRUE(fit.ok()) << fit.error().message();
  EXPECT_FALSE(fit->baseline.fits);
  double donation = 0, mixed = 0, remat_full = 0, attention = 0;
  uint64_t best_remat = UINT64_MAX;
  std::string best_remat_name;
  for (const FitCandidate& c : fit->candidates) {
    if (c.step == "combined") continue;
    EXPECT_FALSE(c.fits && !c.only_moves_to_host) << c.change << " fits alone";
    if (c.change.rfind("donate", 0) == 0) donation = c.cost;
    if (c.change == "mixed precision (fp32 parameters, bf16 compute)") mixed = c.cost;
    if (c.change == "mixed precision + cuDNN fused attention") attention = c.cost - mixed;
    if (c.change.rfind("remat ", 0) == 0 && c.peak_bytes < best_remat) {
      best_remat = c.peak_bytes;
      best_remat_name = c.change;
      remat_full = c.cost;
    }
  }
  ASSERT_EQ(best_remat_name, "remat full");
  ASSERT_FALSE(fit->ranked.empty());
  const FitCandidate& best = fit->candidates[fit->ranked.front()];
  EXPECT_EQ(best.step, "combined");
  EXPECT_TRUE(best.fits);
  EXPECT_LE(best.peak_bytes, best.limit_bytes);
  EXPECT_EQ(best.change,
            "donation + mixed precision + remat full + cuDNN fused attention + FSDP over 8 devices");
  EXPECT_GT(attention, 0);
  // FSDP over 8 costs 7 more GPUs
  EXPECT_DOUBLE_EQ(best.cost, donation + mixed + remat_full + attention + 7.0);
  EXPECT_EQ(std::count(best.code.begin(), best.code.end(), '\n'), 4);  // one line per change
  EXPECT_EQ(best.code.find("astype"), best.code.rfind("astype")) << "bf16 compute written once";
  // The stack alone and FSDP over 2 and 4 were planned on the way, and do not fit; nothing past 8 is shown.
  size_t combined = 0;
  for (const FitCandidate& c : fit->candidates) {
    if (c.step != "combined") continue;
    ++combined;
    if (&c != &best) {
      EXPECT_FALSE(c.fits) << c.change;
    }
  }
  EXPECT_EQ(combined, 4u);
  // A family stops once more of it stops helping: FSDP over 16 gains less than a tenth over 8, so 32 and 64
  // are neither planned nor shown.
  std::vector<const FitCandidate*> fsdp;
  for (const FitCandidate& c : fit->candidates)
    if (c.step == "sharding") fsdp.push_back(&c);
  ASSERT_EQ(fsdp.size(), 4u);
  EXPECT_EQ(fsdp.back()->change, "FSDP over 16 devices");
  EXPECT_GT(fsdp[3]->peak_bytes * 10, fsdp[2]->peak_bytes * 9);
  EXPECT_LT(fsdp[2]->peak_bytes * 10, fsdp[1]->peak_bytes * 9);
  ModelSpec by_hand = *spec;
  by_hand.donate = true;
  by_hand.precision = Precision::kMixed;
  by_hand.remat = RematPolicy::kFull;
  by_hand.attn = AttentionKind::kCudnn;
  by_hand.sharding = ShardingKind::kFsdp;
  by_hand.mesh = {8};
  by_hand.mesh_axes = {"data"};
  auto planned = plan_step(by_hand, 1ull << 30);
  ASSERT_TRUE(planned.ok()) << planned.error().message();
  EXPECT_EQ(planned->peak_bytes, best.peak_bytes);
}

// An inference step is not trained: fit offers no remat, accumulation or FSDP for it (a server's sharding is
// tensor parallel), and says what a smaller batch or bf16 compute costs a server, not a training run.
TEST(ModelZoo, FitSpeaksOfServingForAnInferenceStep) {
  auto spec = model_spec_from_json(Json::parse(R"({"model": "gpt", "step": "infer", "batch": 64})"));
  ASSERT_TRUE(spec.ok());
  auto fit = fit_step(*spec, 16ull << 30);
  ASSERT_TRUE(fit.ok()) << fit.error().message();
  bool batch = false, mixed = false;
  for (const FitCandidate& c : fit->candidates) {
    EXPECT_EQ(c.change.find("remat"), std::string::npos) << c.change;
    EXPECT_EQ(c.change.find("accumulation"), std::string::npos) << c.change;
    if (c.step == "sharding") {
      EXPECT_EQ(c.change.rfind("tensor parallel over", 0), 0u) << c.change;
    }
    EXPECT_EQ(c.cost_note.find("learning rate"), std::string::npos) << c.cost_note;
    EXPECT_EQ(c.cost_note.find("loss curve"), std::string::npos) << c.cost_note;
    if (c.change.rfind("batch ", 0) == 0) {
      batch = true;
      EXPECT_NE(c.cost_note.find("fewer sequences per step"), std::string::npos) << c.cost_note;
    }
    if (c.change.rfind("mixed precision", 0) == 0) mixed = true;
  }
  EXPECT_TRUE(batch);
  EXPECT_TRUE(mixed);
}

// reference_programs.py's MLP under offload_dot_with_no_batch_dims: each checkpointed hidden layer's GEMM
// result (no batch dimensions) is put in pinned host memory as it is computed and brought back to the
// device for the layer's recomputation - the lowered program JAX writes, one annotate_device_placement call
// each way per layer. The device holds no less than under remat dots_no_batch (XLA:GPU copies each to the
// host only just before the backward pass reads it, and runs the other layers' weight gradients while the
// copies come back), the host one layer's result at a time, and every saved result crosses the host link.
// Over several devices it is refused, with the reason.
TEST(ModelZoo, AnMlpOffloadsItsSavedGemmResultsToTheHost) {
  const std::string base = R"({"model": "mlp", "din": 256, "width": 1024, "depth": 4, "dout": 256,
                               "batch": 512, "donate": true, "remat": ")";
  auto spec = model_spec_from_json(Json::parse(base + R"(offload_dots_no_batch"})"));
  ASSERT_TRUE(spec.ok()) << spec.error().message();
  auto built = build_step_module(*spec);
  ASSERT_TRUE(built.ok()) << built.error().message();
  EXPECT_FALSE(built->is_scheduled);  // the lowered program JAX traces
  size_t to_host = 0, to_device = 0;
  for (const HloComputation& c : built->computations)
    for (const HloInstruction& x : c.instructions) {
      to_host += x.buffer_placement() == "pinned_host";
      to_device += x.buffer_placement() == "device";
    }
  EXPECT_EQ(to_host, 4u) << "the four hidden layers' GEMM results";
  EXPECT_EQ(to_device, 4u);
  const StepPlan offload = plan(base + R"(offload_dots_no_batch"})");
  const StepPlan dots = plan(base + R"(dots_no_batch"})");
  const uint64_t layer_bytes = 512 * 1024 * 4;
  EXPECT_EQ(offload.offloaded_bytes, 4 * layer_bytes);
  EXPECT_EQ(offload.host_peak_bytes, layer_bytes);
  EXPECT_GE(offload.peak_bytes, dots.peak_bytes);
  EXPECT_EQ(dots.host_peak_bytes, 0u);
  auto sharded = model_spec_from_json(Json::parse(
      base + R"(offload_dots_no_batch", "sharding": "fsdp", "mesh": [2], "mesh_axes": ["data"]})"));
  ASSERT_FALSE(sharded.ok());
  EXPECT_NE(sharded.error().message().find("one GPU"), std::string::npos) << sharded.error().message();
}

// The location step: offloading the saved activations is tried, with what it moves over PCIe, and - since
// XLA:GPU copies each to the host only just before the backward pass reads it, and its latency-hiding
// scheduler runs later layers' weight gradients while the copies come back - it is reported as raising the
// device peak over remat dots_no_batch's and not offered. The step is the shared program
// gpt_mixed_donate_offload_dots_nb's without the policy: XLA's host temp there was 176 MiB, one layer's
// three GEMM results (128 MiB) and the next layer's first.
TEST(ModelZoo, FitSaysOffloadOnlyMovesMemoryToTheHost) {
  auto spec = model_spec_from_json(Json::parse(
      R"({"model": "gpt", "d_model": 1024, "heads": 16, "layers": 8, "seq": 1024, "batch": 8,
          "donate": true, "precision": "mixed"})"));
  ASSERT_TRUE(spec.ok());
  auto fit = fit_step(*spec, 8ull << 30);  // a 6 GiB pool: the step's 9.8 GiB does not fit
  ASSERT_TRUE(fit.ok()) << fit.error().message();
  const FitCandidate* offload = nullptr;
  const FitCandidate* dots_no_batch = nullptr;
  for (const FitCandidate& c : fit->candidates) {
    if (c.step == "location") offload = &c;
    if (c.change == "remat dots_no_batch") dots_no_batch = &c;
  }
  ASSERT_NE(offload, nullptr);
  ASSERT_NE(dots_no_batch, nullptr);
  EXPECT_TRUE(dots_no_batch->fits);
  EXPECT_TRUE(offload->only_moves_to_host);
  EXPECT_GT(offload->peak_bytes, dots_no_batch->peak_bytes);
  const uint64_t one_block = 8ull * 1024 * (3072 + 1024 + 4096) * 2;  // one block's dots, bf16
  EXPECT_GE(offload->host_peak_bytes, one_block);
  EXPECT_LE(offload->host_peak_bytes, 176ull << 20);
  EXPECT_NE(offload->cost_note.find("1.00GiB to the host and back"), std::string::npos) << offload->cost_note;
  EXPECT_NE(offload->cost_note.find("raises the device peak over remat dots_no_batch's"), std::string::npos)
      << offload->cost_note;
  for (size_t i : fit->ranked) EXPECT_NE(&fit->candidates[i], offload);
  // A step that keeps dots on two layers only is offered the policy on all of them, and offloading is
  // weighed against that.
  auto partial = model_spec_from_json(Json::parse(
      R"({"model": "gpt", "d_model": 1024, "heads": 16, "layers": 8, "seq": 1024, "batch": 8,
          "donate": true, "precision": "mixed", "remat": "dots_no_batch", "remat_layers": [0, 1]})"));
  ASSERT_TRUE(partial.ok());
  auto refit = fit_step(*partial, 8ull << 30);
  ASSERT_TRUE(refit.ok()) << refit.error().message();
  uint64_t all_layers = 0, offloaded = 0;
  for (const FitCandidate& c : refit->candidates) {
    if (c.change == "remat dots_no_batch") all_layers = c.peak_bytes;
    if (c.step == "location") offloaded = c.peak_bytes;
  }
  EXPECT_EQ(all_layers, dots_no_batch->peak_bytes);
  EXPECT_GE(offloaded, all_layers);
}

}  // namespace
}  // namespace memfit
