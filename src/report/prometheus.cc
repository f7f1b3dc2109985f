#include "memfit/report/prometheus.h"

#include <fmt/format.h>

#include <cmath>
#include <set>

#include "memfit/core/text.h"

namespace memfit {
namespace {

std::string escape(std::string_view text, bool quote) {
  // Prometheus reads UTF-8: anything else (a process name, a GPU name) becomes U+FFFD first.
  const std::string utf8 = valid_utf8(text);
  std::string out;
  out.reserve(utf8.size());
  for (char c : utf8) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '"' && quote) {
      out += "\\\"";
    } else {
      out += c;
    }
  }
  return out;
}

std::string number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::floor(v) && std::fabs(v) < 1e18) return fmt::format("{}", static_cast<int64_t>(v));
  return fmt::format("{}", v);
}

}  // namespace

std::string render_prometheus(const std::vector<MetricFamily>& families) {
  std::string out;
  for (const MetricFamily& f : families) {
    if (f.samples.empty()) continue;
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", f.name, escape(f.help, false), f.name, f.type);
    for (const MetricSample& s : f.samples) {
      out += f.name;
      if (!s.labels.empty()) {
        out += '{';
        for (size_t i = 0; i < s.labels.size(); ++i) {
          if (i) out += ',';
          out += fmt::format("{}=\"{}\"", s.labels[i].first, escape(s.labels[i].second, true));
        }
        out += '}';
      }
      out += ' ';
      out += number(s.value);
      out += '\n';
    }
  }
  return out;
}

std::vector<MetricFamily> fleet_metrics(const FleetSnapshot& snap) {
  std::vector<MetricFamily> out;
  out.reserve(32);  // the families below are filled through references: no reallocation
  auto family = [&](std::string name, std::string help) -> MetricFamily& {
    out.push_back({std::move(name), std::move(help), "gauge", {}});
    return out.back();
  };
  auto d = [](uint64_t v) { return static_cast<double>(v); };

  family("memfit_up", "1 when the exporter's last probe ran").samples.push_back({{}, 1});
  family("memfit_probe_duration_seconds", "How long the last probe of the machine took")
      .samples.push_back({{}, snap.probe_seconds});
  family("memfit_probe_timestamp_seconds", "When the last probe ran (Unix time)")
      .samples.push_back({{}, snap.unix_time_seconds});
  if (snap.host) {
    family("memfit_host_memory_total_bytes", "Host RAM (MemTotal)")
        .samples.push_back({{}, d(snap.host->total_bytes)});
    family("memfit_host_memory_available_bytes", "Host RAM available without swapping (MemAvailable)")
        .samples.push_back({{}, d(snap.host->available_bytes)});
  }
  if (snap.pressure) {
    family("memfit_host_memory_pressure_ratio",
           "Share of wall time some task stalled on memory (PSI /proc/pressure/memory, some)")
        .samples.push_back({{{"window", "10s"}}, snap.pressure->some_avg10 / 100.0});
  }
  MetricFamily& gpu_total = family("memfit_gpu_memory_total_bytes", "GPU memory (NVML)");
  MetricFamily& gpu_used = family("memfit_gpu_memory_used_bytes", "GPU memory in use, pools included (NVML)");
  for (const GpuMemory& g : snap.gpus) {
    const std::vector<std::pair<std::string, std::string>> labels = {{"gpu", std::to_string(g.index)},
                                                                     {"name", g.name}};
    gpu_total.samples.push_back({labels, d(g.total_bytes)});
    gpu_used.samples.push_back({labels, d(g.used_bytes)});
  }
  MetricFamily& proc = family("memfit_process_gpu_memory_bytes",
                              "GPU memory a process holds (NVML: its whole pool, not what is in use)");
  for (const FleetProcess& p : snap.processes)
    proc.samples.push_back(
        {{{"gpu", std::to_string(p.gpu)}, {"pid", std::to_string(p.pid)}, {"command", p.command}},
         d(p.used_bytes)});

  MetricFamily& capacity = family("memfit_share_group_capacity_bytes", "What a lease group may hand out");
  MetricFamily& in_use =
      family("memfit_pool_bytes_in_use", "Bytes a share-group member's pool has handed out");
  MetricFamily& pool =
      family("memfit_pool_pool_bytes", "Bytes a share-group member has reserved from the device");
  MetricFamily& lease =
      family("memfit_pool_lease_bytes", "A share-group member's lease: its pool grows up to it");
  MetricFamily& peak =
      family("memfit_pool_peak_bytes_in_use", "The most a share-group member's pool has handed out at once");
  for (const ShareGroupInfo& g : snap.share_groups) {
    capacity.samples.push_back({{{"group", g.name}, {"gpu", std::to_string(g.device)}}, d(g.capacity_bytes)});
    for (const ShareMemberInfo& m : g.members) {
      const std::vector<std::pair<std::string, std::string>> labels = {
          {"group", g.name}, {"gpu", std::to_string(g.device)}, {"pid", std::to_string(m.pid)}};
      in_use.samples.push_back({labels, d(m.bytes_in_use)});
      pool.samples.push_back({labels, d(m.pool_bytes)});
      lease.samples.push_back({labels, d(m.lease_bytes)});
      peak.samples.push_back({labels, d(m.peak_bytes_in_use)});
    }
  }
  MetricFamily& finding =
      family("memfit_finding", "1 for each current finding of memfit doctor (pid empty: the whole machine)");
  std::set<std::vector<std::pair<std::string, std::string>>>
      seen;  // one series per finding, not per sighting
  for (const FleetFinding& f : snap.findings) {
    std::vector<std::pair<std::string, std::string>> labels = {
        {"code", f.code},
        {"severity", std::string(severity_name(f.severity))},
        {"pid", f.pid ? std::to_string(*f.pid) : std::string()}};
    if (seen.insert(labels).second) finding.samples.push_back({std::move(labels), 1});
  }
  return out;
}

}  // namespace memfit
