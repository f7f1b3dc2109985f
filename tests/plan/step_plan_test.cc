// memfit plan against what the H200 measured for every GPU program in programs.json, and against XLA's
// per-device argument and temp bytes for the 8-device CPU compiles.
#include "memfit/plan/step_plan.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "memfit/core/file_io.h"
#include "memfit/core/json.h"

namespace memfit {
namespace {

TEST(StepPlan, PredictsEverySharedProgram) {
  auto text = read_file(std::string(MEMFIT_TEST_DATA_DIR) + "/xla/programs.json");
  ASSERT_TRUE(text.ok());
  auto programs = parse_json(*text, "programs.json");
  ASSERT_TRUE(programs.ok());
  std::printf("%-28s %14s %14s %8s %14s %14s %8s\n", "program", "measured peak", "predicted", "error",
              "xla temp", "our temp", "error");
  for (const Json& p : (*programs)["programs"]) {
    const std::string name = p["name"];
    SCOPED_TRACE(name);
    // The zoo does not build host offload of saved activations yet (issue: the zoo emits the lowered
    // program); `memfit hlo` plans that program from its HLO (hlo_plan_test).
    if (p["config"].value("remat", "") == "offload_dots_no_batch") continue;
    auto spec = model_spec_from_json(p["config"]);
    ASSERT_TRUE(spec.ok()) << spec.error().message();
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
      EXPECT_LE(std::abs(peak_error), 0.05);
    } else {
      EXPECT_LE(std::abs(temp_error), 0.10);  // the CPU compiles: temp within 10% of XLA's
    }
    const auto& b = plan->breakdown;
    EXPECT_EQ(b.parameters + b.optimizer_state + b.gradients + b.activations + b.temporaries,
              plan->peak_bytes);
    std::printf("%-28s %14.0f %14llu %+7.2f%% %14.0f %14llu %+7.2f%%\n", name.c_str(), measured,
                static_cast<unsigned long long>(plan->peak_bytes), 100 * peak_error, xla_temp,
                static_cast<unsigned long long>(plan->hlo.temp_bytes), 100 * temp_error);
  }
}

}  // namespace
}  // namespace memfit
