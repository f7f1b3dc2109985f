// Fuzz target: the HLO text importer and the entry sizes on arbitrary text.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "memfit/program/hlo_module.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto module = memfit::parse_hlo_module(std::string_view(reinterpret_cast<const char*>(data), size));
  if (module.ok()) (void)memfit::entry_sizes(*module);
  return 0;
}
