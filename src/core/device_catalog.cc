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
  uint64_t total_bytes;  // the total cudaMemGetInfo reports: what JAX's and PyTorch's limits are fractions of
};

constexpr uint64_t kMiB = 1ull << 20;

// The driver keeps part of the card from CUDA: CUDA's total is NVML's total minus NVML's "reserved" (v2
// memory info). Measured on the H200: 150754820096 - 644939776 = 150109880320 (FACTS.md, driver 580).
constexpr uint64_t kH200ReservedBytes = 644939776;

// Cards not measured here: NVML's total as nvidia-smi prints it for each (H100 80 GB 81559 MiB, A100 80 GB
// 81920 MiB, A100 40 GB 40960 MiB; https://thundergolfer.com/blog/nvidia-gpu-memory-capacity) minus the
// H200's measured reservation. The reservation depends on the card and driver: PyTorch's OOM messages
// report 79.11-79.25 GiB for H100s and 79.15 GiB for an A100 80 GB whose nvidia-smi said 81920 MiB, so
// these capacities are good to about 0.3% - a fraction of the planner's own error.
constexpr uint64_t nvml_less_reserved(uint64_t nvml_total_mib) {
  return nvml_total_mib * kMiB - kH200ReservedBytes;
}

constexpr std::array<KnownDevice, 4> kDevices = {{
    {"h200", 150109880320ull},  // H200 141 GB HBM3e, cudaMemGetInfo's total (FACTS.md)
    {"h100", nvml_less_reserved(81559)},
    {"a100-80gb", nvml_less_reserved(81920)},
    {"a100-40gb", nvml_less_reserved(40960)},
}};

std::string device_names() {
  std::string names;
  for (const KnownDevice& d : kDevices) names += fmt::format("{}{}", names.empty() ? "" : ", ", d.name);
  return names;
}

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
    return invalid_argument(
        fmt::format("{} (or a known device name: {})", bytes.error().message(), device_names()));
  }
  if (*bytes == 0) return invalid_argument("a device capacity must be above 0 bytes");
  return *bytes;
}

}  // namespace memfit
