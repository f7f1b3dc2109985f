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
#include "spin_lock.h"

namespace memfit {
namespace {

constexpr uint32_t kNone = ~uint32_t{0};
constexpr int8_t kNoBin = -1;
// Requests above this are refused before any rounding arithmetic (no device has 4 EiB).
constexpr uint64_t kMaxRequestBytes = uint64_t{1} << 62;

struct Chunk;

// Orders a bin by (size, address); a bare size finds the first chunk at least that large.
struct SizeKey {
  uint64_t size;
};
struct ChunkOrder {
  using is_transparent = void;
  const std::vector<Chunk>* chunks;
  bool operator()(uint32_t a, uint32_t b) const;
  bool operator()(uint32_t a, SizeKey k) const;
  bool operator()(SizeKey k, uint32_t b) const;
};
using Bin = std::set<uint32_t, ChunkOrder, detail::PoolAllocator<uint32_t>>;

// One cache line each: a chunk is read in one miss, and indexing a handle is a shift.
struct alignas(64) Chunk {
  uintptr_t ptr = 0;
  uint64_t size = 0;       // bytes, a multiple of 256
  uint64_t requested = 0;  // bytes the caller asked for (0 when free)
  uint32_t prev = kNone;   // physical neighbours in the same region
  uint32_t next = kNone;
  uint32_t region = 0;
  uint32_t tag = 0;  // index into tags; 0 = untagged
  bool in_use = false;
  int8_t bin = kNoBin;
  Bin::iterator bin_entry;  // valid while bin != kNoBin: a free chunk leaves its bin in O(1), no search
};

struct Region {
  uintptr_t base = 0;
  uint64_t size = 0;
  uint32_t first_chunk = kNone;  // the chunk at `base` keeps its handle through splits and merges
  bool live = true;
};

inline bool ChunkOrder::operator()(uint32_t a, uint32_t b) const {
  const Chunk& ca = (*chunks)[a];
  const Chunk& cb = (*chunks)[b];
  return ca.size != cb.size ? ca.size < cb.size : ca.ptr < cb.ptr;
}
inline bool ChunkOrder::operator()(uint32_t a, SizeKey k) const { return (*chunks)[a].size < k.size; }
inline bool ChunkOrder::operator()(SizeKey k, uint32_t b) const { return k.size < (*chunks)[b].size; }

// An exact shortcut for the commonest pool hit (glibc's tcache plays the same role for malloc). When an
// allocation splits free chunk `whole` into itself (in use) and a free remainder `rest`, and the very next
// operation frees it, the free merges the two back: every chunk, bin and link is again as it was before the
// allocation (even the remainder's handle would be popped back from the free list). So an allocation of
// the same rounded size next would make the same choice and the same split; both steps are replayed from
// here instead of searching the bins and checking neighbours. Any other operation that changes the pool
// first forgets it (State::forget_resplit), so the shortcut never differs from XLA's search.
struct Resplit {
  enum Stage : uint8_t { kIdle, kAllocated, kMergedBack };
  Stage stage = kIdle;
  // The bin entry's bin while merged back, and while split. Both follow from the chunks' sizes
  // (bin_for_size); kept because working them out again cost 19 instructions per 256-B pair (188 -> 207).
  int8_t whole_bin = kNoBin;
  int8_t rest_bin = kNoBin;
  uint32_t whole = kNone;
  uint32_t rest = kNone;  // kept out of the free-handle list while merged back
  uint64_t rounded = 0;
};

}  // namespace

// OOM reports that walk every chunk; later ones in the same allocator carry the figures only.
constexpr uint64_t kDetailedOomReports = 16;

struct BfcAllocator::State {
  State(DeviceMemory& d, BfcOptions o) : device(d), options(std::move(o)) {
    for (auto& b : bins)
      b = std::make_unique<Bin>(ChunkOrder{&chunks}, detail::PoolAllocator<uint32_t>(&arena));
    tags.push_back("(untagged)");
    const uint64_t limit = options.memory_limit_bytes;
    next_region_bytes = options.allow_growth ? bfc_round_bytes(std::min(limit, kBfcFirstRegionBytes))
                                             : bfc_round_bytes(limit);
  }

  DeviceMemory& device;
  const BfcOptions options;

  mutable detail::SpinLock mu;  // guards everything below; held for tens of nanoseconds, never blocks
  detail::NodeArena arena;
  std::vector<Chunk> chunks;
  std::vector<uint32_t> free_handles;
  // Each tree behind a pointer, so a lone entry changes bins by swapping two pointers (hand_over_bin_entry).
  std::array<std::unique_ptr<Bin>, kNumBins> bins;
  uint32_t nonempty_bins = 0;  // bit b set when bins[b] is not empty
  // Live allocations: address -> chunk handle. The newest one waits outside the table until the next
  // allocation, so the most common pattern - a buffer freed before the next is made (LIFO temporaries,
  // every pool-hit pair) - never touches the table.
  detail::PtrMap in_use;
  uintptr_t newest_ptr = 0;  // 0: none waiting
  uint32_t newest_handle = kNone;
  // The last split, remembered so that the loop's pattern - the same size allocated, freed, allocated -
  // replays it instead of searching (see Resplit).
  Resplit resplit;
  std::vector<Region> regions;
  std::vector<std::string> tags;
  std::map<std::string, uint32_t, std::less<>> tag_ids;
  uint64_t next_region_bytes = 0;  // XLA's curr_region_allocation_bytes_
  bool preallocated = false;       // a capped preallocation has been made (region_cap_bytes)
  AllocatorStats stats;
  uint64_t pool_bytes = 0;
  uint64_t oom_reports = 0;  // OOM reports built so far (the first kDetailedOomReports are detailed)
  uint64_t peak_pool_bytes = 0;
  std::string last_device_error;

  std::condition_variable_any freed;  // signalled on deallocate while someone waits to retry
  int waiters = 0;
  std::mutex growth_mu;  // one thread grows the pool at a time; never held with `mu` across a device call

  // --- chunk and bin bookkeeping (mu held) ---
  Bin& bin(int b) { return *bins[static_cast<size_t>(b)]; }
  const Bin& bin(int b) const { return *bins[static_cast<size_t>(b)]; }

  // A free, binless chunk [ptr, ptr + size) of `region` between `prev` and `next`.
  uint32_t new_chunk(uintptr_t ptr, uint64_t size, uint32_t region, uint32_t prev, uint32_t next) {
    uint32_t h;
    if (!free_handles.empty()) {
      h = free_handles.back();
      free_handles.pop_back();
    } else {
      h = static_cast<uint32_t>(chunks.size());
      chunks.emplace_back();
    }
    Chunk& c = chunks[h];
    c.ptr = ptr;
    c.size = size;
    c.requested = 0;
    c.prev = prev;
    c.next = next;
    c.region = region;
    c.tag = 0;
    c.in_use = false;
    c.bin = kNoBin;
    return h;
  }
  void delete_chunk(uint32_t h) { free_handles.push_back(h); }

  void insert_into_bin(uint32_t h) {
    Chunk& c = chunks[h];
    c.bin = static_cast<int8_t>(bin_for_size(c.size));
    c.bin_entry = bin(c.bin).insert(h).first;
    nonempty_bins |= 1u << c.bin;
  }
  void remove_from_bin(uint32_t h) {
    Chunk& c = chunks[h];
    Bin& b = bin(c.bin);
    b.erase(c.bin_entry);
    if (b.empty()) nonempty_bins &= ~(1u << c.bin);
    c.bin = kNoBin;
  }

  // The common pool hit: one large free chunk shrinks by a split and grows back by a merge. Its bin entry
  // can then be kept for the new key (size, ptr) with no rebalancing when the key still sorts between the
  // entry's neighbours in the same bin, or when the entry is alone and the key's bin is empty (the whole
  // one-node tree moves: what happens at every power-of-two region of a growing pool, which sits on a bin
  // boundary). Returns the bin the entry of free chunk `holder` can serve from, or -1 (erase and insert).
  int reusable_bin(const Chunk& holder, uint64_t size, uintptr_t ptr) const {
    const int target = bin_for_size(size);
    const Bin& holder_bin = bin(holder.bin);
    if (target != holder.bin)
      return holder_bin.size() == 1 && (nonempty_bins >> target & 1u) == 0 ? target : -1;
    if (holder_bin.size() == 1) return target;
    auto before = [&](uint32_t other) {
      const Chunk& o = chunks[other];
      return o.size != size ? o.size < size : o.ptr < ptr;
    };
    const auto it = holder.bin_entry;
    if (it != holder_bin.begin() && !before(*std::prev(it))) return -1;
    const auto next = std::next(it);
    return next == holder_bin.end() || !before(*next) ? target : -1;
  }

  // Hands the bin entry of free chunk `from` to chunk `to`, which has the key reusable_bin() accepted, in
  // bin `target`. (Set elements are const only to stop reordering, which the check above rules out.)
  void hand_over_bin_entry(uint32_t from, uint32_t to, int target) {
    Chunk& f = chunks[from];
    Chunk& t = chunks[to];
    const_cast<uint32_t&>(*f.bin_entry) = to;
    if (target != f.bin) {  // a lone entry: swap its tree with the empty one (iterators stay valid)
      bins[static_cast<size_t>(f.bin)].swap(bins[static_cast<size_t>(target)]);
      nonempty_bins ^= (1u << f.bin) | (1u << target);
    }
    t.bin = static_cast<int8_t>(target);
    t.bin_entry = f.bin_entry;
    f.bin = kNoBin;
  }

  // Chunk h keeps `size` bytes and free chunk r, which holds the rest of its bytes, becomes its successor
  // and takes over h's bin entry (in bin `target`, as reusable_bin() allowed).
  [[gnu::always_inline]] void split_off_into_entry(uint32_t h, uint32_t r, uint64_t size, int target) {
    Chunk& c = chunks[h];
    if (c.next != kNone) chunks[c.next].prev = r;
    c.next = r;
    c.size = size;
    hand_over_bin_entry(h, r, target);
  }

  // Chunk h absorbs its free successor n and takes over n's bin entry (in bin `target`). n's handle is the
  // caller's to delete or keep.
  [[gnu::always_inline]] void absorb_next_with_entry(uint32_t h, uint32_t n, int target) {
    absorb_links(h, n);
    hand_over_bin_entry(n, h, target);
  }

  bool should_split(uint64_t chunk_size, uint64_t rounded) const {
    return chunk_size >= 2 * rounded || chunk_size - rounded >= options.max_internal_fragmentation_bytes;
  }

  // Splits chunk h so it keeps `size` bytes; the remainder becomes a free chunk after it.
  void split(uint32_t h, uint64_t size) {
    const Chunk& old = chunks[h];
    const uint32_t rest = new_chunk(old.ptr + size, old.size - size, old.region, h, old.next);
    Chunk& c = chunks[h];  // (re-read after new_chunk: the vector may have grown)
    if (c.next != kNone) chunks[c.next].prev = rest;
    c.next = rest;
    c.size = size;
    insert_into_bin(rest);
  }

  // Absorbs chunk b (the physical successor of a) into a.
  void merge(uint32_t a, uint32_t b) {
    absorb_links(a, b);
    delete_chunk(b);
  }
  // a takes b's bytes and b's place among the region's chunks (b's handle is left to the caller).
  [[gnu::always_inline]] void absorb_links(uint32_t a, uint32_t b) {
    Chunk& ca = chunks[a];
    const Chunk& cb = chunks[b];
    ca.size += cb.size;
    ca.next = cb.next;
    if (cb.next != kNone) chunks[cb.next].prev = a;
  }

  // XLA's FindChunkPtr: best fit from the request's bin upward. Returns 0 when nothing fits.
  [[gnu::always_inline]] uintptr_t find_chunk(uint64_t rounded, uint64_t requested, uint32_t tag) {
    forget_resplit();
    const int request_bin = bin_for_size(rounded);
    uint32_t candidates = nonempty_bins & (~0u << request_bin);
    while (candidates != 0) {
      const int b = __builtin_ctz(candidates);
      candidates &= candidates - 1;
      Bin& bin = this->bin(b);
      // Every chunk in a higher bin is larger than the request: its smallest is the tree's cached first.
      auto it = b == request_bin ? bin.lower_bound(SizeKey{rounded}) : bin.begin();
      if (it == bin.end()) continue;
      uint32_t h = *it;
      const Chunk& found = chunks[h];
      const uint64_t rest = found.size - rounded;
      const int target =
          should_split(found.size, rounded) ? reusable_bin(found, rest, found.ptr + rounded) : -1;
      if (target >= 0) {
        // The allocated front keeps the handle (so neighbours and the region's first chunk stay linked);
        // the free remainder is a new chunk that takes over the bin entry.
        // (The remainder's key (rest, ptr + rounded) has just been checked to sit where the entry is.)
        const uint32_t remainder = new_chunk(found.ptr + rounded, rest, found.region, h, found.next);
        split_off_into_entry(h, remainder, rounded, target);
        resplit = Resplit{
            Resplit::kAllocated, static_cast<int8_t>(b), static_cast<int8_t>(target), h, remainder, rounded};
      } else {
        take_from_bin(h, rounded);
      }
      return hand_out(h, requested, tag);
    }
    return 0;
  }

  // Chunk h is no longer in use (not yet merged or binned).
  [[gnu::always_inline]] void mark_free(uint32_t h) {
    Chunk& c = chunks[h];
    c.in_use = false;
    c.requested = 0;
    stats.bytes_in_use -= c.size;
  }

  // Marks chunk h in use and counts it.
  [[gnu::always_inline]] uintptr_t hand_out(uint32_t h, uint64_t requested, uint32_t tag) {
    Chunk& c = chunks[h];
    c.in_use = true;
    c.requested = requested;
    c.tag = tag;
    if (newest_ptr != 0) in_use.insert(newest_ptr, newest_handle);
    newest_ptr = c.ptr;
    newest_handle = h;
    ++stats.num_allocs;
    stats.bytes_in_use += c.size;
    stats.peak_bytes_in_use = std::max(stats.peak_bytes_in_use, stats.bytes_in_use);
    stats.largest_alloc_size = std::max(stats.largest_alloc_size, c.size);
    return c.ptr;
  }

  // The split find_chunk made last, made again (Resplit): only when the pool is back where it was.
  [[gnu::always_inline]] uintptr_t redo_split(uint64_t requested, uint32_t tag) {
    // The remainder still holds its pointer, size, region and neighbours from the split.
    split_off_into_entry(resplit.whole, resplit.rest, resplit.rounded, resplit.rest_bin);
    resplit.stage = Resplit::kAllocated;
    return hand_out(resplit.whole, requested, tag);
  }

  // The free that undoes the split (Resplit): the remainder is merged back, its handle kept for a redo.
  [[gnu::always_inline]] void undo_split() {
    absorb_next_with_entry(resplit.whole, resplit.rest, resplit.whole_bin);
    resplit.stage = Resplit::kMergedBack;
  }

  // Called before any other change to the pool: a merged-back remainder's handle returns to the free list.
  void forget_resplit() {
    if (resplit.stage == Resplit::kMergedBack) delete_chunk(resplit.rest);
    resplit.stage = Resplit::kIdle;
  }

  // The chunk leaves its bin, and a remainder worth splitting off goes to its own (out of line: the pool
  // hit's path above keeps its bin entry instead).
  [[gnu::noinline]] void take_from_bin(uint32_t h, uint64_t rounded) {
    remove_from_bin(h);
    if (should_split(chunks[h].size, rounded)) split(h, rounded);
  }

  // Coalesces free chunk h with its free neighbours (never across regions: the device gives no adjacency
  // guarantee) and bins the result. The common case - only the next chunk is free, and the merged chunk can
  // take its bin entry in place - touches no tree.
  [[gnu::always_inline]] void coalesce(uint32_t h) {
    const Chunk& c = chunks[h];
    if (const uint32_t next = c.next;
        next != kNone && !chunks[next].in_use && (c.prev == kNone || chunks[c.prev].in_use)) {
      const Chunk& n = chunks[next];
      if (const int target = reusable_bin(n, n.size + c.size, c.ptr); target >= 0) {
        absorb_next_with_entry(h, next, target);
        delete_chunk(next);
        return;
      }
    }
    coalesce_and_bin(h);
  }
  // The general case: either neighbour free, the result binned anew.
  [[gnu::noinline]] void coalesce_and_bin(uint32_t h) {
    if (const uint32_t next = chunks[h].next; next != kNone && !chunks[next].in_use) {
      remove_from_bin(next);
      merge(h, next);
    }
    if (const uint32_t prev = chunks[h].prev; prev != kNone && !chunks[prev].in_use) {
      remove_from_bin(prev);
      merge(prev, h);
      h = prev;
    }
    insert_into_bin(h);
  }

  [[gnu::noinline]] Error unknown_pointer(void* ptr) const {
    return failed_precondition(fmt::format(
        "{}: deallocate({}) of a pointer it did not allocate or already freed", options.name, ptr));
  }

  void add_region(uintptr_t base, uint64_t size) {
    forget_resplit();  // a new region may fit better than the remembered chunk
    const auto region = static_cast<uint32_t>(regions.size());
    const uint32_t h = new_chunk(base, size, region, kNone, kNone);
    regions.push_back(Region{base, size, h, true});
    insert_into_bin(h);
    pool_bytes += size;
    peak_pool_bytes = std::max(peak_pool_bytes, pool_bytes);
  }

  uint32_t intern_tag(std::string_view tag) { return tag.empty() ? 0 : intern_named_tag(tag); }
  [[gnu::noinline]] uint32_t intern_named_tag(std::string_view tag) {
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
    return chunks[*bin(top).rbegin()].size;
  }

  // Fully free regions leave the pool (garbage collection), until `wanted` bytes have; returns them for
  // release outside the lock.
  std::vector<Region> take_free_regions(uint64_t wanted) {
    forget_resplit();
    std::vector<Region> out;
    uint64_t taken = 0;
    for (Region& r : regions) {
      if (taken >= wanted) break;
      if (!r.live) continue;
      const Chunk& c = chunks[r.first_chunk];
      if (c.in_use || c.size != r.size) continue;
      remove_from_bin(r.first_chunk);
      delete_chunk(r.first_chunk);
      r.live = false;
      pool_bytes -= r.size;
      taken += r.size;
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

  // `device_total`/`device_free` are read by the caller before it takes `mu` (they are device calls).
  // `detailed`: also walk every chunk for the occupancy bar and the live allocations by tag. That walk is
  // O(chunks); an OOM storm (a replay past its capacity, a caller retrying in a loop) gets it only for the
  // first kDetailedOomReports failures, and a report that says the rest was left out.
  OomReport report(uint64_t requested, uint64_t rounded, uint64_t device_total, uint64_t device_free,
                   bool detailed) const {
    OomReport r;
    r.allocator_name = options.name;
    r.requested_bytes = requested;
    r.rounded_bytes = rounded;
    r.bytes_in_use = stats.bytes_in_use;
    r.live_allocations = in_use.size() + (newest_ptr != 0 ? 1 : 0);
    r.pool_bytes = pool_bytes;
    r.bytes_limit = options.memory_limit_bytes;
    r.device_total_bytes = device_total;
    r.device_free_bytes = device_free;
    r.free_in_pool_bytes = pool_bytes - stats.bytes_in_use;
    r.largest_free_bytes = largest_free();
    r.growth = options.allow_growth;
    r.memory_fraction = options.memory_fraction;
    r.device_error = last_device_error;
    if (!detailed) {
      r.detail_omitted = true;
      explain_oom(r);
      return r;
    }
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
  // Rounded up to 256 B (bfc_round_bytes, inlined here: this is the pool hit's path).
  const uint64_t rounded = size_bytes > kMaxRequestBytes
                               ? size_bytes
                               : (size_bytes + kBfcMinAllocationBytes - 1) & ~(kBfcMinAllocationBytes - 1);
  uint32_t tag_id = 0;
  {
    std::lock_guard<detail::SpinLock> lock(s.mu);
    tag_id = s.intern_tag(tag);
    if (s.resplit.stage == Resplit::kMergedBack && s.resplit.rounded == rounded)
      return reinterpret_cast<void*>(s.redo_split(size_bytes, tag_id));
    if (rounded <= kMaxRequestBytes) {
      if (uintptr_t p = s.find_chunk(rounded, size_bytes, tag_id)) return reinterpret_cast<void*>(p);
    }
  }
  return allocate_slow(size_bytes, rounded, tag_id);
}

// Growth, garbage collection, waiting for frees, the OOM report: kept out of line so the pool hit stays
// small.
Expected<void*> BfcAllocator::allocate_slow(uint64_t size_bytes, uint64_t rounded, uint32_t tag_id) {
  State& s = *state_;
  // Grows the pool (device calls without `mu`).
  auto try_grow = [&]() -> uintptr_t {
    std::lock_guard<std::mutex> growth(s.growth_mu);
    uint64_t bytes = 0;
    uint64_t preallocate = 0;
    bool increased = false;
    {
      std::lock_guard<detail::SpinLock> lock(s.mu);
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
      if (s.options.region_cap_bytes > 0) {
        bytes = std::min(bytes, std::max(s.options.region_cap_bytes, rounded));
        if (!s.options.allow_growth && !s.preallocated) {
          s.preallocated = true;
          preallocate = available;
        }
      }
    }
    if (preallocate > 0) {
      // The limit as capped regions, as many as the device gives; then the request is served from them (or,
      // larger than a region, by growth after garbage collection).
      const uint64_t cap = bfc_round_bytes(s.options.region_cap_bytes);
      uint64_t reserved = 0;
      while (preallocate - reserved >= kBfcMinAllocationBytes) {
        const uint64_t size =
            std::min(cap, (preallocate - reserved) / kBfcMinAllocationBytes * kBfcMinAllocationBytes);
        Expected<void*> region = s.device.reserve(size);
        std::lock_guard<detail::SpinLock> lock(s.mu);
        if (!region.ok()) {
          s.last_device_error = region.error().message();
          break;
        }
        s.add_region(reinterpret_cast<uintptr_t>(*region), size);
        reserved += size;
      }
      std::lock_guard<detail::SpinLock> lock(s.mu);
      if (uintptr_t p = s.find_chunk(rounded, size_bytes, tag_id)) return p;
      const uint64_t available =
          (s.options.memory_limit_bytes - std::min(s.options.memory_limit_bytes, s.pool_bytes)) /
          kBfcMinAllocationBytes * kBfcMinAllocationBytes;
      if (rounded > available) return 0;
      bytes = std::min(available, std::max(cap, rounded));
    }
    Expected<void*> region = s.device.reserve(bytes);
    while (!region.ok()) {
      const uint64_t smaller = bfc_backpedal_bytes(bytes);
      if (smaller < rounded || smaller >= bytes) break;
      bytes = smaller;
      region = s.device.reserve(bytes);
    }
    std::lock_guard<detail::SpinLock> lock(s.mu);
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
          std::lock_guard<detail::SpinLock> lock(s.mu);
          released = s.take_free_regions(rounded);
        }
        for (const Region& r : released) (void)s.device.release(reinterpret_cast<void*>(r.base), r.size);
        if (!released.empty()) {
          if (uintptr_t p = try_grow()) return reinterpret_cast<void*>(p);
        }
      }
      std::unique_lock<detail::SpinLock> lock(s.mu);
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
  const uint64_t device_total = s.device.total_bytes();
  const uint64_t device_free = s.device.free_bytes();
  std::lock_guard<detail::SpinLock> lock(s.mu);
  const bool detailed = s.oom_reports++ < kDetailedOomReports;
  auto report =
      std::make_shared<OomReport>(s.report(size_bytes, rounded, device_total, device_free, detailed));
  std::string message = report->summary();
  return resource_exhausted(std::move(message), std::move(report));
}

Status BfcAllocator::deallocate(void* ptr) {
  if (ptr == nullptr) return ok_status();
  State& s = *state_;
  s.mu.lock();
  // The pool hit's free: the newest allocation, whose split is undone in place (Resplit). This path makes
  // no call, so the function saves two registers rather than six; every other free goes out of line.
  if (reinterpret_cast<uintptr_t>(ptr) == s.newest_ptr && s.resplit.stage == Resplit::kAllocated &&
      s.resplit.whole == s.newest_handle && s.waiters == 0) [[likely]] {
    s.newest_ptr = 0;
    s.mark_free(s.newest_handle);
    s.undo_split();
    s.mu.unlock();
    return ok_status();
  }
  return deallocate_locked(ptr);
}

// Any other free; `mu` is held on entry and released here.
Status BfcAllocator::deallocate_locked(void* ptr) {
  State& s = *state_;
  std::lock_guard<detail::SpinLock> lock(s.mu, std::adopt_lock);
  uint32_t h;
  if (reinterpret_cast<uintptr_t>(ptr) == s.newest_ptr) {
    h = s.newest_handle;
    s.newest_ptr = 0;
  } else {
    h = s.in_use.erase(reinterpret_cast<uintptr_t>(ptr));
  }
  if (h == detail::PtrMap::kNotFound) return s.unknown_pointer(ptr);
  s.mark_free(h);
  if (s.resplit.stage == Resplit::kAllocated && s.resplit.whole == h) {
    s.undo_split();
  } else {
    s.forget_resplit();
    s.coalesce(h);
  }
  if (s.waiters > 0) s.freed.notify_all();
  return ok_status();
}

AllocatorStats BfcAllocator::stats() const {
  const State& s = *state_;
  std::lock_guard<detail::SpinLock> lock(s.mu);
  AllocatorStats out = s.stats;
  out.bytes_limit = s.options.memory_limit_bytes;
  out.largest_free_block_bytes = s.largest_free();
  out.pool_bytes = s.pool_bytes;
  out.peak_pool_bytes = s.peak_pool_bytes;
  return out;
}

void BfcAllocator::reset_peak() {
  State& s = *state_;
  std::lock_guard<detail::SpinLock> lock(s.mu);
  s.stats.peak_bytes_in_use = s.stats.bytes_in_use;
  s.peak_pool_bytes = s.pool_bytes;
}

std::vector<ChunkExtent> BfcAllocator::chunks() const {
  std::lock_guard<detail::SpinLock> lock(state_->mu);
  return state_->extents();
}

uint64_t BfcAllocator::release_free_memory(uint64_t wanted_bytes) {
  State& s = *state_;
  std::vector<Region> released;
  {
    std::lock_guard<detail::SpinLock> lock(s.mu);
    released = s.take_free_regions(wanted_bytes);
  }
  uint64_t bytes = 0;
  for (const Region& r : released) {
    if (s.device.release(reinterpret_cast<void*>(r.base), r.size).ok()) bytes += r.size;
  }
  return bytes;
}

uint64_t BfcAllocator::region_count() const {
  std::lock_guard<detail::SpinLock> lock(state_->mu);
  return static_cast<uint64_t>(
      std::count_if(state_->regions.begin(), state_->regions.end(), [](const Region& r) { return r.live; }));
}

OomReport BfcAllocator::oom_report(uint64_t size_bytes) const {
  const uint64_t device_total = state_->device.total_bytes();
  const uint64_t device_free = state_->device.free_bytes();
  std::lock_guard<detail::SpinLock> lock(state_->mu);
  return state_->report(size_bytes, bfc_round_bytes(std::min(size_bytes, kMaxRequestBytes)), device_total,
                        device_free, /*detailed=*/true);
}

}  // namespace memfit
