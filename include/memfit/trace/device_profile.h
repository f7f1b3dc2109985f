// memfit/trace/device_profile.h - JAX's device memory profile (jax.profiler.save_device_memory_profile):
// a gzipped pprof `perftools.profiles.Profile` (read with Debian's libprotobuf and pprof's own
// profile.proto).
//
// What JAX writes (jaxlib PyClient::HeapProfile; ../shared/reference/diagnostics.md): sample types
// [("allocations","count"), ("space","bytes")]; each live array is a sample labelled kind=buffer and
// device=<Device.DebugString()> ("cuda:0"), each loaded executable one labelled kind=executable (no device,
// its generated code's bytes); a sample's locations are the Python stack where the array was made, the
// innermost frame first.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "memfit/core/status.h"

namespace memfit {

struct ProfileSite {
  std::string kind;                 // "buffer", "executable" (or what the profile says)
  std::string device;               // "" when the sample has no device label (executables)
  std::vector<std::string> frames;  // "function (file:line)", innermost first
  uint64_t bytes = 0;
  uint64_t count = 0;
};

struct ProfileDevice {
  std::string device;  // "" = samples with no device label
  uint64_t buffer_bytes = 0;
  uint64_t buffer_count = 0;
  uint64_t executable_bytes = 0;
  uint64_t executable_count = 0;
};

struct DeviceMemoryProfile {
  std::vector<ProfileDevice> devices;  // sorted by name
  std::vector<ProfileSite> sites;      // samples with the same kind, device and stack summed; largest first
  uint64_t buffer_bytes = 0;
  uint64_t executable_bytes = 0;
  // The live buffer bytes of `device` ("" or absent: of the device holding the most).
  uint64_t device_buffer_bytes(std::string_view device = {}) const;
};

// `data` is the file's bytes, gzipped or not. kInvalidArgument for anything that is not such a profile
// (not protobuf, no bytes sample type, an index outside the string table, a location that does not exist).
Expected<DeviceMemoryProfile> parse_device_memory_profile(std::string_view data);

// What grew from `base` to `now`: per site (kind, device, stack) the bytes before and after, sites that grew
// by the most first; and the devices' changes.
struct ProfileGrowth {
  ProfileSite site;  // as in `now`
  uint64_t base_bytes = 0;
  int64_t delta_bytes = 0;
};
struct ProfileDiff {
  std::vector<ProfileGrowth> grown;   // delta > 0, largest first
  std::vector<ProfileGrowth> shrunk;  // delta < 0, most negative first
  int64_t buffer_delta_bytes = 0;
  int64_t executable_delta_bytes = 0;
};
ProfileDiff diff_profiles(const DeviceMemoryProfile& base, const DeviceMemoryProfile& now);

}  // namespace memfit
