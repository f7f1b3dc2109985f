#include "memfit/c/memfit_alloc.h"

#include <fmt/format.h>

#include <array>
#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>

#include "memfit/alloc/allocator.h"
#include "memfit/alloc/allocator_factory.h"
#include "memfit/alloc/async_allocator.h"
#include "memfit/alloc/vmm_allocator.h"
#include "memfit/alloc/xla_allocator.h"
#include "memfit/core/bytes.h"
#include "memfit/core/device_catalog.h"
#include "memfit/core/environment.h"
#include "memfit/core/json.h"
#include "memfit/core/xla_env.h"
#include "memfit/device/cuda_device.h"
#include "memfit/device/cuda_page_mapper.h"
#include "memfit/device/simulated_device.h"
#include "memfit/share/leased_device.h"
#include "memfit/share/share_member.h"

namespace {

using memfit::Allocator;
using memfit::DeviceMemory;
using memfit::Expected;

constexpr int kMaxDevices = 64;

// Made once per device and never freed (the process may exit while other threads allocate).
struct PerDevice {
  std::unique_ptr<DeviceMemory> device;
  std::unique_ptr<memfit::ShareMember> member;  // MEMFIT_SHARE: the lease the pool grows in
  std::unique_ptr<memfit::LeasedDevice> leased;
  std::unique_ptr<Allocator> allocator;
  memfit::VmmAllocator* vmm = nullptr;  // the allocator, when it is the page-mapped pool (stream-ordered)
};

std::mutex g_create_mutex;  // guards creation only: an allocation finds its device with one atomic load
std::array<std::atomic<PerDevice*>, kMaxDevices> g_devices{};
thread_local std::string t_last_error;

// Joins the group of `o` (MEMFIT_SHARE, read once by the caller), with the allocator's limit as the most it
// may lease; none when no group is set.
Expected<std::unique_ptr<memfit::ShareMember>> join_group(memfit::ShareMemberOptions o,
                                                          const DeviceMemory& memory, bool simulated,
                                                          uint64_t limit_bytes) {
  if (o.group.empty()) return std::unique_ptr<memfit::ShareMember>();
  // A simulated device is all the group's; a GPU's group has what was free when it was made, less room for
  // the CUDA contexts of members still to come.
  const uint64_t free = memory.free_bytes();
  o.capacity_bytes =
      simulated ? memory.total_bytes() : free - std::min(free, memfit::kShareContextMarginBytes);
  o.device_name = memory.name();
  o.limit_bytes = std::max<uint64_t>(limit_bytes, 1);
  return memfit::ShareMember::join(o);
}

Expected<PerDevice*> create_device(int device) {
  auto d = std::make_unique<PerDevice>();
  const memfit::Environment env = memfit::Environment::from_process();
  MEMFIT_ASSIGN_OR_RETURN(memfit::XlaAllocatorConfig config, memfit::parse_xla_allocator_env(env));
  MEMFIT_ASSIGN_OR_RETURN(memfit::ShareMemberOptions share, memfit::share_options_from_env(env, device));
  const auto simulated_bytes = env.get("MEMFIT_SIMULATED_BYTES");
  const bool simulated = simulated_bytes && !simulated_bytes->empty();
  if (simulated) {
    MEMFIT_ASSIGN_OR_RETURN(uint64_t bytes, memfit::parse_capacity(std::string(*simulated_bytes)));
    memfit::SimulatedDeviceOptions o;
    o.capacity_bytes = bytes;
    o.name = fmt::format("simulated GPU {}", device);
    MEMFIT_ASSIGN_OR_RETURN(auto sim, memfit::SimulatedDevice::create(o));
    d->device = std::move(sim);
  } else {
    MEMFIT_ASSIGN_OR_RETURN(auto gpu, memfit::CudaDevice::create(device));
    if (config.kind == memfit::XlaAllocatorKind::kCudaAsync) {
      if (!share.group.empty())
        return memfit::invalid_argument(
            "MEMFIT_SHARE works with the bfc, platform and vmm allocators: cudaMallocAsync's pool grows "
            "inside "
            "the driver, where a lease cannot bound it");
      // cudaMallocAsync's pool, with the limit JAX reports enforced and memory kept across synchronizes.
      memfit::AsyncOptions o;
      o.limit_bytes = *memfit::plan_xla_allocator(config, gpu->total_bytes()).limit_bytes;
      MEMFIT_ASSIGN_OR_RETURN(d->allocator, memfit::AsyncAllocator::create(*gpu, o));
      d->device = std::move(gpu);
      return d.release();
    }
    d->device = std::move(gpu);
  }
  MEMFIT_ASSIGN_OR_RETURN(auto chosen, memfit::xla_allocator_settings(config, d->device->total_bytes(),
                                                                      std::chrono::milliseconds(0)));
  auto& [kind, settings] = chosen;
  MEMFIT_ASSIGN_OR_RETURN(
      d->member, join_group(share, *d->device, simulated,
                            settings.limit_bytes != 0 ? settings.limit_bytes : d->device->total_bytes()));
  DeviceMemory* memory = d->device.get();
  if (d->member) {
    d->leased = std::make_unique<memfit::LeasedDevice>(*d->device, *d->member);
    memory = d->leased.get();
    // A shared pool gives memory back as whole free regions: a preallocated pool is reserved as regions of
    // kShareRegionBytes (not one region of the whole limit), growth stops doubling there, and a pool short
    // of lease returns its own free regions before it fails.
    settings.region_cap_bytes = memfit::kShareRegionBytes;
    settings.garbage_collection = true;
  }
  if (kind == memfit::AllocatorKind::kVmm) {
    memfit::VmmOptions o;
    o.name = fmt::format("GPU_{}_vmm", device);
    o.limit_bytes = settings.limit_bytes;
    if (auto cache = env.get("MEMFIT_VMM_CACHE"); cache && !cache->empty()) {
      auto bytes = memfit::parse_bytes(*cache);
      if (!bytes.ok()) return bytes.error().with_context("MEMFIT_VMM_CACHE");
      o.cache_bytes = *bytes;
    }
    std::unique_ptr<memfit::VmmAllocator> vmm;
    if (simulated) {
      vmm = std::make_unique<memfit::VmmAllocator>(*memory, o);
    } else {  // cuMemCreate/cuMemMap pages of the real GPU
      MEMFIT_ASSIGN_OR_RETURN(std::unique_ptr<memfit::PageMapper> mapper,
                              memfit::CudaPageMapper::create(device));
      if (d->member) mapper = memfit::make_leased_page_mapper(std::move(mapper), *d->member);
      vmm = std::make_unique<memfit::VmmAllocator>(std::move(mapper), o);
    }
    d->vmm = vmm.get();
    d->allocator = std::move(vmm);
  } else {
    MEMFIT_ASSIGN_OR_RETURN(d->allocator, memfit::make_allocator(kind, *memory, settings));
  }
  if (d->member) {
    Allocator* a = d->allocator.get();
    d->member->set_hooks({[a] {
                            const memfit::AllocatorStats s = a->stats();
                            return memfit::ShareMember::Usage{s.bytes_in_use, s.peak_bytes_in_use};
                          },
                          [a](uint64_t wanted) { return a->release_free_memory(wanted); }});
  }
  return d.release();
}

Expected<PerDevice*> device_for(int device) {
  if (device < 0 || device >= kMaxDevices)
    return memfit::invalid_argument(fmt::format("device {} is out of range", device));
  std::atomic<PerDevice*>& slot = g_devices[static_cast<size_t>(device)];
  if (PerDevice* d = slot.load(std::memory_order_acquire)) [[likely]]
    return d;
  std::lock_guard<std::mutex> lock(g_create_mutex);
  if (PerDevice* d = slot.load(std::memory_order_acquire)) return d;
  MEMFIT_ASSIGN_OR_RETURN(PerDevice * d, create_device(device));
  slot.store(d, std::memory_order_release);
  return d;
}

// The device's allocator when it has been made (no creation, no lock).
PerDevice* existing(int device) {
  if (device < 0 || device >= kMaxDevices) return nullptr;
  return g_devices[static_cast<size_t>(device)].load(std::memory_order_acquire);
}

int copy_out(const std::string& text, char* buffer, size_t capacity) {
  if (buffer != nullptr && capacity > 0) {
    const size_t n = std::min(text.size(), capacity - 1);
    std::memcpy(buffer, text.data(), n);
    buffer[n] = '\0';
  }
  return static_cast<int>(std::min<size_t>(text.size(), 0x7fffffff));
}

std::string describe(const memfit::Error& e) {
  if (const auto* detail = e.detail(); detail != nullptr) return detail->to_text();
  return e.message();
}

}  // namespace

extern "C" {

void* memfit_alloc(ssize_t size, int device, void* stream) {
  if (size < 0) {
    t_last_error = fmt::format("memfit_alloc: negative size {}", size);
    return nullptr;
  }
  auto d = device_for(device);
  if (!d.ok()) {
    t_last_error = describe(d.error());
    return nullptr;
  }
  // The page-mapped pool orders its page release on the stream; the others serve one compute stream, as
  // XLA's allocators do.
  auto ptr = (*d)->vmm != nullptr
                 ? (*d)->vmm->allocate_on(static_cast<uint64_t>(size), reinterpret_cast<uintptr_t>(stream))
                 : (*d)->allocator->allocate(static_cast<uint64_t>(size), "memfit_alloc");
  if (!ptr.ok()) {
    t_last_error = describe(ptr.error());
    return nullptr;
  }
  return *ptr;
}

void memfit_free(void* ptr, ssize_t /*size*/, int device, void* stream) {
  if (ptr == nullptr) return;
  auto d = device_for(device);
  if (!d.ok()) {
    t_last_error = describe(d.error());
    return;
  }
  const memfit::Status freed = (*d)->vmm != nullptr
                                   ? (*d)->vmm->deallocate_on(ptr, reinterpret_cast<uintptr_t>(stream))
                                   : (*d)->allocator->deallocate(ptr);
  if (!freed.ok()) t_last_error = describe(freed.error());
}

int memfit_empty_cache(int device) {
  PerDevice* d = existing(device);
  if (d == nullptr) return -1;
  if (d->vmm == nullptr) return 0;  // the BFC and platform pools keep no cache apart from their pool
  if (auto s = d->vmm->trim_cache(0); !s.ok()) {
    t_last_error = describe(s.error());
    return -1;
  }
  return 0;
}

int memfit_stats_json(int device, char* buffer, size_t capacity) {
  PerDevice* d = existing(device);
  if (d == nullptr) return -1;
  memfit::AllocatorStats stats = d->allocator->stats();
  nlohmann::json j = stats.to_json();
  if (d->member) {
    // In a group the limit is the lease: what the process holds a promise of, never more than it can get.
    j["bytes_limit"] = std::min(stats.bytes_limit.value_or(~uint64_t{0}), d->member->lease_bytes());
    j["share_group"] = d->member->options().group;
    j["lease_bytes"] = d->member->lease_bytes();
  }
  return copy_out(memfit::json_text(j), buffer, capacity);
}

int memfit_last_error(char* buffer, size_t capacity) { return copy_out(t_last_error, buffer, capacity); }

void memfit_reset_peak(int device) {
  if (PerDevice* d = existing(device)) d->allocator->reset_peak();
}

}  // extern "C"
