// memfit/core/device_catalog.h - device capacities memfit knows by name, as CUDA reports them.
//
// The total cudaMemGetInfo reports, not the marketing figure: a wrong capacity would make every prediction
// wrong by the same amount. The H200's is measured; the others are NVML's published totals less the
// driver's reservation measured on the H200 (good to about 0.3%; device_catalog.cc says why).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "memfit/core/status.h"

namespace memfit {

std::optional<uint64_t> known_device_capacity(std::string_view name);

// A capacity as a user types it: a known device name ("h200", "h100", "a100-80gb", "a100-40gb") or a size
// ("80GiB", "150109880320").
Expected<uint64_t> parse_capacity(std::string_view text);

}  // namespace memfit
