#include "memfit/alloc/xla_allocator.h"

#include <fmt/format.h>

namespace memfit {

Expected<std::pair<AllocatorKind, AllocatorSettings>> xla_allocator_settings(
    const XlaAllocatorConfig& config, uint64_t total_bytes, std::chrono::milliseconds retry_wait) {
  const XlaAllocatorPlan plan = plan_xla_allocator(config, total_bytes);
  AllocatorSettings settings;
  settings.name = plan.allocator_name;
  settings.retry_wait = retry_wait;
  settings.memory_fraction = config.memory_fraction;
  if (plan.allocator == "bfc") {
    settings.limit_bytes = *plan.limit_bytes;
    return std::pair{plan.preallocate ? AllocatorKind::kBfc : AllocatorKind::kBfcGrowth, settings};
  }
  if (plan.allocator == "platform") return std::pair{AllocatorKind::kPlatform, settings};
  if (plan.allocator == "vmm") {
    // Capped at the fraction, as XLA's vmm mode is; nothing is reserved up front.
    settings.limit_bytes = *plan.limit_bytes;
    if (settings.name.empty()) settings.name = "GPU_0_vmm";
    return std::pair{AllocatorKind::kVmm, settings};
  }
  return unavailable(
      fmt::format("the {} allocator needs memfit's CUDA backend on a real GPU", plan.allocator));
}

Expected<std::unique_ptr<Allocator>> make_xla_allocator(const XlaAllocatorConfig& config,
                                                        DeviceMemory& device,
                                                        std::chrono::milliseconds retry_wait) {
  MEMFIT_ASSIGN_OR_RETURN(auto chosen, xla_allocator_settings(config, device.total_bytes(), retry_wait));
  return make_allocator(chosen.first, device, chosen.second);
}

}  // namespace memfit
