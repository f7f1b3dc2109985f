#include <fmt/format.h>
#include <sys/mman.h>

#include <algorithm>
#include <mutex>
#include <optional>
#include <vector>

#include "memfit/device/page_mapper.h"

namespace memfit {
namespace {

// Where ranges start when nothing backs them: high, page-aligned, and never dereferenced.
constexpr uintptr_t kFakeRangeBase = uintptr_t{0x7c0000000000};
// Marks a page a mapping covers after its first (whose slot holds the reservation).
void* const kContinuation = reinterpret_cast<void*>(uintptr_t{1});

class DevicePageMapper final : public PageMapper {
 public:
  DevicePageMapper(DeviceMemory& device, uint64_t granularity_bytes)
      : device_(device), granularity_bytes_(granularity_bytes), next_fake_(kFakeRangeBase) {}

  uint64_t granularity_bytes() const override { return granularity_bytes_; }

  Expected<uintptr_t> reserve_range(uint64_t size_bytes) override {
    if (size_bytes == 0 || size_bytes % granularity_bytes_ != 0)
      return invalid_argument(
          fmt::format("a range of {} B is not a multiple of the {}-B page", size_bytes, granularity_bytes_));
    std::lock_guard<std::mutex> lock(mu_);
    Range r;
    r.size_bytes = size_bytes;
    if (device_.is_host_accessible()) {
      void* p = ::mmap(nullptr, size_bytes, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (p == MAP_FAILED)
        return resource_exhausted(fmt::format("mmap of a {}-byte range failed", size_bytes));
      r.base = reinterpret_cast<uintptr_t>(p);
      r.host = true;
    } else {
      r.base = next_fake_;
      next_fake_ += size_bytes;
    }
    // One slot per page for the reservation mapped there (8 B per 2 MiB page: 4 MiB for a 1 TiB range).
    r.backing.assign(size_bytes / granularity_bytes_, nullptr);
    ranges_.push_back(std::move(r));
    return ranges_.back().base;
  }

  Status free_range(uintptr_t base, uint64_t size_bytes) override {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = ranges_.begin(); it != ranges_.end(); ++it) {
      if (it->base != base) continue;
      if (it->host) ::munmap(reinterpret_cast<void*>(base), size_bytes);
      ranges_.erase(it);
      return ok_status();
    }
    return failed_precondition(fmt::format("free_range of {:#x}, which is not a reserved range", base));
  }

  Status map(uintptr_t address, uint64_t size_bytes) override {
    MEMFIT_ASSIGN_OR_RETURN(void* physical, device_.reserve(size_bytes));
    std::lock_guard<std::mutex> lock(mu_);
    const std::optional<Pages> p = pages_of(address, size_bytes);
    if (!p || std::any_of(p->first, p->end(), [](void* slot) { return slot != nullptr; })) {
      (void)device_.release(physical, size_bytes);
      return failed_precondition(
          fmt::format("map of {:#x} (+{} B): not page-aligned inside a reserved range, or already mapped",
                      address, size_bytes));
    }
    p->first[0] = physical;
    std::fill(p->first + 1, p->end(), kContinuation);
    return ok_status();
  }

  Status unmap(uintptr_t address, uint64_t size_bytes) override {
    if (device_.work_pending_on(address, size_bytes)) {
      return failed_precondition(fmt::format(
          "unmap of {:#x} (+{} B) while work queued on it has not finished", address, size_bytes));
    }
    void* physical = nullptr;
    bool host = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      const std::optional<Pages> p = pages_of(address, size_bytes);
      if (!p || !is_one_mapping(*p))
        return failed_precondition(
            fmt::format("unmap of {:#x} (+{} B), which is not one mapping made by map", address, size_bytes));
      physical = p->first[0];
      std::fill(p->first, p->end(), nullptr);
      host = p->range->host;
    }
    // Drop the host pages too, so a host-backed test sees zeros, as a fresh mapping would give.
    if (host) ::madvise(reinterpret_cast<void*>(address), size_bytes, MADV_DONTNEED);
    return device_.release(physical, size_bytes);
  }

  uint64_t total_bytes() const override { return device_.total_bytes(); }
  uint64_t free_bytes() const override { return device_.free_bytes(); }
  std::string name() const override { return device_.name(); }
  Expected<Event> record_event(uintptr_t stream) override { return device_.record_event(stream); }
  bool event_done(Event event) override { return device_.event_done(event); }
  Status wait_event(Event event) override { return device_.wait_event(event); }
  void release_event(Event event) override { device_.release_event(event); }

 private:
  struct Range {
    uintptr_t base = 0;
    uint64_t size_bytes = 0;
    bool host = false;           // mmap'd host memory
    std::vector<void*> backing;  // per page: the reservation mapped from it (on a mapping's first page)
  };

  // The page slots of [address, +size) in the range holding it.
  struct Pages {
    Range* range;
    void** first;
    uint64_t count;
    void** end() const { return first + count; }
  };
  // None unless [address, +size) is whole pages inside one reserved range.
  std::optional<Pages> pages_of(uintptr_t address, uint64_t size_bytes) {
    for (Range& r : ranges_) {
      if (address < r.base || address - r.base >= r.size_bytes) continue;
      const uint64_t offset = address - r.base;
      if (size_bytes == 0 || size_bytes % granularity_bytes_ != 0 || offset % granularity_bytes_ != 0 ||
          size_bytes > r.size_bytes - offset)
        return std::nullopt;
      return Pages{&r, &r.backing[offset / granularity_bytes_], size_bytes / granularity_bytes_};
    }
    return std::nullopt;
  }

  // Whether the pages are exactly one mapping: its first page, then all of its others, and no more.
  static bool is_one_mapping(const Pages& p) {
    if (p.first[0] == nullptr || p.first[0] == kContinuation) return false;
    if (!std::all_of(p.first + 1, p.end(), [](void* slot) { return slot == kContinuation; })) return false;
    return p.end() == p.range->backing.data() + p.range->backing.size() || *p.end() != kContinuation;
  }

  DeviceMemory& device_;
  const uint64_t granularity_bytes_;
  std::mutex mu_;
  uintptr_t next_fake_;
  std::vector<Range> ranges_;  // a VMM pool reserves one
};

}  // namespace

std::unique_ptr<PageMapper> make_device_page_mapper(DeviceMemory& device, uint64_t granularity_bytes) {
  return std::make_unique<DevicePageMapper>(device, granularity_bytes);
}

}  // namespace memfit
