// A planned program as a Timeline (plan/plan_timeline.h): the device's buffers of XLA's own programs
// (tests/data/xla, recorded with jax 0.11.2 on an H200), checked against the plan they come from.
#include "memfit/plan/plan_timeline.h"

#include <gtest/gtest.h>

#include <set>

#include "memfit/program/hlo_source.h"
#include "memfit/program/stablehlo_module.h"
#include "memfit/trace/readers.h"
#include "memfit/trace/writer.h"

namespace memfit {
namespace {

HloPlan plan_of(const std::string& file) {
  auto source = read_hlo_source(std::string(MEMFIT_TEST_DATA_DIR) + "/xla/" + file, "");
  EXPECT_TRUE(source.ok()) << file;
  auto module = parse_program_text(source->text);
  EXPECT_TRUE(module.ok()) << file;
  auto plan = plan_hlo(*module);
  EXPECT_TRUE(plan.ok()) << file;
  return std::move(*plan);
}

// Every alloc has one free or lives to the end; ids are dense; the bytes live never go negative.
void expect_well_formed(const Timeline& t) {
  std::vector<int> state(t.buffer_count, 0);  // 0 never, 1 live, 2 freed
  int64_t live = 0;
  for (const TraceEvent& e : t.events) {
    ASSERT_LT(e.buffer, t.buffer_count);
    if (e.kind == EventKind::kAlloc) {
      EXPECT_EQ(state[e.buffer], 0) << "buffer " << e.buffer << " allocated twice";
      state[e.buffer] = 1;
      live += static_cast<int64_t>(e.size_bytes);
    } else {
      EXPECT_EQ(state[e.buffer], 1) << "buffer " << e.buffer << " freed while not live";
      state[e.buffer] = 2;
      live -= static_cast<int64_t>(e.size_bytes);
      EXPECT_GE(live, 0);
    }
  }
  for (int s : state) EXPECT_NE(s, 0);
  EXPECT_EQ(t.labels.size(), t.buffer_count);
}

TEST(PlanTimeline, ItsMostLiveBytesAreThePlansLowerBound) {
  // Optimized and lowered programs, donation, a while loop (scan), host offload (S(5) buffers are not the
  // device's).
  for (const char* file : {"mlp_fp32.hlo.txt.gz", "gpt_fp32_donate.hlo.txt.gz",
                           "gpt_fp32_donate_scan.hlo.txt.gz", "gpt_mixed_donate_offload_dots_nb.hlo.txt.gz",
                           "gpt_fp32_donate.lowered.hlo.txt.gz", "gpt_fp32_donate_scan.stablehlo.mlir.gz"}) {
    SCOPED_TRACE(file);
    const HloPlan plan = plan_of(file);
    const Timeline t = plan_timeline(plan);
    expect_well_formed(t);
    EXPECT_EQ(peak_live_bytes(t), plan.lower_bound_bytes);
  }
}

TEST(PlanTimeline, LabelsAndCategoriesComeFromThePlan) {
  const HloPlan plan = plan_of("gpt_fp32_donate.hlo.txt.gz");
  const Timeline t = plan_timeline(plan);
  std::set<std::string> names;
  for (const PlannedBuffer& b : plan.buffers) names.insert(b.name);
  std::set<std::string> tags_used;
  for (const TraceEvent& e : t.events) {
    if (e.kind != EventKind::kAlloc) continue;
    ASSERT_LT(e.tag, t.tags.size());
    tags_used.insert(t.tags[e.tag]);
    EXPECT_TRUE(names.count(t.labels[e.buffer].name)) << t.labels[e.buffer].name;
  }
  // A training step has parameters, the backward's gradients and the forward's activations.
  EXPECT_TRUE(tags_used.count("parameters"));
  EXPECT_TRUE(tags_used.count("gradients"));
  EXPECT_TRUE(tags_used.count("activations"));
  EXPECT_FALSE(tags_used.count("(untagged)"));
}

TEST(PlanTimeline, SurvivesTheTraceFormat) {
  // Written as a memfit trace (memfit hlo --trace-out) and read back, as memfit replay reads it.
  const HloPlan plan = plan_of("mlp_fp32_donate.hlo.txt.gz");
  const Timeline t = plan_timeline(plan);
  auto back = parse_memfit_trace(to_memfit_trace(t));
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(back->events.size(), t.events.size());
  EXPECT_EQ(peak_live_bytes(*back), plan.lower_bound_bytes);
}

}  // namespace
}  // namespace memfit
