// memfit/alloc/oom_report.h - why an allocation failed, worded for the person who has to fix it.
//
// Carries what XLA's BFC dump shows (rounded request, in use / pool / limit, occupancy bar with '*' for
// requested bytes, 'x' for rounding waste, '_' for free) plus what it leaves to the reader: fragmentation
// (1 - largest free / free), the largest live allocations by tag, the cause in one sentence, and which knob
// would help, with numbers. Attached to the kResourceExhausted error an allocator returns.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "memfit/core/json_fwd.h"
#include "memfit/core/status.h"

namespace memfit {

struct LiveAllocationGroup {
  std::string tag;  // "(untagged)" when the caller gave none
  uint64_t bytes = 0;
  uint64_t count = 0;
  uint64_t largest_bytes = 0;
};

struct OomReport final : ErrorDetail {
  std::string allocator_name;
  uint64_t requested_bytes = 0;
  uint64_t rounded_bytes = 0;
  uint64_t bytes_in_use = 0;
  uint64_t live_allocations = 0;
  std::optional<uint64_t> pool_bytes;   // absent: no pool (platform)
  std::optional<uint64_t> bytes_limit;  // absent: no limit but the device
  uint64_t device_total_bytes = 0;
  uint64_t device_free_bytes = 0;
  uint64_t free_in_pool_bytes = 0;
  uint64_t largest_free_bytes = 0;
  bool growth = false;            // the pool grows on demand (XLA_PYTHON_CLIENT_PREALLOCATE=false)
  double memory_fraction = 0.75;  // the fraction the limit came from, for advice
  std::string occupancy_bar;      // 100 characters; empty when there is no pool
  std::vector<LiveAllocationGroup> top_live;  // by bytes, largest first
  bool detail_omitted =
      false;  // the bar and top_live were left out (an OOM storm: only the first are walked)
  std::string cause;
  std::string device_error;  // what the device (or a share group's lease) said when the pool could not grow
  std::vector<std::string> suggestions;

  // 1 - largest_free / free_in_pool; 0 when nothing is free.
  double fragmentation() const;
  // One line, XLA's shape: "Out of memory while trying to allocate 62.91GiB (rounded to ...) with ...".
  std::string summary() const;

  Json to_json() const override;
  std::string to_text() const override;
};

// Fills `cause` and `suggestions` from the figures of `report`.
void explain_oom(OomReport& report);

// XLA's 100-character occupancy bar from (offset, size, requested) of every chunk in `pool_bytes`.
struct ChunkExtent {
  uint64_t offset = 0;
  uint64_t size_bytes = 0;
  uint64_t requested_bytes = 0;  // 0 for a free chunk
  bool in_use = false;
};
std::string occupancy_bar(const std::vector<ChunkExtent>& chunks, uint64_t pool_bytes);

}  // namespace memfit
