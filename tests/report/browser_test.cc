// The HTML timelines in a real browser: headless Chromium renders the pages `memfit hlo --html` and
// `memfit replay --html` write for shared data, and the rendered DOM must hold the series, the peak marker
// and the legend. Screenshots are saved under the build folder (report_*.png).
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_runner.h"
#include "memfit/core/file_io.h"
#include "memfit/report/memory_chart.h"

namespace memfit {
namespace {

std::string chromium() {
  for (const char* c : {"/usr/bin/chromium", "/usr/bin/chromium-browser", "/usr/bin/google-chrome"})
    if (std::filesystem::exists(c)) return c;
  return "";
}

std::string run(const std::string& command) {
  std::string out;
  FILE* p = ::popen(command.c_str(), "r");
  if (p == nullptr) return out;
  std::array<char, 65536> buf{};
  size_t n = 0;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  ::pclose(p);
  return out;
}

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

// The page marks its peak within [peak_low, peak_high]: what the command itself reported.
void check_page(const std::string& browser, const std::string& html, const std::string& name,
                size_t categories, size_t lines, uint64_t peak_low, uint64_t peak_high) {
  const std::string flags =
      "--headless --no-sandbox --disable-gpu --hide-scrollbars --virtual-time-budget=10000";
  const std::string dom = run(browser + " " + flags + " --dump-dom file://" + html + " 2>/dev/null");
  ASSERT_NE(dom.find("data-rendered=\"yes\""), std::string::npos) << "the page's script did not finish";
  EXPECT_EQ(count(dom, "class=\"series\""), categories);  // one stacked area per category
  EXPECT_EQ(count(dom, "class=\"legend-item\""), categories);
  EXPECT_EQ(count(dom, "id=\"peak-marker\""), 1u);
  EXPECT_EQ(count(dom, "class=\"limit\""), lines);
  EXPECT_GE(count(dom, "<tr><td class=\"num\">"), 1u);  // the peak's live set
  const std::string marker = "id=\"peak-marker\" data-bytes=\"";
  const size_t at = dom.find(marker);
  ASSERT_NE(at, std::string::npos);
  const uint64_t page_peak = std::stoull(dom.substr(at + marker.size()));
  EXPECT_GE(page_peak, peak_low);
  EXPECT_LE(page_peak, peak_high);
  const size_t ms = dom.find("data-render-ms=\"");
  ASSERT_NE(ms, std::string::npos);
  EXPECT_LT(std::stol(dom.substr(ms + 16)), 2000) << "the page took 2 s or more to draw";
  const std::string png = std::string(MEMFIT_BUILD_DIR) + "/report_" + name + ".png";
  run(browser + " " + flags + " --window-size=1200,1000 --screenshot=" + png + " file://" + html +
      " >/dev/null 2>&1");
  EXPECT_TRUE(std::filesystem::exists(png));
  EXPECT_GT(std::filesystem::file_size(png), 10000u);
}

TEST(Browser, HloAndReplayTimelinesRender) {
  const std::string browser = chromium();
  if (browser.empty())
    GTEST_SKIP() << "chromium is not installed: scripts/test installs it (apt-get install chromium)";
  const std::string data = MEMFIT_TEST_DATA_DIR;
  const std::string hlo_html = std::string(MEMFIT_BUILD_DIR) + "/report_hlo.html";
  auto hlo =
      testing::run_cli({"hlo", data + "/xla/gpt_fp32_donate.hlo.txt.gz", "--json", "--html", hlo_html});
  ASSERT_EQ(hlo.code, 0) << hlo.err;
  // Live bytes over the schedule reach the device's peak, less the temp block's alignment and packing gaps.
  const uint64_t hlo_peak = nlohmann::json::parse(hlo.out)["peak_bytes"];
  // A compiled module carries no optimizer-state category (the model zoo's own): five areas are drawn.
  check_page(browser, hlo_html, "hlo", 5, 1, hlo_peak - hlo_peak / 1000, hlo_peak);
  const std::string replay_html = std::string(MEMFIT_BUILD_DIR) + "/report_replay.html";
  auto replay =
      testing::run_cli({"replay", data + "/gpt2_train_fp32.trace.csv.gz", "--json", "--html", replay_html});
  ASSERT_EQ(replay.code, 0) << replay.err;
  // four policies and the recorded run
  const uint64_t live_peak = nlohmann::json::parse(replay.out)["peak_live_bytes"];
  check_page(browser, replay_html, "replay", 1, 5, live_peak, live_peak);
  const std::string plan_html = std::string(MEMFIT_BUILD_DIR) + "/report_plan.html";
  auto plan = testing::run_cli({"plan", "--model", "gpt", "--donate", "--remat", "full", "--device", "h200",
                                "--json", "--html", plan_html});
  ASSERT_EQ(plan.code, 0) << plan.err;
  const uint64_t plan_peak = nlohmann::json::parse(plan.out)["peak_bytes"];
  // The peak, the peak in the program's own order ("at most", above the predicted one with full remat: XLA's
  // list order there), the pool and the device.
  ASSERT_GT(nlohmann::json::parse(plan.out)["peak_upper_bytes"].get<uint64_t>(), plan_peak);
  check_page(browser, plan_html, "plan", 6, 4, plan_peak - plan_peak / 1000, plan_peak);
}

TEST(Browser, AMillionEventTraceOpensInUnderTwoSeconds) {
  const std::string browser = chromium();
  if (browser.empty())
    GTEST_SKIP() << "chromium is not installed: scripts/test installs it (apt-get install chromium)";
  TimelineBuilder b("memfit");
  for (uint64_t i = 0; i < 500000; ++i) {  // 10^6 events: a sawtooth of allocations
    ASSERT_TRUE(b.alloc(0x1000 + 0x100 * (i % 4096), 1024 + (i % 97) * 4096, 0, i, 2 * i + 1).ok());
    if (i >= 4095) {
      ASSERT_TRUE(b.free(0x1000 + 0x100 * ((i + 1) % 4096), i, 2 * i + 2).ok());
    }
  }
  const Timeline t = std::move(b).finish();
  ASSERT_GE(t.events.size(), 995000u);
  const std::string html = std::string(MEMFIT_BUILD_DIR) + "/report_million.html";
  ASSERT_TRUE(write_file_atomic(html, render_html(chart_from_timeline(t, "10^6 events"))).ok());
  check_page(browser, html, "million", 1, 0, peak_live_bytes(t), peak_live_bytes(t));
}

}  // namespace
}  // namespace memfit
