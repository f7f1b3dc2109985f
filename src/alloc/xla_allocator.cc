#include "memfit/alloc/xla_allocator.h"

#include <fmt/format.h>

#include "memfit/alloc/bfc_allocator.h"
#include "memfit/alloc/platform_allocator.h"

namespace memfit {

Expected<std::unique_ptr<Allocator>> make_xla_allocator(const XlaAllocatorConfig& config,
                                                        DeviceMemory& device,
                                                        std::chrono::milliseconds retry_wait) {
  const XlaAllocatorPlan plan = plan_xla_allocator(config, device.total_bytes());
  if (plan.allocator == "bfc") {
    BfcOptions options;
    options.name = plan.allocator_name;
    options.memory_limit_bytes = *plan.limit_bytes;
    options.allow_growth = !plan.preallocate;
    options.retry_wait = retry_wait;
    options.memory_fraction = config.memory_fraction;
    return std::unique_ptr<Allocator>(std::make_unique<BfcAllocator>(device, options));
  }
  if (plan.allocator == "platform") {
    PlatformOptions options;
    options.name = plan.allocator_name;
    return std::unique_ptr<Allocator>(std::make_unique<PlatformAllocator>(device, options));
  }
  return unavailable(
      fmt::format("the {} allocator needs memfit's CUDA backend on a real GPU", plan.allocator));
}

}  // namespace memfit
