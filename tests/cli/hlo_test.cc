// `memfit hlo`: golden table and JSON on a real program, dump folders, and bad input.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli_runner.h"
#include "golden.h"
#include "memfit/core/file_io.h"
#include "trace_out.h"

namespace memfit::cli {
namespace {

const std::string kData = std::string(MEMFIT_TEST_DATA_DIR) + "/xla/";

// Output names the file it read; make it independent of where the checkout is.
std::string relative_paths(std::string s) {
  for (size_t at = s.find(kData); at != std::string::npos; at = s.find(kData))
    s.replace(at, kData.size(), "xla/");
  return s;
}

// A dump folder with XLA's buffer assignment beside the module: XLA's figures next to memfit's, and what
// differs named.
TEST(HloCommand, DumpFolderWithXlasBufferAssignment) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("memfit-dump-ba-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string stem = "module_0042.jit_step.sm_90_gpu_after_optimizations";
  fs::copy_file(kData + "gpt_fp32_donate.hlo.txt.gz", dir / (stem + ".txt.gz"),
                fs::copy_options::overwrite_existing);
  fs::copy_file(kData + "gpt_fp32_donate.buffer-assignment.txt.gz",
                dir / (stem + "-buffer-assignment.txt.gz"), fs::copy_options::overwrite_existing);
  const auto json = testing::run_cli({"hlo", dir.string(), "--json"});
  ASSERT_EQ(json.code, 0) << json.err;
  const auto j = nlohmann::json::parse(json.out);
  ASSERT_TRUE(j.contains("xla_buffer_assignment")) << json.out.substr(0, 500);
  const auto& x = j["xla_buffer_assignment"];
  EXPECT_EQ(x["temp_bytes"].get<uint64_t>(), 16131614744ull);  // memory_analysis() of this compile
  EXPECT_EQ(x["argument_bytes"], j["argument_bytes"]);
  EXPECT_EQ(x["alias_bytes"], j["alias_bytes"]);
  EXPECT_EQ(x["largest_temp_values"].size(), 10u);
  // memfit's temp is within 0.01% of XLA's here; the difference is named, value by value.
  ASSERT_EQ(x["differences"].size(), 1u) << x.dump();
  const std::string d = x["differences"][0];
  EXPECT_EQ(d.rfind("temp: memfit ", 0), 0u) << d;
  EXPECT_NE(d.find("in XLA's temp, not memfit's: "), std::string::npos) << d;
  const auto table = testing::run_cli({"hlo", dir.string()});
  ASSERT_EQ(table.code, 0);
  EXPECT_NE(table.out.find("XLA's own buffer assignment"), std::string::npos);
  EXPECT_NE(table.out.find("argument          1614733316      1614733316  same"), std::string::npos)
      << table.out;
  // A broken dump is exit 2 naming the file.
  { std::ofstream(dir / (stem + "-buffer-assignment.txt.gz"), std::ios::trunc) << "not a dump\n"; }
  const auto broken = testing::run_cli({"hlo", dir.string()});
  EXPECT_EQ(broken.code, 2);
  EXPECT_NE(broken.err.find("buffer-assignment"), std::string::npos) << broken.err;
  fs::remove_all(dir);
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

// A program before partitioning, sharded over 8 devices: memfit says it plans it whole (one device running
// all of it), in the table and as `partitions` in the JSON; an unsharded one says nothing of the kind.
TEST(HloCommand, SaysWhenALoweredProgramIsShardedOverDevices) {
  for (const char* file : {"cpu8_gpt_fsdp8.lowered.hlo.txt.gz", "cpu8_gpt_fsdp8.stablehlo.mlir.gz"}) {
    SCOPED_TRACE(file);
    const auto table = testing::run_cli({"hlo", kData + file});
    ASSERT_EQ(table.code, 0) << table.err;
    EXPECT_NE(table.out.find("sharded over 8 devices"), std::string::npos) << table.out;
    const auto json = testing::run_cli({"hlo", kData + file, "--json"});
    ASSERT_EQ(json.code, 0) << json.err;
    EXPECT_EQ(nlohmann::json::parse(json.out)["partitions"], 8);
  }
  const auto single = testing::run_cli({"hlo", kData + "gpt_fp32.lowered.hlo.txt.gz", "--json"});
  ASSERT_EQ(single.code, 0) << single.err;
  EXPECT_FALSE(nlohmann::json::parse(single.out).contains("partitions"));
}

// A sharded program is planned as each device's share (memfit partitions it as XLA's SPMD partitioner
// would), so --capacity is decided for one device: the FSDP step fits a card of twice its per-device peak and
// not one of half of it, though one device running all of it would need several times more.
TEST(HloCommand, AShardedProgramsCapacityVerdictIsEachDevices) {
  const std::string file = kData + "cpu8_gpt_fsdp8.stablehlo.mlir.gz";
  const auto json = testing::run_cli({"hlo", file, "--json"});
  ASSERT_EQ(json.code, 0) << json.err;
  const auto j = nlohmann::json::parse(json.out);
  EXPECT_EQ(j["partitions"], 8);
  EXPECT_TRUE(j["partitioned"].get<bool>());
  const uint64_t per_device = j["peak_bytes"];
  // Each device's arguments: the compiled per-device module's, to the byte.
  const auto compiled = testing::run_cli({"hlo", kData + "cpu8_gpt_fsdp8.hlo.txt.gz", "--json"});
  ASSERT_EQ(compiled.code, 0) << compiled.err;
  EXPECT_EQ(j["argument_bytes"], nlohmann::json::parse(compiled.out)["argument_bytes"]);
  struct Case {
    uint64_t capacity;
    int code;
    const char* says;
  };
  // --capacity B in bytes is the device; the pool is 75% of it (XLA_PYTHON_CLIENT_MEM_FRACTION's default).
  for (const Case& c : {Case{per_device * 2, 0, "the program fits on each device"},
                        Case{per_device / 2, 1, "the program does NOT fit on each device"}}) {
    SCOPED_TRACE(c.says);
    const auto table = testing::run_cli({"hlo", file, "--capacity", std::to_string(c.capacity)});
    EXPECT_EQ(table.code, c.code) << table.err;
    EXPECT_NE(table.out.find(c.says), std::string::npos) << table.out;
    EXPECT_NE(table.out.find("every figure below is one device's"), std::string::npos) << table.out;
    const auto verdict = testing::run_cli({"hlo", file, "--capacity", std::to_string(c.capacity), "--json"});
    EXPECT_EQ(nlohmann::json::parse(verdict.out)["fits"], c.code == 0);
  }
}

// A program before optimization is planned in the order memfit predicts XLA picks, and also in the
// program's own order, the most XLA's memory scheduler keeps: --capacity between the two fits as predicted
// but says the order decides ("fits_in_every_order": false, still exit 0); above both it simply fits; below
// the prediction it does not (exit 1). A compiled module has one order: its upper figures are its own.
TEST(HloCommand, ALoweredProgramsVerdictSaysWhenTheOrderDecides) {
  const std::string file = kData + "gpt_fp32_donate_remat_full.lowered.hlo.txt.gz";
  const auto json = testing::run_cli({"hlo", file, "--json"});
  ASSERT_EQ(json.code, 0) << json.err;
  const auto j = nlohmann::json::parse(json.out);
  const uint64_t peak = j["peak_bytes"];
  const uint64_t upper = j["peak_upper_bytes"];
  ASSERT_GT(upper, peak + peak / 10);  // jax.checkpoint's recomputation, run where written, holds far more
  EXPECT_EQ(upper - peak, j["temp_upper_bytes"].get<uint64_t>() - j["temp_bytes"].get<uint64_t>());
  const auto table = testing::run_cli({"hlo", file});
  EXPECT_NE(table.out.find("at most"), std::string::npos) << table.out;
  struct Case {
    uint64_t pool;  // the pool wanted: --capacity is the device, the pool about 75% of it
    int code;
    bool fits;
    bool says_order;
  };
  for (const Case& c : {Case{peak / 2 + upper / 2, 0, true, true}, Case{upper + upper / 10, 0, true, false},
                        Case{peak - peak / 10, 1, false, false}}) {
    SCOPED_TRACE(c.pool);
    const std::string capacity = std::to_string(c.pool / 3 * 4);
    const auto verdict = testing::run_cli({"hlo", file, "--capacity", capacity, "--json"});
    EXPECT_EQ(verdict.code, c.code) << verdict.err;
    const auto v = nlohmann::json::parse(verdict.out);
    EXPECT_EQ(v["fits"], c.fits);
    if (c.fits) {
      EXPECT_EQ(v["fits_in_every_order"], !c.says_order) << "limit " << v["limit_bytes"];
    } else {
      EXPECT_FALSE(v.contains("fits_in_every_order"));
    }
    const auto text = testing::run_cli({"hlo", file, "--capacity", capacity});
    EXPECT_EQ(text.code, c.code);
    EXPECT_EQ(text.out.find("but not in every order XLA may pick") != std::string::npos, c.says_order)
        << text.out;
  }
  const auto compiled = testing::run_cli({"hlo", kData + "gpt_fp32.hlo.txt.gz", "--json"});
  ASSERT_EQ(compiled.code, 0) << compiled.err;
  const auto o = nlohmann::json::parse(compiled.out);
  EXPECT_EQ(o["peak_upper_bytes"], o["peak_bytes"]);
  // The HTML timeline draws it as a line beside the peak's; a compiled module's has none.
  const auto html = std::filesystem::temp_directory_path() / ("memfit-range-" + std::to_string(::getpid()));
  for (const auto& [program, drawn] :
       {std::pair{file, true}, std::pair{kData + "gpt_fp32.hlo.txt.gz", false}}) {
    ASSERT_EQ(testing::run_cli({"hlo", program, "--html", html.string()}).code, 0);
    auto page = read_file(html.string());
    ASSERT_TRUE(page.ok());
    EXPECT_EQ(page->find("at most (the program's own order)") != std::string::npos, drawn) << program;
  }
  std::filesystem::remove(html);
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

// --trace-out writes the plan as a memfit trace: memfit replay runs the planned program through the
// allocator policies, and its live bytes are the plan's no-fragmentation bound.
TEST(HloCommand, TraceOutReplaysThePlannedProgram) {
  const auto trace =
      std::filesystem::temp_directory_path() / ("memfit_plan_trace_" + std::to_string(::getpid()) + ".csv");
  const auto hlo = testing::run_cli(
      {"hlo", kData + "gpt_fp32_donate.lowered.hlo.txt.gz", "--json", "--trace-out", trace.string()});
  ASSERT_EQ(hlo.code, 0) << hlo.err;
  testing::expect_replay_reaches_bound(trace.string(),
                                       nlohmann::json::parse(hlo.out)["lower_bound_bytes"].get<uint64_t>());
  // A folder that does not exist: exit 2, nothing written.
  const auto bad =
      testing::run_cli({"hlo", kData + "mlp_fp32.hlo.txt.gz", "--trace-out", "/nonexistent/dir/t.csv"});
  EXPECT_EQ(bad.code, 2);
  std::filesystem::remove(trace);
}

// An option that only qualifies another is refused alone, exit 2 naming both, rather than ignored:
// `--buffers` without `--json` printed the table without a buffer, `--profile-device` without a profile
// nothing of it, `plan --mem-fraction` without a device no pool.
TEST(HloCommand, AnOptionThatQualifiesAnotherIsRefusedAlone) {
  const std::string program = kData + "gpt_fp32_donate.lowered.hlo.txt.gz";
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"hlo", program, "--buffers"}, "--buffers requires --json"},
      {{"hlo", program, "--profile-device", "cuda:0"}, "--profile-device requires --live-profile"},
      {{"plan", "--model", "gpt", "--profile-device", "cuda:0"}, "--profile-device requires --live-profile"},
      {{"plan", "--model", "gpt", "--mem-fraction", "0.9"}, "give --capacity or --device"},
      {{"fit", "--model", "gpt", "--mem-fraction", "0.9"}, "give --capacity or --device"},
  };
  for (const auto& [args, expect] : cases) {
    SCOPED_TRACE(fmt::format("{}", fmt::join(args, " ")));
    const auto run = testing::run_cli(args);
    EXPECT_EQ(run.code, 2);
    EXPECT_TRUE(run.out.empty());
    EXPECT_NE(run.err.find(expect), std::string::npos) << run.err;
  }
  // Given together they run.
  const auto together = testing::run_cli({"hlo", program, "--buffers", "--json"});
  EXPECT_EQ(together.code, 0) << together.err;
  EXPECT_NE(together.out.find("\"buffers\""), std::string::npos);
  const auto pooled =
      testing::run_cli({"plan", "--model", "gpt", "--mem-fraction", "0.9", "--device", "h200"});
  EXPECT_EQ(pooled.code, 0) << pooled.err;
  EXPECT_NE(pooled.out.find("XLA's pool 90% of it"), std::string::npos) << pooled.out;
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
