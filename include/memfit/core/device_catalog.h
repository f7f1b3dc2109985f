// memfit/core/device_catalog.h - device capacities memfit knows by name, as CUDA reports them.
//
// Only measured totals are listed (cudaMemGetInfo total, not the marketing figure): a wrong capacity
// would make every prediction wrong by the same amount.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "memfit/core/status.h"

namespace memfit {

std::optional<uint64_t> known_device_capacity(std::string_view name);

// A capacity as a user types it: a known device name ("h200") or a size ("80GiB", "150109880320").
Expected<uint64_t> parse_capacity(std::string_view text);

}  // namespace memfit
