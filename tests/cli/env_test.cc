// Golden tests of `memfit env` in every mode of ../shared/FACTS.md §1, table and JSON.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "cli_runner.h"
#include "golden.h"

namespace memfit::cli {
namespace {

using testing::CliRun;

CliRun run_env(std::map<std::string, std::string, std::less<>> vars, std::vector<std::string> args) {
  args.insert(args.begin(), "env");
  return testing::run_cli(args, Environment(std::move(vars)));
}

struct Mode {
  const char* name;
  std::map<std::string, std::string, std::less<>> vars;
};

const Mode kModes[] = {
    {"default", {}},
    {"preallocate_false", {{"XLA_PYTHON_CLIENT_PREALLOCATE", "false"}}},
    {"fraction_030_deprecated", {{"XLA_PYTHON_CLIENT_MEM_FRACTION", "0.30"}}},
    {"fraction_045", {{"XLA_CLIENT_MEM_FRACTION", "0.45"}}},
    {"platform", {{"XLA_PYTHON_CLIENT_ALLOCATOR", "platform"}}},
    {"cuda_async", {{"XLA_PYTHON_CLIENT_ALLOCATOR", "cuda_async"}}},
    {"tf_gpu_allocator", {{"TF_GPU_ALLOCATOR", "cuda_malloc_async"}}},
    {"vmm", {{"XLA_PYTHON_CLIENT_ALLOCATOR", "vmm"}}},
    {"preallocate_upper_false", {{"XLA_PYTHON_CLIENT_PREALLOCATE", "FALSE"}}},
};

TEST(EnvCommand, GoldenTablesAndJsonForEveryMode) {
  for (const Mode& mode : kModes) {
    SCOPED_TRACE(mode.name);
    CliRun table = run_env(mode.vars, {"--capacity", "150109880320"});
    EXPECT_EQ(table.code, 0);
    EXPECT_EQ(table.err, "");
    testing::expect_golden(std::string("env_") + mode.name + ".txt", table.out);
    CliRun json = run_env(mode.vars, {"--capacity", "h200", "--json"});
    EXPECT_EQ(json.code, 0);
    testing::expect_golden(std::string("env_") + mode.name + ".json", json.out);
  }
}

TEST(EnvCommand, JsonHasTheContractFields) {
  CliRun r = run_env({}, {"--capacity", "150109880320", "--json"});
  ASSERT_EQ(r.code, 0);
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["allocator"], "bfc");
  EXPECT_EQ(j["preallocate"], true);
  EXPECT_EQ(j["memory_fraction"], 0.75);
  EXPECT_EQ(j["limit_bytes"], 112583507968u);
  EXPECT_TRUE(j["warnings"].is_array());
  CliRun r30 =
      run_env({{"XLA_PYTHON_CLIENT_MEM_FRACTION", "0.30"}}, {"--capacity", "150109880320", "--json"});
  EXPECT_EQ(nlohmann::json::parse(r30.out)["limit_bytes"], 45034242048u);
  CliRun platform = run_env({{"XLA_PYTHON_CLIENT_ALLOCATOR", "platform"}}, {"--capacity", "h200", "--json"});
  EXPECT_TRUE(nlohmann::json::parse(platform.out)["limit_bytes"].is_null());
}

TEST(EnvCommand, BadInputExitsTwoWithOneLineAndNoStdout) {
  const std::vector<std::pair<std::map<std::string, std::string, std::less<>>, std::string>> cases = {
      {{{"XLA_PYTHON_CLIENT_ALLOCATOR", "foo"}}, "'foo' is not an allocator"},
      {{{"XLA_CLIENT_MEM_FRACTION", "abc"}}, "not a number"},
      {{{"XLA_CLIENT_MEM_FRACTION", "-1"}}, "greater than 0"},
      {{{"XLA_CLIENT_MEM_FRACTION", "0.5"}, {"XLA_PYTHON_CLIENT_MEM_FRACTION", "0.5"}}, "both"},
  };
  for (const auto& [vars, needle] : cases) {
    for (bool json : {false, true}) {
      std::vector<std::string> args = {"--capacity", "h200"};
      if (json) args.push_back("--json");
      CliRun r = run_env(vars, args);
      EXPECT_EQ(r.code, 2) << needle;
      EXPECT_EQ(r.out, "") << needle;
      EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
      EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    }
  }
  CliRun bad_capacity = run_env({}, {"--capacity", "lots"});
  EXPECT_EQ(bad_capacity.code, 2);
  EXPECT_NE(bad_capacity.err.find("--capacity"), std::string::npos);
}

}  // namespace
}  // namespace memfit::cli

namespace memfit::cli {
namespace {

TEST(BenchCommand, JsonHasEveryAllocatorAndMallocAtEachSize) {
  std::ostringstream out;
  std::ostringstream err;
  const Environment env;
  // 20 pairs: the JSON's shape is the point here (under ASan 200 pairs took 18 s, 2026-12-05).
  ASSERT_EQ(run({"bench", "--json", "--samples", "1", "--pairs", "20"}, Io{out, err, env}), 0) << err.str();
  const auto j = nlohmann::json::parse(out.str());
  // Which malloc the ratios are to: this test binary links no jemalloc, so glibc's - or, in a sanitizer
  // build, the sanitizer's, which takes malloc over.
#if defined(MEMFIT_SANITIZER_ADDRESS)
  const std::string expected = "AddressSanitizer's";
#elif defined(MEMFIT_SANITIZER_THREAD)
  const std::string expected = "ThreadSanitizer's";
#else
  const std::string expected = "glibc ";
#endif
  EXPECT_EQ(j["malloc"].get<std::string>().rfind(expected, 0), 0u) << j["malloc"];
  std::map<uint64_t, std::set<std::string>> seen;
  for (const auto& r : j["results"]) {
    EXPECT_GT(r["median_ns"].get<double>(), 0.0);
    seen[r["size_bytes"].get<uint64_t>()].insert(r["allocator"].get<std::string>());
  }
  ASSERT_EQ(seen.size(), 4u);  // 256 B, 64 KiB, 1 MiB, 64 MiB
  for (const auto& [size, names] : seen) {
    EXPECT_EQ(names, (std::set<std::string>{"malloc", "bfc", "bfc-growth", "platform", "vmm"})) << size;
  }
}

}  // namespace
}  // namespace memfit::cli
