// memfit/alloc/microbench.h - time alloc+free pairs of every allocator against std::malloc, in one run.
//
// Used by `memfit bench` so a user can see the figures on their own machine. Each allocator serves from a
// simulated device (no GPU calls are timed: the figure is the allocator's own bookkeeping). The median of
// several samples is reported, so a noisy neighbour moves it little; compare ratios, not absolute times.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace memfit {

struct MicrobenchResult {
  std::string allocator;  // "bfc", "bfc-growth", "platform", "vmm", "malloc"
  uint64_t size_bytes = 0;
  double median_ns = 0;  // per alloc+free pair
  double ratio_to_malloc = 0;
};

struct MicrobenchOptions {
  std::vector<uint64_t> sizes_bytes = {256, 64 << 10, 1 << 20, 64 << 20};
  int samples = 9;
  uint64_t pairs_per_sample = 0;                     // 0: calibrated so a sample lasts about 5 ms
  std::function<void(const std::string&)> progress;  // called before each allocator/size; may be empty
};

std::vector<MicrobenchResult> run_microbench(const MicrobenchOptions& options);

// The malloc this process allocates through, the "malloc" row's: "jemalloc <version>" where the executable
// links jemalloc (memfit does, where it is installed: src/malloc/jemalloc_config.cc) or preloads it, a
// sanitizer's in a sanitizer build, else "glibc <version>".
std::string process_malloc();

}  // namespace memfit
