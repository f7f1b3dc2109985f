// memfit/diagnose/doctor.h - the seed's method as a program: probe the machine, a process and a failed
// job's logs, and return findings in the order allocation, location, shapes, sharding.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "memfit/diagnose/finding.h"
#include "memfit/diagnose/probes.h"

namespace memfit {

struct LogInput {
  std::string name;  // shown as the finding's source
  std::string text;
};

struct DoctorOptions {
  std::string root = "/";                      // where /proc and /sys are read (a fixture tree in tests)
  bool probe_machine = true;                   // host memory, pressure, cgroup, NVML
  bool query_gpu = true;                       // NVML (off in tests)
  std::optional<std::vector<GpuMemory>> gpus;  // the GPUs as given (tests, saved state) instead of NVML
  std::optional<int> pid;                      // one process: its XLA variables, pool and footprint
  std::optional<uint64_t> capacity_bytes;      // GPU capacity when NVML cannot tell
  std::vector<LogInput> logs;
  Environment environment;  // the variables in force for this shell
};

struct DoctorReport {
  std::vector<Finding> findings;
  std::vector<std::string> notes;  // what could not be probed, and why
  Json facts;                      // what was measured (host memory, GPUs, the process)
};

// kNotFound when --pid names no process; kInvalidArgument for a pid that cannot be one (<= 0) or a root
// with no proc/ below it; everything else unavailable becomes a note.
Expected<DoctorReport> run_doctor(const DoctorOptions& options);

}  // namespace memfit
