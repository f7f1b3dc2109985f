// Fuzz target: JAX's device memory profile (pprof protobuf, gzipped or not), then a diff with itself.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "memfit/trace/device_profile.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto p = memfit::parse_device_memory_profile(std::string_view(reinterpret_cast<const char*>(data), size));
  if (p.ok()) {
    (void)memfit::diff_profiles(*p, *p);
    (void)p->device_buffer_bytes();
  }
  return 0;
}
