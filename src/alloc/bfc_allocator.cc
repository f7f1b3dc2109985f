#include "memfit/alloc/bfc_allocator.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <vector>

#include "memfit/core/bytes.h"
#include "memfit/core/xla_env.h"
#include "node_pool.h"
#include "ptr_map.h"

namespace memfit {
namespace {

constexpr uint32_t kNone = ~uint32_t{0};
constexpr int8_t kNoBin = -1;
// Requests above this are refused before any rounding arithmetic (no device has 4 EiB).
constexpr uint64_t kMaxRequestBytes = uint64_t{1} << 62;

struct Chunk {
  uintptr_t ptr = 0;
  uint64_t size = 0;       // bytes, a multiple of 256
  uint64_t requested = 0;  // bytes the caller asked for (0 when free)
  uint32_t prev = kNone;   // physical neighbours in the same region
  uint32_t next = kNone;
  uint32_t region = 0;
  uint32_t tag = 0;  // index into tags; 0 = untagged
  bool in_use = false;
  int8_t bin = kNoBin;
};

struct Region {
  uintptr_t base = 0;
  uint64_t size = 0;
  uint32_t first_chunk = kNone;  // the chunk at `base` keeps its handle through splits and merges
  bool live = true;
};

// Orders a bin by (size, address); a bare size finds the first chunk at least that large.
struct SizeKey {
  uint64_t size;
};
struct ChunkOrder {
  using is_transparent = void;
  const std::vector<Chunk>* chunks;
  bool operator()(uint32_t a, uint32_t b) const {
    const Chunk& ca = (*chunks)[a];
    const Chunk& cb = (*chunks)[b];
    return ca.size != cb.size ? ca.size < cb.size : ca.ptr < cb.ptr;
  }
  bool operator()(uint32_t a, SizeKey k) const { return (*chunks)[a].size < k.size; }
  bool operator()(SizeKey k, uint32_t b) const { return k.size < (*chunks)[b].size; }
};
using Bin = std::set<uint32_t, ChunkOrder, detail::PoolAllocator<uint32_t>>;

}  // namespace

struct BfcAllocator::State {
  State(DeviceMemory& d, BfcOptions o) : device(d), options(std::move(o)) {
    bins.reserve(kNumBins);
    for (int i = 0; i < kNumBins; ++i)
      bins.emplace_back(ChunkOrder{&chunks}, detail::PoolAllocator<uint32_t>(&arena));
    tags.push_back("(untagged)");
    const uint64_t limit = options.memory_limit_bytes;
    next_region_bytes = options.allow_growth ? bfc_round_bytes(std::min(limit, kBfcFirstRegionBytes))
                                             : bfc_round_bytes(limit);
  }

  DeviceMemory& device;
  const BfcOptions options;

  mutable std::mutex mu;  // guards everything below; held for tens of nanoseconds
  detail::NodeArena arena;
  std::vector<Chunk> chunks;
  std::vector<uint32_t> free_handles;
  std::vector<Bin> bins;
  uint32_t nonempty_bins = 0;  // bit b set when bins[b] is not empty
  detail::PtrMap in_use;       // address -> chunk handle of live allocations
  std::vector<Region> regions;
  std::vector<std::string> tags;
  std::map<std::string, uint32_t, std::less<>> tag_ids;
  uint64_t next_region_bytes = 0;  // XLA's curr_region_allocation_bytes_
  AllocatorStats stats;
  uint64_t pool_bytes = 0;
  uint64_t peak_pool_bytes = 0;
  std::string last_device_error;

  std::condition_variable freed;  // signalled on deallocate while someone waits to retry
  int waiters = 0;
  std::mutex growth_mu;  // one thread grows the pool at a time; never held with `mu` across a device call

  // --- chunk and bin bookkeeping (mu held) ---
  uint32_t new_chunk() {
    if (!free_handles.empty()) {
      const uint32_t h = free_handles.back();
      free_handles.pop_back();
      chunks[h] = Chunk{};
      return h;
    }
    chunks.emplace_back();
    return static_cast<uint32_t>(chunks.size() - 1);
  }
  void delete_chunk(uint32_t h) { free_handles.push_back(h); }

  void insert_into_bin(uint32_t h) {
    Chunk& c = chunks[h];
    c.bin = static_cast<int8_t>(bin_for_size(c.size));
    bins[static_cast<size_t>(c.bin)].insert(h);
    nonempty_bins |= 1u << c.bin;
  }
  void remove_from_bin(uint32_t h) {
    Chunk& c = chunks[h];
    Bin& bin = bins[static_cast<size_t>(c.bin)];
    bin.erase(h);
    if (bin.empty()) nonempty_bins &= ~(1u << c.bin);
    c.bin = kNoBin;
  }

  // Whether the bin entry at `it` may take the key (size, ptr) without moving: same bin, and still ordered
  // between its neighbours. Then the tree is left untouched (no rebalancing) - the common case of a pool
  // hit, where one large free chunk shrinks by a split and grows back by a merge.
  bool fits_in_place(const Bin& bin, Bin::const_iterator it, int bin_index, uint64_t size,
                     uintptr_t ptr) const {
    if (bin_for_size(size) != bin_index) return false;
    auto before = [&](uint32_t other) {
      const Chunk& o = chunks[other];
      return o.size != size ? o.size < size : o.ptr < ptr;
    };
    if (it != bin.begin() && !before(*std::prev(it))) return false;
    const auto next = std::next(it);
    return next == bin.end() || !before(*next);
  }

  // Points whatever referred to `from` as its physical predecessor's successor (or as its region's first
  // chunk) at `to`.
  void relink_prev(const Chunk& from, uint32_t old_handle, uint32_t to) {
    if (from.prev != kNone) {
      chunks[from.prev].next = to;
    } else if (regions[from.region].first_chunk == old_handle) {
      regions[from.region].first_chunk = to;
    }
  }

  bool should_split(uint64_t chunk_size, uint64_t rounded) const {
    return chunk_size >= 2 * rounded || chunk_size - rounded >= options.max_internal_fragmentation_bytes;
  }

  // Splits chunk h so it keeps `size` bytes; the remainder becomes a free chunk after it.
  void split(uint32_t h, uint64_t size) {
    const uint32_t rest = new_chunk();
    Chunk& c = chunks[h];  // (re-read after new_chunk: the vector may have grown)
    Chunk& r = chunks[rest];
    r.ptr = c.ptr + size;
    r.size = c.size - size;
    r.region = c.region;
    r.prev = h;
    r.next = c.next;
    if (c.next != kNone) chunks[c.next].prev = rest;
    c.next = rest;
    c.size = size;
    insert_into_bin(rest);
  }

  // Absorbs chunk b (the physical successor of a) into a.
  void merge(uint32_t a, uint32_t b) {
    Chunk& ca = chunks[a];
    const Chunk& cb = chunks[b];
    ca.size += cb.size;
    ca.next = cb.next;
    if (cb.next != kNone) chunks[cb.next].prev = a;
    delete_chunk(b);
  }

  // XLA's FindChunkPtr: best fit from the request's bin upward. Returns 0 when nothing fits.
  uintptr_t find_chunk(uint64_t rounded, uint64_t requested, uint32_t tag) {
    int b = bin_for_size(rounded);
    uint32_t candidates = nonempty_bins & (~0u << b);
    while (candidates != 0) {
      b = __builtin_ctz(candidates);
      candidates &= candidates - 1;
      Bin& bin = bins[static_cast<size_t>(b)];
      auto it = bin.lower_bound(SizeKey{rounded});
      if (it == bin.end()) continue;
      uint32_t h = *it;
      const uint64_t rest = chunks[h].size - rounded;
      if (should_split(chunks[h].size, rounded) && fits_in_place(bin, it, b, rest, chunks[h].ptr + rounded)) {
        // The free remainder keeps the bin entry (and handle); the allocated front gets a new handle.
        const uint32_t front = new_chunk();
        Chunk& f = chunks[front];
        Chunk& r = chunks[h];
        f.ptr = r.ptr;
        f.size = rounded;
        f.region = r.region;
        f.prev = r.prev;
        f.next = h;
        relink_prev(r, h, front);
        r.ptr += rounded;
        r.size = rest;
        r.prev = front;
        h = front;
      } else {
        bin.erase(it);
        if (bin.empty()) nonempty_bins &= ~(1u << b);
        chunks[h].bin = kNoBin;
        if (should_split(chunks[h].size, rounded)) split(h, rounded);
      }
      Chunk& c = chunks[h];
      c.in_use = true;
      c.requested = requested;
      c.tag = tag;
      in_use.insert(c.ptr, h);
      ++stats.num_allocs;
      stats.bytes_in_use += c.size;
      stats.peak_bytes_in_use = std::max(stats.peak_bytes_in_use, stats.bytes_in_use);
      stats.largest_alloc_size = std::max(stats.largest_alloc_size, c.size);
      return c.ptr;
    }
    return 0;
  }

  void add_region(uintptr_t base, uint64_t size) {
    const uint32_t h = new_chunk();
    Chunk& c = chunks[h];
    c.ptr = base;
    c.size = size;
    c.region = static_cast<uint32_t>(regions.size());
    regions.push_back(Region{base, size, h, true});
    insert_into_bin(h);
    pool_bytes += size;
    peak_pool_bytes = std::max(peak_pool_bytes, pool_bytes);
  }

  uint32_t intern_tag(std::string_view tag) {
    if (tag.empty()) return 0;
    auto it = tag_ids.find(tag);
    if (it != tag_ids.end()) return it->second;
    const auto id = static_cast<uint32_t>(tags.size());
    tags.emplace_back(tag);
    tag_ids.emplace(std::string(tag), id);
    return id;
  }

  uint64_t largest_free() const {
    if (nonempty_bins == 0) return 0;
    const int top = 31 - __builtin_clz(nonempty_bins);
    return chunks[*bins[static_cast<size_t>(top)].rbegin()].size;
  }

  // Fully free regions leave the pool (garbage collection); returns them for release outside the lock.
  std::vector<Region> take_free_regions() {
    std::vector<Region> out;
    for (Region& r : regions) {
      if (!r.live) continue;
      const Chunk& c = chunks[r.first_chunk];
      if (c.in_use || c.size != r.size) continue;
      remove_from_bin(r.first_chunk);
      delete_chunk(r.first_chunk);
      r.live = false;
      pool_bytes -= r.size;
      out.push_back(r);
    }
    return out;
  }

  std::vector<ChunkExtent> extents() const {
    std::vector<ChunkExtent> out;
    uint64_t region_offset = 0;
    for (const Region& r : regions) {
      if (!r.live) continue;
      for (uint32_t h = r.first_chunk; h != kNone; h = chunks[h].next) {
        const Chunk& c = chunks[h];
        out.push_back({region_offset + (c.ptr - r.base), c.size, c.requested, c.in_use});
      }
      region_offset += r.size;
    }
    return out;
  }

  OomReport report(uint64_t requested, uint64_t rounded) const {
    OomReport r;
    r.allocator_name = options.name;
    r.requested_bytes = requested;
    r.rounded_bytes = rounded;
    r.bytes_in_use = stats.bytes_in_use;
    r.live_allocations = in_use.size();
    r.pool_bytes = pool_bytes;
    r.bytes_limit = options.memory_limit_bytes;
    r.device_total_bytes = device.total_bytes();
    r.device_free_bytes = device.free_bytes();
    r.free_in_pool_bytes = pool_bytes - stats.bytes_in_use;
    r.largest_free_bytes = largest_free();
    r.growth = options.allow_growth;
    r.memory_fraction = options.memory_fraction;
    const std::vector<ChunkExtent> all = extents();
    r.occupancy_bar = occupancy_bar(all, pool_bytes);
    std::vector<LiveAllocationGroup> groups(tags.size());
    for (const Region& region : regions) {
      if (!region.live) continue;
      for (uint32_t h = region.first_chunk; h != kNone; h = chunks[h].next) {
        const Chunk& c = chunks[h];
        if (!c.in_use) continue;
        LiveAllocationGroup& g = groups[c.tag];
        g.bytes += c.size;
        g.count += 1;
        g.largest_bytes = std::max(g.largest_bytes, c.size);
      }
    }
    for (size_t i = 0; i < groups.size(); ++i) groups[i].tag = tags[i];
    std::erase_if(groups, [](const LiveAllocationGroup& g) { return g.count == 0; });
    std::sort(groups.begin(), groups.end(), [](const auto& a, const auto& b) {
      return a.bytes != b.bytes ? a.bytes > b.bytes : a.tag < b.tag;
    });
    if (groups.size() > 10) groups.resize(10);
    r.top_live = std::move(groups);
    explain_oom(r);
    return r;
  }
};

BfcAllocator::BfcAllocator(DeviceMemory& device, BfcOptions options)
    : state_(std::make_unique<State>(device, std::move(options))) {}

BfcAllocator::~BfcAllocator() {
  for (const Region& r : state_->regions) {
    if (r.live) (void)state_->device.release(reinterpret_cast<void*>(r.base), r.size);
  }
}

int BfcAllocator::bin_for_size(uint64_t size_bytes) {
  const uint64_t v = std::max<uint64_t>(size_bytes, 256) >> 8;
  return std::min(kNumBins - 1, 63 - __builtin_clzll(v));
}

std::string BfcAllocator::name() const { return state_->options.name; }

Expected<void*> BfcAllocator::allocate(uint64_t size_bytes, std::string_view tag) {
  if (size_bytes == 0) return static_cast<void*>(nullptr);
  State& s = *state_;
  const uint64_t rounded = size_bytes > kMaxRequestBytes ? size_bytes : bfc_round_bytes(size_bytes);
  uint32_t tag_id = 0;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    tag_id = s.intern_tag(tag);
    if (rounded <= kMaxRequestBytes) {
      if (uintptr_t p = s.find_chunk(rounded, size_bytes, tag_id)) return reinterpret_cast<void*>(p);
    }
  }

  // Slow path: grow the pool (device calls without `mu`), collect free regions, wait for frees.
  auto try_grow = [&]() -> uintptr_t {
    std::lock_guard<std::mutex> growth(s.growth_mu);
    uint64_t bytes = 0;
    bool increased = false;
    {
      std::lock_guard<std::mutex> lock(s.mu);
      if (uintptr_t p = s.find_chunk(rounded, size_bytes, tag_id)) return p;  // someone else grew it
      const uint64_t available =
          (s.options.memory_limit_bytes - std::min(s.options.memory_limit_bytes, s.pool_bytes)) /
          kBfcMinAllocationBytes * kBfcMinAllocationBytes;
      if (rounded > available) return 0;
      while (rounded > s.next_region_bytes) {
        s.next_region_bytes *= 2;
        increased = true;
      }
      bytes = std::min(s.next_region_bytes, available);
    }
    Expected<void*> region = s.device.reserve(bytes);
    while (!region.ok()) {
      const uint64_t smaller = bfc_backpedal_bytes(bytes);
      if (smaller < rounded || smaller >= bytes) break;
      bytes = smaller;
      region = s.device.reserve(bytes);
    }
    std::lock_guard<std::mutex> lock(s.mu);
    if (!region.ok()) {
      s.last_device_error = region.error().message();
      return 0;
    }
    if (!increased) s.next_region_bytes *= 2;
    s.add_region(reinterpret_cast<uintptr_t>(*region), bytes);
    return s.find_chunk(rounded, size_bytes, tag_id);
  };

  if (rounded <= kMaxRequestBytes) {
    const auto deadline = std::chrono::steady_clock::now() + s.options.retry_wait;
    while (true) {
      if (uintptr_t p = try_grow()) return reinterpret_cast<void*>(p);
      if (s.options.garbage_collection) {
        std::vector<Region> released;
        {
          std::lock_guard<std::mutex> lock(s.mu);
          released = s.take_free_regions();
        }
        for (const Region& r : released) (void)s.device.release(reinterpret_cast<void*>(r.base), r.size);
        if (!released.empty()) {
          if (uintptr_t p = try_grow()) return reinterpret_cast<void*>(p);
        }
      }
      std::unique_lock<std::mutex> lock(s.mu);
      if (uintptr_t p = s.find_chunk(rounded, size_bytes, tag_id)) return reinterpret_cast<void*>(p);
      if (std::chrono::steady_clock::now() >= deadline) break;
      // XLA's AllocatorRetry: wait for another thread to free memory, then try again.
      ++s.waiters;
      const bool woke = s.freed.wait_until(lock, deadline) == std::cv_status::no_timeout;
      --s.waiters;
      if (uintptr_t p = s.find_chunk(rounded, size_bytes, tag_id)) return reinterpret_cast<void*>(p);
      if (!woke) break;
    }
  }
  std::lock_guard<std::mutex> lock(s.mu);
  auto report = std::make_shared<OomReport>(s.report(size_bytes, rounded));
  std::string message = report->summary();
  return resource_exhausted(std::move(message), std::move(report));
}

Status BfcAllocator::deallocate(void* ptr) {
  if (ptr == nullptr) return ok_status();
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mu);
  uint32_t h = s.in_use.erase(reinterpret_cast<uintptr_t>(ptr));
  if (h == detail::PtrMap::kNotFound) {
    return failed_precondition(fmt::format(
        "{}: deallocate({}) of a pointer it did not allocate or already freed", s.options.name, ptr));
  }
  Chunk& c = s.chunks[h];
  c.in_use = false;
  c.requested = 0;
  s.stats.bytes_in_use -= c.size;
  // Coalesce with free neighbours (never across regions: the device gives no adjacency guarantee).
  // Fast path: only the next chunk is free and the merged chunk can take its bin entry in place.
  if (const uint32_t next = c.next;
      next != kNone && !s.chunks[next].in_use && (c.prev == kNone || s.chunks[c.prev].in_use)) {
    Chunk& n = s.chunks[next];
    Bin& bin = s.bins[static_cast<size_t>(n.bin)];
    const auto it = bin.find(next);
    if (s.fits_in_place(bin, it, n.bin, n.size + c.size, c.ptr)) {
      s.relink_prev(c, h, next);
      n.prev = c.prev;
      n.ptr = c.ptr;
      n.size += c.size;
      s.delete_chunk(h);
      if (s.waiters > 0) s.freed.notify_all();
      return ok_status();
    }
  }
  if (const uint32_t next = c.next; next != kNone && !s.chunks[next].in_use) {
    s.remove_from_bin(next);
    s.merge(h, next);
  }
  if (const uint32_t prev = s.chunks[h].prev; prev != kNone && !s.chunks[prev].in_use) {
    s.remove_from_bin(prev);
    s.merge(prev, h);
    h = prev;
  }
  s.insert_into_bin(h);
  if (s.waiters > 0) s.freed.notify_all();
  return ok_status();
}

AllocatorStats BfcAllocator::stats() const {
  const State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mu);
  AllocatorStats out = s.stats;
  out.bytes_limit = s.options.memory_limit_bytes;
  out.largest_free_block_bytes = s.largest_free();
  out.pool_bytes = s.pool_bytes;
  out.peak_pool_bytes = s.peak_pool_bytes;
  return out;
}

void BfcAllocator::reset_peak() {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mu);
  s.stats.peak_bytes_in_use = s.stats.bytes_in_use;
  s.peak_pool_bytes = s.pool_bytes;
}

std::vector<ChunkExtent> BfcAllocator::chunks() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->extents();
}

uint64_t BfcAllocator::region_count() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return static_cast<uint64_t>(
      std::count_if(state_->regions.begin(), state_->regions.end(), [](const Region& r) { return r.live; }));
}

OomReport BfcAllocator::oom_report(uint64_t size_bytes) const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->report(size_bytes, bfc_round_bytes(std::min(size_bytes, kMaxRequestBytes)));
}

}  // namespace memfit
