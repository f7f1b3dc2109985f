// memfit plan: will a model's training (or inference) step fit, and what holds its peak.
#include <fmt/format.h>

#include <ostream>

#include "commands.h"
#include "html_report.h"
#include "memfit/core/bytes.h"
#include "memfit/core/device_catalog.h"
#include "memfit/core/file_io.h"
#include "memfit/core/json.h"
#include "memfit/plan/largest_fit.h"
#include "memfit/plan/step_plan.h"
#include "plan_options.h"
#include "progress.h"

namespace memfit::cli {

Json step_plan_to_json(const StepPlan& p) {
  Json j;
  j["spec"] = model_spec_to_json(p.spec);
  j["parameter_count"] = p.arguments.parameter_count;
  j["devices"] = p.spec.devices();
  j["argument_bytes"] = p.hlo.argument_bytes;
  j["output_bytes"] = p.hlo.output_bytes;
  j["alias_bytes"] = p.hlo.alias_bytes;
  j["temp_bytes"] = p.hlo.temp_bytes;
  j["peak_bytes"] = p.peak_bytes;
  j["lower_bound_bytes"] = p.hlo.lower_bound_bytes;  // the peak with no fragmentation in temp
  j["peak_upper_bytes"] = p.peak_upper_bytes;        // in the program's own order: the most XLA keeps
  j["host_peak_bytes"] = p.host_peak_bytes;          // pinned host memory (remat offload), not the device's
  j["offloaded_bytes"] = p.offloaded_bytes;          // copied to the host and back each step
  j["caveats"] = p.hlo.caveats;                      // what the prediction is known to miss (HloPlan)
  j["breakdown"] = {{"parameters", p.breakdown.parameters}, {"optimizer_state", p.breakdown.optimizer_state},
                    {"gradients", p.breakdown.gradients},   {"activations", p.breakdown.activations},
                    {"kv_cache", p.breakdown.kv_cache},     {"temporaries", p.breakdown.temporaries}};
  if (p.capacity_bytes) {
    j["capacity_bytes"] = *p.capacity_bytes;
    j["memory_fraction"] = p.memory_fraction;
    j["limit_bytes"] = p.limit_bytes;
    j["fits"] = p.fits;
    j["fits_in_every_order"] = p.fits_in_every_order;
  } else {
    // Without a device there is no answer to "does it fit": null, not a guess.
    j["capacity_bytes"] = nullptr;
    j["fits"] = nullptr;
  }
  Json groups = Json::array();
  for (const BufferGroup& g : p.hlo.groups)
    groups.push_back({{"count", g.count},
                      {"bytes_each", g.bytes_each},
                      {"total_bytes", g.total_bytes},
                      {"shape", g.shape},
                      {"op_name", g.op_name}});
  j["groups_at_peak"] = groups;
  if (!p.extrapolated_from.empty()) {
    // Too deep to build whole: the depths planned, and whether every figure grew alike between them.
    j["extrapolated_from_layers"] = p.extrapolated_from;
    j["extrapolation_exact"] = p.extrapolation_exact;
    // How far apart a figure's two growths were (its larger one is taken); null when the line is in doubt.
    j["extrapolation_wobble_bytes"] =
        p.extrapolation_wobble_bytes == UINT64_MAX ? Json(nullptr) : Json(p.extrapolation_wobble_bytes);
  }
  return j;
}

// ARCHITECTURE.md's keys: `fits` (the step as it is) and `changes[]` (`change`, `peak_bytes`, `cost`), the
// changes that fit, cheapest first; `tried[]` is every change in the seed's order.
Json fit_to_json(const FitResult& fit) {
  auto candidate = [](const FitCandidate& c) {
    return Json{{"step", c.step},
                {"change", c.change},
                {"code", c.code},
                {"cost", c.cost},
                {"cost_note", c.cost_note},
                {"peak_bytes", c.peak_bytes},
                {"limit_bytes", c.limit_bytes},
                {"fits", c.fits},
                {"peak_upper_bytes", c.peak_upper_bytes},
                {"fits_in_every_order", c.fits_in_every_order},
                {"host_peak_bytes", c.host_peak_bytes},
                {"only_moves_to_host", c.only_moves_to_host},
                {"peak_approximate", c.peak_approximate},
                {"peak_at_least_bytes", c.peak_at_least_bytes}};
  };
  Json j;
  j["fits"] = fit.baseline.fits;
  Json changes = Json::array();
  for (size_t i : fit.ranked) changes.push_back(candidate(fit.candidates[i]));
  j["changes"] = changes;
  Json tried = Json::array();
  for (const FitCandidate& c : fit.candidates) tried.push_back(candidate(c));
  j["tried"] = tried;
  j["baseline"] = step_plan_to_json(fit.baseline);
  j["programs_planned"] = fit.programs_planned;
  j["programs_extrapolated"] = fit.programs_extrapolated;
  j["programs_approximate"] = fit.programs_approximate;
  return j;
}

Json largest_fit_to_json(const LargestFit& f) {
  Json j;
  j["fits"] = f.value > 0;
  Json l;
  l["key"] = f.key;
  l["value"] = f.value;
  l["step"] = f.step;
  l["peak_bytes"] = f.plan.peak_bytes;
  l["limit_bytes"] = f.plan.limit_bytes;
  l["next_value"] = f.next_value;
  if (f.next_peak_bytes) {
    l["next_peak_bytes"] = *f.next_peak_bytes;
    l["next_peak_approximate"] = f.next_peak_approximate;
  }
  if (!f.next_refused.empty()) l["next_refused"] = f.next_refused;
  l["programs_planned"] = f.programs_planned;
  j["largest"] = l;
  j["plan"] = step_plan_to_json(f.plan);
  return j;
}

namespace {

void print_largest(std::ostream& out, const LargestFit& f) {
  const StepPlan& p = f.plan;
  out << fmt::format("memfit fit: the largest {} that fits a pool of {} ({:.0f}% of {}): {}\n", f.key,
                     format_bytes(p.limit_bytes), 100 * p.memory_fraction, format_bytes(*p.capacity_bytes),
                     f.value > 0 ? std::to_string(f.value) : "none");
  if (f.value > 0) out << fmt::format("  {} {}: peak {}, fits\n", f.key, f.value, format_bytes(p.peak_bytes));
  if (f.next_peak_bytes) {
    out << fmt::format("  {} {}: peak {}{}, does not\n", f.key, f.next_value,
                       f.next_peak_approximate ? "~" : "", format_bytes(*f.next_peak_bytes));
  } else if (!f.next_refused.empty()) {
    out << fmt::format("  {} {}: not built ({})\n", f.key, f.next_value, f.next_refused);
  }
  if (f.step > 1)
    out << fmt::format("  ({} in steps of {}: it splits into microbatches and over the data axis)\n", f.key,
                       f.step);
  out << fmt::format("  ({} plans)\n", f.programs_planned);
}

void print(std::ostream& out, const StepPlan& p) {
  const ModelSpec& s = p.spec;
  out << fmt::format(
      "memfit plan: {} {} step, {} precision, remat {}, {} parameters{}{}\n", to_string(s.model),
      to_string(s.step), to_string(s.precision), to_string(s.remat), p.arguments.parameter_count,
      s.donate ? ", donated" : "",
      s.devices() > 1 ? fmt::format(", {} over {} devices", to_string(s.sharding), s.devices()) : "");
  auto row = [&](const char* what, uint64_t bytes) {
    out << fmt::format("  {:<16} {:>10} {:>16} B  {:>6}\n", what, format_bytes(bytes), bytes,
                       format_percent(bytes, p.peak_bytes));
  };
  if (s.devices() > 1 && s.sharding == ShardingKind::kReplicated) {
    out << fmt::format(
        "  data parallel: parameters and optimizer state replicated on each of the {} devices (as pmap "
        "does), the batch split\n",
        s.devices());
  }
  out << "  per device, at the peak:\n";
  row("parameters", p.breakdown.parameters);
  row("optimizer state", p.breakdown.optimizer_state);
  row("gradients", p.breakdown.gradients);
  row("activations", p.breakdown.activations);
  if (s.step == StepKind::kDecode) row("KV cache", p.breakdown.kv_cache);
  row("temporaries", p.breakdown.temporaries);
  row("peak", p.peak_bytes);
  if (p.peak_upper_bytes > p.peak_bytes)
    out << fmt::format(
        "  at most {} in the program's own order, the most XLA's memory scheduler keeps:\n"
        "  the order XLA picks decides where between that and the peak the step lands\n",
        format_bytes(p.peak_upper_bytes));
  if (p.offloaded_bytes > 0) {
    out << fmt::format(
        "  pinned host memory: {} at its fullest, not on the device ({} copied to the host and back each "
        "step)\n",
        format_bytes(p.host_peak_bytes), format_bytes(p.offloaded_bytes));
  }
  out << caveat_lines(p.hlo.caveats);
  out << fmt::format("  (XLA would report argument {}, output {}, alias {}, temp {})\n",
                     format_bytes(p.hlo.argument_bytes), format_bytes(p.hlo.output_bytes),
                     format_bytes(p.hlo.alias_bytes), format_bytes(p.hlo.temp_bytes));
  if (!p.extrapolated_from.empty()) {
    const std::vector<uint64_t>& d = p.extrapolated_from;
    out << fmt::format(
        "  extrapolated: {} unrolled layers are more than memfit builds whole ({}); planned at {}, {} and {} "
        "layers, {}\n",
        p.spec.blocks(), kMaxUnrolledLayers, d[0], d[1], d[2],
        p.extrapolation_exact ? "every figure grew by the same bytes per layer at each depth"
        : p.extrapolation_wobble_bytes == UINT64_MAX
            ? "but the line is in doubt: a figure shrank, or another pass leads deeper down"
            : fmt::format(
                  "the heap's packing grew unevenly between depths (by up to {}): the larger growth is "
                  "taken",
                  format_bytes(p.extrapolation_wobble_bytes)));
  }
  if (p.capacity_bytes) {
    out << fmt::format("  device {}, XLA's pool {:.0f}% of it = {}: {}\n", format_bytes(*p.capacity_bytes),
                       100 * p.memory_fraction, format_bytes(p.limit_bytes),
                       p.fits ? fmt::format("fits, {} to spare", format_bytes(p.limit_bytes - p.peak_bytes))
                              : fmt::format("does NOT fit, {} over (memfit fit finds the cheapest change)",
                                            format_bytes(p.peak_bytes - p.limit_bytes)));
    if (p.fits) out << order_caveat(p.peak_upper_bytes, p.limit_bytes);
  }
  if (p.hlo.groups.empty()) return;
  out << "\n  largest tensors live at the peak:\n";
  for (const BufferGroup& g : p.hlo.groups)
    out << fmt::format("  {:>5} x {:>10} {:>10}  {:<24} {}\n", g.count, format_bytes(g.bytes_each),
                       format_bytes(g.total_bytes), g.shape, g.op_name);
}

}  // namespace

Action add_plan_command(CLI::App& app, Io& io) {
  auto options = std::make_shared<PlanOptions>();
  auto html = std::make_shared<std::string>();
  auto trace_out = std::make_shared<std::string>();
  auto live = std::make_shared<std::pair<std::string, std::string>>();  // --live-profile, --profile-device
  add_plan_options(app, *options);
  app.add_option("--html", *html, "Also write a self-contained HTML memory timeline to this file");
  app.add_option(
      "--trace-out", *trace_out,
      "Also write the step's plan as a memfit trace: `memfit replay` runs it through allocator policies");
  CLI::Option* live_profile =
      app.add_option("--live-profile", live->first,
                     "A live process's device memory profile (jax.profiler.save_device_memory_profile): does "
                     "the next step fit on top of what it holds?");
  app.add_option("--profile-device", live->second,
                 "The profile's device (cuda:0); default: the one holding most")
      ->needs(live_profile);
  return [options, html, trace_out, live, &io]() -> int {
    auto in = resolve_plan_inputs(*options, io.env);
    if (!in.ok()) return fail(io, in.error());
    if (plan_is_extrapolated(in->spec) && (!html->empty() || !trace_out->empty()))
      return fail(
          io, invalid_argument(fmt::format(
                  "--html and --trace-out draw a program's buffers; a step of more than {} unrolled layers "
                  "is extrapolated from smaller depths, not built: draw it with --scan or fewer layers",
                  kMaxUnrolledLayers)));
    auto plan = plan_step(in->spec, in->capacity_bytes, in->memory_fraction);
    if (!plan.ok()) return fail(io, plan.error());
    if (!html->empty()) {
      MemoryChart chart = chart_from_plan(
          plan->hlo,
          fmt::format("memfit plan: {} {} step", to_string(in->spec.model), to_string(in->spec.step)));
      if (plan->capacity_bytes) {
        chart.lines.push_back({"capacity", *plan->capacity_bytes});
        chart.lines.push_back(
            {fmt::format("XLA pool ({:.0f}%)", 100 * plan->memory_fraction), plan->limit_bytes});
      }
      const Status written = write_html(*html, chart);
      if (!written.ok()) return fail(io, written.error());
    }
    if (!trace_out->empty()) {
      const Status written = write_plan_trace(*trace_out, plan->hlo);
      if (!written.ok()) return fail(io, written.error());
    }
    std::optional<NextStepFit> next;
    if (!live->first.empty()) {
      const uint64_t arguments = plan->breakdown.parameters + plan->breakdown.optimizer_state;
      auto fit =
          live_profile_fit(live->first, live->second, plan->peak_bytes, arguments,
                           plan->capacity_bytes ? std::optional<uint64_t>(plan->limit_bytes) : std::nullopt,
                           plan->peak_upper_bytes);
      if (!fit.ok()) return fail(io, fit.error());
      next = *fit;
    }
    if (options->json) {
      Json j = step_plan_to_json(*plan);
      if (next) j["live_profile"] = next_step_json(live->first, *next);
      io.out << json_to_output(j);
    } else {
      print(io.out, *plan);
      if (next) print_next_step(io.out, live->first, *next);
    }
    if (next && next->fits) return *next->fits ? kExitOk : kExitFinding;
    return plan->fits ? kExitOk : kExitFinding;
  };
}

Action add_fit_command(CLI::App& app, Io& io) {
  auto options = std::make_shared<PlanOptions>();
  auto largest = std::make_shared<std::string>();
  add_plan_options(app, *options);
  app.add_option(
      "--largest", *largest,
      "Instead of changes: the largest batch (or seq) that fits - a server's concurrent sequences or "
      "context, a training run's batch");
  return [options, largest, &io]() -> int {
    auto in = resolve_plan_inputs(*options, io.env);
    if (!in.ok()) return fail(io, in.error());
    if (!in->capacity_bytes) return fail(io, invalid_argument("memfit fit needs --capacity or --device"));
    Progress progress(io.err, io.stderr_is_terminal);
    if (!largest->empty()) {
      auto found = largest_fitting(in->spec, *largest, *in->capacity_bytes, in->memory_fraction,
                                   [&](const std::string& trying) {
                                     progress.update(fmt::format("memfit fit: planning {}", trying));
                                   });
      progress.done();
      if (!found.ok()) return fail(io, found.error());
      if (options->json) {
        io.out << json_to_output(largest_fit_to_json(*found));
      } else {
        print_largest(io.out, *found);
      }
      return found->value > 0 ? kExitOk : kExitFinding;
    }
    auto fit = fit_step(in->spec, *in->capacity_bytes, in->memory_fraction, [&](size_t done, size_t total) {
      progress.update(fmt::format("memfit fit: planned {} of {} changes", done, total));
    });
    progress.done();
    if (!fit.ok()) return fail(io, fit.error());
    const StepPlan& b = fit->baseline;
    if (options->json) {
      io.out << json_to_output(fit_to_json(*fit));
    } else {
      io.out << fmt::format(
          "memfit fit: peak {} in a pool of {} ({:.0f}% of {}): {}\n", format_bytes(b.peak_bytes),
          format_bytes(b.limit_bytes), 100 * b.memory_fraction, format_bytes(*b.capacity_bytes),
          b.fits ? "fits already" : fmt::format("{} over", format_bytes(b.peak_bytes - b.limit_bytes)));
      if (fit->programs_extrapolated > 0) {
        const bool deep = b.spec.blocks() > kMaxUnrolledLayers;
        const std::string rest = fit->programs_extrapolated == fit->programs_planned ? ""
                                 : deep ? fmt::format("; the rest at {}, {} and {}", kExtrapolationLayers,
                                                      2 * kExtrapolationLayers, 3 * kExtrapolationLayers)
                                        : "; the rest whole";
        const size_t alike = fit->programs_extrapolated - fit->programs_approximate;
        // The lines taken as figures (each figure grew alike, to 64 KiB or but for the shallowest depth's
        // heap holes: plan_step_extended), and those kept for a verdict alone.
        std::string how;
        if (alike > 0) how = fmt::format("{} where each figure grew alike", alike);
        if (fit->programs_approximate > 0)
          how += fmt::format(
              "{}{} marked ~ (estimates): the bytes live at once are over the pool, so they cannot fit "
              "whatever the packing",
              how.empty() ? "" : "; ", fit->programs_approximate);
        io.out << fmt::format("  (of the {} plans, {} made at {}, {} and {} layers and extended - {}{})\n",
                              fit->programs_planned, fit->programs_extrapolated, kFitExtrapolationLayers,
                              2 * kFitExtrapolationLayers, 3 * kFitExtrapolationLayers, how, rest);
      } else if (!b.extrapolated_from.empty()) {
        io.out << fmt::format(
            "  (more than {} unrolled layers: each plan below is made at {}, {} and {} layers and "
            "extrapolated)\n",
            kMaxUnrolledLayers, b.extrapolated_from[0], b.extrapolated_from[1], b.extrapolated_from[2]);
      }
      io.out << "\n  tried, in the seed's order (allocation, location, shapes, sharding):\n";
      for (const FitCandidate& c : fit->candidates) {
        // A change too long for its column (a combined one) has a line of its own.
        const bool long_name = c.change.size() > 50;
        if (long_name) io.out << fmt::format("  {:<10} {}\n", c.step, c.change);
        io.out << fmt::format("  {:<10} {:<50} {:>10}  {}\n", long_name ? "" : c.step,
                              long_name ? "" : c.change,
                              (c.peak_approximate ? "~" : "") + format_bytes(c.peak_bytes),
                              !c.fits                 ? "-"
                              : c.fits_in_every_order ? "fits"
                                                      : "fits as predicted (not in every order)");
        if (c.host_peak_bytes > 0) io.out << fmt::format("  {:<10} {}\n", "", c.cost_note);
      }
      if (fit->ranked.empty()) {
        io.out << "\n  no change fits, alone or stacked with the others that help: use a larger device or "
                  "more of them\n";
      } else {
        io.out << "\n  changes that fit, cheapest first:\n";
        int n = 0;
        for (size_t i : fit->ranked) {
          const FitCandidate& c = fit->candidates[i];
          // A combined change's code is one line per change it makes.
          std::string code = c.code;
          for (size_t at = code.find('\n'); at != std::string::npos; at = code.find('\n', at + 8))
            code.replace(at, 1, "\n       ");
          io.out << fmt::format("  {}. {} -> peak {} ({}){}\n       {}\n", ++n, c.change,
                                format_bytes(c.peak_bytes), c.cost_note,
                                c.fits_in_every_order
                                    ? ""
                                    : fmt::format("; {} in the program's own order: XLA's order decides",
                                                  format_bytes(c.peak_upper_bytes)),
                                code);
        }
      }
    }
    return b.fits || !fit->ranked.empty() ? kExitOk : kExitFinding;
  };
}

}  // namespace memfit::cli
