// `memfit profile` and --live-profile on profiles made with the protobuf library
// (tests/trace/profile_writer.h).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli_runner.h"
#include "memfit/core/bytes.h"
#include "profile_writer.h"

namespace memfit::cli {
namespace {

namespace fs = std::filesystem;
using memfit::testing::ProfileWriter;

struct Files {
  fs::path dir = fs::temp_directory_path() / ("memfit-profile-" + std::to_string(::getpid()));
  Files() { fs::create_directories(dir); }
  ~Files() { fs::remove_all(dir); }
  std::string write(const std::string& name, const std::string& bytes) {
    const fs::path p = dir / name;
    std::ofstream(p, std::ios::binary) << bytes;
    return p.string();
  }
};

TEST(ProfileCommand, DevicesSitesAndWhatGrew) {
  Files files;
  ProfileWriter before = memfit::testing::ten_gib_array();
  ProfileWriter after = memfit::testing::ten_gib_array();
  const uint64_t leak = after.frame("cache_activations", "train.py", 40);
  after.sample({leak}, 2, 3ll << 30, "buffer", "cuda:0");
  const std::string base = files.write("step1.prof", before.saved());
  const std::string now = files.write("step2.prof", after.saved());

  const auto r = testing::run_cli({"profile", base, "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  bool found = false;
  for (const auto& d : j["devices"]) {
    if (d["device"] != "cuda:0") continue;
    found = true;
    EXPECT_EQ(d["buffer_bytes"].get<uint64_t>(), 10ull << 30);
  }
  EXPECT_TRUE(found) << r.out;
  EXPECT_EQ(j["executable_bytes"].get<uint64_t>(), 1u << 20);
  EXPECT_EQ(j["sites"][0]["frames"][0], "init_params (model.py:12)");

  const auto diff = testing::run_cli({"profile", now, "--diff", base, "--json"});
  ASSERT_EQ(diff.code, 0) << diff.err;
  const auto d = nlohmann::json::parse(diff.out)["diff"];
  EXPECT_EQ(d["buffer_delta_bytes"].get<int64_t>(), 3ll << 30);
  EXPECT_EQ(d["grown"][0]["frames"][0], "cache_activations (train.py:40)");
  const auto table = testing::run_cli({"profile", now, "--diff", base});
  ASSERT_EQ(table.code, 0);
  EXPECT_NE(table.out.find("grew    3.00GiB"), std::string::npos) << table.out;

  const auto bad = testing::run_cli({"profile", files.write("bad.prof", "\x1f\x8b garbage")});
  EXPECT_EQ(bad.code, 2);
  EXPECT_TRUE(bad.out.empty());
}

// The next step of gpt_fp32_donate (peak 17.75 GB, 1.6 GB of arguments) in a process already holding 10 GiB
// on cuda:0: fits an H200's default pool, not an 18 GiB one.
TEST(ProfileCommand, LiveProfileSaysWhetherTheNextStepFits) {
  Files files;
  const std::string prof = files.write("live.prof", memfit::testing::ten_gib_array().saved());
  const std::string hlo = std::string(MEMFIT_TEST_DATA_DIR) + "/xla/gpt_fp32_donate.hlo.txt.gz";
  const auto fits = testing::run_cli({"hlo", hlo, "--capacity", "h200", "--live-profile", prof, "--json"});
  ASSERT_EQ(fits.code, 0) << fits.err;
  const auto j = nlohmann::json::parse(fits.out);
  const auto& live = j["live_profile"];
  EXPECT_EQ(live["device"], "cuda:0");
  EXPECT_EQ(live["live_buffer_bytes"].get<uint64_t>(), 10ull << 30);
  const uint64_t peak = j["peak_bytes"].get<uint64_t>();
  const uint64_t args = j["argument_bytes"].get<uint64_t>();
  EXPECT_EQ(live["needed_bytes"].get<uint64_t>(), (10ull << 30) + peak - args);
  EXPECT_TRUE(live["fits"].get<bool>());
  // A compiled module has one order: the most it needs is what it needs.
  EXPECT_EQ(live["needed_upper_bytes"], live["needed_bytes"]);
  EXPECT_TRUE(live["fits_in_every_order"].get<bool>());
  {
    // A program before optimization with full remat, whose own order holds far more than the predicted
    // one: a pool between the two fits as predicted, and the verdict says the order decides.
    const std::string lowered =
        std::string(MEMFIT_TEST_DATA_DIR) + "/xla/gpt_fp32_donate_remat_full.lowered.hlo.txt.gz";
    const auto r = testing::run_cli({"hlo", lowered, "--live-profile", prof, "--json"});
    ASSERT_EQ(r.code, 0) << r.err;
    const auto k = nlohmann::json::parse(r.out);
    const uint64_t needed = k["live_profile"]["needed_bytes"];
    const uint64_t needed_upper = k["live_profile"]["needed_upper_bytes"];
    EXPECT_EQ(needed_upper - needed, k["peak_upper_bytes"].get<uint64_t>() - k["peak_bytes"].get<uint64_t>());
    ASSERT_GT(needed_upper, needed + needed / 10);
    const std::string capacity = std::to_string((needed / 2 + needed_upper / 2) / 3 * 4);  // pool: 75%
    const auto between = testing::run_cli({"hlo", lowered, "--capacity", capacity, "--live-profile", prof});
    EXPECT_EQ(between.code, 0) << between.err;
    EXPECT_NE(between.out.find("the next step fits"), std::string::npos) << between.out;
    EXPECT_NE(between.out.find("but not in every order XLA may pick"), std::string::npos) << between.out;
    const auto v = nlohmann::json::parse(
        testing::run_cli({"hlo", lowered, "--capacity", capacity, "--live-profile", prof, "--json"}).out);
    EXPECT_TRUE(v["live_profile"]["fits"].get<bool>());
    EXPECT_FALSE(v["live_profile"]["fits_in_every_order"].get<bool>());
  }
  const auto tight = testing::run_cli({"hlo", hlo, "--capacity", "24GiB", "--live-profile", prof});
  EXPECT_EQ(tight.code, 1) << tight.out;  // 75% of 24 GiB = 18 GiB < 10 GiB + the step's 16 GB
  EXPECT_NE(tight.out.find("the next step does NOT fit"), std::string::npos) << tight.out;
  const auto plan =
      testing::run_cli({"plan", "--model", "gpt", "--device", "h200", "--live-profile", prof, "--json"});
  ASSERT_LE(plan.code, 1) << plan.err;
  EXPECT_TRUE(nlohmann::json::parse(plan.out).contains("live_profile"));
  // A sharded program: the step is one device's share (partitioned), and the table says so - its peak and
  // arguments those of `memfit hlo --json`, each device's.
  const std::string sharded_program =
      std::string(MEMFIT_TEST_DATA_DIR) + "/xla/cpu8_gpt_fsdp8.stablehlo.mlir.gz";
  const auto sharded = testing::run_cli({"hlo", sharded_program, "--live-profile", prof});
  ASSERT_EQ(sharded.code, 0) << sharded.err;
  EXPECT_NE(sharded.out.find("every figure below is one device's"), std::string::npos) << sharded.out;
  const auto per_device = nlohmann::json::parse(testing::run_cli({"hlo", sharded_program, "--json"}).out);
  EXPECT_NE(sharded.out.find(fmt::format("the step's peak {} with its {} of arguments",
                                         format_bytes(per_device["peak_bytes"].get<uint64_t>()),
                                         format_bytes(per_device["argument_bytes"].get<uint64_t>()))),
            std::string::npos)
      << sharded.out;
  const auto no_device = testing::run_cli({"hlo", hlo, "--live-profile", prof, "--profile-device", "cuda:7"});
  EXPECT_EQ(no_device.code, 2);
  EXPECT_NE(no_device.err.find("no device 'cuda:7'"), std::string::npos) << no_device.err;
}

}  // namespace
}  // namespace memfit::cli
