// memfit hlo's planner against XLA on every shared program (tests/data/xla/programs.json, recorded with
// jax 0.11.2 on an H200) and against XLA's own buffer-assignment dump of gpt_fp32_donate.
#include "memfit/plan/hlo_plan.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "memfit/core/device_catalog.h"
#include "memfit/core/file_io.h"
#include "memfit/core/json.h"
#include "memfit/plan/buffer_model.h"
#include "memfit/plan/xla_gpu_model.h"
#include "memfit/program/stablehlo_module.h"

namespace memfit {
namespace {

std::string data(const std::string& name) { return std::string(MEMFIT_TEST_DATA_DIR) + "/xla/" + name; }

HloModule load(const std::string& name, const std::string& suffix = ".hlo.txt.gz") {
  auto text = read_file(data(name + suffix));
  EXPECT_TRUE(text.ok()) << name;
  auto module = parse_hlo_module(*text);
  EXPECT_TRUE(module.ok()) << name << ": " << module.error().message();
  return std::move(*module);
}

double relative(double ours, double theirs) { return (ours - theirs) / theirs; }

// The programs of a bundled list (programs.json, lowered_programs.json, captured_programs.json); an empty
// array, and a failure, when it does not read.
Json program_list(const std::string& list) {
  auto text = read_file(data(list));
  EXPECT_TRUE(text.ok()) << list;
  if (!text.ok()) return Json::array();
  auto parsed = parse_json(*text, list);
  EXPECT_TRUE(parsed.ok()) << list << ": " << parsed.error().message();
  return parsed.ok() ? (*parsed)["programs"] : Json::array();
}

// One program of a list by name; null when the list lacks it.
Json program_named(const std::string& list, const std::string& name) {
  for (const Json& p : program_list(list))
    if (p["name"] == name) return p;
  return Json();
}

// Every program whose optimized module is bundled: those of programs.json, and of lowered_programs.json fp32
// full remat (bundled for its scheduler estimates), the flax/optax encoder (a value later written in place by
// a scatter never takes an operand's memory: -15.9% before) and ViT inference (operands that only forward a
// value, through a bitcast or a tuple, are not candidates: -10.9% before), both as XLA's
// HeapSimulator::RunComputation shares buffers.
TEST(HloPlan, MatchesXlaMemoryAnalysisOnEveryProgram) {
  std::vector<Json> programs;
  for (const char* list : {"programs.json", "lowered_programs.json"}) {
    for (const Json& p : program_list(list))
      if (read_file(data(p["name"].get<std::string>() + ".hlo.txt.gz")).ok()) programs.push_back(p);
  }
  int checked = 0;
  std::printf("%-28s %15s %15s %9s %15s %15s %9s %9s\n", "program", "xla temp", "our temp", "error",
              "measured peak", "our peak", "error", "xla err");
  for (const Json& p : programs) {
    const std::string name = p["name"];
    SCOPED_TRACE(name);
    const HloModule module = load(name);
    auto plan = plan_hlo(module);
    ASSERT_TRUE(plan.ok()) << plan.error().message();
    const Json& xla = p["xla_memory_analysis"];
    EXPECT_EQ(plan->argument_bytes, xla["argument_size_in_bytes"].get<uint64_t>());
    EXPECT_EQ(plan->output_bytes, xla["output_size_in_bytes"].get<uint64_t>());
    EXPECT_EQ(plan->alias_bytes, xla["alias_size_in_bytes"].get<uint64_t>());
    const double xla_temp = xla["temp_size_in_bytes"].get<double>();
    const double temp_error = relative(static_cast<double>(plan->temp_bytes), xla_temp);
    EXPECT_LE(std::abs(temp_error), 0.01) << "temp " << plan->temp_bytes << " vs XLA " << xla_temp;
    EXPECT_EQ(plan->host_temp_bytes, xla["host_temp_size_in_bytes"].get<uint64_t>());
    // The packed block can never beat the no-fragmentation bound.
    EXPECT_LE(plan->temp_lower_bound_bytes, plan->temp_bytes);
    // A compiled module's schedule is fixed: no range to span.
    EXPECT_EQ(plan->temp_upper_bytes, plan->temp_bytes);
    EXPECT_EQ(plan->peak_upper_bytes, plan->peak_bytes);
    EXPECT_EQ(plan->peak_bytes,
              plan->argument_bytes + plan->output_bytes - plan->alias_bytes + plan->temp_bytes);
    double peak_error = 0, xla_error = 0;
    if (!p["measured"].is_null()) {
      const double measured = p["measured"]["peak_bytes_in_use_after_step"].get<double>();
      const double xla_peak = xla["argument_size_in_bytes"].get<double>() +
                              xla["output_size_in_bytes"].get<double>() -
                              xla["alias_size_in_bytes"].get<double>() + xla_temp;
      peak_error = relative(static_cast<double>(plan->peak_bytes), measured);
      xla_error = relative(xla_peak, measured);
      // Within 2% of what the H200 measured, and never further off than XLA's own figure (+0.01%): on
      // mlp_fp32_donate_remat_full the device held 64 MiB beyond XLA's accounting (see the README).
      EXPECT_LE(std::abs(peak_error), std::max(0.02, std::abs(xla_error) + 1e-4));
    }
    std::printf("%-28s %15.0f %15llu %+8.3f%% %15s %15llu %+8.3f%% %+8.3f%%\n", name.c_str(), xla_temp,
                static_cast<unsigned long long>(plan->temp_bytes), 100 * temp_error,
                p["measured"].is_null()
                    ? "-"
                    : std::to_string(p["measured"]["peak_bytes_in_use_after_step"].get<uint64_t>()).c_str(),
                static_cast<unsigned long long>(plan->peak_bytes), 100 * peak_error, 100 * xla_error);
    ++checked;
  }
  EXPECT_EQ(checked, 14);
}

// XLA's dump of gpt_fp32_donate: "allocation N: ..., parameter P | constant | preallocated-temp | ..." then
// " value: <id name @0> (size=S,offset=O): shape".
struct DumpValue {
  int allocation;
  uint64_t offset;
  uint64_t size;
};
struct Dump {
  std::map<std::string, DumpValue> values;
  std::map<int, std::string>
      kind;  // allocation -> "parameter" | "temp" | "output" | "constant" | "thread-local"
};

Dump read_dump() {
  Dump dump;
  auto text = read_file(data("gpt_fp32_donate.buffer-assignment.txt.gz"));
  EXPECT_TRUE(text.ok());
  std::istringstream in(*text);
  std::string line;
  int allocation = -1;
  while (std::getline(in, line)) {
    if (line.starts_with("allocation ")) {
      allocation = std::stoi(line.substr(11));
      std::string kind = "output";
      if (line.find("thread-local") != std::string::npos) kind = "thread-local";
      if (line.find("preallocated-temp") != std::string::npos) kind = "temp";
      if (line.find(", parameter ") != std::string::npos) kind = "parameter";
      if (line.find("constant") != std::string::npos) kind = "constant";
      dump.kind[allocation] = kind;
    } else if (line.starts_with(" value: <")) {
      const size_t name_at = line.find(' ', 9) + 1;
      const std::string name = line.substr(name_at, line.find(' ', name_at) - name_at);
      const size_t s = line.find("size=") + 5;
      const size_t o = line.find("offset=") + 7;
      dump.values[name] = {allocation, std::stoull(line.substr(o)), std::stoull(line.substr(s))};
    } else if (line.starts_with("Total bytes used")) {
      break;
    }
  }
  return dump;
}

TEST(HloPlan, SharesAllocationsAsXlaDidForGptDonate) {
  const Dump dump = read_dump();
  ASSERT_GT(dump.values.size(), 1000u);
  const HloModule module = load("gpt_fp32_donate");
  auto model = build_buffer_model(module);
  ASSERT_TRUE(model.ok()) << model.error().message();
  // Our allocation of each value: the buffer that owns its memory (temps: the one temp block).
  std::map<std::string, std::string> ours;
  for (const HloValue& v : model->values) {
    const HloBuffer& b = model->buffers[v.buffer];
    uint32_t owner = v.buffer;
    if (b.kind == BufferKind::kReusesAllocation) owner = b.allocation_of;
    const BufferKind kind = model->buffers[owner].kind;
    ours[value_name(module, v)] = kind == BufferKind::kTemp ? "temp" : "buffer " + std::to_string(owner);
  }
  // Every value XLA assigned outside thread-local memory is one we model, and two values share an
  // allocation in XLA's dump exactly when they share one in ours.
  std::map<int, std::set<std::string>> xla_groups;
  std::map<std::string, std::set<int>> our_groups;
  size_t compared = 0;
  for (const auto& [name, v] : dump.values) {
    if (dump.kind.at(v.allocation) == "thread-local") continue;
    auto it = ours.find(name);
    ASSERT_NE(it, ours.end()) << name << " (allocation " << v.allocation << ") is not a value of ours";
    if (dump.kind.at(v.allocation) == "temp") {
      EXPECT_EQ(it->second, "temp") << name;
    }
    xla_groups[v.allocation].insert(it->second);
    our_groups[it->second].insert(v.allocation);
    ++compared;
  }
  EXPECT_GT(compared, 800u);
  for (const auto& [allocation, owners] : xla_groups)
    EXPECT_EQ(owners.size(), 1u) << "XLA allocation " << allocation << " is split across our buffers";
  for (const auto& [owner, allocations] : our_groups)
    EXPECT_EQ(allocations.size(), 1u) << "our " << owner << " spans several XLA allocations";
}

}  // namespace
}  // namespace memfit

namespace memfit {
namespace {

// Both forms of the program before optimization: HLO text and StableHLO (JAX's default).
void expect_lowered_plans(const std::string& suffix, const std::string& source,
                          const std::set<std::string>& held, const std::string& list = "programs.json",
                          int expected = 7, const std::set<std::string>& temp_not_held = {}) {
  const Json programs = program_list(list);
  std::printf("%-28s %15s %15s %9s %15s %15s %9s\n", source.c_str(), "xla temp", "predicted", "error",
              "measured peak", "predicted", "error");
  int checked = 0;
  for (const Json& p : programs) {
    const std::string name = p["name"];
    if (p["backend"] != "gpu") continue;
    SCOPED_TRACE(name);
    auto lowered_text = read_file(data(name + suffix));
    ASSERT_TRUE(lowered_text.ok()) << lowered_text.error().message();
    auto module = parse_program_text(*lowered_text);
    ASSERT_TRUE(module.ok()) << module.error().message();
    EXPECT_FALSE(module->is_scheduled);
    auto plan = plan_hlo(*module);
    ASSERT_TRUE(plan.ok()) << plan.error().message();
    EXPECT_EQ(plan->source, suffix.find("stablehlo") != std::string::npos ? "stablehlo" : "lowered-hlo");
    const Json& xla = p["xla_memory_analysis"];
    EXPECT_EQ(plan->argument_bytes, xla["argument_size_in_bytes"].get<uint64_t>());
    EXPECT_EQ(plan->output_bytes, xla["output_size_in_bytes"].get<uint64_t>());
    EXPECT_EQ(plan->alias_bytes, xla["alias_size_in_bytes"].get<uint64_t>());
    const double xla_temp = xla["temp_size_in_bytes"].get<double>();
    const Json& m = p["measured"];
    const double measured =
        m["peak_bytes_in_use_after_step"].get<double>() -
        (m["bytes_in_use_before_step"].get<double>() - xla["argument_size_in_bytes"].get<double>());
    const double peak_error = relative(static_cast<double>(plan->peak_bytes), measured);
    std::printf("%-28s %15.0f %15llu %8.1f%% %15.0f %15llu %8.1f%%\n", name.c_str(), xla_temp,
                static_cast<unsigned long long>(plan->temp_bytes),
                100 * relative(static_cast<double>(plan->temp_bytes), xla_temp), measured,
                static_cast<unsigned long long>(plan->peak_bytes), 100 * peak_error);
    if (held.contains(name)) {
      EXPECT_LE(std::abs(peak_error), 0.05) << "peak " << plan->peak_bytes;
      // XLA's temp too, where the caller does not say it is missed.
      if (!temp_not_held.contains(name)) {
        EXPECT_LE(std::abs(relative(static_cast<double>(plan->temp_bytes), xla_temp)), 0.05)
            << "temp " << plan->temp_bytes;
      }
    }
    // The range XLA's choice of schedule spans: the program's own order is the most XLA's memory scheduler
    // keeps, and XLA's temp lies under it - where memfit's prediction misses by XLA's ordering too - to 1%.
    // Where the program's own order is the one kept or needs what it does to 1% (the range is one figure:
    // accumulated GPT, whose logits die at the backward pass's start as in XLA's graph; the conv net, whose
    // orders all need 2.50 GB) the bound is the prediction, held to the 5% above. (Per-example gradients
    // lay above it until their Adam updates were written apart, as XLA's transpose fusions write them.)
    EXPECT_GE(plan->temp_upper_bytes, plan->temp_bytes);
    EXPECT_EQ(plan->peak_upper_bytes - plan->temp_upper_bytes, plan->peak_bytes - plan->temp_bytes);
    const double range_tolerance =
        static_cast<double>(plan->temp_upper_bytes) > 1.01 * static_cast<double>(plan->temp_bytes) ? 1.01
                                                                                                   : 1.05;
    EXPECT_GE(range_tolerance * static_cast<double>(plan->temp_upper_bytes), xla_temp)
        << "upper " << plan->temp_upper_bytes;
    std::printf("%-28s at most (the program's own order): temp %llu, peak %llu (%+.1f%% of measured)\n",
                name.c_str(), static_cast<unsigned long long>(plan->temp_upper_bytes),
                static_cast<unsigned long long>(plan->peak_upper_bytes),
                100 * relative(static_cast<double>(plan->peak_upper_bytes), measured));
    // Host offload: values annotated to the pinned host are host memory on this path too.
    const uint64_t xla_host_temp = xla["host_temp_size_in_bytes"].get<uint64_t>();
    if (xla_host_temp > 0) {
      EXPECT_GT(plan->host_temp_bytes, 0u);
      EXPECT_LE(plan->host_temp_bytes, xla_host_temp);
      std::printf(
          "%-28s host temp: XLA %llu, predicted %llu (%.1f%%)\n", name.c_str(),
          static_cast<unsigned long long>(xla_host_temp),
          static_cast<unsigned long long>(plan->host_temp_bytes),
          100 * relative(static_cast<double>(plan->host_temp_bytes), static_cast<double>(xla_host_temp)));
    } else {
      EXPECT_EQ(plan->host_temp_bytes, 0u);
    }
    ++checked;
  }
  EXPECT_EQ(checked, expected);
}

// Argument, output and alias bytes are exact; temp is memfit's prediction of XLA:GPU (plan/xla_gpu_model.h),
// printed against XLA's own and the H200's, and held within 5% of the measured peak where it is today. The
// scan program's lowered HLO needs XLA's copy insertion for loops (its residual stacks start as one
// broadcast of zeros shared by several loop elements: -52% before, +2.3% with it).
TEST(HloPlan, LoweredHloProgramsPlannedThroughTheGpuModel) {
  expect_lowered_plans(".lowered.hlo.txt.gz", "lowered HLO",
                       {"gpt_fp32", "gpt_fp32_donate", "gpt_fp32_donate_scan", "mlp_fp32", "mlp_fp32_donate",
                        "mlp_fp32_donate_remat_full"});
}

// More programs, only their lowered forms bundled (lowered_programs.json): precision, inference, remat,
// library layers, cuDNN attention, gradient accumulation, a scan with full remat. Held within 5% where the
// model is today; the rest are printed (the README's table). Mixed precision came within 5% when GEMM fusions
// stopped taking in narrowing casts (the weights' bf16 copies live from the forward to the backward, as XLA's
// wrapped_convert buffers do): mlp_mixed_donate -11.3% -> 0.0%. Small-batch MLPs came within 5% when GEMMs
// too small to fill the GPU were split along their contraction (their f32 partials saved for the backward
// pass): mlp_mean_grads_b128 -17.1% -> +2.2%; per-example gradients (vmap) -21.5% -> -7.7%, then -5.7% ->
// +0.7% when their Adam updates were written apart as XLA writes them (PerExampleGradients... below).
// Their temp is held within 5% of XLA's too. mlp_mean_grads_b128 came within it (+12.0% -> +4.0%) when a
// small tanh was recomputed by its readers, as XLA's performance model weighs it; cuDNN attention's (-5.3%
// -> +0.3%, and gpt_mixed_donate's -2.7% -> +0.2%) when a norm's normalized rows that the backward pass
// reads too were written once, as XLA keeps them beside the norm's output (XlaGpuModel.ANormsRows...).
const std::set<std::string> kTempMisses = {};
TEST(HloPlan, MoreLoweredProgramsPlannedThroughTheGpuModel) {
  expect_lowered_plans(
      ".lowered.hlo.txt.gz", "lowered HLO",
      {"gpt_mixed_donate", "gpt_bf16_donate", "gpt_fp32_infer_b32", "gpt_fp32_donate_remat_full",
       "gpt_fp32_donate_remat_dots", "flax_encoder_adafactor_b32", "vit_b16_fp32_donate", "mlp_mixed_donate",
       "gpt_mixed_donate_cudnn", "gpt_fp32_donate_accum4_b32", "mlp_mean_grads_b128", "mlp_vmap_grads_b128",
       "mlp_fp32_donate_accum4", "gpt_fp32_donate_scan_remat_full"},
      "lowered_programs.json", 15, kTempMisses);
  expect_lowered_plans(
      ".stablehlo.mlir.gz", "StableHLO",
      {"gpt_mixed_donate", "gpt_bf16_donate", "gpt_fp32_infer_b32", "gpt_fp32_donate_remat_full",
       "gpt_fp32_donate_remat_dots", "flax_encoder_adafactor_b32", "vit_b16_fp32_donate", "mlp_mixed_donate",
       "gpt_mixed_donate_cudnn", "gpt_fp32_donate_accum4_b32", "mlp_mean_grads_b128", "mlp_vmap_grads_b128",
       "mlp_fp32_donate_accum4", "gpt_fp32_donate_scan_remat_full"},
      "lowered_programs.json", 15, kTempMisses);
}

// Programs captured on the H200 after the model was built (captured_programs.json, gpu/xla_probe.sh): the
// shared families in combinations the shared data does not hold - bf16 with dots remat, mixed precision with
// scan and in inference, a KV-cache decode step, GPT-2's vocabulary in fp32, a bf16 MLP with full remat,
// per-example gradients of another MLP, ViT in mixed precision with dots remat, a flax CNN with AdamW. Held
// within 5% of the measured peak where the model is: seven of nine. Mixed-precision inference came within 5%
// when a widening epilogue whose result is the program's output was folded into its GEMM (+9.7% -> -1.4%).
// Not held: the decode step, whose step peak was not observed (the process's high-water mark, 2.21 GB, was
// set while its arguments were built; the step needs 0.4 MB of temp; memfit is +0.7% of XLA's own peak),
// and per-example gradients (-25% of the measured peak, as XLA's own figure: the device held 58 MiB beyond
// it; -39% before their Adam updates were written apart, now +0.5% of XLA's temp).
TEST(HloPlan, ProgramsCapturedAfterTheModelWasBuilt) {
  expect_lowered_plans(
      ".lowered.hlo.txt.gz", "lowered HLO (captured)",
      {"gpt_bf16_donate_remat_dots", "gpt_mixed_donate_scan", "gpt_mixed_infer_b16", "gpt2dims_fp32_donate",
       "mlp_bf16_donate_remat_full", "vit_b16_mixed_donate_remat_dots", "flax_cnn_adamw_b32"},
      "captured_programs.json", 9);
}

// Per-example gradients (vmap) averaged into one: XLA sums the per-example products in the order their dot
// writes them, the transpose of the weight's, and fuses the transpose into Adam's update - a transpose
// fusion, which reads the weight and its moments through transposes, so it writes the new moments in
// buffers of their own and copies them over the donated arguments after every update (the compiled b64's
// copy.60 to copy.72); the mean's division by the batch is a multiply fused into each reader. Before both,
// the prediction was -16.4% (b128) and -49.7% (b64) of XLA's temp.
TEST(HloPlan, PerExampleGradientsWriteAdamsNewMomentsApartAsXlaDoes) {
  struct Case {
    const char* name;
    const char* list;
    size_t weight_matrices;
  };
  for (const auto& [name, list, weight_matrices] :
       {Case{"mlp_vmap_grads_b128", "lowered_programs.json", 5},
        Case{"mlp_vmap_grads_b64", "captured_programs.json", 4}}) {
    SCOPED_TRACE(name);
    const Json program = program_named(list, name);
    ASSERT_FALSE(program.is_null());
    const double xla_temp = program["xla_memory_analysis"]["temp_size_in_bytes"].get<double>();
    const HloModule lowered = load(name, ".lowered.hlo.txt.gz");
    auto plan = plan_hlo(lowered);
    ASSERT_TRUE(plan.ok()) << plan.error().message();
    std::printf("%-20s temp %llu, XLA %.0f (%+.1f%%)\n", name,
                static_cast<unsigned long long>(plan->temp_bytes), xla_temp,
                100 * relative(static_cast<double>(plan->temp_bytes), xla_temp));
    EXPECT_LE(std::abs(relative(static_cast<double>(plan->temp_bytes), xla_temp)), 0.02);
    // Each weight matrix's two new moments, copied over their arguments just before the root.
    auto modeled = model_xla_gpu(lowered);
    ASSERT_TRUE(modeled.ok()) << modeled.error().message();
    copy_donated_parameters(*modeled);
    HloModule scheduled = list_scheduled(*modeled);
    remove_unneeded_donation_copies(scheduled);
    const std::vector<HloInstruction>& entry = scheduled.entry()->instructions;
    size_t copied_over = 0;
    while (copied_over + 1 < entry.size() &&
           entry[entry.size() - 2 - copied_over].name.ends_with(".output") &&
           entry[entry.size() - 2 - copied_over].opcode == HloOpcode::kCopy)
      ++copied_over;
    EXPECT_EQ(copied_over, 2 * weight_matrices);
  }
}

// The same programs' optimized modules: argument, output and alias exact, temp within 1% of XLA's on all
// nine (ViT in mixed precision with dots remat was +2.2% before the reduction emitter's sharing rule,
// BufferModel.AReductionFusionsOutputTakesAnOperandItsHeroAlsoReads).
TEST(HloPlan, CapturedProgramsOptimizedModulesMatchXla) {
  int checked = 0;
  for (const Json& p : program_list("captured_programs.json")) {
    const std::string name = p["name"];
    SCOPED_TRACE(name);
    auto plan = plan_hlo(load(name));
    ASSERT_TRUE(plan.ok()) << plan.error().message();
    const Json& xla = p["xla_memory_analysis"];
    EXPECT_EQ(plan->argument_bytes, xla["argument_size_in_bytes"].get<uint64_t>());
    EXPECT_EQ(plan->output_bytes, xla["output_size_in_bytes"].get<uint64_t>());
    EXPECT_EQ(plan->alias_bytes, xla["alias_size_in_bytes"].get<uint64_t>());
    const double error =
        relative(static_cast<double>(plan->temp_bytes), xla["temp_size_in_bytes"].get<double>());
    std::printf("%-34s optimized temp %+.2f%% of XLA's\n", name.c_str(), 100 * error);
    EXPECT_LE(std::abs(error), 0.01);
    ++checked;
  }
  EXPECT_EQ(checked, 9);
}

// jax.checkpoint's offload_dot_with_no_batch_dims from the lowered program: each layer's three GEMM results
// without batch dimensions (q/k/v, the attention output's projection, the MLP's first layer) go to the pinned
// host. XLA's latency-hiding scheduler takes each copy to the host only as the backward pass comes for it, so
// the host holds about one layer's three at a time: batch x seq x (3 + 1 + 4) x d_model bf16 values, and
// while one layer's come back the next layer's start out. XLA's own host temp is 176 MiB, the model's
// between one layer's (128 MiB) and that.
TEST(HloPlan, LoweredHostOffloadHoldsOneLayerOnTheHost) {
  const uint64_t batch = 8, seq = 1024, d_model = 1024, bf16_bytes = 2;
  for (const char* suffix : {".lowered.hlo.txt.gz", ".stablehlo.mlir.gz"}) {
    SCOPED_TRACE(suffix);
    auto text = read_file(data(std::string("gpt_mixed_donate_offload_dots_nb") + suffix));
    ASSERT_TRUE(text.ok());
    auto module = parse_program_text(*text);
    ASSERT_TRUE(module.ok()) << module.error().message();
    auto plan = plan_hlo(*module);
    ASSERT_TRUE(plan.ok()) << plan.error().message();
    EXPECT_GE(plan->host_temp_bytes, batch * seq * (3 + 1 + 4) * d_model * bf16_bytes);
    EXPECT_LE(plan->host_temp_bytes, 176ull << 20);
    uint64_t host_buffers = 0;
    for (const PlannedBuffer& b : plan->buffers) host_buffers += b.host_memory ? 1 : 0;
    EXPECT_EQ(host_buffers, 8u * 3u);  // every layer's three
  }
}

// XLA's compiled offload program with each copy-start/copy-done pair written as JAX writes the copy before
// XLA asyncifies it: an annotate_device_placement of the start's operand, where the done was.
HloModule with_copies_as_placements(HloModule m) {
  for (HloComputation& c : m.computations) {
    std::map<std::string, std::string> start_operand;
    std::vector<HloInstruction> out;
    for (HloInstruction& x : c.instructions) {
      if (x.opcode == HloOpcode::kCopyStart && x.operands.size() == 1) {
        start_operand[x.name] = x.operands[0];
        continue;
      }
      if (x.opcode == HloOpcode::kCopyDone && start_operand.contains(x.operands.at(0))) {
        x.operands = {start_operand[x.operands[0]]};
        x.set_opcode("custom-call");
        x.custom_call_target = "annotate_device_placement";
        x.mutable_buffer_placement() = x.shape.memory_space == kHostMemorySpace ? "pinned_host" : "device";
      }
      out.push_back(std::move(x));
    }
    c.instructions = std::move(out);
  }
  return m;
}

// The model of XLA's latency-hiding scheduler run over XLA's own graph of the offload program (its copies
// written as placements; plan/xla_gpu_model.h, latency_hiding_scheduled). In XLA's compiled order that graph
// needs XLA's temp to 1.3% (a copy as one instruction: its source freed at the done, its device copy taken at
// the start). XLA's memory scheduler kept its list order, 1.84 GB of temp over this graph (-64%); the
// latency-hiding scheduler then moved 254 places per instruction and the step needed 5.13 GB. The model,
// from that list order, lands within 5% of it; from XLA's compiled order it keeps the order within 40 places
// per instruction and the temp within 5%.
TEST(HloPlan, XlasLatencyHidingSchedulerIsReproducedOverItsOwnOffloadGraph) {
  auto text = read_file(data("gpt_mixed_donate_offload_dots_nb.hlo.txt.gz"));
  ASSERT_TRUE(text.ok());
  auto compiled = parse_program_text(*text);
  ASSERT_TRUE(compiled.ok()) << compiled.error().message();
  const HloModule graph = with_copies_as_placements(std::move(*compiled));
  const Json xla = program_named("programs.json", "gpt_mixed_donate_offload_dots_nb")["xla_memory_analysis"];
  ASSERT_TRUE(xla.is_object());
  const double xla_temp = xla["temp_size_in_bytes"].get<double>();
  auto temp_of = [](const HloModule& m) {
    auto plan = plan_hlo(m);
    EXPECT_TRUE(plan.ok()) << plan.error().message();
    return plan.ok() ? static_cast<double>(plan->temp_bytes) : 0.0;
  };
  EXPECT_LE(std::abs(relative(temp_of(graph), xla_temp)), 0.02);
  const uint64_t h200 = *known_device_capacity("h200");
  const HloModule listed = list_scheduled(graph);
  EXPECT_LE(relative(temp_of(listed), xla_temp), -0.5) << "the memory scheduler's order alone";
  const double from_list = temp_of(latency_hiding_scheduled(listed, h200));
  EXPECT_LE(std::abs(relative(from_list, xla_temp)), 0.05) << from_list;
  const HloModule kept = latency_hiding_scheduled(graph, h200);
  EXPECT_LE(std::abs(relative(temp_of(kept), xla_temp)), 0.05);
  std::map<std::string, size_t> compiled_position;
  const HloComputation& before = *graph.entry();
  for (size_t i = 0; i < before.instructions.size(); ++i) compiled_position[before.instructions[i].name] = i;
  double moved = 0;
  const HloComputation& after = *kept.entry();
  for (size_t i = 0; i < after.instructions.size(); ++i)
    moved += std::abs(static_cast<double>(i) -
                      static_cast<double>(compiled_position.at(after.instructions[i].name)));
  EXPECT_LT(moved / static_cast<double>(after.instructions.size()), 40.0);
  std::printf(
      "over XLA's graph: compiled %+.1f%%, list %+.1f%%, list + latency hiding %+.1f%% of XLA's temp; "
      "%.1f places per instruction from XLA's order\n",
      100 * relative(temp_of(graph), xla_temp), 100 * relative(temp_of(listed), xla_temp),
      100 * relative(from_list, xla_temp), moved / static_cast<double>(after.instructions.size()));
}

// XLA's scheduler limit comes from the GPU (GetSchedulerMemoryLimit: 95% of 80% of it, less the arguments
// and outputs), and past half of it the latency-hiding scheduler weighs memory before hiding copies: the
// offload program planned for an 8 GiB GPU holds less than for an H200, where the limit is far off.
TEST(HloPlan, AnOffloadingProgramIsScheduledForTheGpuItRunsOn) {
  auto text = read_file(data("gpt_mixed_donate_offload_dots_nb.lowered.hlo.txt.gz"));
  ASSERT_TRUE(text.ok());
  auto module = parse_program_text(*text);
  ASSERT_TRUE(module.ok()) << module.error().message();
  const Json xla = program_named("programs.json", "gpt_mixed_donate_offload_dots_nb")["xla_memory_analysis"];
  ASSERT_TRUE(xla.is_object());
  const uint64_t io = xla["argument_size_in_bytes"].get<uint64_t>() +
                      xla["output_size_in_bytes"].get<uint64_t>() -
                      xla["alias_size_in_bytes"].get<uint64_t>();
  EXPECT_EQ(xla_scheduler_memory_limit(*module, 8ull << 30), ((8ull << 30) / 10 * 8 - io) / 100 * 95);
  HloPlanOptions small, h200;
  small.device_memory_bytes = 8ull << 30;
  h200.device_memory_bytes = *known_device_capacity("h200");
  auto on_small = plan_hlo(*module, small);
  auto on_h200 = plan_hlo(*module, h200);
  ASSERT_TRUE(on_small.ok() && on_h200.ok());
  EXPECT_LT(on_small->temp_bytes, on_h200->temp_bytes);
  std::printf("offload program's temp: %llu for an 8 GiB GPU, %llu for an H200\n",
              static_cast<unsigned long long>(on_small->temp_bytes),
              static_cast<unsigned long long>(on_h200->temp_bytes));
}

// The host offload program is the one XLA's latency-hiding scheduler reorders (it holds asynchronous copies),
// and the model follows it approximately: measured, the step peaked 1.3% under the prediction. The plan says
// so beside its figures - for the lowered program only: the compiled module is in XLA's final order already,
// and a program that offloads nothing is not reordered.
TEST(HloPlan, AHostOffloadPredictionSaysWhatItMisses) {
  auto caveats_of = [](const std::string& file) {
    auto text = read_file(data(file));
    EXPECT_TRUE(text.ok()) << file;
    auto module = parse_program_text(text.ok() ? *text : std::string());
    EXPECT_TRUE(module.ok()) << file;
    auto plan = module.ok() ? plan_hlo(*module) : Expected<HloPlan>(internal_error("no module"));
    EXPECT_TRUE(plan.ok()) << file;
    return plan.ok() ? plan->caveats : std::vector<std::string>{"not planned"};
  };
  const std::vector<std::string> offload_caveat{std::string(kHostOffloadCaveat)};
  EXPECT_EQ(caveats_of("gpt_mixed_donate_offload_dots_nb.lowered.hlo.txt.gz"), offload_caveat);
  EXPECT_EQ(caveats_of("gpt_mixed_donate_offload_dots_nb.stablehlo.mlir.gz"), offload_caveat);
  EXPECT_TRUE(caveats_of("gpt_mixed_donate_offload_dots_nb.hlo.txt.gz").empty());
  EXPECT_TRUE(caveats_of("gpt_fp32.lowered.hlo.txt.gz").empty());
}

// One program, two front ends: the lowered HLO text and the StableHLO of the same jax.jit(...).lower() plan
// to the same temp (within 4 KiB: tuple tables and scalars). StableHLO writes a scatter's combiner as a
// region, HLO as a to_apply computation; before the region's op was read, XLA's fold of add(A,
// scatter-add(zeros)) was missed on StableHLO and every GPT held an embedding-sized gradient more (+5.2% on
// remat full). The scanned GPT's loop is read differently by the two (-1.4%, bounded here, not explained).
TEST(HloPlan, TheLoweredHloAndStableHloOfOneProgramPlanAlike) {
  int pairs = 0;
  for (const char* name :
       {"gpt_fp32", "gpt_fp32_donate", "gpt_bf16_donate", "gpt_mixed_donate", "gpt_fp32_donate_remat_full",
        "gpt_fp32_donate_remat_dots", "gpt_fp32_donate_accum4_b32", "gpt_fp32_infer_b32",
        "gpt_mixed_donate_cudnn", "gpt_mixed_donate_offload_dots_nb", "gpt_fp32_donate_scan_remat_full",
        "vit_b16_fp32_donate", "flax_encoder_adafactor_b32", "mlp_fp32_donate", "mlp_vmap_grads_b128",
        "gpt_fp32_donate_scan"}) {
    SCOPED_TRACE(name);
    std::vector<uint64_t> temps;
    for (const char* suffix : {".lowered.hlo.txt.gz", ".stablehlo.mlir.gz"}) {
      auto text = read_file(data(std::string(name) + suffix));
      ASSERT_TRUE(text.ok()) << text.error().message();
      auto module = parse_program_text(*text);
      ASSERT_TRUE(module.ok()) << module.error().message();
      auto plan = plan_hlo(*module);
      ASSERT_TRUE(plan.ok()) << plan.error().message();
      temps.push_back(plan->temp_bytes);
    }
    const double gap = std::abs(static_cast<double>(temps[1]) - static_cast<double>(temps[0]));
    if (std::string(name) == "gpt_fp32_donate_scan") {
      EXPECT_LE(gap / static_cast<double>(temps[0]), 0.02);
    } else {
      EXPECT_LE(gap, 4096.0) << temps[0] << " vs " << temps[1];
    }
    ++pairs;
  }
  EXPECT_EQ(pairs, 16);
}

// A sharded program before partitioning, as JAX lowers jit with shardings: its parameters carry their
// shardings (HLO's sharding={devices=...}, Shardy's sdy.sharding over a mesh) and its donated arguments are
// buffer donors, which XLA pairs with outputs of equal size. Each device's share of the arguments is XLA's
// per-device argument_size_in_bytes to the byte, from both front ends; outputs and aliases too where every
// new value keeps its argument's sharding (FSDP, replicated), within 0.2% under tensor parallelism (where
// XLA's propagation gives some results shardings of its own).
TEST(HloPlan, EachDevicesShareOfAShardedProgramsArguments) {
  // The same step compiled for one device: the whole program's entry.
  const Json one_device = program_named("programs.json", "cpu8_gpt_single");
  ASSERT_FALSE(one_device.is_null());
  const Json& single = one_device["xla_memory_analysis"];
  int checked = 0;
  for (const Json& p : program_list("programs.json")) {
    const std::string name = p["name"];
    if (name != "cpu8_gpt_fsdp8" && name != "cpu8_gpt_tp4_dp2" && name != "cpu8_gpt_replicated_dp8") continue;
    const Json& xla = p["xla_memory_analysis"];
    for (const char* suffix : {".lowered.hlo.txt.gz", ".stablehlo.mlir.gz"}) {
      SCOPED_TRACE(name + suffix);
      auto program = read_file(data(name + suffix));
      ASSERT_TRUE(program.ok()) << program.error().message();
      auto module = parse_program_text(*program);
      ASSERT_TRUE(module.ok()) << module.error().message();
      auto plan = plan_hlo(std::move(*module));
      ASSERT_TRUE(plan.ok()) << plan.error().message();
      EXPECT_EQ(plan->partitions, 8u);
      EXPECT_EQ(plan->argument_bytes, xla["argument_size_in_bytes"].get<uint64_t>());
      const double output =
          relative(static_cast<double>(plan->output_bytes), xla["output_size_in_bytes"].get<double>());
      const double alias =
          relative(static_cast<double>(plan->alias_bytes), xla["alias_size_in_bytes"].get<double>());
      if (name == "cpu8_gpt_tp4_dp2") {
        EXPECT_LE(std::abs(output), 0.002) << plan->output_bytes;
        EXPECT_LE(std::abs(alias), 0.002) << plan->alias_bytes;
      } else {
        EXPECT_EQ(plan->output_bytes, xla["output_size_in_bytes"].get<uint64_t>());
        EXPECT_EQ(plan->alias_bytes, xla["alias_size_in_bytes"].get<uint64_t>());
      }
      // Partitioned: the plan is one device's, a share of the unsharded compile's entry.
      EXPECT_TRUE(plan->partitioned);
      EXPECT_LT(plan->argument_bytes, single["argument_size_in_bytes"].get<uint64_t>() + 1);
      ++checked;
    }
  }
  EXPECT_EQ(checked, 6);
}

// Where the mixed-precision full-remat miss comes from: not the buffers the model finds but the order XLA
// compiles them in. XLA's ListScheduler's own decisions on the H200 (its VLOG(2) log, bundled) put XLA's
// compiled graph in an order that needs within 2% of what memfit predicts from the lowered program (3.56 GB
// against 3.61: the last layer's residual, which XLA writes once and the model recomputes from its two
// terms), and memfit's re-implementation (list_scheduled) finds the same; the order XLA compiled - its DFS
// scheduler's, chosen by its estimate by 8 bytes (next tests) - holds over a third more
// (measured: 6.72 GB peak against 5.23 predicted). It is not the latency-hiding scheduler's: compiled with
// that disabled, the order is the same instruction for instruction and the temp the same to the byte
// (gpu/RESULTS.md). The prediction's range reaches XLA's order.
TEST(HloPlan, XlasListSchedulerOrderNeedsWhatThePredictionSays) {
  const std::string name = "gpt_mixed_donate_remat_full_b16";
  const HloModule compiled = load(name);
  auto in_xla_order = plan_hlo(compiled);
  ASSERT_TRUE(in_xla_order.ok()) << in_xla_order.error().message();
  // XLA's list order, from its log: the compiled entry reordered (nine scheduled instructions XLA removed
  // afterwards, a copy and eight optimization barriers, are not in it).
  auto log = read_file(data(name + ".list_scheduler_order.txt.gz"));
  ASSERT_TRUE(log.ok()) << log.error().message();
  HloModule listed = compiled;
  HloComputation* entry = nullptr;
  for (HloComputation& c : listed.computations)
    if (c.is_entry) entry = &c;
  ASSERT_NE(entry, nullptr);
  std::map<std::string, uint32_t> index;
  for (uint32_t i = 0; i < entry->instructions.size(); ++i) index.emplace(entry->instructions[i].name, i);
  std::vector<uint32_t> order;
  std::istringstream lines(*log);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] == '#') continue;
    if (auto it = index.find(line); it != index.end()) order.push_back(it->second);
  }
  ASSERT_EQ(order.size(), entry->instructions.size());
  reorder_instructions(entry->instructions, order);
  auto in_xla_list_order = plan_hlo(listed);
  ASSERT_TRUE(in_xla_list_order.ok()) << in_xla_list_order.error().message();
  auto in_list_order = plan_hlo(list_scheduled(compiled));
  ASSERT_TRUE(in_list_order.ok()) << in_list_order.error().message();
  auto lowered_text = read_file(data(name + ".lowered.hlo.txt.gz"));
  ASSERT_TRUE(lowered_text.ok());
  auto lowered = parse_program_text(*lowered_text);
  ASSERT_TRUE(lowered.ok()) << lowered.error().message();
  auto predicted = plan_hlo(*lowered);
  ASSERT_TRUE(predicted.ok()) << predicted.error().message();
  std::printf(
      "temp: XLA's compiled order %llu, XLA's list order %llu, memfit's list order %llu, predicted %llu "
      "(at most %llu)\n",
      static_cast<unsigned long long>(in_xla_order->temp_bytes),
      static_cast<unsigned long long>(in_xla_list_order->temp_bytes),
      static_cast<unsigned long long>(in_list_order->temp_bytes),
      static_cast<unsigned long long>(predicted->temp_bytes),
      static_cast<unsigned long long>(predicted->temp_upper_bytes));
  EXPECT_EQ(in_xla_list_order->argument_bytes, in_xla_order->argument_bytes);
  EXPECT_EQ(in_xla_list_order->alias_bytes, in_xla_order->alias_bytes);
  for (const auto& plan : {in_xla_list_order, in_list_order}) {
    EXPECT_LE(
        std::abs(relative(static_cast<double>(plan->temp_bytes), static_cast<double>(predicted->temp_bytes))),
        0.02);
    EXPECT_GT(static_cast<double>(in_xla_order->temp_bytes), 1.33 * static_cast<double>(plan->temp_bytes));
  }
  EXPECT_LE(in_xla_order->temp_bytes, predicted->temp_upper_bytes);
}

// Which order XLA compiled: its DFS memory scheduler's. XLA's DefaultMemoryScheduler runs its list, DFS and
// post-order schedulers and keeps the one its estimate finds smallest (hlo_memory_scheduler.cc); for this
// program its log (VLOG(2), the H200, gpu/RESULTS.md) says list 6.76 GiB, DFS 6.76 GiB (a little less),
// post order 7.93 GiB, and it chose DFS: a tie but for 8 bytes (next test). The buffer assignment that
// follows needs 3.56 GB of temp for the list order, 5.10 GB for the DFS order XLA kept. dfs_scheduled() over
// XLA's graph as the scheduler saw it (dumped just before scheduling: its optimization barriers and donation
// copies still in) reproduces the compiled order and its temp.
TEST(HloPlan, XlasCompiledOrderIsItsDfsSchedulersOverTheGraphItScheduled) {
  const std::string name = "gpt_mixed_donate_remat_full_b16";
  const HloModule before = load(name, ".before_scheduling.hlo.txt.gz");
  ASSERT_FALSE(before.is_scheduled);
  HloModule dfs = dfs_scheduled(before);
  dfs.is_scheduled = true;
  auto plan = plan_hlo(dfs);
  ASSERT_TRUE(plan.ok()) << plan.error().message();
  const HloModule compiled = load(name);
  auto compiled_plan = plan_hlo(compiled);
  ASSERT_TRUE(compiled_plan.ok()) << compiled_plan.error().message();
  const double xla_temp = 5102733408.0;  // memory_analysis().temp_size_in_bytes (programs.json)
  std::printf("temp: DFS order of the graph XLA scheduled %llu, the compiled order %llu, XLA %.0f\n",
              static_cast<unsigned long long>(plan->temp_bytes),
              static_cast<unsigned long long>(compiled_plan->temp_bytes), xla_temp);
  EXPECT_LE(std::abs(relative(static_cast<double>(plan->temp_bytes), xla_temp)), 0.01);
  EXPECT_LE(std::abs(relative(static_cast<double>(plan->temp_bytes),
                              static_cast<double>(compiled_plan->temp_bytes))),
            0.001);
  // The same order, instruction for instruction, over what both hold (the compiled module lost its barriers
  // and a copy after scheduling, and prints no get-tuple-element or bitcast differently).
  auto names = [](const HloModule& m) {
    std::vector<std::string> out;
    for (const HloComputation& c : m.computations)
      if (c.is_entry)
        for (const HloInstruction& i : c.instructions)
          if (i.opcode != HloOpcode::kGetTupleElement && i.opcode != HloOpcode::kBitcast)
            out.push_back(i.name);
    return out;
  };
  const std::vector<std::string> a = names(dfs), b = names(compiled);
  const std::set<std::string> in_a(a.begin(), a.end()), in_b(b.begin(), b.end());
  std::vector<std::string> common_a, common_b;
  for (const std::string& x : a)
    if (in_b.contains(x)) common_a.push_back(x);
  for (const std::string& x : b)
    if (in_a.contains(x)) common_b.push_back(x);
  ASSERT_EQ(common_a.size(), common_b.size());
  std::map<std::string, size_t> at;
  for (size_t k = 0; k < common_b.size(); ++k) at.emplace(common_b[k], k);
  double displacement = 0;
  for (size_t k = 0; k < common_a.size(); ++k)
    displacement += std::abs(static_cast<double>(k) - static_cast<double>(at[common_a[k]]));
  displacement /= static_cast<double>(common_a.size());
  std::printf("%zu instructions, each %.2f places from where XLA compiled it on average\n", common_a.size(),
              displacement);
  EXPECT_GT(common_b.size(), 900u);
  // Ties of XLA's order (equal fan-out and bytes fall to names, which differ before and after scheduling)
  // move a few; the list order is 299 places away on average.
  EXPECT_LT(displacement, 1.0);
}

// XLA's PostOrderMemoryScheduler's order of a module: each computation's MakeInstructionPostOrder.
HloModule in_post_order(HloModule module) {
  for (HloComputation& comp : module.computations)
    reorder_instructions(comp.instructions, instruction_post_order(comp));
  return module;
}

// What XLA's memory scheduler weighs `order` by (scheduler_estimate_bytes).
uint64_t scheduler_estimate(const HloModule& order) {
  auto estimate = scheduler_estimate_bytes(order);
  EXPECT_TRUE(estimate.ok()) << estimate.error().message();
  return estimate.ok() ? *estimate : 0;
}

// XLA's DefaultMemoryScheduler keeps whichever of its list, DFS and post-order schedules its estimate
// finds least, the list's on a tie and then the DFS's (hlo_memory_scheduler.cc). Its log on the H200
// (TF_CPP_VMODULE=hlo_memory_scheduler=2, gpu/RESULTS.md) printed the three estimates, rounded to 0.01 GiB,
// for three programs. scheduler_estimate_bytes() over the graph XLA scheduled gives every
// figure and every choice: for the mixed-precision full-remat step, the DFS order by 8 bytes of 7.26 GB.
// Two graphs are the compiled modules, which lost their optimization barriers (and the offload program its
// copies' order) after scheduling: their DFS order is not quite the one XLA estimated (6.65 GiB against
// the 6.62 logged for fp32 full remat), the list and post orders are.
TEST(HloPlan, XlasMemorySchedulerEstimateIsReproduced) {
  struct Case {
    const char* name;
    const char* suffix;
    double list_gib, dfs_gib, post_gib;  // XLA's log
    double dfs_tolerance_gib;
    const char* kept;
  };
  for (const Case& c :
       {Case{"gpt_mixed_donate_remat_full_b16", ".before_scheduling.hlo.txt.gz", 6.76, 6.76, 7.93, 0.005,
             "dfs"},
        Case{"gpt_mixed_donate_offload_dots_nb", ".hlo.txt.gz", 4.19, 5.18, 6.65, 0.005, "list"},
        Case{"gpt_fp32_donate_remat_full", ".hlo.txt.gz", 4.75, 6.62, 7.92, 0.04, "list"}}) {
    SCOPED_TRACE(c.name);
    const HloModule graph = load(c.name, c.suffix);
    const double gib = 1024.0 * 1024.0 * 1024.0;
    const double list = static_cast<double>(scheduler_estimate(list_scheduled(graph))),
                 dfs = static_cast<double>(scheduler_estimate(dfs_scheduled(graph))),
                 post_order = static_cast<double>(scheduler_estimate(in_post_order(graph)));
    std::printf(
        "%-34s estimates: list %.0f B (%.4f GiB), DFS %.0f B (%.4f GiB), post order %.0f B (%.4f GiB)\n",
        c.name, list, list / gib, dfs, dfs / gib, post_order, post_order / gib);
    EXPECT_NEAR(list / gib, c.list_gib, 0.005);
    EXPECT_NEAR(dfs / gib, c.dfs_gib, c.dfs_tolerance_gib);
    EXPECT_NEAR(post_order / gib, c.post_gib, 0.005);
    const std::string kept = list <= dfs && list <= post_order ? "list" : dfs <= post_order ? "dfs" : "post";
    EXPECT_EQ(kept, c.kept);
  }
}

// Which of its schedules XLA kept for a plain fp32 GPT step: the post order. The compiled entry's estimate is
// its post order's to the byte, and a GB under the list order's, which XLA's rule would keep on a tie.
TEST(HloPlan, XlaKeptThePostOrderOfAPlainGptStep) {
  const HloModule compiled = load("gpt_fp32_donate");
  const uint64_t as_compiled = scheduler_estimate(compiled),
                 post_order = scheduler_estimate(in_post_order(compiled)),
                 list = scheduler_estimate(list_scheduled(compiled)),
                 dfs = scheduler_estimate(dfs_scheduled(compiled));
  std::printf("estimates: compiled %llu, post order %llu, list %llu, DFS %llu\n",
              static_cast<unsigned long long>(as_compiled), static_cast<unsigned long long>(post_order),
              static_cast<unsigned long long>(list), static_cast<unsigned long long>(dfs));
  EXPECT_EQ(as_compiled, post_order);
  EXPECT_LT(post_order + 1000000000, list);
  EXPECT_LT(post_order, dfs);
}

TEST(HloPlan, StableHloProgramsPlannedThroughTheGpuModel) {
  expect_lowered_plans(".stablehlo.mlir.gz", "StableHLO",
                       {"gpt_fp32", "gpt_fp32_donate", "gpt_fp32_donate_scan", "mlp_fp32", "mlp_fp32_donate",
                        "mlp_fp32_donate_remat_full"});
}

}  // namespace
}  // namespace memfit
