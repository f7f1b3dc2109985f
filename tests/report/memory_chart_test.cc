// The HTML timeline's data: the peak and its live set, downsampling that keeps the peak, safe embedding.
#include "memfit/report/memory_chart.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace memfit {
namespace {

nlohmann::json data_of(const std::string& page) {
  const std::string open = "<script type=\"application/json\" id=\"data\">";
  const size_t at = page.find(open) + open.size();
  std::string json = page.substr(at, page.find("</script>", at) - at);
  for (size_t p = json.find("<\\/"); p != std::string::npos; p = json.find("<\\/")) json.replace(p, 3, "</");
  return nlohmann::json::parse(json);
}

TEST(MemoryChart, PeakAndItsLiveSet) {
  MemoryChart chart;
  chart.categories = {"activations", "gradients"};
  chart.buffers = {{"a", "f32[4]", "jit(f)/mul", 0, 100, 0, 9},
                   {"b", "f32[8]", "jit(f)/dot", 0, 300, 5, 6},
                   {"c", "f32[8]", "jit(f)/dot", 1, 300, 6, 8}};
  chart.lines = {{"capacity", 1000}};
  const auto d = data_of(render_html(chart));
  EXPECT_EQ(d["peak"]["bytes"], 700u);  // a, b and c at step 6
  EXPECT_EQ(d["peak"]["x"], 6u);
  ASSERT_EQ(d["peak"]["rows"].size(), 2u);
  EXPECT_EQ(d["peak"]["rows"][0]["op"], "jit(f)/dot");
  EXPECT_EQ(d["peak"]["rows"][0]["count"], 2u);
  EXPECT_EQ(d["series"].size(), 2u);
  EXPECT_EQ(d["lines"][0]["bytes"], 1000u);
}

TEST(MemoryChart, AMillionEventsAreDownsampledKeepingThePeak) {
  MemoryChart chart;
  chart.categories = {"live"};
  uint64_t expected_peak = 0;
  for (uint64_t i = 0; i < 500000; ++i) {  // 10^6 alloc/free events
    const uint64_t bytes = 1000 + (i * 7919) % 5000;
    chart.buffers.push_back({"buffer", "", "", 0, bytes, 2 * i, 2 * i + (i == 250000 ? 1 : 0)});
    expected_peak = std::max(expected_peak, bytes);
  }
  chart.buffers.push_back({"spike", "", "jit(f)/spike", 0, 1u << 30, 700001, 700001});
  ChartOptions o;
  const std::string page = render_html(chart, o);
  const auto d = data_of(page);
  EXPECT_LE(d["columns"].size(), o.max_points);
  EXPECT_LE(d["buffers"]["bytes"].size(), o.max_buffers);
  EXPECT_EQ(d["peak"]["bytes"], 1u << 30);  // the spike sits at an odd step, where nothing else is live
  uint64_t column_max = 0;
  for (const auto& v : d["series"][0]) column_max = std::max(column_max, v.get<uint64_t>());
  EXPECT_EQ(column_max, d["peak"]["bytes"].get<uint64_t>());  // the spike survives downsampling
  EXPECT_LT(page.size(), 4u << 20);                           // a page that opens fast
}

TEST(MemoryChart, NamesCannotBreakOutOfThePage) {
  MemoryChart chart;
  chart.title = "<b>title</b>";
  chart.buffers = {{"</script><script>alert(1)</script>", "s", "o", 0, 10, 0, 1}};
  const std::string page = render_html(chart);
  EXPECT_EQ(page.find("</script><script>alert"), std::string::npos);
  EXPECT_NE(page.find("&lt;b&gt;title"), std::string::npos);
  EXPECT_EQ(data_of(page)["buffers"]["name"][0], "</script><script>alert(1)</script>");
}

// A title is text wherever it came from: one holding the page template's own placeholders (a file named
// so, found by the writers fuzzer) stays in the title, and the data goes where the data goes.
TEST(MemoryChart, ATitleHoldingThePlaceholdersStaysText) {
  MemoryChart chart;
  chart.title = "run @DATA@ @TITLE@.hlo";
  chart.buffers = {{"a", "f32[4]", "jit(f)/mul", 0, 100, 0, 9}};
  const std::string page = render_html(chart);
  EXPECT_NE(page.find("<title>run @DATA@ @TITLE@.hlo</title>"), std::string::npos);
  EXPECT_EQ(data_of(page)["buffers"]["name"][0], "a");
}

TEST(MemoryChart, TimelineChartFollowsAllocsAndFrees) {
  TimelineBuilder b("memfit");
  ASSERT_TRUE(b.alloc(0x1000, 100, 0, 0, 1).ok());
  ASSERT_TRUE(b.alloc(0x2000, 50, 0, 1, 2).ok());
  ASSERT_TRUE(b.free(0x1000, 2, 3).ok());
  ASSERT_TRUE(b.alloc(0x3000, 30, 0, 3, 4).ok());
  const Timeline t = std::move(b).finish();
  const MemoryChart chart = chart_from_timeline(t, "trace");
  ASSERT_EQ(chart.buffers.size(), 3u);
  EXPECT_EQ(chart.buffers[0].end, 1u);  // freed at event 2
  const auto d = data_of(render_html(chart));
  EXPECT_EQ(d["peak"]["bytes"], 150u);
}

}  // namespace
}  // namespace memfit
