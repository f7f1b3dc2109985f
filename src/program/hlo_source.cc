#include "memfit/program/hlo_source.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>
#include <system_error>
#include <tuple>
#include <vector>

#include "memfit/core/file_io.h"

namespace memfit {

Expected<HloSource> read_hlo_source(const std::string& path, const std::string& module_name) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(path, ec)) {
    if (!module_name.empty()) return invalid_argument("--module applies to a dump folder, not a file");
    MEMFIT_ASSIGN_OR_RETURN(std::string text, read_file(path));
    return HloSource{path, std::move(text), {}, {}};
  }
  struct Candidate {
    std::string path;
    uintmax_t size;
  };
  std::vector<Candidate> found;
  std::vector<std::string> names;
  for (fs::directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const bool optimized =
        name.ends_with("after_optimizations.txt") || name.ends_with("after_optimizations.txt.gz");
    if (!optimized || !it->is_regular_file(ec)) continue;
    names.push_back(name);
    if (!module_name.empty() && name.find(module_name) == std::string::npos) continue;
    found.push_back({it->path().string(), it->file_size(ec)});
  }
  if (ec) return invalid_argument(fmt::format("{}: cannot list the folder: {}", path, ec.message()));
  if (found.empty() && names.empty() && module_name.empty()) {
    // A folder memfit_jax.capture() wrote on a machine without a GPU: the program before optimization.
    for (const char* lowered : {"lowered.stablehlo.mlir", "lowered.hlo.txt"}) {
      const fs::path p = fs::path(path) / lowered;
      if (!fs::is_regular_file(p, ec)) continue;
      MEMFIT_ASSIGN_OR_RETURN(std::string text, read_file(p.string()));
      return HloSource{p.string(), std::move(text), {}, {}};
    }
  }
  if (found.empty()) {
    if (names.empty()) {
      return invalid_argument(fmt::format(
          "{}: no *after_optimizations.txt in this folder (dump with XLA_FLAGS=\"--xla_dump_to={} "
          "--xla_dump_hlo_as_text\"), and no lowered.stablehlo.mlir of memfit_jax.capture()",
          path, path));
    }
    std::sort(names.begin(), names.end());
    return invalid_argument(fmt::format("{}: no optimized module matches '{}'; there are: {}", path,
                                        module_name, fmt::join(names, ", ")));
  }
  const auto largest =
      std::max_element(found.begin(), found.end(), [](const Candidate& a, const Candidate& b) {
        return std::tie(a.size, b.path) < std::tie(b.size, a.path);
      });
  MEMFIT_ASSIGN_OR_RETURN(std::string text, read_file(largest->path));
  HloSource source{largest->path, std::move(text), {}, {}};
  // XLA names it after the module's file:
  // module_0012.jit_step.sm_90_gpu_after_optimizations-buffer-assignment.txt
  std::string stem = fs::path(largest->path).filename().string();
  for (const char* ext : {".gz", ".txt"})
    if (stem.ends_with(ext)) stem.resize(stem.size() - std::string_view(ext).size());
  std::vector<std::string> assignments;
  std::string matching;
  for (fs::directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!name.ends_with("buffer-assignment.txt") && !name.ends_with("buffer-assignment.txt.gz")) continue;
    assignments.push_back(it->path().string());
    if (name.starts_with(stem)) matching = it->path().string();
  }
  if (matching.empty() && assignments.size() == 1) matching = assignments.front();
  if (!matching.empty()) {
    MEMFIT_ASSIGN_OR_RETURN(source.buffer_assignment_text, read_file(matching));
    source.buffer_assignment_path = matching;
  }
  return source;
}

}  // namespace memfit
