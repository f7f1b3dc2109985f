// memfit/trace/replay.h - replay a Timeline through allocator policies on a simulated device.
//
// Policies:
//   bfc         XLA's BFC, preallocated (limit = 0.75 x capacity, rounded up to 2 MiB, as JAX); its reserved
//               figure is the pool's high-water mark: the smallest preallocated pool that serves the trace
//   bfc-growth  XLA's BFC with XLA_PYTHON_CLIENT_PREALLOCATE=false: regions from 2 MiB, doubling, kept
//   platform    one device reservation per buffer (512-B granularity), returned on free: no pool at all
//   vmm         page-mapped pool (2 MiB pages mapped while a live buffer touches them)
// For each: peak reserved, peak in use, the ratio to the trace's peak live bytes (the lower bound), OOMs
// under the capacity with the first one's report, reserved-vs-live samples over time, and replay speed.
#pragma once

#include <cstdint>
#include <functional>
#include <iterator>
#include <optional>
#include <string>
#include <vector>

#include "memfit/core/status.h"
#include "memfit/trace/timeline.h"

namespace memfit {

inline constexpr const char* kReplayPolicies[] = {"bfc", "bfc-growth", "platform", "vmm"};

struct ReplaySample {
  uint64_t event = 0;
  uint64_t live_bytes = 0;
  uint64_t reserved_bytes = 0;
};

struct PolicyResult {
  std::string name;
  uint64_t peak_reserved_bytes = 0;
  uint64_t peak_in_use_bytes = 0;
  double ratio_to_peak_live = 0;
  uint64_t oom_events = 0;
  std::optional<uint64_t> first_oom_event;  // index into the timeline's events
  std::string first_oom;                    // the allocator's one-line report
  double events_per_second = 0;
  std::vector<ReplaySample> samples;  // about 50, evenly spread over the events
};

struct ReplayOptions {
  std::vector<std::string> policies{std::begin(kReplayPolicies), std::end(kReplayPolicies)};
  std::optional<uint64_t> capacity_bytes;                    // none: a device large enough that nothing fails
  std::function<void(const std::string&, double)> progress;  // (policy, fraction done); may be empty
};

struct ReplayResult {
  uint64_t events = 0;
  uint64_t peak_live_bytes = 0;
  uint64_t capacity_bytes = 0;
  std::vector<PolicyResult> policies;
};

// kInvalidArgument for an unknown policy name.
Expected<ReplayResult> replay(const Timeline& timeline, const ReplayOptions& options);

}  // namespace memfit
