#include "memfit/alloc/vmm_allocator.h"

#include <fmt/format.h>
#include <sys/mman.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <set>
#include <unordered_map>
#include <vector>

#include "memfit/alloc/oom_report.h"
#include "memfit/core/checked.h"

namespace memfit {
namespace {
constexpr uintptr_t kFakeVirtualBase = uintptr_t{0x7c0000000000};
constexpr uint64_t kMaxRequestBytes = uint64_t{1} << 62;
}  // namespace

struct VmmAllocator::State {
  State(DeviceMemory& d, VmmOptions o) : device(d), options(std::move(o)) {
    if (options.limit_bytes == 0) options.limit_bytes = device.total_bytes();
    if (options.virtual_bytes == 0) options.virtual_bytes = 4 * device.total_bytes();
    options.virtual_bytes = round_up(options.virtual_bytes, options.page_bytes);
    base = kFakeVirtualBase;
    if (device.is_host_accessible()) {
      void* p = ::mmap(nullptr, options.virtual_bytes, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (p != MAP_FAILED) {
        base = reinterpret_cast<uintptr_t>(p);
        host_mapped = true;
      }
    }
    free_by_offset.emplace(0, options.virtual_bytes);
    free_by_size.emplace(options.virtual_bytes, 0);
  }

  struct Page {
    uint32_t users = 0;        // live buffers touching this page
    void* physical = nullptr;  // the device reservation backing it
  };
  struct Live {
    uint64_t offset;
    uint64_t size;  // rounded
  };

  DeviceMemory& device;
  VmmOptions options;
  uintptr_t base = 0;
  bool host_mapped = false;

  mutable std::mutex mu;  // held across page mapping: mapping is part of the placement decision
  std::map<uint64_t, uint64_t> free_by_offset;
  std::set<std::pair<uint64_t, uint64_t>> free_by_size;  // (size, offset): best fit, lowest address
  std::unordered_map<uint64_t, Page> pages;              // only pages in use: the virtual range may be huge
  std::unordered_map<uintptr_t, Live> live;
  AllocatorStats stats;
  uint64_t mapped_bytes = 0;
  uint64_t peak_mapped_bytes = 0;

  uint64_t first_page(uint64_t offset) const { return offset / options.page_bytes; }
  uint64_t last_page(uint64_t offset, uint64_t size) const {
    return (offset + size - 1) / options.page_bytes;
  }

  // Maps the pages [offset, offset + size) needs; on failure unmaps what it mapped and reports why.
  Status map_pages(uint64_t offset, uint64_t size) {
    const uint64_t first = first_page(offset);
    const uint64_t last = last_page(offset, size);
    uint64_t new_pages = 0;
    for (uint64_t p = first; p <= last; ++p) new_pages += pages.contains(p) ? 0 : 1;
    if (mapped_bytes + new_pages * options.page_bytes > options.limit_bytes) {
      return resource_exhausted(fmt::format("{} more pages would pass the limit", new_pages));
    }
    for (uint64_t p = first; p <= last; ++p) {
      if (auto it = pages.find(p); it != pages.end()) {
        ++it->second.users;
        continue;
      }
      auto physical = device.reserve(options.page_bytes);
      if (!physical.ok()) {
        for (uint64_t q = first; q < p; ++q) unuse_page(q);
        return physical.error();
      }
      pages.emplace(p, Page{1, *physical});
      mapped_bytes += options.page_bytes;
    }
    peak_mapped_bytes = std::max(peak_mapped_bytes, mapped_bytes);
    return ok_status();
  }

  void unuse_page(uint64_t p) {
    auto it = pages.find(p);
    if (--it->second.users > 0) return;
    (void)device.release(it->second.physical, options.page_bytes);
    pages.erase(it);
    mapped_bytes -= options.page_bytes;
    if (host_mapped)
      ::madvise(reinterpret_cast<void*>(base + p * options.page_bytes), options.page_bytes, MADV_DONTNEED);
  }

  void insert_free(uint64_t offset, uint64_t size) {
    auto next = free_by_offset.lower_bound(offset);
    if (next != free_by_offset.end() && next->first == offset + size) {
      free_by_size.erase({next->second, next->first});
      size += next->second;
      next = free_by_offset.erase(next);
    }
    if (next != free_by_offset.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second == offset) {
        free_by_size.erase({prev->second, prev->first});
        offset = prev->first;
        size += prev->second;
        free_by_offset.erase(prev);
      }
    }
    free_by_offset.emplace(offset, size);
    free_by_size.emplace(size, offset);
  }

  Error oom(uint64_t requested, uint64_t rounded, const std::string& why) const {
    auto r = std::make_shared<OomReport>();
    r->allocator_name = options.name;
    r->requested_bytes = requested;
    r->rounded_bytes = rounded;
    r->bytes_in_use = stats.bytes_in_use;
    r->live_allocations = live.size();
    r->pool_bytes = mapped_bytes;
    r->bytes_limit = options.limit_bytes;
    r->device_total_bytes = device.total_bytes();
    r->device_free_bytes = device.free_bytes();
    r->growth = true;
    explain_oom(*r);
    r->cause += " (" + why + ")";
    std::string message = r->summary();
    return resource_exhausted(std::move(message), std::move(r));
  }
};

VmmAllocator::VmmAllocator(DeviceMemory& device, VmmOptions options)
    : state_(std::make_unique<State>(device, std::move(options))) {}

VmmAllocator::~VmmAllocator() {
  State& s = *state_;
  for (auto& [index, page] : s.pages) (void)s.device.release(page.physical, s.options.page_bytes);
  if (s.host_mapped) ::munmap(reinterpret_cast<void*>(s.base), s.options.virtual_bytes);
}

std::string VmmAllocator::name() const { return state_->options.name; }

Expected<void*> VmmAllocator::allocate(uint64_t size_bytes, std::string_view /*tag*/) {
  if (size_bytes == 0) return static_cast<void*>(nullptr);
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mu);
  if (size_bytes > kMaxRequestBytes) return s.oom(size_bytes, size_bytes, "larger than any device");
  const uint64_t rounded = round_up(size_bytes, kAllocationAlignment);
  auto fit = s.free_by_size.lower_bound({rounded, 0});
  if (fit == s.free_by_size.end()) return s.oom(size_bytes, rounded, "no virtual range left");
  const auto [hole_size, offset] = *fit;
  if (Status mapped = s.map_pages(offset, rounded); !mapped.ok()) {
    return s.oom(size_bytes, rounded, mapped.error().message());
  }
  s.free_by_size.erase(fit);
  s.free_by_offset.erase(offset);
  if (hole_size > rounded) {
    s.free_by_offset.emplace(offset + rounded, hole_size - rounded);
    s.free_by_size.emplace(hole_size - rounded, offset + rounded);
  }
  const uintptr_t address = s.base + offset;
  s.live.emplace(address, State::Live{offset, rounded});
  ++s.stats.num_allocs;
  s.stats.bytes_in_use += rounded;
  s.stats.peak_bytes_in_use = std::max(s.stats.peak_bytes_in_use, s.stats.bytes_in_use);
  s.stats.largest_alloc_size = std::max(s.stats.largest_alloc_size, rounded);
  return reinterpret_cast<void*>(address);
}

Status VmmAllocator::deallocate(void* ptr) {
  if (ptr == nullptr) return ok_status();
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.live.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == s.live.end()) {
    return failed_precondition(fmt::format(
        "{}: deallocate({}) of a pointer it did not allocate or already freed", s.options.name, ptr));
  }
  const State::Live l = it->second;
  s.live.erase(it);
  s.stats.bytes_in_use -= l.size;
  for (uint64_t p = s.first_page(l.offset); p <= s.last_page(l.offset, l.size); ++p) s.unuse_page(p);
  s.insert_free(l.offset, l.size);
  return ok_status();
}

AllocatorStats VmmAllocator::stats() const {
  const State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mu);
  AllocatorStats out = s.stats;
  out.bytes_limit = s.options.limit_bytes;
  out.pool_bytes = s.mapped_bytes;
  out.peak_pool_bytes = s.peak_mapped_bytes;
  out.largest_free_block_bytes = s.options.limit_bytes - s.mapped_bytes;
  return out;
}

void VmmAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->stats.peak_bytes_in_use = state_->stats.bytes_in_use;
  state_->peak_mapped_bytes = state_->mapped_bytes;
}

}  // namespace memfit
