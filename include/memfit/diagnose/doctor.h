// memfit/diagnose/doctor.h - the seed's method as a program: probe the machine, a process and a failed
// job's logs, and return findings in the order allocation, location, shapes, sharding.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "memfit/core/json.h"
#include "memfit/diagnose/finding.h"
#include "memfit/diagnose/probes.h"
#include "memfit/share/share_group.h"

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
  std::optional<HostMemory> host;  // the machine's, when it was probed (also in `facts`)
  std::optional<MemoryPressure> pressure;
  // The machine's lease groups (memfit share), read once when the real machine is probed: the doctor's
  // listing and the exporter's fleet view both take them from here.
  std::vector<ShareGroupInfo> share_groups;
};

// Whether a preallocated pool holding `held_bytes` where its settings asked for `asked_bytes` was cut short
// when it was reserved (the driver refused the whole pool; XLA backed off by 0.9x): more than 1 GiB short,
// and more than 2 GiB held (so a process that has not made its pool yet is not one).
bool pool_looks_shrunken(uint64_t held_bytes, uint64_t asked_bytes);

// kNotFound when --pid names no process; kInvalidArgument for a pid that cannot be one (<= 0) or a root
// with no proc/ below it; everything else unavailable becomes a note.
Expected<DoctorReport> run_doctor(const DoctorOptions& options);

}  // namespace memfit
