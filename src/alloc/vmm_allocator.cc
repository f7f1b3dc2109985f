#include "memfit/alloc/vmm_allocator.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "memfit/alloc/bfc_allocator.h"
#include "memfit/alloc/oom_report.h"
#include "memfit/core/checked.h"
#include "ptr_map.h"

namespace memfit {
namespace {
constexpr uint64_t kMaxRequestBytes = uint64_t{1} << 62;

// The virtual range as a "device" of one reservation, so that XLA's BFC (best fit, coalescing, binned, with
// its in-place fast path) places buffers in it. Only address space: physical pages are the VMM's business.
class VirtualRange final : public DeviceMemory {
 public:
  VirtualRange(uintptr_t base, uint64_t size_bytes) : base_(base), size_bytes_(size_bytes) {}
  Expected<void*> reserve(uint64_t size_bytes) override {
    if (taken_ || size_bytes > size_bytes_) return resource_exhausted("no virtual range left");
    taken_ = true;
    return reinterpret_cast<void*>(base_);
  }
  Status release(void*, uint64_t) override {
    taken_ = false;
    return ok_status();
  }
  uint64_t total_bytes() const override { return size_bytes_; }
  uint64_t free_bytes() const override { return taken_ ? 0 : size_bytes_; }
  std::string name() const override { return "virtual range"; }

 private:
  uintptr_t base_;
  uint64_t size_bytes_;
  bool taken_ = false;  // touched only under the VMM's lock
};

BfcOptions virtual_placement(uint64_t virtual_bytes) {
  BfcOptions o;
  o.name = "vmm_virtual";
  o.memory_limit_bytes = virtual_bytes;
  o.allow_growth = false;
  o.retry_wait = std::chrono::milliseconds(0);
  // Always split off the rest: unused virtual tails would otherwise keep neighbours off their pages.
  o.max_internal_fragmentation_bytes = kAllocationAlignment;
  return o;
}
}  // namespace

struct VmmAllocator::State {
  State(std::unique_ptr<PageMapper> m, VmmOptions o) : mapper(std::move(m)), options(std::move(o)) {
    const uint64_t granularity = std::max<uint64_t>(mapper->granularity_bytes(), 1);
    options.page_bytes = round_up(std::max(options.page_bytes, granularity), granularity);
    if (options.limit_bytes == 0) options.limit_bytes = mapper->total_bytes();
    if (options.virtual_bytes == 0) options.virtual_bytes = 4 * mapper->total_bytes();
    options.virtual_bytes = round_up(options.virtual_bytes, options.page_bytes);
    Expected<uintptr_t> reserved = mapper->reserve_range(options.virtual_bytes);
    if (!reserved.ok()) {
      unusable = reserved.error().message();
      return;
    }
    base = *reserved;
    range = std::make_unique<VirtualRange>(base, options.virtual_bytes);
    placement = std::make_unique<BfcAllocator>(*range, virtual_placement(options.virtual_bytes));
  }

  struct Page {
    uint64_t index = 0;  // page number in the virtual range
    uint32_t users = 0;  // live buffers touching this page
  };
  struct Live {
    uint64_t offset;
    uint64_t size;           // rounded
    uint64_t run_pages = 0;  // interior pages, mapped as one range (no other buffer may share them)
  };

  std::unique_ptr<PageMapper> mapper;
  VmmOptions options;
  uintptr_t base = 0;
  std::string unusable;  // why the virtual range could not be reserved (every allocation then fails)

  mutable std::mutex mu;  // held across page mapping: mapping is part of the placement decision
  // Where buffers go in the virtual range: XLA's best fit with coalescing (see bfc_allocator.h).
  std::unique_ptr<VirtualRange> range;
  std::unique_ptr<BfcAllocator> placement;
  // Edge pages in use (the virtual range may be huge, so only these are kept): page index -> slot.
  detail::PtrMap page_slots;
  std::vector<Page> page_pool;
  std::vector<uint32_t> free_page_slots;
  // Live buffers: address -> slot.
  detail::PtrMap live_slots;
  std::vector<Live> live_pool;
  std::vector<uint32_t> free_live_slots;

  static uintptr_t page_key(uint64_t p) { return (p + 1) << 8; }  // nonzero, as PtrMap needs
  Page* find_page(uint64_t p) {
    const uint32_t slot = page_slots.find(page_key(p));
    return slot == detail::PtrMap::kNotFound ? nullptr : &page_pool[slot];
  }
  uintptr_t page_address(uint64_t p) const { return base + p * options.page_bytes; }
  void add_page(uint64_t p, Page page) {
    uint32_t slot;
    if (!free_page_slots.empty()) {
      slot = free_page_slots.back();
      free_page_slots.pop_back();
      page_pool[slot] = page;
    } else {
      slot = static_cast<uint32_t>(page_pool.size());
      page_pool.push_back(page);
    }
    page_slots.insert(page_key(p), slot);
  }
  AllocatorStats stats;
  uint64_t mapped_bytes = 0;
  uint64_t peak_mapped_bytes = 0;

  uint64_t first_page(uint64_t offset) const { return offset / options.page_bytes; }
  uint64_t last_page(uint64_t offset, uint64_t size) const {
    return (offset + size - 1) / options.page_bytes;
  }

  // Pages wholly inside [offset, offset + size): only this buffer can use them while it lives, so they are
  // backed by one physical range (one device call, like one cuMemCreate of n pages). The 0-2 edge pages may
  // be shared with neighbours and are reference-counted one by one.
  std::pair<uint64_t, uint64_t> interior(uint64_t offset, uint64_t size) const {
    const uint64_t first = (offset + options.page_bytes - 1) / options.page_bytes;
    const uint64_t end = (offset + size) / options.page_bytes;
    return {first, end > first ? end - first : 0};
  }

  // Maps what [offset, offset + size) needs; on failure unmaps what it mapped and reports why.
  Status map_pages(uint64_t offset, uint64_t size, Live& buffer) {
    const auto [run_first, run_pages] = interior(offset, size);
    // At most two edge pages: the first and the last, when partly covered.
    std::array<uint64_t, 2> edges{};
    size_t edge_count = 0;
    const uint64_t first = first_page(offset);
    const uint64_t last = last_page(offset, size);
    if (run_pages == 0 || first < run_first) edges[edge_count++] = first;
    if (last != first && (run_pages == 0 || last >= run_first + run_pages)) edges[edge_count++] = last;
    uint64_t new_pages = run_pages;
    for (size_t i = 0; i < edge_count; ++i) new_pages += find_page(edges[i]) != nullptr ? 0 : 1;
    if (mapped_bytes + new_pages * options.page_bytes > options.limit_bytes) {
      return resource_exhausted(fmt::format("{} more pages would pass the limit", new_pages));
    }
    if (run_pages > 0) {
      MEMFIT_RETURN_IF_ERROR(mapper->map(page_address(run_first), run_pages * options.page_bytes));
      buffer.run_pages = run_pages;
      mapped_bytes += run_pages * options.page_bytes;
    }
    for (size_t i = 0; i < edge_count; ++i) {
      const uint64_t p = edges[i];
      if (Page* page = find_page(p)) {
        ++page->users;
        continue;
      }
      if (Status mapped = mapper->map(page_address(p), options.page_bytes); !mapped.ok()) {
        for (size_t k = 0; k < i; ++k) unuse_page(edges[k]);
        unmap_run(buffer);
        return mapped.error();
      }
      add_page(p, Page{p, 1});
      mapped_bytes += options.page_bytes;
    }
    peak_mapped_bytes = std::max(peak_mapped_bytes, mapped_bytes);
    return ok_status();
  }

  void unmap_run(Live& buffer) {
    if (buffer.run_pages == 0) return;
    const uint64_t run_first = interior(buffer.offset, buffer.size).first;
    (void)mapper->unmap(page_address(run_first), buffer.run_pages * options.page_bytes);
    mapped_bytes -= buffer.run_pages * options.page_bytes;
    buffer.run_pages = 0;
  }

  void unmap_pages(Live& buffer) {
    const auto [run_first, run_pages] = interior(buffer.offset, buffer.size);
    for (uint64_t p = first_page(buffer.offset); p <= last_page(buffer.offset, buffer.size); ++p) {
      if (run_pages > 0 && p == run_first) {
        p = run_first + run_pages - 1;
        continue;
      }
      unuse_page(p);
    }
    unmap_run(buffer);
  }

  void unuse_page(uint64_t p) {
    const uint32_t slot = page_slots.find(page_key(p));
    Page& page = page_pool[slot];
    if (--page.users > 0) return;
    (void)mapper->unmap(page_address(p), options.page_bytes);
    page_slots.erase(page_key(p));
    free_page_slots.push_back(slot);
    mapped_bytes -= options.page_bytes;
  }

  Error oom(uint64_t requested, uint64_t rounded, const std::string& why) const {
    auto r = std::make_shared<OomReport>();
    r->allocator_name = options.name;
    r->requested_bytes = requested;
    r->rounded_bytes = rounded;
    r->bytes_in_use = stats.bytes_in_use;
    r->live_allocations = live_slots.size();
    r->pool_bytes = mapped_bytes;
    r->bytes_limit = options.limit_bytes;
    r->device_total_bytes = mapper->total_bytes();
    r->device_free_bytes = mapper->free_bytes();
    r->growth = true;
    explain_oom(*r);
    r->cause += " (" + why + ")";
    std::string message = r->summary();
    return resource_exhausted(std::move(message), std::move(r));
  }
};

VmmAllocator::VmmAllocator(std::unique_ptr<PageMapper> mapper, VmmOptions options)
    : state_(std::make_unique<State>(std::move(mapper), std::move(options))) {}

VmmAllocator::VmmAllocator(DeviceMemory& device, VmmOptions options)
    : VmmAllocator(make_device_page_mapper(device, options.page_bytes), options) {}  // (a copy: read above)

VmmAllocator::~VmmAllocator() {
  State& s = *state_;
  if (!s.unusable.empty()) return;
  // Unmap what live buffers still hold (free slots hold stale entries: skip them), then the range.
  for (uint32_t slot : s.free_live_slots) s.live_pool[slot].run_pages = 0;
  for (State::Live& buffer : s.live_pool) s.unmap_run(buffer);
  for (uint32_t slot : s.free_page_slots) s.page_pool[slot].users = 0;
  for (const State::Page& page : s.page_pool) {
    if (page.users > 0) (void)s.mapper->unmap(s.page_address(page.index), s.options.page_bytes);
  }
  (void)s.mapper->free_range(s.base, s.options.virtual_bytes);
}

std::string VmmAllocator::name() const { return state_->options.name; }

Expected<void*> VmmAllocator::allocate(uint64_t size_bytes, std::string_view /*tag*/) {
  if (size_bytes == 0) return static_cast<void*>(nullptr);
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.unusable.empty()) return unavailable(fmt::format("{}: {}", s.options.name, s.unusable));
  if (size_bytes > kMaxRequestBytes) return s.oom(size_bytes, size_bytes, "larger than any device");
  const uint64_t rounded = round_up(size_bytes, kAllocationAlignment);
  auto placed = s.placement->allocate(rounded);
  if (!placed.ok()) return s.oom(size_bytes, rounded, "no virtual range left");
  const uintptr_t address = reinterpret_cast<uintptr_t>(*placed);
  const uint64_t offset = address - s.base;
  State::Live buffer{offset, rounded};
  if (Status mapped = s.map_pages(offset, rounded, buffer); !mapped.ok()) {
    (void)s.placement->deallocate(*placed);
    return s.oom(size_bytes, rounded, mapped.error().message());
  }
  uint32_t slot;
  if (!s.free_live_slots.empty()) {
    slot = s.free_live_slots.back();
    s.free_live_slots.pop_back();
    s.live_pool[slot] = buffer;
  } else {
    slot = static_cast<uint32_t>(s.live_pool.size());
    s.live_pool.push_back(buffer);
  }
  s.live_slots.insert(address, slot);
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
  const uint32_t slot = s.live_slots.erase(reinterpret_cast<uintptr_t>(ptr));
  if (slot == detail::PtrMap::kNotFound) {
    return failed_precondition(fmt::format(
        "{}: deallocate({}) of a pointer it did not allocate or already freed", s.options.name, ptr));
  }
  State::Live l = s.live_pool[slot];
  s.free_live_slots.push_back(slot);
  s.stats.bytes_in_use -= l.size;
  s.unmap_pages(l);
  return s.placement->deallocate(ptr);
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
