// Fuzz target: every trace reader (format detection, CSV, RMM, memfit, the pickle decoder), then a replay
// of whatever parsed. Built as a libFuzzer target with clang (scripts/fuzz) and, with any compiler, linked to
// tests/fuzz/mutation_driver.cc for a short deterministic run in ctest.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "memfit/trace/readers.h"
#include "memfit/trace/replay.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  auto timeline = memfit::parse_trace(input);
  if (!timeline.ok()) return 0;
  memfit::ReplayOptions options;
  options.policies = {"bfc", "vmm"};
  options.capacity_bytes = 64ull << 20;  // small: exercises the OOM path too
  (void)memfit::replay(*timeline, options);
  return 0;
}
