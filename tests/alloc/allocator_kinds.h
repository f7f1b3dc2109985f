// The allocators every conformance and stress test runs against, each over a simulated device.
#pragma once

#include <memory>

#include "memfit/alloc/bfc_allocator.h"
#include "memfit/alloc/platform_allocator.h"
#include "memfit/alloc/vmm_allocator.h"
#include "memfit/device/simulated_device.h"

namespace memfit::testing {

inline std::unique_ptr<Allocator> make_bfc(DeviceMemory& device, uint64_t limit_bytes, bool growth, bool gc) {
  BfcOptions o;
  o.memory_limit_bytes = limit_bytes;
  o.allow_growth = growth;
  o.garbage_collection = gc;
  o.retry_wait = std::chrono::milliseconds(0);
  return std::make_unique<BfcAllocator>(device, o);
}

struct BfcPreallocated {
  static std::unique_ptr<Allocator> make(DeviceMemory& d, uint64_t limit) {
    return make_bfc(d, limit, false, false);
  }
};
struct BfcGrowth {
  static std::unique_ptr<Allocator> make(DeviceMemory& d, uint64_t limit) {
    return make_bfc(d, limit, true, false);
  }
};
struct BfcGrowthGc {
  static std::unique_ptr<Allocator> make(DeviceMemory& d, uint64_t limit) {
    return make_bfc(d, limit, true, true);
  }
};

struct Platform {
  static std::unique_ptr<Allocator> make(DeviceMemory& device, uint64_t limit_bytes) {
    PlatformOptions o;
    o.limit_bytes = limit_bytes;
    return std::make_unique<PlatformAllocator>(device, o);
  }
};

struct Vmm {
  static std::unique_ptr<Allocator> make(DeviceMemory& device, uint64_t limit_bytes) {
    VmmOptions o;
    o.limit_bytes = limit_bytes;
    return std::make_unique<VmmAllocator>(device, o);
  }
};

inline std::unique_ptr<SimulatedDevice> host_backed_device(uint64_t capacity_bytes) {
  auto d = SimulatedDevice::create({capacity_bytes, 512, true, "sim"});
  if (!d.ok()) std::abort();
  return std::move(d).value();
}

}  // namespace memfit::testing
