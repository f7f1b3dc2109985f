// memfit plan against what the H200 measured for every GPU program in programs.json, and against XLA's
// per-device argument and temp bytes for the 8-device CPU compiles.
#include "memfit/plan/step_plan.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <string>

#include "memfit/core/file_io.h"
#include "memfit/core/json.h"

namespace memfit {
namespace {

// The programs of `list` that the zoo does not yet plan within 5% of the measured peak, each with why;
// they are planned and printed, not held. Every other measured program is held to 5%.
const std::map<std::string, std::string> kNotHeld = {
    // The zoo does not build host offload of saved activations yet; `memfit hlo` plans its HLO.
    {"gpt_mixed_donate_offload_dots_nb", "offload"},
    // ViT's patch embedding and head: +6% in training, +7% in inference.
    {"vit_b16_fp32_donate", "vit"},
    {"vit_b16_infer_b256", "vit"},
    // flax.linen's encoder is not a zoo family yet: refused with a reason.
    {"flax_encoder_adafactor_b32", "flax_encoder"},
};

void expect_zoo_plans(const std::string& list) {
  auto text = read_file(std::string(MEMFIT_TEST_DATA_DIR) + "/xla/" + list);
  ASSERT_TRUE(text.ok());
  auto programs = parse_json(*text, list);
  ASSERT_TRUE(programs.ok());
  std::printf("%-32s %14s %14s %8s %14s %14s %8s\n", list.c_str(), "measured peak", "predicted", "error",
              "xla temp", "our temp", "error");
  for (const Json& p : (*programs)["programs"]) {
    const std::string name = p["name"];
    SCOPED_TRACE(name);
    const auto why = kNotHeld.find(name);
    auto spec = model_spec_from_json(p["config"]);
    if (!spec.ok()) {
      // Only a program listed as not held may be refused, and then with the key that is not built.
      ASSERT_NE(why, kNotHeld.end()) << spec.error().message();
      EXPECT_NE(spec.error().message().find(why->second), std::string::npos) << spec.error().message();
      std::printf("%-32s refused: %s\n", name.c_str(), spec.error().message().c_str());
      continue;
    }
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
      if (why == kNotHeld.end()) {
        EXPECT_LE(std::abs(peak_error), 0.05);
      }
    } else {
      EXPECT_LE(std::abs(temp_error), 0.10);  // the CPU compiles: temp within 10% of XLA's
    }
    const auto& b = plan->breakdown;
    EXPECT_EQ(b.parameters + b.optimizer_state + b.gradients + b.activations + b.temporaries,
              plan->peak_bytes);
    std::printf("%-32s %14.0f %14llu %+7.2f%% %14.0f %14llu %+7.2f%%%s\n", name.c_str(), measured,
                static_cast<unsigned long long>(plan->peak_bytes), 100 * peak_error, xla_temp,
                static_cast<unsigned long long>(plan->hlo.temp_bytes), 100 * temp_error,
                why == kNotHeld.end() ? "" : "  (not held)");
  }
}

TEST(StepPlan, PredictsEverySharedProgram) { expect_zoo_plans("programs.json"); }

// Ten more GPU programs, bundled for their lowered forms: mixed and bf16 precision, cuDNN attention,
// remat, accumulation, inference, ViT and the flax encoder.
TEST(StepPlan, PredictsTheLoweredProgramsConfigs) { expect_zoo_plans("lowered_programs.json"); }

}  // namespace
}  // namespace memfit
