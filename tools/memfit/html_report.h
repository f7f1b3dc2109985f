// tools/memfit/html_report.h - `--html FILE` for memfit hlo, plan and replay: their results as a MemoryChart,
// written all-or-nothing.
#pragma once

#include <optional>
#include <string>

#include "memfit/core/status.h"
#include "memfit/plan/hlo_plan.h"
#include "memfit/report/memory_chart.h"

namespace memfit::cli {

// A planned program drawn as every Timeline is (plan_timeline, then chart_from_timeline), with the plan's
// figures as subtitle and its peak as a line.
MemoryChart chart_from_plan(const HloPlan& plan, const std::string& title);

Status write_html(const std::string& path, const MemoryChart& chart);

// `--trace-out FILE`: the plan's Timeline as a memfit trace, all-or-nothing (memfit replay reads it).
Status write_plan_trace(const std::string& path, const HloPlan& plan);

}  // namespace memfit::cli
