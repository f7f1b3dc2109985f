// memfit profile: JAX's device memory profile (jax.profiler.save_device_memory_profile) - live buffers and
// executables per device, the Python sites that made them, and with --diff what grew since another.
#include <fmt/format.h>

#include <ostream>

#include "commands.h"
#include "memfit/core/bytes.h"
#include "memfit/core/file_io.h"
#include "memfit/core/json.h"
#include "memfit/plan/live_profile.h"
#include "memfit/trace/device_profile.h"

namespace memfit::cli {
namespace {

struct ProfileOptions {
  std::string path;
  std::string base;
  size_t top = 10;
  bool json = false;
};

Json site_json(const ProfileSite& s) {
  return {
      {"kind", s.kind}, {"device", s.device}, {"bytes", s.bytes}, {"count", s.count}, {"frames", s.frames}};
}

std::string where(const ProfileSite& s) {
  return s.frames.empty() ? std::string("(no stack)") : s.frames.front();
}

}  // namespace

Expected<DeviceMemoryProfile> read_device_memory_profile(const std::string& path) {
  MEMFIT_ASSIGN_OR_RETURN(std::string data, read_file(path));
  auto profile = parse_device_memory_profile(data);
  if (!profile.ok()) return profile.error().with_context(path);
  return profile;
}

Json next_step_json(const std::string& path, const NextStepFit& f) {
  Json j;
  j["file"] = path;
  j["device"] = f.device;
  j["live_buffer_bytes"] = f.live_buffer_bytes;
  j["executable_bytes"] = f.executable_bytes;
  j["step_peak_bytes"] = f.step_peak_bytes;
  j["step_argument_bytes"] = f.step_argument_bytes;
  j["needed_bytes"] = f.needed_bytes;
  j["needed_upper_bytes"] = f.needed_upper_bytes;
  j["limit_bytes"] = f.limit_bytes ? Json(*f.limit_bytes) : Json(nullptr);
  j["fits"] = f.fits ? Json(*f.fits) : Json(nullptr);
  j["fits_in_every_order"] = f.fits_in_every_order ? Json(*f.fits_in_every_order) : Json(nullptr);
  return j;
}

void print_next_step(std::ostream& out, const std::string& path, const NextStepFit& f) {
  out << fmt::format(
      "\n  in the live process ({}): {} of arrays on {}, {} of executables;\n"
      "  the step's peak {} with its {} of arguments taken as among those arrays: {} needed\n",
      path, format_bytes(f.live_buffer_bytes), f.device.empty() ? "(no device)" : f.device,
      format_bytes(f.executable_bytes), format_bytes(f.step_peak_bytes), format_bytes(f.step_argument_bytes),
      format_bytes(f.needed_bytes));
  if (f.limit_bytes) {
    out << fmt::format("  against the pool's limit of {}: {}\n", format_bytes(*f.limit_bytes),
                       *f.fits ? fmt::format("the next step fits, {} to spare",
                                             format_bytes(*f.limit_bytes - f.needed_bytes))
                               : fmt::format("the next step does NOT fit, {} over",
                                             format_bytes(f.needed_bytes - *f.limit_bytes)));
    if (*f.fits) out << order_caveat(f.needed_upper_bytes, *f.limit_bytes);
  } else {
    out << "  (give --capacity, or --device, to compare it with the pool)\n";
  }
}

Expected<NextStepFit> live_profile_fit(const std::string& path, const std::string& device,
                                       uint64_t peak_bytes, uint64_t argument_bytes,
                                       std::optional<uint64_t> limit_bytes, uint64_t peak_upper_bytes) {
  MEMFIT_ASSIGN_OR_RETURN(DeviceMemoryProfile profile, read_device_memory_profile(path));
  auto fit = next_step_fit(profile, device, peak_bytes, argument_bytes, limit_bytes, peak_upper_bytes);
  if (!fit.ok()) return fit.error().with_context(path);
  return fit;
}

Action add_profile_command(CLI::App& app, Io& io) {
  auto options = std::make_shared<ProfileOptions>();
  app.add_option("FILE", options->path, "A device memory profile (jax.profiler.save_device_memory_profile)")
      ->required();
  app.add_option("--diff", options->base, "An earlier profile of the same process: what grew since (a leak)");
  app.add_option("--top", options->top, "Sites listed (default 10)")
      ->check(CLI::Range(size_t{0}, kMaxListed));
  app.add_flag("--json", options->json, "Print one JSON object");
  return [options, &io]() -> int {
    auto profile = read_device_memory_profile(options->path);
    if (!profile.ok()) return fail(io, profile.error());
    std::optional<DeviceMemoryProfile> base;
    if (!options->base.empty()) {
      auto b = read_device_memory_profile(options->base);
      if (!b.ok()) return fail(io, b.error());
      base = std::move(b).value();
    }
    const size_t top = options->top;
    if (options->json) {
      Json j;
      j["file"] = options->path;
      j["buffer_bytes"] = profile->buffer_bytes;
      j["executable_bytes"] = profile->executable_bytes;
      Json devices = Json::array();
      for (const ProfileDevice& d : profile->devices)
        devices.push_back({{"device", d.device},
                           {"buffer_bytes", d.buffer_bytes},
                           {"buffer_count", d.buffer_count},
                           {"executable_bytes", d.executable_bytes},
                           {"executable_count", d.executable_count}});
      j["devices"] = devices;
      Json sites = Json::array();
      for (size_t i = 0; i < std::min(top, profile->sites.size()); ++i)
        sites.push_back(site_json(profile->sites[i]));
      j["sites"] = sites;
      if (base) {
        const ProfileDiff d = diff_profiles(*base, *profile);
        Json grown = Json::array();
        for (size_t i = 0; i < std::min(top, d.grown.size()); ++i) {
          Json g = site_json(d.grown[i].site);
          g["base_bytes"] = d.grown[i].base_bytes;
          g["delta_bytes"] = d.grown[i].delta_bytes;
          grown.push_back(std::move(g));
        }
        j["diff"] = {{"base", options->base},
                     {"buffer_delta_bytes", d.buffer_delta_bytes},
                     {"executable_delta_bytes", d.executable_delta_bytes},
                     {"grown", grown},
                     {"shrunk_sites", d.shrunk.size()}};
      }
      io.out << json_to_output(j);
      return kExitOk;
    }
    io.out << fmt::format("memfit profile: {}: {} in live buffers, {} in executables\n", options->path,
                          format_bytes(profile->buffer_bytes), format_bytes(profile->executable_bytes));
    for (const ProfileDevice& d : profile->devices) {
      io.out << fmt::format("  {:<14} buffers {:>10} ({} arrays)  executables {:>10} ({})\n",
                            d.device.empty() ? "(no device)" : d.device, format_bytes(d.buffer_bytes),
                            d.buffer_count, format_bytes(d.executable_bytes), d.executable_count);
    }
    io.out << "\n  largest sites (innermost Python frame):\n";
    for (size_t i = 0; i < std::min(top, profile->sites.size()); ++i) {
      const ProfileSite& s = profile->sites[i];
      io.out << fmt::format("  {:>10} {:>5} x {:<10} {:<8} {}\n", format_bytes(s.bytes), s.count, s.kind,
                            s.device.empty() ? "-" : s.device, where(s));
    }
    if (base) {
      const ProfileDiff d = diff_profiles(*base, *profile);
      io.out << fmt::format("\n  since {}: buffers {:+} B, executables {:+} B\n", options->base,
                            d.buffer_delta_bytes, d.executable_delta_bytes);
      if (d.grown.empty()) io.out << "  nothing grew\n";
      for (size_t i = 0; i < std::min(top, d.grown.size()); ++i) {
        const ProfileGrowth& g = d.grown[i];
        io.out << fmt::format("  grew {:>10} ({} -> {}) {:<10} {}\n",
                              format_bytes(static_cast<uint64_t>(g.delta_bytes)), format_bytes(g.base_bytes),
                              format_bytes(g.site.bytes), g.site.kind, where(g.site));
      }
    }
    return kExitOk;
  };
}

}  // namespace memfit::cli
