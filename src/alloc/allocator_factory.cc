#include "memfit/alloc/allocator_factory.h"

#include <fmt/format.h>

#include "memfit/alloc/bfc_allocator.h"
#include "memfit/alloc/platform_allocator.h"
#include "memfit/alloc/vmm_allocator.h"

namespace memfit {

std::string_view allocator_kind_name(AllocatorKind kind) {
  switch (kind) {
    case AllocatorKind::kBfc:
      return "bfc";
    case AllocatorKind::kBfcGrowth:
      return "bfc-growth";
    case AllocatorKind::kPlatform:
      return "platform";
    case AllocatorKind::kVmm:
      return "vmm";
  }
  return "?";
}

Expected<AllocatorKind> parse_allocator_kind(std::string_view name) {
  for (AllocatorKind kind : kAllocatorKinds)
    if (allocator_kind_name(kind) == name) return kind;
  return invalid_argument(fmt::format("unknown allocator '{}' (expected bfc, bfc-growth, platform or vmm)",
                                      name.substr(0, std::min<size_t>(name.size(), 80))));
}

Expected<std::unique_ptr<Allocator>> make_allocator(AllocatorKind kind, DeviceMemory& device,
                                                    const AllocatorSettings& settings) {
  switch (kind) {
    case AllocatorKind::kBfc:
    case AllocatorKind::kBfcGrowth: {
      BfcOptions o;
      if (!settings.name.empty()) o.name = settings.name;
      o.memory_limit_bytes = settings.limit_bytes != 0
                                 ? settings.limit_bytes
                                 : bfc_memory_limit(kXlaDefaultMemoryFraction, device.total_bytes());
      o.allow_growth = kind == AllocatorKind::kBfcGrowth;
      o.retry_wait = settings.retry_wait;
      o.memory_fraction = settings.memory_fraction;
      o.garbage_collection = settings.garbage_collection;
      o.region_cap_bytes = settings.region_cap_bytes;
      return std::unique_ptr<Allocator>(std::make_unique<BfcAllocator>(device, o));
    }
    case AllocatorKind::kPlatform: {
      PlatformOptions o;
      if (!settings.name.empty()) o.name = settings.name;
      if (settings.limit_bytes != 0) o.limit_bytes = settings.limit_bytes;
      return std::unique_ptr<Allocator>(std::make_unique<PlatformAllocator>(device, o));
    }
    case AllocatorKind::kVmm: {
      VmmOptions o;
      if (!settings.name.empty()) o.name = settings.name;
      o.limit_bytes = settings.limit_bytes;
      o.cache_bytes = settings.vmm_cache_bytes;
      return std::unique_ptr<Allocator>(std::make_unique<VmmAllocator>(device, o));
    }
  }
  return invalid_argument("unknown allocator kind");
}

}  // namespace memfit
