#include "memfit/diagnose/fleet.h"

#include <algorithm>
#include <chrono>

#include "memfit/diagnose/doctor.h"

namespace memfit {

FleetSnapshot probe_fleet(const FleetOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  FleetSnapshot s;
  s.unix_time_seconds =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  const HostProbe host(options.root);
  if (options.gpus) {
    s.gpus = *options.gpus;
  } else if (options.query_gpu) {
    auto nvml = query_nvml();
    if (nvml.ok()) {
      s.gpus = std::move(nvml).value();
    } else {
      s.notes.push_back(nvml.error().message());
      s.findings.push_back({"no_gpu_view", Severity::kInfo, std::nullopt});
    }
  }
  for (const GpuMemory& g : s.gpus) {
    for (const GpuProcess& p : g.processes) {
      FleetProcess fp{g.index, p.pid, {}, p.used_bytes};
      if (auto proc = host.process(static_cast<int>(p.pid)); proc.ok()) fp.command = proc->name;
      s.processes.push_back(std::move(fp));
    }
  }
  // The doctor's findings: the machine's (GPUs given, so NVML is asked once), then each GPU process's.
  DoctorOptions machine;
  machine.root = options.root;
  machine.gpus = s.gpus;
  machine.query_gpu = false;
  machine.environment = options.environment;
  if (auto report = run_doctor(machine); report.ok()) {
    // The doctor probed host memory and pressure: read once, kept here.
    s.host = report->host;
    s.pressure = report->pressure;
    s.share_groups = std::move(report->share_groups);
    for (const Finding& f : report->findings) {
      // The exporter's own shell is not what runs on the GPUs: its XLA variables are not a finding.
      if (f.code == "invalid_xla_variable" || f.code == "xla_variable_trap") continue;
      s.findings.push_back({f.code, f.severity, std::nullopt});
    }
  } else {
    s.notes.push_back(report.error().message());
  }
  std::vector<uint32_t> seen;
  for (const FleetProcess& p : s.processes) {
    if (std::find(seen.begin(), seen.end(), p.pid) != seen.end()) continue;
    seen.push_back(p.pid);
    DoctorOptions one;
    one.root = options.root;
    one.probe_machine = false;
    one.gpus = s.gpus;
    one.pid = static_cast<int>(p.pid);
    auto report = run_doctor(one);
    if (!report.ok()) continue;  // gone since NVML listed it
    for (const Finding& f : report->findings) s.findings.push_back({f.code, f.severity, p.pid});
  }
  s.probe_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return s;
}

}  // namespace memfit
