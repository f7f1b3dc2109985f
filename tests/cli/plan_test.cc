// `memfit plan` and `memfit fit`: golden output, spec files, exit codes and refused specs.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "cli_runner.h"
#include "golden.h"
#include "trace_out.h"

namespace memfit::cli {
namespace {

TEST(PlanCommand, GoldenTableAndJson) {
  const auto table = testing::run_cli({"plan", "--model", "gpt", "--donate", "--device", "h200"});
  ASSERT_EQ(table.code, 0) << table.err;
  testing::expect_golden("plan_gpt_donate_h200.txt", table.out);
  const auto json = testing::run_cli({"plan", "--model", "mlp", "--remat", "full", "--donate", "--json"});
  ASSERT_EQ(json.code, 0) << json.err;
  testing::expect_golden("plan_mlp_remat_full.json", json.out);
  const auto j = nlohmann::json::parse(json.out);
  for (const char* key : {"peak_bytes", "breakdown", "fits"}) EXPECT_TRUE(j.contains(key)) << key;
  for (const char* key : {"parameters", "optimizer_state", "gradients", "activations", "temporaries"})
    EXPECT_TRUE(j["breakdown"].contains(key)) << key;
}

// A step deeper than memfit builds whole says how it was extended: from which depths, whether every figure
// grew alike, and if not by how much its growths differed (the flax encoder's heap packing: 129 bytes).
TEST(PlanCommand, ADeepStepSaysHowItsLineWasDrawn) {
  const std::vector<std::string> step = {"plan", "--model",   "flax_encoder", "--layers",
                                         "1000", "--d-model", "256",          "--heads",
                                         "4",    "--seq",     "128"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = step;
    args.insert(args.end(), extra.begin(), extra.end());
    return testing::run_cli(args);
  };
  const auto json = with({"--json"});
  ASSERT_EQ(json.code, 0) << json.err;
  const auto j = nlohmann::json::parse(json.out);
  EXPECT_EQ(j["extrapolated_from_layers"], nlohmann::json::array({64, 128, 192}));
  EXPECT_FALSE(j["extrapolation_exact"].get<bool>());
  EXPECT_EQ(j["extrapolation_wobble_bytes"].get<uint64_t>(), 129u);
  const auto text = with({});
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_NE(text.out.find("grew unevenly between depths (by up to 129B)"), std::string::npos) << text.out;
}

// A deep step's fit keeps an extension that wobbled only for a change that cannot fit: its figure is marked
// ~ in the table and peak_approximate in the JSON, beside the bytes live at once that put it over the pool.
TEST(PlanCommand, ADeepStepsFitMarksTheFiguresItEstimated) {
  const std::vector<std::string> fit = {"fit",  "--model", "gpt", "--layers",   "128",   "--d-model",
                                        "256",  "--heads", "4",   "--seq",      "128",   "--vocab",
                                        "8000", "--batch", "4",   "--capacity", "192MiB"};
  std::vector<std::string> as_json = fit;
  as_json.push_back("--json");
  const auto json = testing::run_cli(as_json);
  ASSERT_EQ(json.code, 0) << json.err;  // the whole stack over 64 devices fits a 144 MiB pool
  const auto j = nlohmann::json::parse(json.out);
  size_t marked = 0;
  for (const auto& c : j["tried"]) {
    if (!c["peak_approximate"].get<bool>()) continue;
    ++marked;
    EXPECT_FALSE(c["fits"].get<bool>()) << c.dump();
    EXPECT_GT(c["peak_at_least_bytes"].get<uint64_t>(), c["limit_bytes"].get<uint64_t>()) << c.dump();
  }
  EXPECT_GT(marked, 0u);
  EXPECT_EQ(j["programs_approximate"].get<size_t>(), marked);
  const auto text = testing::run_cli(fit);
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_NE(text.out.find(fmt::format("{} marked ~ (estimates)", marked)), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("  shapes     mixed precision (fp32 parameters, bf16 compute)      ~"),
            std::string::npos)
      << text.out;
}

// The step's peak in the program's own order bounds what XLA's memory scheduler keeps; a device whose pool
// lies between it and the predicted peak fits as predicted, but the plan says the order decides.
TEST(PlanCommand, SaysWhenOnlyThePredictedOrderFits) {
  const std::vector<std::string> step = {"plan", "--model", "gpt", "--remat", "full", "--donate", "--json"};
  const auto json = testing::run_cli(step);
  ASSERT_EQ(json.code, 0) << json.err;
  const auto j = nlohmann::json::parse(json.out);
  const uint64_t peak = j["peak_bytes"];
  const uint64_t upper = j["peak_upper_bytes"];
  ASSERT_GT(upper, peak + peak / 10);
  EXPECT_FALSE(j.contains("fits_in_every_order"));  // no device, no verdict
  auto with_pool = [&](uint64_t pool, bool json_out) {
    std::vector<std::string> args(step.begin(), step.end() - (json_out ? 0 : 1));
    args.insert(args.end(), {"--device", std::to_string(pool / 3 * 4)});  // the pool is 75% of it
    return testing::run_cli(args);
  };
  const auto between = with_pool(peak / 2 + upper / 2, true);
  ASSERT_EQ(between.code, 0) << between.err;
  const auto b = nlohmann::json::parse(between.out);
  EXPECT_TRUE(b["fits"].get<bool>());
  EXPECT_FALSE(b["fits_in_every_order"].get<bool>());
  EXPECT_NE(with_pool(peak / 2 + upper / 2, false).out.find("but not in every order XLA may pick"),
            std::string::npos);
  const auto above = with_pool(upper + upper / 10, true);
  ASSERT_EQ(above.code, 0) << above.err;
  EXPECT_TRUE(nlohmann::json::parse(above.out)["fits_in_every_order"].get<bool>());
  EXPECT_EQ(with_pool(upper + upper / 10, false).out.find("not in every order"), std::string::npos);
}

TEST(PlanCommand, SpecFileTakesProgramsJsonConfigsAndFlagsOverrideIt) {
  const auto path =
      std::filesystem::temp_directory_path() / ("memfit_spec_" + std::to_string(::getpid()) + ".json");
  std::ofstream(path)
      << R"({"name": "gpt_fp32_donate", "config": {"model": "gpt", "vocab": 32000, "d_model": 1024,
      "heads": 16, "layers": 8, "seq": 1024, "batch": 8, "donate": true}})";
  const auto as_is = testing::run_cli({"plan", path.string(), "--json"});
  ASSERT_EQ(as_is.code, 0) << as_is.err;
  const double peak = nlohmann::json::parse(as_is.out)["peak_bytes"].get<double>();
  EXPECT_NEAR(peak, 17778860544.0, 0.05 * 17778860544.0);  // measured on the H200
  const auto smaller = testing::run_cli({"plan", path.string(), "--batch", "4", "--json"});
  ASSERT_EQ(smaller.code, 0) << smaller.err;
  EXPECT_LT(nlohmann::json::parse(smaller.out)["peak_bytes"].get<double>(), peak);
  std::filesystem::remove(path);
}

// --attn cudnn: cuDNN's fused attention kernel holds no scores, so the step takes less than XLA's attention.
TEST(PlanCommand, AttnFlagChoosesTheFusedKernel) {
  const std::vector<std::string> args = {"plan",        "--model", "gpt",      "--layers", "2",
                                         "--precision", "mixed",   "--donate", "--json"};
  auto with = [&](const char* attn) {
    std::vector<std::string> a = args;
    a.insert(a.end(), {"--attn", attn});
    const auto run = testing::run_cli(a);
    EXPECT_EQ(run.code, 0) << run.err;
    return nlohmann::json::parse(run.out);
  };
  const auto xla = with("xla"), cudnn = with("cudnn");
  EXPECT_EQ(xla["spec"]["attn"], "xla");
  EXPECT_EQ(cudnn["spec"]["attn"], "cudnn");
  EXPECT_LT(cudnn["peak_bytes"].get<double>(), xla["peak_bytes"].get<double>());
}

TEST(PlanCommand, DoesNotFitExitsOneAndFitFindsTheCheapestChange) {
  const auto tight = testing::run_cli({"plan", "--model", "gpt", "--capacity", "16GiB"});
  EXPECT_EQ(tight.code, 1);
  EXPECT_NE(tight.out.find("does NOT fit"), std::string::npos);
  const auto fit = testing::run_cli({"fit", "--model", "gpt", "--capacity", "16GiB"});
  ASSERT_EQ(fit.code, 0) << fit.err;
  testing::expect_golden("fit_gpt_16gib.txt", fit.out);
  EXPECT_NE(fit.out.find("jax.checkpoint"), std::string::npos);
  EXPECT_NE(fit.out.find("donate parameters"), std::string::npos);  // tried first, does not fit alone
  EXPECT_NE(fit.out.find("optax.MultiSteps"), std::string::npos);
  EXPECT_NE(fit.out.find("NamedSharding"), std::string::npos);
  // The location step: tried, its PCIe traffic stated, and said to raise the device peak (XLA's
  // latency-hiding scheduler: plan/xla_gpu_model.h).
  EXPECT_NE(fit.out.find("location   offload saved activations"), std::string::npos);
  EXPECT_NE(fit.out.find("raises the device peak over remat dots_no_batch's"), std::string::npos);
  const auto offload = testing::run_cli(
      {"plan", "--model", "gpt", "--precision", "mixed", "--remat", "offload_dots_no_batch", "--donate"});
  ASSERT_EQ(offload.code, 0) << offload.err;
  EXPECT_NE(offload.out.find("pinned host memory:"), std::string::npos) << offload.out;
  EXPECT_NE(offload.out.find("caveat: this program copies values to the host"), std::string::npos)
      << offload.out;
}

// fit --json has ARCHITECTURE.md's keys: `fits` for the step as it is, `changes[]` (`change`, `peak_bytes`,
// `cost`) the changes that fit, cheapest first, each under the pool's limit; `tried[]` every change.
TEST(PlanCommand, FitJsonHasTheArchitecturesKeys) {
  const auto run = testing::run_cli({"fit", "--model", "gpt", "--capacity", "16GiB", "--json"});
  ASSERT_EQ(run.code, 0) << run.err;
  const auto j = nlohmann::json::parse(run.out);
  ASSERT_TRUE(j.contains("fits"));
  EXPECT_FALSE(j["fits"].get<bool>());  // the default GPT step needs more than 16 GiB
  ASSERT_TRUE(j["changes"].is_array());
  ASSERT_FALSE(j["changes"].empty());
  double last_cost = -1;
  for (const auto& c : j["changes"]) {
    ASSERT_TRUE(c.contains("change") && c.contains("peak_bytes") && c.contains("cost")) << c.dump();
    EXPECT_TRUE(c["fits"].get<bool>());
    EXPECT_LE(c["peak_bytes"].get<uint64_t>(), c["limit_bytes"].get<uint64_t>());
    EXPECT_GE(c["cost"].get<double>(), last_cost) << "cheapest first";
    last_cost = c["cost"].get<double>();
    // Whether it fits whatever order XLA keeps: its peak in the program's own order under the limit too.
    const uint64_t upper = c["peak_upper_bytes"];
    EXPECT_GE(upper, c["peak_bytes"].get<uint64_t>());
    EXPECT_EQ(c["fits_in_every_order"].get<bool>(), upper <= c["limit_bytes"].get<uint64_t>());
  }
  EXPECT_GT(j["tried"].size(), j["changes"].size());  // some of the seed's fixes do not fit alone
  // jax.checkpoint's recomputation, written where the backward pass needs it, can hold far more than it
  // saves: at batch 16, full remat needs 7.5 GiB in the list order and 16.9 GiB in the program's own.
  const auto wide =
      testing::run_cli({"fit", "--model", "gpt", "--batch", "16", "--capacity", "16GiB", "--json"});
  ASSERT_EQ(wide.code, 0) << wide.err;
  const auto w = nlohmann::json::parse(wide.out);
  EXPECT_TRUE(std::any_of(w["changes"].begin(), w["changes"].end(), [](const auto& c) {
    return c["change"] == "remat full" && !c["fits_in_every_order"].template get<bool>();
  })) << wide.out;
  const auto roomy = testing::run_cli({"fit", "--model", "mlp", "--capacity", "h200", "--json"});
  ASSERT_EQ(roomy.code, 0) << roomy.err;
  EXPECT_TRUE(nlohmann::json::parse(roomy.out)["fits"].get<bool>());
}

// When no change fits alone, fit's answer is a combination: exit 0, its change names every change it stacks
// and its code is one line each (text: indented under it); when even that does not fit, exit 1.
TEST(PlanCommand, FitOffersACombinationWhenNoChangeFitsAlone) {
  const auto run =
      testing::run_cli({"fit", "--model", "gpt", "--layers", "4", "--capacity", "1GiB", "--json"});
  ASSERT_EQ(run.code, 0) << run.err;
  const auto j = nlohmann::json::parse(run.out);
  ASSERT_FALSE(j["changes"].empty());
  const auto& best = j["changes"][0];
  EXPECT_EQ(best["step"], "combined");
  EXPECT_EQ(best["change"],
            "donation + mixed precision + remat full + cuDNN fused attention + FSDP over 8 devices");
  EXPECT_NE(best["code"].get<std::string>().find("donate_argnums=(0, 1))\nx @ W.astype"), std::string::npos);
  const auto text = testing::run_cli({"fit", "--model", "gpt", "--layers", "4", "--capacity", "1GiB"});
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_NE(text.out.find("donate_argnums=(0, 1))\n       x @ W.astype"), std::string::npos) << text.out;
  const auto hopeless = testing::run_cli({"fit", "--model", "gpt", "--layers", "4", "--capacity", "64MiB"});
  EXPECT_EQ(hopeless.code, 1) << hopeless.err;
  EXPECT_NE(hopeless.out.find("no change fits, alone or stacked"), std::string::npos) << hopeless.out;
}

// fit --largest: the largest batch or seq that fits, in text and JSON; exit 1 when none does, 2 for a key
// the model has not.
TEST(PlanCommand, FitLargestFindsTheBiggestBatch) {
  const std::vector<std::string> base = {"fit",      "--model", "gpt",   "--step", "decode",
                                         "--layers", "4",       "--seq", "4096",   "--d-model",
                                         "1024",     "--heads", "16"};
  auto with = [&](std::vector<std::string> extra, const char* capacity = "2GiB") {
    std::vector<std::string> args = base;
    args.insert(args.end(), {"--capacity", capacity});
    args.insert(args.end(), extra.begin(), extra.end());
    return testing::run_cli(args);
  };
  const auto json = with({"--largest", "batch", "--json"});
  ASSERT_EQ(json.code, 0) << json.err;
  const auto j = nlohmann::json::parse(json.out);
  EXPECT_TRUE(j["fits"].get<bool>());
  const auto& l = j["largest"];
  EXPECT_EQ(l["key"], "batch");
  EXPECT_GT(l["value"].get<uint64_t>(), 1u);
  EXPECT_LE(l["peak_bytes"].get<uint64_t>(), l["limit_bytes"].get<uint64_t>());
  EXPECT_GT(l["next_peak_bytes"].get<uint64_t>(), l["limit_bytes"].get<uint64_t>());
  const auto text = with({"--largest", "batch"});
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_NE(text.out.find("the largest batch that fits"), std::string::npos) << text.out;
  EXPECT_EQ(with({"--largest", "seq"}, "64MiB").code, 1);
  const auto unknown = with({"--largest", "depth"});
  EXPECT_EQ(unknown.code, 2);
  EXPECT_NE(unknown.err.find("--largest depth: not a size fit can search (batch, or seq"), std::string::npos)
      << unknown.err;
}

// --trace-out: the step's plan as a memfit trace; memfit replay runs it through the allocator policies, its
// live bytes the plan's no-fragmentation bound and each pool at least that.
TEST(PlanCommand, TraceOutReplaysTheStep) {
  const auto trace =
      std::filesystem::temp_directory_path() / ("memfit_step_trace_" + std::to_string(::getpid()) + ".csv");
  const auto plan = testing::run_cli(
      {"plan", "--model", "gpt", "--layers", "2", "--donate", "--json", "--trace-out", trace.string()});
  ASSERT_EQ(plan.code, 0) << plan.err;
  const auto p = nlohmann::json::parse(plan.out);
  EXPECT_LE(p["lower_bound_bytes"].get<uint64_t>(), p["peak_bytes"].get<uint64_t>());
  testing::expect_replay_reaches_bound(trace.string(), p["lower_bound_bytes"].get<uint64_t>());
  std::filesystem::remove(trace);
}

TEST(PlanCommand, NonsenseExitsTwoWithAReason) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"plan", "--model", "gpt", "--heads", "7"}, "heads"},
      {{"plan", "--model", "gpt", "--remat", "sometimes"}, "remat"},
      {{"plan", "--model", "gpt", "--attn", "flash"}, "attn"},
      {{"plan", "--model", "gpt", "--layers", "-3"}, "layers"},
      // Beyond 64 bits, or not a number: the key is named, nothing is clamped to a number never given.
      {{"plan", "--model", "gpt", "--batch", "18446744073709551616"}, "batch: expected a positive integer"},
      {{"plan", "--model", "gpt", "--layers", "1e3"}, "layers: expected a positive integer"},
      {{"plan", "--model", "gpt", "--d-ff", "302", "--step", "decode", "--sharding", "tp", "--mesh",
        "model=4"},
       "d_ff"},
      {{"plan", "--model", "gpt", "--mesh", "data=x"}, "mesh"},
      {{"plan", "--model", "gpt", "--sharding", "fsdp"}, "mesh"},
      {{"plan", "/nonexistent/spec.json"}, "spec.json"},
      {{"fit", "--model", "gpt"}, "--capacity"},
      {{"plan", "--model", "gpt", "--capacity", "lots"}, "--capacity"},
      // An unsigned option would read -1 as 2^64 - 1.
      {{"hlo", "--top", "-1", "step.hlo"}, "--top"},
      {{"profile", "--top", "18446744073709551616", "memory.prof"}, "--top"},
  };
  for (const auto& [args, reason] : cases) {
    const auto run = testing::run_cli(args);
    EXPECT_EQ(run.code, 2) << args[2];
    EXPECT_TRUE(run.out.empty());
    EXPECT_NE(run.err.find(reason), std::string::npos) << run.err;
  }
}

// The pool's share of the device: --mem-fraction, else the XLA variables in force, as `memfit hlo --capacity`
// reads them (exported XLA_CLIENT_MEM_FRACTION=0.5 made hlo say 50% and plan 75%).
TEST(PlanCommand, ThePoolFractionIsTheFlagElseTheXlaVariablesInForce) {
  using Vars = std::map<std::string, std::string, std::less<>>;
  const Environment half(Vars{{"XLA_CLIENT_MEM_FRACTION", "0.5"}});
  auto fraction_of = [](const testing::CliRun& run) {
    EXPECT_EQ(run.code, 0) << run.err;
    return nlohmann::json::parse(run.out)["memory_fraction"].get<double>();
  };
  EXPECT_DOUBLE_EQ(fraction_of(testing::run_cli({"plan", "--model", "mlp", "--device", "h200", "--json"})),
                   0.75);
  EXPECT_DOUBLE_EQ(
      fraction_of(testing::run_cli({"plan", "--model", "mlp", "--device", "h200", "--json"}, half)), 0.5);
  EXPECT_DOUBLE_EQ(
      fraction_of(testing::run_cli(
          {"plan", "--model", "mlp", "--device", "h200", "--mem-fraction", "0.9", "--json"}, half)),
      0.9);
  // The same pool as memfit hlo's under the same variables.
  const auto planned = testing::run_cli({"plan", "--model", "mlp", "--device", "h200", "--json"}, half);
  const auto env = testing::run_cli({"env", "--capacity", "h200", "--json"}, half);
  ASSERT_EQ(env.code, 0) << env.err;
  EXPECT_EQ(nlohmann::json::parse(planned.out)["limit_bytes"], nlohmann::json::parse(env.out)["limit_bytes"]);
  // A fit's pool too; and a variable JAX cannot read is refused, as hlo refuses it.
  const auto fit = testing::run_cli({"fit", "--model", "mlp", "--capacity", "4GiB"}, half);
  EXPECT_NE(fit.out.find("(50% of 4.00GiB)"), std::string::npos) << fit.out;
  const auto bad = testing::run_cli({"plan", "--model", "mlp", "--device", "h200"},
                                    Environment(Vars{{"XLA_CLIENT_MEM_FRACTION", "abc"}}));
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("XLA_CLIENT_MEM_FRACTION='abc'"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace memfit::cli
