#include "memfit/alloc/allocator_stats.h"
#include "memfit/core/json.h"

namespace memfit {

Json AllocatorStats::to_json() const {
  Json j;
  j["num_allocs"] = num_allocs;
  j["bytes_in_use"] = bytes_in_use;
  j["peak_bytes_in_use"] = peak_bytes_in_use;
  j["largest_alloc_size"] = largest_alloc_size;
  if (bytes_limit) j["bytes_limit"] = *bytes_limit;
  j["bytes_reserved"] = bytes_reserved;
  j["peak_bytes_reserved"] = peak_bytes_reserved;
  if (bytes_reservable_limit) j["bytes_reservable_limit"] = *bytes_reservable_limit;
  j["largest_free_block_bytes"] = largest_free_block_bytes;
  if (pool_bytes) j["pool_bytes"] = *pool_bytes;
  if (peak_pool_bytes) j["peak_pool_bytes"] = *peak_pool_bytes;
  return j;
}

}  // namespace memfit
