// Fuzz target: the log classifier on arbitrary text (no crash, no hang, findings always well-formed).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "memfit/diagnose/log_classifier.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  for (const memfit::Finding& f : memfit::classify_log(input, "fuzz.log")) {
    if (f.code.empty() || f.fix.empty()) std::abort();
  }
  return 0;
}
