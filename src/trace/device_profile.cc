#include "memfit/trace/device_profile.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <tuple>
#include <unordered_map>

#include "memfit/core/checked.h"
#include "memfit/core/file_io.h"
#include "profile.pb.h"

// Protobuf up to 3.21 (Debian's) logs a failed parse's reason to stderr itself; its LogSilencer keeps a
// refusal to memfit's one line. Later protobufs log through Abseil and have no silencer.
#if defined(GOOGLE_PROTOBUF_VERSION) && GOOGLE_PROTOBUF_VERSION < 4022000
#include <google/protobuf/stubs/logging.h>
#define MEMFIT_PROTOBUF_LOG_SILENCER 1
#endif

namespace memfit {
namespace {

constexpr uint64_t kMaxProfileBytes = 1ull << 30;

using SiteKey = std::tuple<std::string, std::string, std::vector<std::string>>;

int64_t signed_delta(uint64_t now, uint64_t before) {
  return now >= before ? static_cast<int64_t>(std::min<uint64_t>(now - before, INT64_MAX))
                       : -static_cast<int64_t>(std::min<uint64_t>(before - now, INT64_MAX));
}

}  // namespace

uint64_t DeviceMemoryProfile::device_buffer_bytes(std::string_view device) const {
  uint64_t best = 0;
  for (const ProfileDevice& d : devices) {
    if (!device.empty() && d.device == device) return d.buffer_bytes;
    if (device.empty()) best = std::max(best, d.buffer_bytes);
  }
  return best;
}

Expected<DeviceMemoryProfile> parse_device_memory_profile(std::string_view data) {
  std::string raw;
  if (data.size() >= 2 && static_cast<unsigned char>(data[0]) == 0x1f &&
      static_cast<unsigned char>(data[1]) == 0x8b) {
    MEMFIT_ASSIGN_OR_RETURN(raw, gunzip(data, kMaxProfileBytes));
    data = raw;
  }
  perftools::profiles::Profile p;
  bool parsed = false;
  if (data.size() <= kMaxProfileBytes) {
#ifdef MEMFIT_PROTOBUF_LOG_SILENCER
    // A string that is not UTF-8 (profile.proto is proto3) fails the parse with an ERROR line of
    // protobuf's own; the refusal below says it.
    google::protobuf::LogSilencer quiet;
#endif
    parsed = p.ParseFromArray(data.data(), static_cast<int>(data.size()));
  }
  if (!parsed) return invalid_argument("not a pprof profile (the protobuf does not parse)");
  const auto& strings = p.string_table();
  auto str = [&](int64_t i) -> Expected<std::string> {
    if (i < 0 || i >= strings.size())
      return invalid_argument(
          fmt::format("string index {} outside the profile's table of {}", i, strings.size()));
    return strings.Get(static_cast<int>(i));
  };
  int bytes_index = -1;
  int count_index = -1;
  for (int i = 0; i < p.sample_type_size(); ++i) {
    MEMFIT_ASSIGN_OR_RETURN(std::string type, str(p.sample_type(i).type()));
    MEMFIT_ASSIGN_OR_RETURN(std::string unit, str(p.sample_type(i).unit()));
    if (unit == "bytes" && bytes_index < 0) bytes_index = i;
    if (unit == "count" && count_index < 0) count_index = i;
  }
  if (bytes_index < 0)
    return invalid_argument(
        "the profile has no bytes sample type: not a memory profile (JAX writes space/bytes)");

  std::unordered_map<uint64_t, const perftools::profiles::Function*> functions;
  for (const auto& f : p.function()) functions[f.id()] = &f;
  std::unordered_map<uint64_t, std::vector<std::string>> locations;  // id -> frames, innermost first
  for (const auto& loc : p.location()) {
    std::vector<std::string>& frames = locations[loc.id()];
    // pprof lists a location's inlined lines callee first, as samples list locations leaf first.
    for (const auto& line : loc.line()) {
      auto f = functions.find(line.function_id());
      if (f == functions.end())
        return invalid_argument(fmt::format("location {} names function {} that the profile does not have",
                                            loc.id(), line.function_id()));
      MEMFIT_ASSIGN_OR_RETURN(std::string name, str(f->second->name()));
      MEMFIT_ASSIGN_OR_RETURN(std::string file, str(f->second->filename()));
      frames.push_back(line.line() > 0 ? fmt::format("{} ({}:{})", name, file, line.line())
                                       : fmt::format("{} ({})", name, file));
    }
    if (loc.line_size() == 0) frames.push_back(fmt::format("0x{:x}", loc.address()));
  }

  std::map<SiteKey, ProfileSite> sites;
  std::map<std::string, ProfileDevice> devices;
  DeviceMemoryProfile out;
  for (const auto& s : p.sample()) {
    if (s.value_size() != p.sample_type_size())
      return invalid_argument(
          fmt::format("a sample has {} values for {} sample types", s.value_size(), p.sample_type_size()));
    const int64_t bytes_value = s.value(bytes_index);
    const int64_t count_value = count_index >= 0 ? s.value(count_index) : 1;
    if (bytes_value < 0 || count_value < 0) return invalid_argument("a sample with negative bytes or count");
    std::string kind = "buffer";
    std::string device;
    for (const auto& label : s.label()) {
      MEMFIT_ASSIGN_OR_RETURN(std::string key, str(label.key()));
      MEMFIT_ASSIGN_OR_RETURN(std::string value, str(label.str()));
      if (key == "kind") kind = value;
      if (key == "device") device = value;
    }
    std::vector<std::string> frames;
    for (uint64_t id : s.location_id()) {
      auto loc = locations.find(id);
      if (loc == locations.end())
        return invalid_argument(fmt::format("a sample names location {} that the profile does not have", id));
      frames.insert(frames.end(), loc->second.begin(), loc->second.end());
    }
    const auto bytes = static_cast<uint64_t>(bytes_value);
    const auto count = static_cast<uint64_t>(count_value);
    ProfileSite& site = sites[{kind, device, frames}];
    if (site.frames.empty() && site.kind.empty()) site = {kind, device, frames, 0, 0};
    ProfileDevice& d = devices[device];
    d.device = device;
    std::optional<uint64_t> ok = checked_add(site.bytes, bytes);
    if (ok) site.bytes = *ok;
    const bool is_exe = kind == "executable";
    uint64_t& total = is_exe ? out.executable_bytes : out.buffer_bytes;
    uint64_t& dev_bytes = is_exe ? d.executable_bytes : d.buffer_bytes;
    if (!ok || !checked_add(total, bytes) || !checked_add(dev_bytes, bytes))
      return invalid_argument("the profile's byte counts overflow 64 bits");
    total += bytes;
    dev_bytes += bytes;
    site.count += count;
    (is_exe ? d.executable_count : d.buffer_count) += count;
  }
  for (auto& [key, site] : sites) out.sites.push_back(std::move(site));
  std::stable_sort(out.sites.begin(), out.sites.end(),
                   [](const ProfileSite& a, const ProfileSite& b) { return a.bytes > b.bytes; });
  for (auto& [name, d] : devices) out.devices.push_back(std::move(d));
  return out;
}

ProfileDiff diff_profiles(const DeviceMemoryProfile& base, const DeviceMemoryProfile& now) {
  std::map<SiteKey, uint64_t> before;
  for (const ProfileSite& s : base.sites) before[{s.kind, s.device, s.frames}] += s.bytes;
  ProfileDiff d;
  for (const ProfileSite& s : now.sites) {
    const SiteKey key{s.kind, s.device, s.frames};
    const uint64_t was = before.count(key) ? before[key] : 0;
    before.erase(key);
    const int64_t delta = signed_delta(s.bytes, was);
    if (delta > 0) d.grown.push_back({s, was, delta});
    if (delta < 0) d.shrunk.push_back({s, was, delta});
  }
  for (const auto& [key, bytes] : before)  // gone entirely
    d.shrunk.push_back(
        {{std::get<0>(key), std::get<1>(key), std::get<2>(key), 0, 0}, bytes, signed_delta(0, bytes)});
  std::stable_sort(d.grown.begin(), d.grown.end(), [](const ProfileGrowth& a, const ProfileGrowth& b) {
    return a.delta_bytes > b.delta_bytes;
  });
  std::stable_sort(d.shrunk.begin(), d.shrunk.end(), [](const ProfileGrowth& a, const ProfileGrowth& b) {
    return a.delta_bytes < b.delta_bytes;
  });
  d.buffer_delta_bytes = signed_delta(now.buffer_bytes, base.buffer_bytes);
  d.executable_delta_bytes = signed_delta(now.executable_bytes, base.executable_bytes);
  return d;
}

}  // namespace memfit
