#include <fmt/format.h>
#include <sys/mman.h>

#include <mutex>
#include <unordered_map>

#include "memfit/device/page_mapper.h"

namespace memfit {
namespace {

// Where ranges start when nothing backs them: high, page-aligned, and never dereferenced.
constexpr uintptr_t kFakeRangeBase = uintptr_t{0x7c0000000000};

class DevicePageMapper final : public PageMapper {
 public:
  DevicePageMapper(DeviceMemory& device, uint64_t granularity_bytes)
      : device_(device), granularity_bytes_(granularity_bytes), next_fake_(kFakeRangeBase) {}

  uint64_t granularity_bytes() const override { return granularity_bytes_; }

  Expected<uintptr_t> reserve_range(uint64_t size_bytes) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (device_.is_host_accessible()) {
      void* p = ::mmap(nullptr, size_bytes, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (p == MAP_FAILED)
        return resource_exhausted(fmt::format("mmap of a {}-byte range failed", size_bytes));
      host_ranges_.emplace(reinterpret_cast<uintptr_t>(p), size_bytes);
      return reinterpret_cast<uintptr_t>(p);
    }
    const uintptr_t base = next_fake_;
    next_fake_ += size_bytes;
    return base;
  }

  Status free_range(uintptr_t base, uint64_t size_bytes) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (host_ranges_.erase(base) > 0) ::munmap(reinterpret_cast<void*>(base), size_bytes);
    return ok_status();
  }

  Status map(uintptr_t address, uint64_t size_bytes) override {
    MEMFIT_ASSIGN_OR_RETURN(void* physical, device_.reserve(size_bytes));
    std::lock_guard<std::mutex> lock(mu_);
    backing_[address] = physical;
    return ok_status();
  }

  Status unmap(uintptr_t address, uint64_t size_bytes) override {
    void* physical = nullptr;
    bool host = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = backing_.find(address);
      if (it == backing_.end())
        return failed_precondition(fmt::format("unmap of {:#x}, which is not mapped", address));
      physical = it->second;
      backing_.erase(it);
      host = !host_ranges_.empty();
    }
    // Drop the host pages too, so a host-backed test sees zeros, as a fresh mapping would give.
    if (host) ::madvise(reinterpret_cast<void*>(address), size_bytes, MADV_DONTNEED);
    return device_.release(physical, size_bytes);
  }

  uint64_t total_bytes() const override { return device_.total_bytes(); }
  uint64_t free_bytes() const override { return device_.free_bytes(); }
  std::string name() const override { return device_.name(); }

 private:
  DeviceMemory& device_;
  const uint64_t granularity_bytes_;
  std::mutex mu_;
  uintptr_t next_fake_;
  std::unordered_map<uintptr_t, uint64_t> host_ranges_;  // mmap'd ranges: base -> bytes
  std::unordered_map<uintptr_t, void*> backing_;         // mapped address -> the device reservation behind it
};

}  // namespace

std::unique_ptr<PageMapper> make_device_page_mapper(DeviceMemory& device, uint64_t granularity_bytes) {
  return std::make_unique<DevicePageMapper>(device, granularity_bytes);
}

}  // namespace memfit
