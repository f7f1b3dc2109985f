// memfit/diagnose/log_classifier.h - findings from a failed job's stderr, exception text or kernel log.
//
// Matches on substrings, not on prefixes (absl `W1129 ...] `, Python tracebacks and dmesg timestamps vary),
// and on the wordings of several versions (../shared/FACTS.md §1; jaxlib 0.4.x and 0.11, PyTorch 2.x,
// Linux mm/oom_kill.c). An autotuner's "The caller indicates that this is not a failure" is never an OOM.
#pragma once

#include <string_view>
#include <vector>

#include "memfit/diagnose/finding.h"

namespace memfit {

// `source` names the log in each finding ("train.log").
std::vector<Finding> classify_log(std::string_view text, std::string_view source);

}  // namespace memfit
