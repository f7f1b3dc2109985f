// memfit hlo's planner against XLA on every shared program (tests/data/xla/programs.json).
#include "memfit/plan/hlo_plan.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>

#include "memfit/core/file_io.h"
#include "memfit/core/json.h"

namespace memfit {
namespace {

std::string data(const std::string& name) { return std::string(MEMFIT_TEST_DATA_DIR) + "/xla/" + name; }

TEST(HloPlan, TempMatchesXla) {
  auto text = read_file(data("programs.json"));
  ASSERT_TRUE(text.ok());
  auto programs = parse_json(*text, "programs.json");
  ASSERT_TRUE(programs.ok());
  for (const Json& p : (*programs)["programs"]) {
    const std::string name = p["name"];
    auto hlo = read_file(data(name + ".hlo.txt.gz"));
    ASSERT_TRUE(hlo.ok());
    const auto t0 = std::chrono::steady_clock::now();
    auto module = parse_hlo_module(*hlo);
    ASSERT_TRUE(module.ok());
    auto plan = plan_hlo(*module);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_TRUE(plan.ok()) << plan.error().message();
    const uint64_t xla_temp = p["xla_memory_analysis"]["temp_size_in_bytes"];
    std::printf("%-28s xla %12llu ours %12llu (%+.3f%%) lb %12llu  %s %.3fs\n", name.c_str(),
                (unsigned long long)xla_temp, (unsigned long long)plan->temp_bytes,
                100.0 * ((double)plan->temp_bytes - (double)xla_temp) / (double)xla_temp,
                (unsigned long long)plan->temp_lower_bound_bytes,
                plan->packing == HeapPacking::kSpatial ? "spatial" : "temporal", s);
  }
}

}  // namespace
}  // namespace memfit
namespace memfit {
namespace {
TEST(HloPlanDebug, Packings) {
  for (const char* name : {"gpt_fp32_donate", "gpt_fp32", "mlp_fp32", "cpu8_gpt_fsdp8", "cpu8_gpt_single"}) {
    auto hlo = read_file(data(std::string(name) + ".hlo.txt.gz"));
    auto module = parse_hlo_module(*hlo);
    auto model = build_buffer_model(*module);
    ASSERT_TRUE(model.ok());
    auto s = best_fit_heap(model->heap_intervals, 256, HeapPacking::kSpatial);
    auto t = best_fit_heap(model->heap_intervals, 256, HeapPacking::kTemporal);
    std::printf("%s spatial %llu temporal %llu\n", name, (unsigned long long)s.heap_bytes,
                (unsigned long long)t.heap_bytes);
  }
}
}  // namespace
}  // namespace memfit
