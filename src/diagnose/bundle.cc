#include "memfit/diagnose/bundle.h"

#include <fmt/format.h>

#include <filesystem>

#include "memfit/core/bytes.h"
#include "memfit/core/checked.h"
#include "memfit/core/file_io.h"
#include "memfit/core/xla_env.h"
#include "memfit/diagnose/doctor.h"
#include "memfit/plan/live_profile.h"
#include "memfit/trace/device_profile.h"

namespace memfit {
namespace {

Expected<std::optional<Json>> read_json_file(const std::filesystem::path& p) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(p, ec)) return std::optional<Json>();
  MEMFIT_ASSIGN_OR_RETURN(std::string text, read_file(p.string(), 64ull << 20));
  MEMFIT_ASSIGN_OR_RETURN(Json j, parse_json(text, p.string()));
  if (!j.is_object()) return invalid_argument(fmt::format("{}: expected a JSON object", p.string()));
  return std::optional<Json>(std::move(j));
}

uint64_t get_or_zero(const Json& j, const char* key) {
  auto v = json_get_u64(j, key);
  return v.ok() ? *v : 0;
}

}  // namespace

Expected<BundleReport> diagnose_bundle(const std::string& directory) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(directory, ec))
    return invalid_argument(
        fmt::format("--bundle {}: not a folder (memfit_jax.capture(DIR) writes one)", directory));
  const fs::path dir(directory);
  BundleReport r;
  MEMFIT_ASSIGN_OR_RETURN(std::optional<Json> stats, read_json_file(dir / "memory_stats.json"));
  MEMFIT_ASSIGN_OR_RETURN(std::optional<Json> analysis, read_json_file(dir / "memory_analysis.json"));
  // The process's XLA variables (memfit_jax.capture writes them): whether its pool was preallocated.
  MEMFIT_ASSIGN_OR_RETURN(std::optional<Json> xla_env, read_json_file(dir / "xla_env.json"));
  bool preallocated = false;
  if (xla_env) {
    Environment env;
    for (const auto& [key, value] : xla_env->items())
      if (value.is_string()) env.set(key, value.get<std::string>());
    auto config = parse_xla_allocator_env(env);
    if (!config.ok()) return config.error().with_context(directory + "/xla_env.json");
    // Preallocation depends on the variables alone, not on the device's size.
    preallocated = plan_xla_allocator(*config, 1ull << 30).preallocate;
    r.facts["xla_env"] = *xla_env;
  }
  std::optional<DeviceMemoryProfile> profile;
  const fs::path prof = dir / "device_memory.prof";
  if (fs::is_regular_file(prof, ec)) {
    MEMFIT_ASSIGN_OR_RETURN(std::string data, read_file(prof.string()));
    auto p = parse_device_memory_profile(data);
    if (!p.ok()) return p.error().with_context(prof.string());
    profile = std::move(p).value();
  }
  if (!stats && !analysis && !profile)
    return invalid_argument(
        fmt::format("--bundle {}: no memory_stats.json, memory_analysis.json or device_memory.prof "
                    "(memfit_jax.capture writes "
                    "them)",
                    directory));
  const std::string where = directory;

  if (stats) {
    r.facts["memory_stats"] = *stats;
    const uint64_t limit = get_or_zero(*stats, "bytes_limit");
    const uint64_t pool = get_or_zero(*stats, "pool_bytes");
    const uint64_t in_use = get_or_zero(*stats, "bytes_in_use");
    // Only a preallocated pool is meant to be its whole limit; a growing one is below it by design. The
    // capture's xla_env.json says which (without it, nothing is claimed).
    if (preallocated && limit > 0 && pool > 0 && pool_looks_shrunken(pool, limit)) {
      r.findings.push_back(
          {Step::kAllocation, "shrunken_pool", Severity::kWarning,
           fmt::format("the preallocated pool is {} but bytes_limit says {}: the driver refused the whole "
                       "pool when it "
                       "was reserved (another process held memory), and the process runs out of memory at {}",
                       format_bytes(pool), format_bytes(limit), format_bytes(pool)),
           "give every job on this GPU XLA_PYTHON_CLIENT_PREALLOCATE=false or fractions that fit together, "
           "or share through memfit (MEMFIT_SHARE)",
           where + "/memory_stats.json"});
    }
    if (pool > 0 && in_use * 4 < pool) {
      r.findings.push_back(
          {Step::kAllocation, "pool_mostly_free", Severity::kInfo,
           fmt::format("{} of the {} pool is in use: nvidia-smi shows the pool", format_bytes(in_use),
                       format_bytes(pool)),
           "nothing to fix alone on the GPU; to share it, XLA_PYTHON_CLIENT_PREALLOCATE=false",
           where + "/memory_stats.json"});
    }
  }
  if (analysis) r.facts["memory_analysis"] = *analysis;
  if (profile) {
    Json devices = Json::array();
    for (const ProfileDevice& d : profile->devices)
      devices.push_back(
          {{"device", d.device}, {"buffer_bytes", d.buffer_bytes}, {"executable_bytes", d.executable_bytes}});
    r.facts["device_profile"] = {{"buffer_bytes", profile->buffer_bytes},
                                 {"executable_bytes", profile->executable_bytes},
                                 {"devices", devices}};
    for (const ProfileSite& s : profile->sites) {
      if (s.kind != "buffer" || s.frames.empty()) continue;
      r.findings.push_back(
          {Step::kShapes, "largest_live_arrays", Severity::kInfo,
           fmt::format("the largest live arrays ({} in {}) were made at {}", format_bytes(s.bytes), s.count,
                       s.frames.front()),
           "`memfit profile device_memory.prof --diff EARLIER.prof` shows what grew between steps",
           where + "/device_memory.prof"});
      break;
    }
  }
  // The next step against the pool: the live arrays (the step's arguments among them) plus the step's peak.
  if (analysis && stats && get_or_zero(*stats, "bytes_limit") > 0) {
    const uint64_t args = get_or_zero(*analysis, "argument_size_in_bytes");
    const uint64_t output = get_or_zero(*analysis, "output_size_in_bytes");
    const uint64_t alias = get_or_zero(*analysis, "alias_size_in_bytes");
    const uint64_t temp = get_or_zero(*analysis, "temp_size_in_bytes");
    const auto in_out = checked_add(args, output);
    const auto peak_or = in_out && alias <= *in_out ? checked_add(*in_out - alias, temp) : std::nullopt;
    if (!peak_or)
      return invalid_argument(
          fmt::format("{}/memory_analysis.json: argument + output - alias + temp does not add up "
                      "(a sum past 2^64, or alias larger than argument + output)",
                      directory));
    const uint64_t peak = *peak_or;
    const uint64_t limit = get_or_zero(*stats, "bytes_limit");
    const uint64_t live = profile ? profile->device_buffer_bytes() : get_or_zero(*stats, "bytes_in_use");
    const auto needed = next_step_needed_bytes(live, peak, args);
    if (needed) {
      const bool fits = *needed <= limit;
      r.facts["next_step"] = {{"live_bytes", live},
                              {"step_peak_bytes", peak},
                              {"needed_bytes", *needed},
                              {"limit_bytes", limit},
                              {"fits", fits}};
      if (!fits) {
        r.findings.push_back(
            {Step::kShapes, "next_step_does_not_fit", Severity::kError,
             fmt::format(
                 "the next step needs {} ({} live + the step's peak {} less its {} of arguments), the pool "
                 "limit is {}",
                 format_bytes(*needed), format_bytes(live), format_bytes(peak), format_bytes(args),
                 format_bytes(limit)),
             "free the arrays the step does not need (del, jax.clear_caches), donate the training state "
             "(donate_argnums), or make the step smaller: `memfit fit`",
             where});
      }
    }
  }
  sort_findings(r.findings);
  return r;
}

}  // namespace memfit
