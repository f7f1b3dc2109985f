// memfit/diagnose/finding.h - what `memfit doctor` reports: findings in the seed's order.
//
// The seed's method: debug memory in the order allocation (pool vs in use), location (device vs host),
// shapes (recompilation, peak of a program), sharding (replicate vs partition). Findings sort that way,
// then by severity. Codes are stable (scripts match on them): preallocated_pool, shrunken_pool,
// limit_not_enforced, device_oom, compile_time_oom, benign_allocator_warning, host_oom_kill,
// host_memory_pressure, cgroup_limit, recompilation, eager_op_storm, replication, no_gpu_view.
#pragma once

#include <string>
#include <vector>

#include "memfit/core/json_fwd.h"

namespace memfit {

enum class Step { kAllocation, kLocation, kShapes, kSharding };
enum class Severity { kInfo, kWarning, kError };

std::string_view step_name(Step step);
std::string_view severity_name(Severity severity);

struct Finding {
  Step step = Step::kAllocation;
  std::string code;
  Severity severity = Severity::kInfo;
  std::string message;  // what was seen, with the numbers
  std::string fix;      // what to change: the variable and its value, the JAX call
  std::string source;   // where it was seen ("train.log:12", "/proc/meminfo", "NVML")

  Json to_json() const;
};

// Seed order (step), then errors before warnings before information; stable otherwise.
void sort_findings(std::vector<Finding>& findings);

}  // namespace memfit
