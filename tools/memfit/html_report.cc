#include "html_report.h"

#include <fmt/format.h>

#include "memfit/core/bytes.h"
#include "memfit/core/file_io.h"

namespace memfit::cli {

MemoryChart chart_from_plan(const HloPlan& plan, const std::string& title) {
  MemoryChart chart;
  chart.title = title;
  chart.x_label = "schedule step";
  chart.categories = {"parameters", "optimizer_state", "gradients", "activations", "temporaries", "outputs"};
  auto index = [&](const std::string& c) -> uint32_t {
    for (uint32_t i = 0; i < chart.categories.size(); ++i)
      if (chart.categories[i] == c) return i;
    return 4;
  };
  uint64_t end = 0;
  for (const PlannedBuffer& b : plan.buffers) end = std::max(end, b.end);
  for (const PlannedBuffer& b : plan.buffers) {
    if (b.kind == BufferKind::kConstant || b.bytes == 0) continue;
    ChartBuffer c;
    c.name = b.name;
    c.shape = b.shape;
    c.op_name = b.op_name;
    c.bytes = b.bytes;
    c.start = b.kind == BufferKind::kParameter ? 0 : b.start;
    // A temporary's last step is the one whose result may take over its memory: drawn up to the step
    // before, so a reused chunk is not counted twice.
    c.end = b.kind == BufferKind::kParameter || b.kind == BufferKind::kOutput ? end
            : b.end > b.start                                                 ? b.end - 1
                                                                              : b.end;
    if (!b.category.empty()) {
      c.category = index(b.category);
    } else if (b.kind == BufferKind::kParameter) {
      c.category = index("parameters");
    } else if (b.kind == BufferKind::kOutput) {
      c.category = index("outputs");
    } else if (b.op_name.find("transpose(") != std::string::npos) {
      c.category = index("gradients");
    } else if (b.op_name.find("jvp(") != std::string::npos) {
      c.category = index("activations");
    } else {
      c.category = index("temporaries");
    }
    chart.buffers.push_back(std::move(c));
  }
  chart.subtitle = fmt::format(
      "{}: argument {}, output {}, alias {}, temp {} - the device holds {} at its peak", plan.module,
      format_bytes(plan.argument_bytes), format_bytes(plan.output_bytes), format_bytes(plan.alias_bytes),
      format_bytes(plan.temp_bytes), format_bytes(plan.peak_bytes));
  chart.lines.push_back({"device peak", plan.peak_bytes});
  return chart;
}

Status write_html(const std::string& path, const MemoryChart& chart) {
  return write_file_atomic(path, render_html(chart));
}

}  // namespace memfit::cli
