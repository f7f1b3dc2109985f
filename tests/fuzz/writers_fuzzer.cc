// Fuzz target: the writers that carry text from the user's files into --json and --html (names, shapes, op
// names, titles, paths). Whatever the bytes, the JSON must be valid UTF-8 JSON that reads back, and the
// page's data block must not be closable from inside (no '<' survives into it).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "memfit/core/json.h"
#include "memfit/core/text.h"
#include "memfit/report/memory_chart.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  // Four strings cut from the input at its first three NUL bytes (fewer when it has fewer).
  std::string parts[4];
  size_t at = 0;
  for (int k = 0; k < 4; ++k) {
    const size_t end = k < 3 ? in.find('\0', at) : std::string_view::npos;
    parts[k] = std::string(in.substr(at, end == std::string_view::npos ? std::string_view::npos : end - at));
    if (end == std::string_view::npos) break;
    at = end + 1;
  }
  memfit::Json j = {{"name", parts[0]}, {"shape", parts[1]}, {"op_name", parts[2]}, {"path", parts[3]}};
  const std::string out = memfit::json_to_output(j);
  if (memfit::valid_utf8(out) != out) std::abort();  // the writer must replace what is not UTF-8
  auto back = memfit::parse_json(out, "output");
  if (!back.ok() || !back->is_object() || back->size() != 4) std::abort();
  if (memfit::excerpt(in).size() > 4 * memfit::kExcerptChars + 64) std::abort();

  memfit::MemoryChart chart;
  chart.title = parts[0];
  chart.x_label = parts[3];
  chart.categories = {parts[1], "temporaries"};
  chart.buffers.push_back({parts[0], parts[1], parts[2], 0, size, 0, 3});
  chart.buffers.push_back({parts[2], parts[3], parts[0], 1, 64, 2, 5});
  chart.lines.push_back({parts[3], size + 1});
  const std::string page = memfit::render_html(chart);
  const size_t open = page.find("<script type=\"application/json\" id=\"data\">");
  if (open == std::string::npos) std::abort();
  const size_t body = open + 42;
  const size_t close = page.find("</script>", body);
  if (close == std::string::npos || page.find('<', body) != close) std::abort();  // no '<' in the data
  auto data_json = memfit::parse_json(std::string_view(page).substr(body, close - body), "page data");
  if (!data_json.ok()) std::abort();
  return 0;
}
