#include "memfit/alloc/vmm_allocator.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <optional>
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
    if (!options.cache_bytes) options.cache_bytes = default_vmm_cache_bytes(mapper->total_bytes());
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

  // Pages mapped by one map call, unmapped by one unmap call (CUDA unmaps a range as it was mapped). While a
  // live buffer touches any of its pages it is in use; then it waits in the cache, still mapped, until an
  // allocation reuses it or it is unmapped - only once the work queued before its frees has finished.
  struct Mapping {
    uint64_t first_page = 0;
    uint64_t pages = 0;
    uint32_t users = 0;  // live buffers touching it
    // Streams whose buffers used it since its events were last settled, and at its last release the
    // events recorded on them: (stream, event), the event 0 until recorded.
    std::vector<std::pair<uintptr_t, PageMapper::Event>> streams;
    uint64_t cached_at = 0;  // its key in `cache` while unused
  };
  struct Live {
    uint64_t offset = 0;
    uint64_t size = 0;  // rounded
    uintptr_t stream = 0;
    std::vector<uint32_t> mappings;  // the mappings it touches, by slot
  };

  std::unique_ptr<PageMapper> mapper;
  VmmOptions options;
  uintptr_t base = 0;
  std::string unusable;  // why the virtual range could not be reserved (every allocation then fails)

  mutable std::mutex mu;  // held across page mapping: mapping is part of the placement decision
  // Where buffers go in the virtual range: XLA's best fit with coalescing (see bfc_allocator.h).
  std::unique_ptr<VirtualRange> range;
  std::unique_ptr<BfcAllocator> placement;
  std::vector<Mapping> mappings;
  std::vector<uint32_t> free_mapping_slots;
  std::map<uint64_t, uint32_t> by_first_page;  // mapped ranges: first page -> slot
  std::map<uint64_t, uint32_t> cache;          // unused mappings, oldest first: cached_at -> slot
  uint64_t cache_clock = 0;
  uint64_t cached_bytes = 0;
  // Live buffers: address -> slot.
  detail::PtrMap live_slots;
  std::vector<Live> live_pool;
  std::vector<uint32_t> free_live_slots;

  std::vector<uint32_t> scratch_existing;
  std::vector<std::pair<uint64_t, uint64_t>> scratch_runs, scratch_split;

  AllocatorStats stats;
  uint64_t mapped_bytes = 0;  // in use and cached
  uint64_t peak_mapped_bytes = 0;

  uintptr_t page_address(uint64_t p) const { return base + p * options.page_bytes; }
  uint64_t bytes_of(const Mapping& m) const { return m.pages * options.page_bytes; }

  // The mappings that overlap pages [first, last], in order.
  void overlapping(uint64_t first, uint64_t last, std::vector<uint32_t>& out) const {
    auto it = by_first_page.upper_bound(first);
    if (it != by_first_page.begin()) {
      auto prev = std::prev(it);
      if (prev->first + mappings[prev->second].pages > first) it = prev;
    }
    for (; it != by_first_page.end() && it->first <= last; ++it) out.push_back(it->second);
  }

  void note_stream(Mapping& m, uintptr_t stream) {
    for (const auto& [s, e] : m.streams) {
      if (s == stream) return;
    }
    m.streams.emplace_back(stream, PageMapper::Event{0});
  }

  // A mapping no live buffer touches: an event on every stream that used it marks the work queued before
  // its frees (recorded now, after those frees: the same work and possibly more), and it joins the cache.
  void release_mapping(uint32_t slot) {
    Mapping& m = mappings[slot];
    for (auto& [stream, event] : m.streams) {
      if (event != 0) mapper->release_event(event);
      auto recorded = mapper->record_event(stream);
      // Event 0 means nothing to wait for: a device with no asynchronous work records it. A CUDA context
      // that cannot record an event at all has failed for good (its errors are sticky); its pages are not
      // waited for then.
      event = recorded.ok() ? *recorded : 0;
    }
    m.cached_at = ++cache_clock;
    cache.emplace(m.cached_at, slot);
    cached_bytes += bytes_of(m);
  }

  // Whether every event of `m` is done; with `wait`, waits for those that are not. Events of `stream` (the
  // stream about to use the pages) need no wait: its work runs in order. Settled events are released.
  bool settle(Mapping& m, bool wait, std::optional<uintptr_t> stream = std::nullopt) {
    bool done = true;
    for (auto& [s, event] : m.streams) {
      if (event == 0) continue;
      if (stream && s == *stream) {
        mapper->release_event(event);
        event = 0;
        continue;
      }
      if (!mapper->event_done(event)) {
        if (!wait) {
          done = false;
          continue;
        }
        (void)mapper->wait_event(event);
      }
      mapper->release_event(event);
      event = 0;
    }
    if (done) m.streams.clear();
    return done;
  }

  void take_from_cache(uint32_t slot) {
    Mapping& m = mappings[slot];
    cache.erase(m.cached_at);
    cached_bytes -= bytes_of(m);
  }

  void unmap_mapping(uint32_t slot) {
    Mapping& m = mappings[slot];
    (void)mapper->unmap(page_address(m.first_page), bytes_of(m));
    mapped_bytes -= bytes_of(m);
    by_first_page.erase(m.first_page);
    m = Mapping{};
    free_mapping_slots.push_back(slot);
  }

  // Unmaps cached mappings, oldest first, until `enough()`. Polls their events, or waits when `wait`; at
  // most `budget` mappings are looked at (a free must not walk a long cache of busy pages).
  template <typename Enough>
  void evict(Enough enough, bool wait, size_t budget = SIZE_MAX) {
    for (auto it = cache.begin(); it != cache.end() && !enough() && budget-- > 0;) {
      const uint32_t slot = it->second;
      if (!settle(mappings[slot], wait)) {
        ++it;
        continue;
      }
      it = cache.erase(it);
      cached_bytes -= bytes_of(mappings[slot]);
      unmap_mapping(slot);
    }
  }

  uint32_t add_mapping(uint64_t first_page, uint64_t pages) {
    uint32_t slot;
    if (!free_mapping_slots.empty()) {
      slot = free_mapping_slots.back();
      free_mapping_slots.pop_back();
    } else {
      slot = static_cast<uint32_t>(mappings.size());
      mappings.emplace_back();
    }
    Mapping& m = mappings[slot];
    m.first_page = first_page;
    m.pages = pages;
    by_first_page.emplace(first_page, slot);
    mapped_bytes += pages * options.page_bytes;
    return slot;
  }

  // Gives [offset, offset + size) its pages on `stream`: the mappings already there (from the cache first:
  // those pages cost no device call), then one new mapping per run of pages still unmapped.
  Status map_pages(Live& buffer) {
    const uint64_t first = buffer.offset / options.page_bytes;
    const uint64_t last = (buffer.offset + buffer.size - 1) / options.page_bytes;
    // Scratch lists kept across calls (an allocation is hot: no heap traffic for them).
    std::vector<uint32_t>& existing = scratch_existing;
    existing.clear();
    overlapping(first, last, existing);
    // A cached mapping this buffer covers only in part would stay mapped whole for a few of its pages
    // (CUDA unmaps a range only as it was mapped): when its work has finished, unmap it and map just what
    // the buffer needs. Without this a training loop's pool drifts to 1.12x live on the GPT-2 trace.
    bool dropped = false;
    for (uint32_t slot : existing) {
      Mapping& m = mappings[slot];
      const bool inside = m.first_page >= first && m.first_page + m.pages <= last + 1;
      if (m.users != 0 || inside || !settle(m, /*wait=*/false)) continue;  // unmapping: every stream
      take_from_cache(slot);
      unmap_mapping(slot);
      dropped = true;
    }
    if (dropped) {
      existing.clear();
      overlapping(first, last, existing);
    }
    std::vector<std::pair<uint64_t, uint64_t>>& runs = scratch_runs;  // (first page, pages) not mapped yet
    runs.clear();
    uint64_t cursor = first;
    for (uint32_t slot : existing) {
      const Mapping& m = mappings[slot];
      if (m.first_page > cursor) runs.emplace_back(cursor, m.first_page - cursor);
      cursor = std::max(cursor, m.first_page + m.pages);
    }
    if (cursor <= last) runs.emplace_back(cursor, last + 1 - cursor);
    // The buffer's first and last pages, when it covers them only in part, are mappings of their own: a
    // neighbour may come to share them, and must not keep this buffer's interior mapped after it is freed.
    const bool first_partial = buffer.offset % options.page_bytes != 0;
    const bool last_partial = (buffer.offset + buffer.size) % options.page_bytes != 0;
    std::vector<std::pair<uint64_t, uint64_t>>& split = scratch_split;
    split.clear();
    for (auto [p, n] : runs) {
      if (first_partial && p == first && n > 1) {
        split.emplace_back(p, 1);
        ++p;
        --n;
      }
      if (last_partial && p + n - 1 == last && n > 1) {
        split.emplace_back(p, n - 1);
        split.emplace_back(last, 1);
        continue;
      }
      split.emplace_back(p, n);
    }
    uint64_t new_bytes = 0;
    for (const auto& [p, n] : split) new_bytes += n * options.page_bytes;

    // Claim what is mapped: out of the cache, safe for this stream (another stream's work on these pages
    // must have finished before this buffer's work may start).
    for (uint32_t slot : existing) {
      Mapping& m = mappings[slot];
      if (m.users == 0) {
        take_from_cache(slot);
        settle(m, /*wait=*/true, buffer.stream);
      }
      ++m.users;
      note_stream(m, buffer.stream);
      buffer.mappings.push_back(slot);
    }
    auto undo = [&] {
      for (uint32_t slot : buffer.mappings) {
        if (--mappings[slot].users == 0) release_mapping(slot);
      }
      buffer.mappings.clear();
    };
    // Recycle before a new peak: when these pages would take the pool past its high-water mark, cached
    // pages whose work has finished go back first, oldest first, so the peak is what live buffers need
    // (within a page or two per hole), not live plus a full cache: 1.003x live on the GPT-2 trace, where
    // keeping the cache whole gave 1.036x. Below the mark the cache stays, for the next step to land on.
    if (new_bytes > 0 && cached_bytes > 0 && mapped_bytes + new_bytes > peak_mapped_bytes) {
      evict([&] { return mapped_bytes + new_bytes <= peak_mapped_bytes; }, /*wait=*/false, /*budget=*/64);
    }
    // Room under the limit: unmap cached pages, oldest first, waiting for their streams if need be.
    if (mapped_bytes + new_bytes > options.limit_bytes)
      evict([&] { return mapped_bytes + new_bytes <= options.limit_bytes; }, /*wait=*/true);
    if (mapped_bytes + new_bytes > options.limit_bytes) {
      undo();
      return resource_exhausted(
          fmt::format("{} more pages would pass the limit", new_bytes / options.page_bytes));
    }
    for (const auto& [p, n] : split) {
      Status mapped = mapper->map(page_address(p), n * options.page_bytes);
      if (!mapped.ok() && mapped.error().code() == ErrorCode::kResourceExhausted && !cache.empty()) {
        evict([] { return false; }, /*wait=*/true);  // the device is full: give back every cached page
        mapped = mapper->map(page_address(p), n * options.page_bytes);
      }
      if (!mapped.ok()) {
        undo();
        return mapped.error();
      }
      const uint32_t slot = add_mapping(p, n);
      mappings[slot].users = 1;
      note_stream(mappings[slot], buffer.stream);
      buffer.mappings.push_back(slot);
    }
    peak_mapped_bytes = std::max(peak_mapped_bytes, mapped_bytes);
    return ok_status();
  }

  void unmap_pages(const Live& buffer, uintptr_t stream) {
    for (uint32_t slot : buffer.mappings) {
      Mapping& m = mappings[slot];
      note_stream(m, stream);
      if (--m.users == 0) release_mapping(slot);
    }
    // Over the cache's bound: give back what has finished, looking at a few of the oldest only.
    if (cached_bytes > *options.cache_bytes)
      evict([&] { return cached_bytes <= *options.cache_bytes; }, /*wait=*/false, /*budget=*/8);
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

uint64_t default_vmm_cache_bytes(uint64_t device_bytes) { return device_bytes / 50; }

VmmAllocator::VmmAllocator(std::unique_ptr<PageMapper> mapper, VmmOptions options)
    : state_(std::make_unique<State>(std::move(mapper), std::move(options))) {}

VmmAllocator::VmmAllocator(DeviceMemory& device, VmmOptions options)
    : VmmAllocator(make_device_page_mapper(device, options.page_bytes), options) {}  // (a copy: read above)

VmmAllocator::~VmmAllocator() {
  State& s = *state_;
  if (!s.unusable.empty()) return;
  // Every mapping, in use or cached, once the work queued on it has finished; then the range.
  std::vector<uint32_t> slots;
  for (const auto& [page, slot] : s.by_first_page) slots.push_back(slot);
  for (uint32_t slot : slots) {
    s.settle(s.mappings[slot], /*wait=*/true);
    s.unmap_mapping(slot);
  }
  (void)s.mapper->free_range(s.base, s.options.virtual_bytes);
}

std::string VmmAllocator::name() const { return state_->options.name; }

Expected<void*> VmmAllocator::allocate(uint64_t size_bytes, std::string_view /*tag*/) {
  return allocate_on(size_bytes, 0);
}

Expected<void*> VmmAllocator::allocate_on(uint64_t size_bytes, uintptr_t stream) {
  if (size_bytes == 0) return static_cast<void*>(nullptr);
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.unusable.empty()) return unavailable(fmt::format("{}: {}", s.options.name, s.unusable));
  if (size_bytes > kMaxRequestBytes) return s.oom(size_bytes, size_bytes, "larger than any device");
  const uint64_t rounded = round_up(size_bytes, kAllocationAlignment);
  auto placed = s.placement->allocate(rounded);
  if (!placed.ok()) return s.oom(size_bytes, rounded, "no virtual range left");
  const uintptr_t address = reinterpret_cast<uintptr_t>(*placed);
  State::Live buffer;
  buffer.offset = address - s.base;
  buffer.size = rounded;
  buffer.stream = stream;
  if (Status mapped = s.map_pages(buffer); !mapped.ok()) {
    (void)s.placement->deallocate(*placed);
    return s.oom(size_bytes, rounded, mapped.error().message());
  }
  uint32_t slot;
  if (!s.free_live_slots.empty()) {
    slot = s.free_live_slots.back();
    s.free_live_slots.pop_back();
    s.live_pool[slot] = std::move(buffer);
  } else {
    slot = static_cast<uint32_t>(s.live_pool.size());
    s.live_pool.push_back(std::move(buffer));
  }
  s.live_slots.insert(address, slot);
  ++s.stats.num_allocs;
  s.stats.bytes_in_use += rounded;
  s.stats.peak_bytes_in_use = std::max(s.stats.peak_bytes_in_use, s.stats.bytes_in_use);
  s.stats.largest_alloc_size = std::max(s.stats.largest_alloc_size, rounded);
  return reinterpret_cast<void*>(address);
}

Status VmmAllocator::deallocate(void* ptr) { return deallocate_on(ptr, std::nullopt); }

Status VmmAllocator::deallocate_on(void* ptr, std::optional<uintptr_t> stream) {
  if (ptr == nullptr) return ok_status();
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mu);
  const uint32_t slot = s.live_slots.erase(reinterpret_cast<uintptr_t>(ptr));
  if (slot == detail::PtrMap::kNotFound) {
    return failed_precondition(fmt::format(
        "{}: deallocate({}) of a pointer it did not allocate or already freed", s.options.name, ptr));
  }
  State::Live l = std::move(s.live_pool[slot]);
  s.live_pool[slot].mappings.clear();
  s.free_live_slots.push_back(slot);
  s.stats.bytes_in_use -= l.size;
  s.unmap_pages(l, stream.value_or(l.stream));
  return s.placement->deallocate(ptr);
}

Status VmmAllocator::trim_cache(uint64_t keep_bytes) {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mu);
  s.evict([&] { return s.cached_bytes <= keep_bytes; }, /*wait=*/true);
  return ok_status();
}

uint64_t VmmAllocator::release_free_memory(uint64_t /*wanted_bytes*/) {
  const uint64_t before = cached_bytes();
  if (!trim_cache(0).ok()) return 0;
  const uint64_t after = cached_bytes();
  return before > after ? before - after : 0;
}

uint64_t VmmAllocator::cached_bytes() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->cached_bytes;
}

AllocatorStats VmmAllocator::stats() const {
  const State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mu);
  AllocatorStats out = s.stats;
  out.bytes_limit = s.options.limit_bytes;
  out.pool_bytes = s.mapped_bytes;
  out.peak_pool_bytes = s.peak_mapped_bytes;
  // Cached pages are free to reuse: what could be mapped is the limit less what live buffers hold.
  out.largest_free_block_bytes = s.options.limit_bytes - (s.mapped_bytes - s.cached_bytes);
  return out;
}

void VmmAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->stats.peak_bytes_in_use = state_->stats.bytes_in_use;
  state_->peak_mapped_bytes = state_->mapped_bytes;
}

}  // namespace memfit
