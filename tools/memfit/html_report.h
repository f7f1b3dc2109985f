// tools/memfit/html_report.h - `--html FILE` for memfit hlo, plan and replay: their results as a MemoryChart,
// written all-or-nothing.
#pragma once

#include <optional>
#include <string>

#include "memfit/core/status.h"
#include "memfit/plan/hlo_plan.h"
#include "memfit/report/memory_chart.h"

namespace memfit::cli {

// Buffers of a planned program over its flattened schedule. Categories: the model zoo's own, else from
// the buffer's kind and JAX op name (forward `jvp(` activations, backward `transpose(` gradients).
MemoryChart chart_from_plan(const HloPlan& plan, const std::string& title);

Status write_html(const std::string& path, const MemoryChart& chart);

}  // namespace memfit::cli
