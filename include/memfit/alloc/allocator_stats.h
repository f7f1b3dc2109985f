// memfit/alloc/allocator_stats.h - allocator statistics with the keys of JAX's `Device.memory_stats()`.
//
// Meanings follow tsl::AllocatorStats (xla/tsl/framework/allocator.h) and what jaxlib 0.11.2 reported on an
// H200 (../shared/FACTS.md §1):
//   bytes_in_use       bytes of live allocations, counted in whole chunks (BFC: 256-B rounded)
//   peak_bytes_in_use  the most bytes_in_use has been since creation or reset_peak()
//   largest_alloc_size the largest single chunk handed out
//   bytes_limit        the most the allocator may reserve (absent: no limit, as for the platform allocator)
//   bytes_reserved     bytes set aside for other uses; 0 for BFC (observed)
//   largest_free_block_bytes  the largest free chunk inside the pool (not counting unreserved headroom)
//   pool_bytes         device memory the allocator holds now; absent when it has no pool
// Optional keys are omitted from JSON when absent, as JAX omits them.
#pragma once

#include <cstdint>
#include <optional>

#include "memfit/core/json_fwd.h"

namespace memfit {

struct AllocatorStats {
  uint64_t num_allocs = 0;
  uint64_t bytes_in_use = 0;
  uint64_t peak_bytes_in_use = 0;
  uint64_t largest_alloc_size = 0;
  std::optional<uint64_t> bytes_limit;
  uint64_t bytes_reserved = 0;
  uint64_t peak_bytes_reserved = 0;
  std::optional<uint64_t> bytes_reservable_limit;
  uint64_t largest_free_block_bytes = 0;
  std::optional<uint64_t> pool_bytes;
  std::optional<uint64_t> peak_pool_bytes;

  Json to_json() const;
};

}  // namespace memfit
