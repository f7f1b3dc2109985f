// memfit/diagnose/bundle.h - a folder memfit_jax.capture() wrote (python/memfit_jax.py): the process's
// memory_stats(), its XLA variables (xla_env.json), its device memory profile and the step's
// memory_analysis(), read together.
//
// What it finds: a preallocated pool smaller than its bytes_limit (the driver refused the whole pool:
// another process holds memory; the same rule as `memfit doctor --pid`), the next step against the pool (the
// live arrays, less the step's own arguments, plus the step's peak), and where the live arrays were made (the
// largest profile site).
#pragma once

#include <string>
#include <vector>

#include "memfit/core/json.h"
#include "memfit/core/status.h"
#include "memfit/diagnose/finding.h"

namespace memfit {

struct BundleReport {
  std::vector<Finding> findings;
  Json facts = Json::object();  // memory_stats, memory_analysis and the profile's figures, as read
};

// kInvalidArgument when the folder holds none of the files, or one that does not read.
Expected<BundleReport> diagnose_bundle(const std::string& directory);

}  // namespace memfit
