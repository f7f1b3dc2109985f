// Fuzz target: the StableHLO reader, then the XLA:GPU model, buffer model and heap on whatever it accepts.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "memfit/plan/hlo_plan.h"
#include "memfit/program/stablehlo_module.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto module = memfit::parse_stablehlo_module(std::string_view(reinterpret_cast<const char*>(data), size));
  if (module.ok()) {
    (void)memfit::entry_sizes(*module);
    (void)memfit::plan_hlo(*module);
  }
  return 0;
}
