// Replay of the real PyTorch traces through every policy (issue targets: the best policy within 1.02x of
// the peak live bytes; PyTorch's own pool measured 1.137 on GPT-2).
#include "memfit/trace/replay.h"

#include <gtest/gtest.h>

#include <sstream>

#include "../cli/cli_runner.h"
#include "../cli/golden.h"
#include "memfit/core/file_io.h"
#include "trace_data.h"

namespace memfit {
namespace {

using testing::load_trace;

const PolicyResult& policy(const ReplayResult& r, std::string_view name) {
  for (const PolicyResult& p : r.policies) {
    if (p.name == name) return p;
  }
  ADD_FAILURE() << "no policy " << name;
  return r.policies.front();
}

TEST(Replay, EveryPolicyOnBothRealTraces) {
  for (const std::string name : {"gpt2_train_fp32.trace.csv.gz", "resnet50_train_bf16amp.trace.csv.gz"}) {
    SCOPED_TRACE(name);
    const Timeline t = load_trace(name);
    auto r = replay(t, ReplayOptions{});
    ASSERT_TRUE(r.ok()) << r.error().message();
    EXPECT_EQ(r->peak_live_bytes, peak_live_bytes(t));
    ASSERT_EQ(r->policies.size(), 4u);
    for (const PolicyResult& p : r->policies) {
      SCOPED_TRACE(p.name);
      EXPECT_EQ(p.oom_events, 0u);
      EXPECT_GE(p.peak_reserved_bytes, r->peak_live_bytes);  // nothing beats the lower bound
      EXPECT_GE(p.peak_in_use_bytes, r->peak_live_bytes);
      EXPECT_FALSE(p.samples.empty());
      EXPECT_GT(p.events_per_second, 0.0);
    }
    // The page-mapped pool is the best pool: within 1% of the lower bound (its cache of freed pages
    // included), and better than PyTorch's own.
    EXPECT_LE(policy(*r, "vmm").ratio_to_peak_live, 1.01);
    EXPECT_LT(policy(*r, "vmm").peak_reserved_bytes, *t.recorded_peak_reserved_bytes);
    // A growing BFC keeps every region it ever took: it cannot do better than the preallocated one here.
    EXPECT_GE(policy(*r, "bfc-growth").peak_reserved_bytes, policy(*r, "bfc").peak_reserved_bytes);
  }
}

TEST(Replay, CapacityBelowThePeakGivesOomsAtTheSameEvent) {
  const Timeline t = load_trace("resnet50_train_bf16amp.trace.csv.gz");
  ReplayOptions o;
  o.capacity_bytes = peak_live_bytes(t) / 2;
  o.policies = {"platform", "vmm", "bfc"};
  auto r = replay(t, o);
  ASSERT_TRUE(r.ok());
  for (const PolicyResult& p : r->policies) {
    EXPECT_GT(p.oom_events, 0u) << p.name;
    ASSERT_TRUE(p.first_oom_event.has_value());
    EXPECT_NE(p.first_oom.find("Out of memory while trying to allocate"), std::string::npos) << p.first_oom;
  }
  // The exact allocator fails first when live bytes pass the capacity; the others no earlier than that.
  EXPECT_LE(*policy(*r, "platform").first_oom_event, *policy(*r, "vmm").first_oom_event);
}

// What a pool holds in use never exceeds what it reserved. The preallocated BFC's reserved figure is its
// high-water mark, which reached only to the end of each request: a chunk BFC leaves unsplit (up to twice the
// request) sat past it, and GPT-2 at 1 GiB showed 768.00 MiB in use beside 762.93 MiB reserved.
TEST(Replay, NoPolicyHoldsMoreInUseThanItReserved) {
  for (const std::string name : {"gpt2_train_fp32.trace.csv.gz", "resnet50_train_bf16amp.trace.csv.gz"}) {
    const Timeline t = load_trace(name);
    for (const uint64_t capacity : {uint64_t{1} << 30, peak_live_bytes(t) / 2, uint64_t{0}}) {
      SCOPED_TRACE(name + " at " + std::to_string(capacity));
      ReplayOptions o;
      if (capacity != 0) o.capacity_bytes = capacity;
      auto r = replay(t, o);
      ASSERT_TRUE(r.ok()) << r.error().message();
      for (const PolicyResult& p : r->policies)
        EXPECT_LE(p.peak_in_use_bytes, p.peak_reserved_bytes) << p.name;
    }
  }
}

TEST(Replay, UnknownPolicyIsAnError) {
  ReplayOptions o;
  o.policies = {"magic"};
  auto r = replay(Timeline{}, o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("unknown policy 'magic'"), std::string::npos);
}

using testing::CliRun;
using testing::run_cli;

TEST(ReplayCommand, GoldenTableForGpt2) {
  CliRun r = run_cli({"replay", testing::data_path("gpt2_train_fp32.trace.csv.gz")});
  ASSERT_EQ(r.code, 0) << r.err;
  // Replay speed varies from run to run: mask that column (characters 59-70 of a policy row, as the table
  // is laid out), and the machine-specific path.
  std::string table;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);) {
    for (const char* policy : kReplayPolicies) {
      if (line.rfind(std::string("  ") + policy + " ", 0) == 0 && line.size() > 71)
        line.replace(59, 12, "  <events/s>");
    }
    table += line + "\n";
  }
  const std::string dir = std::string(MEMFIT_TEST_DATA_DIR) + "/";
  if (const size_t at = table.find(dir); at != std::string::npos)
    table.replace(at, dir.size(), "tests/data/");
  testing::expect_golden("replay_gpt2.txt", table);
}

// The recorded run's own OOMs (PyTorch's "oom" action, RMM's "allocate failure") were counted and never
// shown: they are what the user came with.
TEST(ReplayCommand, SaysHowOftenTheRecordedRunRanOutOfMemory) {
  const std::string rmm = ::testing::TempDir() + "rmm_oom.csv";
  ASSERT_TRUE(write_file_atomic(rmm,
                                "Thread,Time,Action,Pointer,Size,Stream\n1,1,allocate,0x1000,100,0x0\n"
                                "1,2,allocate failure,0x0,999999999,0x0\n1,3,allocate failure,0x0,5,0x0\n"
                                "1,4,free,0x1000,100,0x0\n")
                  .ok());
  CliRun text = run_cli({"replay", rmm, "--policy", "platform"});
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_NE(text.out.find("recorded OOMs             2 - the original run's allocator failed 2 times"),
            std::string::npos)
      << text.out;
  CliRun json = run_cli({"replay", rmm, "--policy", "platform", "--json"});
  ASSERT_EQ(json.code, 0) << json.err;
  EXPECT_EQ(Json::parse(json.out)["recorded_ooms"], 2);
}

TEST(ReplayCommand, JsonFieldsAndExitCodes) {
  CliRun r = run_cli({"replay", testing::data_path("resnet50_train_bf16amp.snapshot.pickle.gz"), "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const Json j = Json::parse(r.out);
  EXPECT_EQ(j["events"], 7101);
  EXPECT_EQ(j["peak_live_bytes"], 3192592912u);
  EXPECT_EQ(j["recorded_peak_reserved_bytes"], 3797942272u);
  EXPECT_EQ(j["recorded_peak_reserved_complete"], true);
  EXPECT_EQ(j["device"], 0);
  EXPECT_EQ(j["recorded_ooms"], 0);
  ASSERT_EQ(j["policies"].size(), 4u);
  for (const Json& p : j["policies"]) {
    EXPECT_TRUE(p.contains("name") && p.contains("peak_reserved_bytes") && p.contains("peak_in_use_bytes") &&
                p.contains("oom_events"));
  }
  CliRun small = run_cli({"replay", testing::data_path("resnet50_train_bf16amp.trace.csv.gz"), "--policy",
                          "vmm", "--capacity", "1GiB", "--json"});
  EXPECT_EQ(small.code, 1);  // found a failure
  EXPECT_GT(Json::parse(small.out)["policies"][0]["oom_events"].get<int>(), 0);
  CliRun missing = run_cli({"replay", "/nonexistent/trace.csv", "--json"});
  EXPECT_EQ(missing.code, 2);
  EXPECT_EQ(missing.out, "");
  EXPECT_NE(missing.err.find("cannot open"), std::string::npos);
  CliRun bad_policy =
      run_cli({"replay", testing::data_path("resnet50_train_bf16amp.trace.csv.gz"), "--policy", "x"});
  EXPECT_EQ(bad_policy.code, 2);
}

}  // namespace
}  // namespace memfit
