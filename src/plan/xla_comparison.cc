#include "memfit/plan/xla_comparison.h"

#include <fmt/format.h>

#include <fmt/ranges.h>
#include <algorithm>
#include <map>

#include <set>

#include "memfit/core/bytes.h"

namespace memfit {
XlaComparison compare_with_xla(const HloPlan& plan, const XlaBufferAssignment& xla) {
  XlaComparison c;
  c.figures = {{"argument", plan.argument_bytes, xla.argument_bytes},
               {"output", plan.output_bytes, xla.output_bytes},
               {"alias", plan.alias_bytes, xla.alias_bytes},
               {"temp", plan.temp_bytes, xla.temp_bytes},
               {"peak", plan.peak_bytes, xla.peak_bytes()}};
  // Host memory (S(5), color 5) apart, where either side has any.
  const XlaComparison::Figure host[] = {{"host arg", plan.host_argument_bytes, xla.host_argument_bytes},
                                        {"host output", plan.host_output_bytes, xla.host_output_bytes},
                                        {"host alias", plan.host_alias_bytes, xla.host_alias_bytes},
                                        {"host temp", plan.host_temp_bytes, xla.host_temp_bytes}};
  for (const XlaComparison::Figure& f : host)
    if (f.memfit_bytes != 0 || f.xla_bytes != 0) c.figures.push_back(f);
  const std::vector<XlaAssignedValue> xla_temp = xla.temp_values();
  c.largest_xla_temp_values.assign(xla_temp.begin(),
                                   xla_temp.begin() + std::min<size_t>(10, xla_temp.size()));

  // Both sides name a value as XLA's dump does: "fusion.3", "fusion.3{1}", a tuple's table "fusion.3{}".
  std::set<std::string> ours_in_temp;
  std::map<std::string, uint64_t> ours_bytes;
  for (const PlannedBuffer& b : plan.buffers) {
    if (b.kind != BufferKind::kTemp) continue;
    ours_in_temp.insert(b.name);
    ours_bytes[b.name] += b.bytes;
  }
  std::set<std::string> xla_in_temp;
  for (const XlaAssignedValue& v : xla_temp) xla_in_temp.insert(v.name);

  for (const XlaComparison::Figure& f : c.figures) {
    if (f.memfit_bytes == f.xla_bytes || f.name == "peak") continue;
    std::string sentence =
        fmt::format("{}: memfit {} ({} B), XLA {} ({} B), {} {}", f.name, format_bytes(f.memfit_bytes),
                    f.memfit_bytes, format_bytes(f.xla_bytes), f.xla_bytes,
                    f.memfit_bytes > f.xla_bytes ? "memfit more by" : "memfit less by",
                    format_bytes(f.memfit_bytes > f.xla_bytes ? f.memfit_bytes - f.xla_bytes
                                                              : f.xla_bytes - f.memfit_bytes));
    if (f.name == "temp") {
      std::vector<std::string> only_xla;
      for (const XlaAssignedValue& v : xla_temp) {
        if (ours_in_temp.count(v.name) || only_xla.size() >= 5) continue;
        only_xla.push_back(fmt::format("{} {}", v.name, format_bytes(v.size_bytes)));
      }
      std::vector<std::pair<uint64_t, std::string>> only_ours;
      for (const auto& [name, bytes] : ours_bytes)
        if (!xla_in_temp.count(name)) only_ours.emplace_back(bytes, name);
      std::sort(only_ours.rbegin(), only_ours.rend());
      if (!only_xla.empty())
        sentence += "; in XLA's temp, not memfit's: " + fmt::format("{}", fmt::join(only_xla, ", "));
      if (!only_ours.empty()) {
        std::vector<std::string> names;
        for (size_t i = 0; i < std::min<size_t>(5, only_ours.size()); ++i)
          names.push_back(fmt::format("{} {}", only_ours[i].second, format_bytes(only_ours[i].first)));
        sentence += "; in memfit's temp, not XLA's: " + fmt::format("{}", fmt::join(names, ", "));
      }
      if (only_xla.empty() && only_ours.empty())
        sentence += "; the same values, packed differently (offsets and reuse)";
    }
    c.differences.push_back(std::move(sentence));
  }
  return c;
}

}  // namespace memfit
