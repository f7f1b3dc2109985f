// memfit replay: a recorded allocation trace through every allocator policy, side by side.
#include <fmt/format.h>

#include <cmath>
#include <ostream>

#include "commands.h"
#include "html_report.h"
#include "memfit/core/bytes.h"
#include "memfit/core/device_catalog.h"
#include "memfit/core/json.h"
#include "memfit/trace/readers.h"
#include "memfit/trace/replay.h"
#include "progress.h"

namespace memfit::cli {
namespace {

double round3(double x) { return std::round(x * 1000.0) / 1000.0; }

}  // namespace

Json replay_to_json(const Timeline& t, const ReplayResult& r, bool capacity_given) {
  Json j;
  j["source"] = t.source;
  if (t.device) j["device"] = *t.device;
  j["events"] = r.events;
  j["peak_live_bytes"] = r.peak_live_bytes;
  if (capacity_given) j["capacity_bytes"] = r.capacity_bytes;
  if (t.recorded_peak_reserved_bytes) {
    j["recorded_peak_reserved_bytes"] = *t.recorded_peak_reserved_bytes;
    // false: the trace began after the run had reserved memory, and the figure is a lower bound.
    j["recorded_peak_reserved_complete"] = t.recorded_reserved_complete;
    j["recorded_ratio_to_peak_live"] =
        r.peak_live_bytes ? round3(static_cast<double>(*t.recorded_peak_reserved_bytes) / r.peak_live_bytes)
                          : 0.0;
  }
  j["frees_before_recording"] = t.frees_before_recording;
  j["segment_frees_before_recording"] = t.segment_frees_before_recording;
  j["recorded_ooms"] = t.recorded_ooms;
  Json policies = Json::array();
  for (const PolicyResult& p : r.policies) {
    Json pj;
    pj["name"] = p.name;
    pj["peak_reserved_bytes"] = p.peak_reserved_bytes;
    pj["peak_in_use_bytes"] = p.peak_in_use_bytes;
    pj["ratio_to_peak_live"] = round3(p.ratio_to_peak_live);
    pj["oom_events"] = p.oom_events;
    if (p.first_oom_event) {
      pj["first_oom_event"] = *p.first_oom_event;
      pj["first_oom"] = p.first_oom;
    }
    pj["events_per_second"] = std::round(p.events_per_second);
    Json samples = Json::array();
    for (const ReplaySample& s : p.samples) samples.push_back({s.event, s.live_bytes, s.reserved_bytes});
    pj["samples"] = {{"columns", {"event", "live_bytes", "reserved_bytes"}}, {"rows", samples}};
    policies.push_back(pj);
  }
  j["policies"] = policies;
  return j;
}

namespace {

void print_table(std::ostream& out, const std::string& path, const Timeline& t, const ReplayResult& r,
                 bool capacity_given) {
  out << fmt::format("memfit replay: {} ({}{}, {} events, {} buffers)\n", path, t.source,
                     t.device ? fmt::format(", device {}", *t.device) : "", r.events, t.buffer_count);
  out << fmt::format("  peak live (lower bound)   {} ({} B)\n", format_bytes(r.peak_live_bytes),
                     r.peak_live_bytes);
  if (t.recorded_peak_reserved_bytes) {
    const double ratio =
        r.peak_live_bytes ? static_cast<double>(*t.recorded_peak_reserved_bytes) / r.peak_live_bytes : 0.0;
    if (t.recorded_reserved_complete) {
      out << fmt::format("  recorded peak reserved    {} ({:.3f}x live) - the original run's allocator\n",
                         format_bytes(*t.recorded_peak_reserved_bytes), ratio);
    } else {
      // Its segments do not cover what was in use: the run's own figure is not in the trace.
      out << fmt::format(
          "  recorded peak reserved    at least {} (>= {:.3f}x live) - the trace began after the run "
          "reserved memory\n",
          format_bytes(*t.recorded_peak_reserved_bytes), ratio);
    }
  }
  if (t.recorded_ooms) {
    out << fmt::format("  recorded OOMs             {} - the original run's allocator failed {} time{}\n",
                       t.recorded_ooms, t.recorded_ooms, t.recorded_ooms == 1 ? "" : "s");
  }
  if (capacity_given) out << fmt::format("  capacity                  {}\n", format_bytes(r.capacity_bytes));
  if (t.frees_before_recording) {
    out << fmt::format(
        "  note: {} buffers freed in the trace were allocated before it began: replayed as live from its "
        "start\n",
        t.frees_before_recording);
  }
  if (t.segment_frees_before_recording) {
    out << fmt::format("  note: {} segments reserved before the recording started were freed in it\n",
                       t.segment_frees_before_recording);
  }
  out << fmt::format("\n  {:<11} {:>13} {:>9} {:>13} {:>6} {:>12}  reserved/live over time\n", "policy",
                     "peak reserved", "x live", "peak in use", "OOMs", "events/s");
  for (const PolicyResult& p : r.policies) {
    // A ten-cell sparkline of reserved / live over the samples (how much the pool holds beyond the live set).
    std::string spark;
    const size_t n = p.samples.size();
    for (size_t cell = 0; cell < 10 && n > 0; ++cell) {
      const ReplaySample& s = p.samples[std::min(n - 1, cell * n / 10)];
      const double over = s.live_bytes ? static_cast<double>(s.reserved_bytes) / s.live_bytes : 0.0;
      spark += over < 1.05 ? '_' : over < 1.25 ? '.' : over < 2.0 ? 'o' : 'O';
    }
    out << fmt::format("  {:<11} {:>13} {:>9.3f} {:>13} {:>6} {:>12.3g}  {}\n", p.name,
                       format_bytes(p.peak_reserved_bytes), p.ratio_to_peak_live,
                       format_bytes(p.peak_in_use_bytes), p.oom_events, p.events_per_second, spark);
  }
  for (const PolicyResult& p : r.policies) {
    if (p.first_oom_event)
      out << fmt::format("\n  {}: first OOM at event {}: {}\n", p.name, *p.first_oom_event, p.first_oom);
  }
  out << "\n  ('_' under 1.05x live, '.' under 1.25x, 'o' under 2x, 'O' 2x or more; bfc = high-water mark of "
         "its "
         "preallocated pool)\n";
}

}  // namespace

Action add_replay_command(CLI::App& app, Io& io) {
  struct Options {
    std::string trace;
    std::string policy = "all";
    std::string capacity;
    bool json = false;
    std::string html;
    std::optional<uint32_t> device;
  };
  auto options = std::make_shared<Options>();
  app.add_option("TRACE", options->trace, "PyTorch snapshot pickle, PyTorch/RMM/memfit CSV (gzip accepted)")
      ->required();
  app.add_option("--policy", options->policy, "bfc, bfc-growth, platform, vmm or all");
  app.add_option("--capacity", options->capacity,
                 "Device capacity (bytes, 80GiB, h100, h200); report the first OOM");
  app.add_flag("--json", options->json, "Print one JSON object");
  app.add_option("--html", options->html, "Also write a self-contained HTML memory timeline to this file");
  app.add_option("--device", options->device,
                 "A PyTorch snapshot's device to replay (default: the one whose trace has events)")
      ->check(CLI::Range(0, 1023));
  return [options, &io]() -> int {
    ReplayOptions ro;
    if (options->policy != "all") ro.policies = {options->policy};
    if (!options->capacity.empty()) {
      auto c = parse_capacity(options->capacity);
      if (!c.ok()) return fail(io, c.error().with_context("--capacity"));
      ro.capacity_bytes = *c;
    }
    Progress progress(io.err, io.stderr_is_terminal);
    progress.update("memfit replay: reading " + options->trace);
    auto timeline = read_trace_file(options->trace, options->device);
    if (!timeline.ok()) return fail(io, timeline.error());
    ro.progress = [&](const std::string& policy, double done) {
      progress.update(fmt::format("memfit replay: {} {:.0f}%", policy, 100 * done));
    };
    auto result = replay(*timeline, ro);
    progress.done();
    if (!result.ok()) return fail(io, result.error());
    const bool capacity_given = ro.capacity_bytes.has_value();
    if (!options->html.empty()) {
      MemoryChart chart = chart_from_timeline(*timeline, "memfit replay: " + options->trace);
      chart.subtitle = fmt::format("{} events of a {} trace; peak live {}", result->events, timeline->source,
                                   format_bytes(result->peak_live_bytes));
      for (const PolicyResult& p : result->policies)
        chart.lines.push_back({p.name + " reserved", p.peak_reserved_bytes});
      if (timeline->recorded_peak_reserved_bytes)
        chart.lines.push_back(
            {timeline->recorded_reserved_complete ? "recorded reserved" : "recorded reserved (at least)",
             *timeline->recorded_peak_reserved_bytes});
      if (capacity_given) chart.lines.push_back({"capacity", *ro.capacity_bytes});
      const Status written = write_html(options->html, chart);
      if (!written.ok()) return fail(io, written.error());
    }
    if (options->json) {
      io.out << json_to_output(replay_to_json(*timeline, *result, capacity_given));
    } else {
      print_table(io.out, options->trace, *timeline, *result, capacity_given);
    }
    for (const PolicyResult& p : result->policies) {
      if (p.oom_events > 0) return kExitFinding;
    }
    return kExitOk;
  };
}

}  // namespace memfit::cli
