// Fuzz target: the JSON spec reader (`memfit plan SPEC.json`): JSON parsing with its depth limit, the model
// spec's checks, and - for the small specs it accepts - the plan itself.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "memfit/core/json.h"
#include "memfit/plan/step_plan.h"
#include "memfit/program/model_zoo.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto json = memfit::parse_json(std::string_view(reinterpret_cast<const char*>(data), size), "spec.json");
  if (!json.ok()) return 0;
  auto spec = memfit::model_spec_from_json(*json);
  if (!spec.ok()) return 0;
  // Planning is checked elsewhere for size; here only specs small enough to plan thousands of times.
  const uint64_t blocks = spec->model == memfit::ModelFamily::kMlp       ? spec->depth
                          : spec->model == memfit::ModelFamily::kFlaxCnn ? spec->widths.size()
                                                                         : spec->layers;
  if (blocks <= 4 && spec->devices() <= 64) (void)memfit::plan_step(*spec, uint64_t{80} << 30, 0.75);
  return 0;
}
