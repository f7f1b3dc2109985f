// memfit hlo: what an XLA program will need on the device, from its optimized HLO alone.
#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <ostream>

#include "commands.h"
#include "html_report.h"
#include "memfit/core/bytes.h"
#include "memfit/core/device_catalog.h"
#include "memfit/core/json.h"
#include "memfit/core/xla_env.h"
#include "memfit/plan/hlo_plan.h"
#include "memfit/plan/xla_comparison.h"
#include "memfit/program/buffer_assignment.h"
#include "memfit/program/hlo_source.h"
#include "memfit/program/stablehlo_module.h"
#include "progress.h"

namespace memfit::cli {

Json hlo_to_json(const std::string& path, const HloPlan& plan, bool all_buffers) {
  Json j;
  j["file"] = path;
  j["module"] = plan.module;
  j["source"] = plan.source;
  if (plan.partitions > 1) {  // every figure is then one device's
    j["partitions"] = plan.partitions;
    j["partitioned"] = plan.partitioned;
  }
  j["instructions"] = plan.instructions;
  j["argument_bytes"] = plan.argument_bytes;
  j["output_bytes"] = plan.output_bytes;
  j["alias_bytes"] = plan.alias_bytes;
  j["temp_bytes"] = plan.temp_bytes;
  j["host_argument_bytes"] = plan.host_argument_bytes;
  j["host_output_bytes"] = plan.host_output_bytes;
  j["host_alias_bytes"] = plan.host_alias_bytes;
  j["host_temp_bytes"] = plan.host_temp_bytes;
  j["peak_bytes"] = plan.peak_bytes;
  j["lower_bound_bytes"] = plan.lower_bound_bytes;
  j["temp_upper_bytes"] = plan.temp_upper_bytes;
  j["peak_upper_bytes"] = plan.peak_upper_bytes;
  j["temp_lower_bound_bytes"] = plan.temp_lower_bound_bytes;
  j["constant_bytes"] = plan.constant_bytes;
  j["heap_packing"] = plan.packing == HeapPacking::kSpatial ? "spatial" : "temporal";
  j["peak_instruction"] = plan.peak_instruction;
  j["peak_op_name"] = plan.peak_op_name;
  j["caveats"] = plan.caveats;
  Json top = Json::array();
  for (uint32_t b : plan.live_at_peak) {
    const PlannedBuffer& row = plan.buffers[b];
    top.push_back({{"name", row.name}, {"bytes", row.bytes}, {"shape", row.shape}, {"op_name", row.op_name}});
    if (top.size() >= 2 * plan.groups.size() + 10) break;
  }
  j["top_buffers"] = top;
  Json groups = Json::array();
  for (const BufferGroup& g : plan.groups) {
    groups.push_back({{"count", g.count},
                      {"bytes_each", g.bytes_each},
                      {"total_bytes", g.total_bytes},
                      {"shape", g.shape},
                      {"op_name", g.op_name},
                      {"names", g.names}});
  }
  j["groups_at_peak"] = groups;
  if (all_buffers) {
    Json rows = Json::array();
    for (const PlannedBuffer& row : plan.buffers) {
      rows.push_back({row.name, buffer_kind_name(row.kind), row.bytes, row.start, row.end, row.offset,
                      row.shape, row.op_name});
    }
    j["buffers"] = {{"columns", {"name", "kind", "bytes", "start", "end", "offset", "shape", "op_name"}},
                    {"rows", rows}};
  }
  return j;
}

Json xla_comparison_to_json(const std::string& path, const XlaComparison& c) {
  Json j;
  j["file"] = path;
  for (const XlaComparison::Figure& f : c.figures) j[f.name + "_bytes"] = f.xla_bytes;
  Json top = Json::array();
  for (const XlaAssignedValue& v : c.largest_xla_temp_values)
    top.push_back(
        {{"name", v.name}, {"bytes", v.size_bytes}, {"offset", v.offset_bytes}, {"shape", v.shape}});
  j["largest_temp_values"] = top;
  j["differences"] = c.differences;
  return j;
}

Expected<HloRun> run_hlo(HloSource source, size_t top, std::optional<uint64_t> device_memory_bytes,
                         const std::function<void(const std::string&)>& progress) {
  if (progress) progress("memfit hlo: parsing " + source.path);
  // Optimized HLO, the lowered program as HLO, or as StableHLO: told apart by the text itself.
  auto module = parse_program_text(source.text);
  if (!module.ok()) return module.error().with_context(source.path);
  if (progress) progress("memfit hlo: planning " + module->name);
  HloPlanOptions po;
  po.top = top;
  if (device_memory_bytes) po.device_memory_bytes = *device_memory_bytes;
  auto plan = plan_hlo(*module, po);
  if (!plan.ok()) return plan.error().with_context(source.path);
  HloRun run{std::move(source), std::move(plan).value(), std::nullopt};
  if (!run.source.buffer_assignment_text.empty()) {
    auto assignment = parse_buffer_assignment(run.source.buffer_assignment_text);
    if (!assignment.ok()) return assignment.error().with_context(run.source.buffer_assignment_path);
    run.xla = compare_with_xla(run.plan, *assignment);
  }
  return run;
}

Json hlo_run_to_json(const HloRun& run, bool all_buffers) {
  Json j = hlo_to_json(run.source.path, run.plan, all_buffers);
  if (run.xla)
    j["xla_buffer_assignment"] = xla_comparison_to_json(run.source.buffer_assignment_path, *run.xla);
  return j;
}

namespace {

void print_comparison(std::ostream& out, const std::string& path, const XlaComparison& c) {
  out << fmt::format("\n  XLA's own buffer assignment ({}):\n", path);
  out << fmt::format("  {:<12} {:>15} {:>15}\n", "", "memfit B", "XLA B");
  for (const XlaComparison::Figure& f : c.figures)
    out << fmt::format("  {:<12} {:>15} {:>15}{}\n", f.name, f.memfit_bytes, f.xla_bytes,
                       f.memfit_bytes == f.xla_bytes ? "  same" : "");
  for (const std::string& d : c.differences) out << "  differs: " << d << "\n";
}

void print_table(std::ostream& out, const std::string& path, const HloPlan& plan) {
  auto row = [&](const char* what, uint64_t bytes, const std::string& note) {
    out << fmt::format("  {:<12} {:>10} {:>15} B  {}\n", what, format_bytes(bytes), bytes, note);
  };
  out << fmt::format("memfit hlo: {} (module {}, {} scheduled instructions)\n", path, plan.module,
                     plan.instructions);
  if (plan.source != "optimized") {
    out << fmt::format(
        "  read: the program before XLA optimized it ({}); planned through memfit's model of XLA:GPU's\n"
        "  fusion and scheduling - a prediction for an H100/H200-class GPU, approximate (the README gives "
        "its\n"
        "  measured error; the compiled module, `compiled.as_text()`, gives XLA's figures exactly)\n",
        plan.source == "stablehlo" ? "StableHLO" : "lowered HLO");
  }
  if (plan.partitioned) {
    out << fmt::format(
        "  the program is sharded over {} devices: memfit partitioned it as XLA's SPMD partitioner would,\n"
        "  and every figure below is one device's (its arguments' share exact; the rest a model, see the\n"
        "  caveats)\n",
        plan.partitions);
  }
  row("argument", plan.argument_bytes, "entry parameters");
  row("output", plan.output_bytes, "results, with their tuple tables");
  row("alias", plan.alias_bytes, "outputs written over donated arguments");
  row("temp", plan.temp_bytes,
      fmt::format("one block, {} best-fit packing",
                  plan.packing == HeapPacking::kSpatial ? "spatial" : "temporal"));
  // Host memory (S(5)): what XLA's memory_analysis() reports in its host_* fields, not on the device.
  if (plan.host_argument_bytes > 0)
    row("host arg", plan.host_argument_bytes,
        "parameters in host memory (pinned_host, S(5)): not on the device");
  if (plan.host_output_bytes > 0) row("host output", plan.host_output_bytes, "results in host memory");
  if (plan.host_alias_bytes > 0)
    row("host alias", plan.host_alias_bytes, "host results written over donated host arguments");
  if (plan.host_temp_bytes > 0)
    row("host temp", plan.host_temp_bytes, "in host memory (offloaded, S(5)): not on the device");
  row("peak", plan.peak_bytes, "argument + output - alias + temp: what the device will hold");
  row("lower bound", plan.lower_bound_bytes,
      fmt::format("with no fragmentation in temp (fragmentation is {} of the peak)",
                  format_percent(plan.peak_bytes - plan.lower_bound_bytes, plan.peak_bytes)));
  if (plan.source != "optimized")
    row("at most", plan.peak_upper_bytes,
        plan.peak_upper_bytes > plan.peak_bytes
            ? fmt::format("the peak in the program's own order, the most XLA's memory scheduler keeps:\n{:44}"
                          "the order XLA picks decides where between this and the peak the step lands",
                          "")
            : "the peak: the program's own order is the predicted one");
  out << caveat_lines(plan.caveats);
  if (plan.groups.empty()) return;
  out << fmt::format("\n  live in temp at its peak (while {} runs{}):\n", plan.peak_instruction,
                     plan.peak_op_name.empty() ? "" : ", " + plan.peak_op_name);
  out << fmt::format("  {:>5}   {:>10} {:>10}  {:<24} {}\n", "count", "each", "total", "shape", "op");
  for (const BufferGroup& g : plan.groups) {
    out << fmt::format("  {:>5} x {:>10} {:>10}  {:<24} {}\n", g.count, format_bytes(g.bytes_each),
                       format_bytes(g.total_bytes), g.shape, g.op_name.empty() ? g.names.front() : g.op_name);
  }
}

}  // namespace

Action add_hlo_command(CLI::App& app, Io& io) {
  struct Options {
    std::string path;
    std::string module;
    size_t top = 10;
    bool json = false;
    bool buffers = false;
    std::string html;
    std::string trace_out;
    std::string capacity;
    std::string live_profile;
    std::string profile_device;
  };
  auto options = std::make_shared<Options>();
  app.add_option("PATH", options->path,
                 "A program as HLO text - optimized (compiled.as_text()) or lowered "
                 "(lowered.as_text(dialect=\"hlo\"))"
                 " - or as StableHLO (lowered.as_text()), gzip accepted; or an XLA dump folder")
      ->required();
  app.add_option("--module", options->module, "In a dump folder: the module whose file name contains this");
  app.add_option("--top", options->top, "Groups of buffers listed at the peak (default 10)")
      ->check(CLI::Range(size_t{0}, kMaxListed));
  CLI::Option* json = app.add_flag("--json", options->json, "Print one JSON object");
  // Options that only qualify another are refused alone rather than ignored.
  app.add_flag("--buffers", options->buffers,
               "With --json: every buffer with its kind, live range (schedule steps) and temp offset")
      ->needs(json);
  app.add_option("--html", options->html, "Also write a self-contained HTML memory timeline to this file");
  app.add_option(
      "--trace-out", options->trace_out,
      "Also write the plan as a memfit trace (alloc/free per schedule step): `memfit replay` runs it "
      "through allocator policies");
  app.add_option(
      "--capacity", options->capacity,
      "The device (bytes, 80GiB, h100, h200): the pool's limit comes from it and the XLA variables in force");
  CLI::Option* live = app.add_option(
      "--live-profile", options->live_profile,
      "A live process's device memory profile: does this program fit on top of what it holds?");
  app.add_option("--profile-device", options->profile_device,
                 "The profile's device (cuda:0); default: the one holding most")
      ->needs(live);
  return [options, &io]() -> int {
    std::optional<uint64_t> limit, device_memory;
    if (!options->capacity.empty()) {
      auto capacity = parse_capacity(options->capacity);
      if (!capacity.ok()) return fail(io, capacity.error().with_context("--capacity"));
      device_memory = *capacity;
      auto config = parse_xla_allocator_env(io.env);
      if (!config.ok()) return fail(io, config.error());
      const XlaAllocatorPlan pool = plan_xla_allocator(*config, *capacity);
      limit = pool.limit_bytes.value_or(*capacity);
    }
    Progress progress(io.err, io.stderr_is_terminal);
    progress.update("memfit hlo: reading " + options->path);
    auto source = read_hlo_source(options->path, options->module);
    if (!source.ok()) return fail(io, source.error());
    auto run = run_hlo(std::move(source).value(), options->top, device_memory,
                       [&](const std::string& what) { progress.update(what); });
    progress.done();
    if (!run.ok()) return fail(io, run.error());
    const HloPlan* plan = &run->plan;
    const HloSource* source_read = &run->source;
    if (!options->html.empty()) {
      const Status written =
          write_html(options->html, chart_from_plan(*plan, "memfit hlo: " + source_read->path));
      if (!written.ok()) return fail(io, written.error());
    }
    if (!options->trace_out.empty()) {
      const Status written = write_plan_trace(options->trace_out, *plan);
      if (!written.ok()) return fail(io, written.error());
    }
    std::optional<NextStepFit> next;
    if (!options->live_profile.empty()) {
      auto fit = live_profile_fit(options->live_profile, options->profile_device, plan->peak_bytes,
                                  plan->argument_bytes, limit, plan->peak_upper_bytes);
      if (!fit.ok()) return fail(io, fit.error());
      next = *fit;
    }
    // A sharded program is planned for one device (its share), so the verdict is each device's.
    std::optional<bool> fits;
    std::string verdict;
    if (limit) {
      fits = plan->peak_bytes <= *limit;
      verdict = *fits ? (plan->partitioned ? "fits on each device" : "fits")
                      : (plan->partitioned ? "does NOT fit on each device" : "does NOT fit");
    }
    if (options->json) {
      Json j = hlo_run_to_json(*run, options->buffers);
      if (limit) {
        j["limit_bytes"] = *limit;
        j["fits"] = fits ? Json(*fits) : Json(nullptr);
        // Whether it fits whatever order XLA's memory scheduler keeps (peak_upper_bytes).
        if (fits && *fits) j["fits_in_every_order"] = plan->peak_upper_bytes <= *limit;
      }
      if (next) j["live_profile"] = next_step_json(options->live_profile, *next);
      io.out << json_to_output(j);
    } else {
      print_table(io.out, source_read->path, *plan);
      if (limit) io.out << fmt::format("  pool limit {}: the program {}\n", format_bytes(*limit), verdict);
      if (fits.value_or(false)) io.out << order_caveat(plan->peak_upper_bytes, *limit);
      if (run->xla) print_comparison(io.out, source_read->buffer_assignment_path, *run->xla);
      if (next) print_next_step(io.out, options->live_profile, *next);
    }
    if (next && next->fits) return *next->fits ? kExitOk : kExitFinding;
    if (limit) return fits.value_or(false) ? kExitOk : kExitFinding;
    return kExitOk;
  };
}

}  // namespace memfit::cli
