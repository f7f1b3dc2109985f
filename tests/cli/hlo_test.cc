// `memfit hlo`: golden table and JSON on a real program, dump folders, and bad input.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli_runner.h"
#include "golden.h"
#include "memfit/core/file_io.h"

namespace memfit::cli {
namespace {

const std::string kData = std::string(MEMFIT_TEST_DATA_DIR) + "/xla/";

// Output names the file it read; make it independent of where the checkout is.
std::string relative_paths(std::string s) {
  for (size_t at = s.find(kData); at != std::string::npos; at = s.find(kData))
    s.replace(at, kData.size(), "xla/");
  return s;
}

TEST(HloCommand, GoldenTableAndJson) {
  for (const char* program : {"mlp_fp32_donate_remat_full", "gpt_fp32_donate"}) {
    SCOPED_TRACE(program);
    const auto table = testing::run_cli({"hlo", kData + program + ".hlo.txt.gz"});
    ASSERT_EQ(table.code, 0) << table.err;
    testing::expect_golden(std::string("hlo_") + program + ".txt", relative_paths(table.out));
    const auto json = testing::run_cli({"hlo", kData + program + ".hlo.txt.gz", "--json", "--top", "5"});
    ASSERT_EQ(json.code, 0) << json.err;
    testing::expect_golden(std::string("hlo_") + program + ".json", relative_paths(json.out));
    const auto j = nlohmann::json::parse(json.out);
    for (const char* key : {"module", "argument_bytes", "output_bytes", "alias_bytes", "temp_bytes",
                            "peak_bytes", "lower_bound_bytes", "top_buffers"})
      EXPECT_TRUE(j.contains(key)) << key;
    EXPECT_GE(j["groups_at_peak"].size(), 1u);
    EXPECT_LE(j["groups_at_peak"].size(), 5u);
    for (const auto& b : j["top_buffers"]) {
      for (const char* key : {"name", "bytes", "shape", "op_name"}) EXPECT_TRUE(b.contains(key)) << key;
    }
  }
}

TEST(HloCommand, DumpFolderPicksTheLargestModuleOrTheNamedOne) {
  const auto dir = std::filesystem::temp_directory_path() / ("memfit_dump_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto big = read_file(kData + "mlp_fp32.hlo.txt.gz");
  auto small = read_file(kData + "mlp_fp32_donate_remat_full.hlo.txt.gz");
  ASSERT_TRUE(big.ok() && small.ok());
  // The remat module text is the larger of the two: rename so the names say which is which.
  std::ofstream(dir / "module_0007.jit_step.sm_90_gpu_after_optimizations.txt") << *small;
  std::ofstream(dir / "module_0003.jit_init.sm_90_gpu_after_optimizations.txt") << *big;
  std::ofstream(dir / "module_0007.jit_step.sm_90_gpu_before_optimizations.txt") << "not read";
  const auto largest = testing::run_cli({"hlo", dir.string(), "--json"});
  ASSERT_EQ(largest.code, 0) << largest.err;
  EXPECT_NE(largest.out.find("jit_step.sm_90_gpu_after_optimizations"), std::string::npos);
  const auto named = testing::run_cli({"hlo", dir.string(), "--module", "jit_init", "--json"});
  ASSERT_EQ(named.code, 0) << named.err;
  const double temp = nlohmann::json::parse(named.out)["temp_bytes"].get<double>();
  EXPECT_NEAR(temp, 100672536.0, 0.01 * 100672536.0);  // mlp_fp32: XLA's temp_size_in_bytes
  const auto none = testing::run_cli({"hlo", dir.string(), "--module", "jit_train"});
  EXPECT_EQ(none.code, 2);
  EXPECT_NE(none.err.find("jit_init"), std::string::npos) << none.err;  // lists what there is
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const auto empty = testing::run_cli({"hlo", dir.string()});
  EXPECT_EQ(empty.code, 2);
  EXPECT_NE(empty.err.find("--xla_dump_to"), std::string::npos) << empty.err;
  std::filesystem::remove_all(dir);
}

TEST(HloCommand, TruncatedOrMalformedHloExitsTwoNamingTheLine) {
  auto text = read_file(kData + "gpt_fp32_donate.hlo.txt.gz");
  ASSERT_TRUE(text.ok());
  const auto dir = std::filesystem::temp_directory_path();
  struct Case {
    std::string name;
    std::string text;
    std::string expect;
  };
  const size_t cut = text->find('\n', text->size() / 2);
  const size_t lines_before_cut = static_cast<size_t>(std::count(text->begin(), text->begin() + cut, '\n'));
  const std::vector<Case> cases = {
      {"truncated", text->substr(0, cut), "truncated"},
      {"garbage", "this is not HLO\n", "line 1"},
      {"bad_shape", "HloModule m\n\nENTRY %e () -> f32[] {\n  ROOT %c = f99[] constant(1)\n}\n", "line 4"},
      {"overflow",
       "HloModule m\n\nENTRY %e () -> f32[] {\n  ROOT %c = f32[99999999999,99999999999] constant(1)\n}\n",
       "line 4"},
      {"undefined",
       "HloModule m\n\nENTRY %e (p: f32[2]) -> f32[2] {\n  %p = f32[2] parameter(0)\n  ROOT %a = f32[2] "
       "add(%p, %nope)\n}\n",
       "line 5"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string path = (dir / ("memfit_bad_" + c.name + ".hlo")).string();
    std::ofstream(path) << c.text;
    const auto run = testing::run_cli({"hlo", path});
    EXPECT_EQ(run.code, 2);
    EXPECT_TRUE(run.out.empty());
    EXPECT_NE(run.err.find(c.expect), std::string::npos) << run.err;
    EXPECT_EQ(std::count(run.err.begin(), run.err.end(), '\n'), 1) << run.err;
    std::filesystem::remove(path);
  }
  EXPECT_GT(lines_before_cut, 100u);
}

}  // namespace
}  // namespace memfit::cli
