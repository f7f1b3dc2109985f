#include "memfit/trace/replay.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "memfit/alloc/allocator_factory.h"
#include "memfit/core/checked.h"
#include "memfit/core/xla_env.h"
#include "memfit/device/simulated_device.h"

namespace memfit {
namespace {

constexpr uint64_t kSamples = 50;

struct Policy {
  std::unique_ptr<SimulatedDevice> device;
  std::unique_ptr<Allocator> allocator;
  bool high_water = false;  // reserved = the pool's high-water mark (preallocated BFC)
};

Expected<Policy> make_policy(const std::string& name, uint64_t capacity) {
  Policy p;
  MEMFIT_ASSIGN_OR_RETURN(p.device, SimulatedDevice::create({capacity, 512, false, "replay"}));
  auto kind = parse_allocator_kind(name);
  if (!kind.ok())
    return invalid_argument(fmt::format(
        "unknown policy '{}' (expected bfc, bfc-growth, platform, vmm or all)", name.substr(0, 80)));
  AllocatorSettings settings;  // XLA's defaults: 75% of the device for the BFC pools
  MEMFIT_ASSIGN_OR_RETURN(p.allocator, make_allocator(*kind, *p.device, settings));
  p.high_water = *kind == AllocatorKind::kBfc;
  return p;
}

}  // namespace

Expected<ReplayResult> replay(const Timeline& timeline, const ReplayOptions& options) {
  ReplayResult result;
  result.events = timeline.events.size();
  result.peak_live_bytes = peak_live_bytes(timeline);
  // Without a capacity, a device four times the peak (at least 1 GiB) so that no policy fails.
  const uint64_t roomy =
      std::max<uint64_t>(1ull << 30, checked_mul(result.peak_live_bytes, 4).value_or(~0ull >> 2));
  result.capacity_bytes = options.capacity_bytes.value_or(roomy);
  const uint64_t sample_every = std::max<uint64_t>(1, result.events / kSamples);

  for (const std::string& name : options.policies) {
    MEMFIT_ASSIGN_OR_RETURN(Policy policy, make_policy(name, result.capacity_bytes));
    Allocator& a = *policy.allocator;
    PolicyResult r;
    r.name = name;
    std::vector<void*> ptrs(timeline.buffer_count, nullptr);
    uintptr_t pool_base = ~uintptr_t{0};
    uint64_t high_water = 0;
    uint64_t live = 0;
    // The preallocated pool's high-water mark reaches to the end of each chunk handed out, which BFC leaves
    // unsplit up to twice the request (should_split): the chunk's size is what bytes_in_use grew by. The
    // Allocator interface has no cheaper way to ask; the stats() per allocation costs the bfc row ~8% of its
    // events/s (a 10^6-event trace, 6 alternating runs: 15.0 -> 13.8 M/s, 2026-12-07).
    uint64_t pool_in_use = 0;
    std::vector<uint64_t> chunk_bytes(policy.high_water ? timeline.buffer_count : 0, 0);
    auto reserved_now = [&] {
      if (policy.high_water) return high_water;
      const AllocatorStats s = a.stats();
      return s.pool_bytes ? *s.pool_bytes : policy.device->used_bytes();
    };
    const auto start = std::chrono::steady_clock::now();
    for (uint64_t i = 0; i < timeline.events.size(); ++i) {
      const TraceEvent& e = timeline.events[i];
      if (e.kind == EventKind::kAlloc) {
        // Tag 0 goes as no tag: both name it "(untagged)", and only a named tag costs the allocator a lookup.
        auto p = a.allocate(e.size_bytes,
                            e.tag == 0 ? std::string_view{} : std::string_view{timeline.tags[e.tag]});
        if (!p.ok()) {
          if (p.error().code() != ErrorCode::kResourceExhausted) return p.error();
          if (r.oom_events++ == 0) {
            r.first_oom_event = i;
            r.first_oom = p.error().message();
          }
          continue;
        }
        ptrs[e.buffer] = *p;
        live += e.size_bytes;
        if (policy.high_water) {
          const auto addr = reinterpret_cast<uintptr_t>(*p);
          const uint64_t in_use = a.stats().bytes_in_use;
          const uint64_t chunk = std::max(in_use - pool_in_use, round_up(e.size_bytes, kAllocationAlignment));
          pool_in_use = in_use;
          chunk_bytes[e.buffer] = chunk;
          pool_base = std::min(pool_base, addr);
          high_water = std::max<uint64_t>(high_water, addr - pool_base + chunk);
        }
      } else if (ptrs[e.buffer] != nullptr) {
        MEMFIT_RETURN_IF_ERROR(a.deallocate(ptrs[e.buffer]));
        ptrs[e.buffer] = nullptr;
        live -= e.size_bytes;
        if (policy.high_water) pool_in_use -= chunk_bytes[e.buffer];
      }
      if (i % sample_every == 0 || i + 1 == timeline.events.size()) {
        r.samples.push_back({i, live, reserved_now()});
        if (options.progress)
          options.progress(name, static_cast<double>(i) / static_cast<double>(result.events));
      }
    }
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    const AllocatorStats s = a.stats();
    r.peak_in_use_bytes = s.peak_bytes_in_use;
    if (policy.high_water) {
      r.peak_reserved_bytes = high_water;
    } else if (s.peak_pool_bytes) {
      r.peak_reserved_bytes = *s.peak_pool_bytes;
    } else {
      r.peak_reserved_bytes = policy.device->peak_used_bytes();
    }
    r.ratio_to_peak_live = result.peak_live_bytes == 0 ? 0.0
                                                       : static_cast<double>(r.peak_reserved_bytes) /
                                                             static_cast<double>(result.peak_live_bytes);
    r.events_per_second = took.count() > 0 ? static_cast<double>(result.events) / took.count() : 0.0;
    result.policies.push_back(std::move(r));
  }
  return result;
}

}  // namespace memfit
