#include "memfit/core/device_catalog.h"

#include <fmt/format.h>

#include <array>
#include <cctype>
#include <string>

#include "memfit/core/bytes.h"

namespace memfit {
namespace {

struct KnownDevice {
  std::string_view name;
  uint64_t total_bytes;
};

// NVIDIA H200 (141 GB HBM3e): 150109880320 B total as cudaMemGetInfo reports it (FACTS.md, driver 580).
constexpr std::array<KnownDevice, 1> kDevices = {{{"h200", 150109880320ull}}};

}  // namespace

std::optional<uint64_t> known_device_capacity(std::string_view name) {
  std::string lowered(name);
  for (char& c : lowered) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const KnownDevice& d : kDevices) {
    if (d.name == lowered) return d.total_bytes;
  }
  return std::nullopt;
}

Expected<uint64_t> parse_capacity(std::string_view text) {
  if (auto known = known_device_capacity(text)) return *known;
  auto bytes = parse_bytes(text);
  if (!bytes.ok()) {
    return invalid_argument(fmt::format("{} (or a known device name: h200)", bytes.error().message()));
  }
  if (*bytes == 0) return invalid_argument("a device capacity must be above 0 bytes");
  return *bytes;
}

}  // namespace memfit
