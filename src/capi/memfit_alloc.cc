#include "memfit/c/memfit_alloc.h"

#include <fmt/format.h>

#include <array>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>

#include "memfit/alloc/allocator.h"
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

namespace {

using memfit::Allocator;
using memfit::DeviceMemory;
using memfit::Expected;

constexpr int kMaxDevices = 64;

struct PerDevice {
  std::unique_ptr<DeviceMemory> device;
  std::unique_ptr<Allocator> allocator;
  memfit::VmmAllocator* vmm = nullptr;  // the allocator, when it is the page-mapped pool (stream-ordered)
};

std::mutex g_mutex;  // guards creation; the allocators are thread-safe themselves
std::array<PerDevice, kMaxDevices> g_devices;
thread_local std::string t_last_error;

Expected<PerDevice*> device_for(int device) {
  if (device < 0 || device >= kMaxDevices)
    return memfit::invalid_argument(fmt::format("device {} is out of range", device));
  std::lock_guard<std::mutex> lock(g_mutex);
  PerDevice& d = g_devices[static_cast<size_t>(device)];
  if (d.allocator) return &d;
  const memfit::Environment env = memfit::Environment::from_process();
  MEMFIT_ASSIGN_OR_RETURN(memfit::XlaAllocatorConfig config, memfit::parse_xla_allocator_env(env));
  if (auto simulated = env.get("MEMFIT_SIMULATED_BYTES"); simulated && !simulated->empty()) {
    MEMFIT_ASSIGN_OR_RETURN(uint64_t bytes, memfit::parse_capacity(std::string(*simulated)));
    memfit::SimulatedDeviceOptions o;
    o.capacity_bytes = bytes;
    o.name = fmt::format("simulated GPU {}", device);
    MEMFIT_ASSIGN_OR_RETURN(auto sim, memfit::SimulatedDevice::create(o));
    d.device = std::move(sim);
  } else {
    MEMFIT_ASSIGN_OR_RETURN(auto gpu, memfit::CudaDevice::create(device));
    if (config.kind == memfit::XlaAllocatorKind::kCudaAsync) {
      // cudaMallocAsync's pool, with the limit JAX reports enforced and memory kept across synchronizes.
      memfit::AsyncOptions o;
      o.limit_bytes = *memfit::plan_xla_allocator(config, gpu->total_bytes()).limit_bytes;
      MEMFIT_ASSIGN_OR_RETURN(d.allocator, memfit::AsyncAllocator::create(*gpu, o));
      d.device = std::move(gpu);
      return &d;
    }
    d.device = std::move(gpu);
  }
  if (config.kind == memfit::XlaAllocatorKind::kVmm) {
    // Capped at the fraction, as XLA's vmm mode is; nothing is reserved up front.
    memfit::VmmOptions o;
    o.name = fmt::format("GPU_{}_vmm", device);
    o.limit_bytes = *memfit::plan_xla_allocator(config, d.device->total_bytes()).limit_bytes;
    if (auto cache = env.get("MEMFIT_VMM_CACHE"); cache && !cache->empty()) {
      auto bytes = memfit::parse_bytes(*cache);
      if (!bytes.ok()) return bytes.error().with_context("MEMFIT_VMM_CACHE");
      o.cache_bytes = *bytes;
    }
    std::unique_ptr<memfit::VmmAllocator> vmm;
    if (env.get("MEMFIT_SIMULATED_BYTES")) {
      vmm = std::make_unique<memfit::VmmAllocator>(*d.device, o);
    } else {  // cuMemCreate/cuMemMap pages of the real GPU
      MEMFIT_ASSIGN_OR_RETURN(auto mapper, memfit::CudaPageMapper::create(device));
      vmm = std::make_unique<memfit::VmmAllocator>(std::move(mapper), o);
    }
    d.vmm = vmm.get();
    d.allocator = std::move(vmm);
  } else {
    MEMFIT_ASSIGN_OR_RETURN(d.allocator,
                            memfit::make_xla_allocator(config, *d.device, std::chrono::milliseconds(0)));
  }
  return &d;
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
  if (device < 0 || device >= kMaxDevices) return -1;
  memfit::VmmAllocator* vmm = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    PerDevice& d = g_devices[static_cast<size_t>(device)];
    if (!d.allocator) return -1;
    vmm = d.vmm;
  }
  if (vmm == nullptr) return 0;  // the BFC and platform pools keep no cache apart from their pool
  if (auto s = vmm->trim_cache(0); !s.ok()) {
    t_last_error = describe(s.error());
    return -1;
  }
  return 0;
}

int memfit_stats_json(int device, char* buffer, size_t capacity) {
  if (device < 0 || device >= kMaxDevices) return -1;
  Allocator* a = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    a = g_devices[static_cast<size_t>(device)].allocator.get();
  }
  if (a == nullptr) return -1;
  return copy_out(memfit::json_text(a->stats().to_json()), buffer, capacity);
}

int memfit_last_error(char* buffer, size_t capacity) { return copy_out(t_last_error, buffer, capacity); }

void memfit_reset_peak(int device) {
  if (device < 0 || device >= kMaxDevices) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  if (Allocator* a = g_devices[static_cast<size_t>(device)].allocator.get()) a->reset_peak();
}

}  // extern "C"
