// memfit/report/memory_chart.h - memory over a program's timeline as one self-contained HTML page (no
// network): stacked live bytes by category, a line per limit (capacity, each allocator's reserved), the
// peak marked with what is live there, and every large buffer's name, size, shape and op on hover.
//
// Large inputs are reduced before they reach the page: the series keep at most `max_points` columns (each
// the column's highest total, so the peak survives), the hover data the `max_buffers` largest buffers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "memfit/trace/timeline.h"

namespace memfit {

struct ChartBuffer {
  std::string name;
  std::string shape;
  std::string op_name;
  uint32_t category = 0;  // index into MemoryChart::categories
  uint64_t bytes = 0;
  uint64_t start = 0;  // x, inclusive
  uint64_t end = 0;    // x, inclusive
};

struct ChartLine {
  std::string label;  // "capacity", "bfc reserved", ...
  uint64_t bytes = 0;
};

struct MemoryChart {
  std::string title;
  std::string subtitle;
  std::string x_label = "step";
  std::vector<std::string> categories;
  std::vector<ChartBuffer> buffers;
  std::vector<ChartLine> lines;
};

struct ChartOptions {
  size_t max_points = 2000;
  size_t max_buffers = 20000;
  size_t peak_rows = 20;
};

// The page. Deterministic for the same chart.
std::string render_html(const MemoryChart& chart, const ChartOptions& options = {});

// A Timeline - a recorded trace or a planned program - as a chart: one category per tag that an allocation
// carries, x = event index; each buffer named by the Timeline's labels where it has them.
MemoryChart chart_from_timeline(const Timeline& timeline, const std::string& title);

}  // namespace memfit
