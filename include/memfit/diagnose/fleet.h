// memfit/diagnose/fleet.h - one look at this machine for a fleet view (`memfit exporter`): host memory and
// pressure, every GPU and the processes on it (NVML), every lease group's members (what is really in use
// inside their pools), and the doctor's current findings, machine-wide and per GPU process.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "memfit/core/environment.h"
#include "memfit/diagnose/finding.h"
#include "memfit/diagnose/probes.h"
#include "memfit/share/share_group.h"

namespace memfit {

struct FleetOptions {
  std::string root = "/";                      // where /proc is read
  bool query_gpu = true;                       // NVML
  std::optional<std::vector<GpuMemory>> gpus;  // given instead of NVML (tests)
  Environment environment;                     // the exporter's own (its XLA variables are not checked)
};

struct FleetProcess {
  int gpu = 0;
  uint32_t pid = 0;
  std::string command;  // /proc/PID/comm, empty when it cannot be read
  uint64_t used_bytes = 0;
};

struct FleetFinding {
  std::string code;
  Severity severity = Severity::kInfo;
  std::optional<int64_t> pid;  // the process it is about; none for the machine
};

struct FleetSnapshot {
  std::optional<HostMemory> host;
  std::optional<MemoryPressure> pressure;
  std::vector<GpuMemory> gpus;
  std::vector<FleetProcess> processes;
  std::vector<ShareGroupInfo> share_groups;
  std::vector<FleetFinding> findings;
  std::vector<std::string> notes;  // what could not be probed
  double probe_seconds = 0;
  double unix_time_seconds = 0;  // when it was taken
};

FleetSnapshot probe_fleet(const FleetOptions& options);

}  // namespace memfit
