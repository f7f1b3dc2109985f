#include "html_report.h"

#include <fmt/format.h>

#include "memfit/core/bytes.h"
#include "memfit/core/file_io.h"
#include "memfit/plan/plan_timeline.h"
#include "memfit/trace/writer.h"

namespace memfit::cli {

MemoryChart chart_from_plan(const HloPlan& plan, const std::string& title) {
  MemoryChart chart = chart_from_timeline(plan_timeline(plan), title);
  chart.subtitle = fmt::format(
      "{}: argument {}, output {}, alias {}, temp {} - the device holds {} at its peak", plan.module,
      format_bytes(plan.argument_bytes), format_bytes(plan.output_bytes), format_bytes(plan.alias_bytes),
      format_bytes(plan.temp_bytes), format_bytes(plan.peak_bytes));
  chart.lines.push_back({"device peak", plan.peak_bytes});
  // A program before optimization: the most XLA's memory scheduler keeps (the program's own order).
  if (plan.peak_upper_bytes > plan.peak_bytes)
    chart.lines.push_back({"at most (the program's own order)", plan.peak_upper_bytes});
  return chart;
}

Status write_html(const std::string& path, const MemoryChart& chart) {
  return write_file_atomic(path, render_html(chart));
}

Status write_plan_trace(const std::string& path, const HloPlan& plan) {
  return write_file_atomic(path, to_memfit_trace(plan_timeline(plan)));
}

}  // namespace memfit::cli
