// memfit/diagnose/probes.h - what the machine says: host memory, pressure, cgroup limits, processes, NVML.
//
// Every file probe reads below a configurable root ("/" on a live machine; a fixture tree in tests), and a
// missing file is "not available", never an error. NVML is loaded with dlopen (no header, no link-time
// dependency), with the versioned structs laid out as in ../shared/FACTS.md §5.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "memfit/core/environment.h"
#include "memfit/core/status.h"

namespace memfit {

struct HostMemory {
  uint64_t total_bytes = 0;
  uint64_t available_bytes = 0;  // MemAvailable
  uint64_t swap_total_bytes = 0;
  uint64_t swap_free_bytes = 0;
};

struct MemoryPressure {  // /proc/pressure/memory (PSI): percent of wall time stalled
  double some_avg10 = 0;
  double full_avg10 = 0;
};

struct CgroupMemory {
  std::string path;                   // the process's cgroup, from /proc/self/cgroup
  std::optional<uint64_t> max_bytes;  // memory.max; absent when "max"
  std::optional<uint64_t> current_bytes;
  uint64_t oom_kills = 0;  // memory.events oom_kill
};

struct ProcessMemory {
  int pid = 0;
  std::string name;
  uint64_t rss_bytes = 0;       // VmRSS
  uint64_t peak_rss_bytes = 0;  // VmHWM
  Environment environment;      // /proc/PID/environ
  bool environment_readable = false;
};

class HostProbe {
 public:
  explicit HostProbe(std::string root = "/") : root_(std::move(root)) {}

  std::optional<HostMemory> memory() const;
  std::optional<MemoryPressure> pressure() const;
  std::optional<CgroupMemory> cgroup() const;
  // kNotFound when the process does not exist (or its status cannot be read).
  Expected<ProcessMemory> process(int pid) const;

 private:
  std::optional<std::string> read(const std::string& relative) const;
  std::string root_;
};

struct GpuProcess {
  uint32_t pid = 0;
  uint64_t used_bytes = 0;  // what nvidia-smi shows for the process
};

struct GpuMemory {
  int index = 0;
  std::string name;
  uint64_t total_bytes = 0;
  uint64_t reserved_bytes = 0;  // the driver's own
  uint64_t free_bytes = 0;
  uint64_t used_bytes = 0;
  std::vector<GpuProcess> processes;
};

// kUnavailable (with the reason) when libnvidia-ml.so.1 cannot be loaded or reports no GPU.
Expected<std::vector<GpuMemory>> query_nvml();

}  // namespace memfit
