// Fuzz target: XLA's buffer-assignment dump.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "memfit/program/buffer_assignment.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto r = memfit::parse_buffer_assignment(std::string_view(reinterpret_cast<const char*>(data), size));
  if (r.ok()) (void)r->temp_values();
  return 0;
}
