// memfit doctor: diagnose a machine, a process or a failed job's logs, in the seed's order.
#include <fmt/format.h>

#include <optional>
#include <ostream>

#include "commands.h"
#include "memfit/core/bytes.h"
#include "memfit/core/device_catalog.h"
#include "memfit/core/file_io.h"
#include "memfit/diagnose/bundle.h"
#include "memfit/diagnose/doctor.h"

namespace memfit::cli {
namespace {
// A job's log is read whole; a gigabyte is far past any stderr worth diagnosing (and /dev/zero ends here).
constexpr uint64_t kMaxLogBytes = 1ull << 30;
}  // namespace

void add_share_groups(DoctorReport& report) {
  Json groups = Json::array();
  for (const ShareGroupInfo& g : report.share_groups) groups.push_back(share_group_json(g));
  if (!groups.empty()) report.facts["share_groups"] = std::move(groups);
}

Json doctor_to_json(const DoctorReport& report) {
  Json findings = Json::array();
  for (const Finding& f : report.findings) findings.push_back(f.to_json());
  return Json{{"findings", findings}, {"notes", report.notes}, {"facts", report.facts}};
}

Action add_doctor_command(CLI::App& app, Io& io) {
  struct Options {
    std::vector<std::string> logs;
    std::optional<int> pid;
    std::string capacity;
    std::string root = "/";
    std::string bundle;
    bool no_gpu = false;
    bool json = false;
  };
  auto options = std::make_shared<Options>();
  app.add_option("--log", options->logs, "A failed job's stderr, exception text or kernel log (repeatable)");
  app.add_option("--pid", options->pid, "Diagnose one process: its XLA variables, pool and footprint");
  app.add_option("--capacity", options->capacity,
                 "GPU capacity when NVML cannot tell (bytes, 80GiB, h100, h200)");
  app.add_option(
      "--bundle", options->bundle,
      "A folder memfit_jax.capture() wrote: memory_stats, the device memory profile, memory_analysis");
  app.add_option("--root", options->root, "Read /proc and /sys under this folder (for saved machine state)");
  app.add_flag("--no-gpu", options->no_gpu, "Do not query NVML");
  app.add_flag("--json", options->json, "Print one JSON object");
  return [options, &io]() -> int {
    DoctorOptions d;
    d.root = options->root;
    d.environment = io.env;
    d.query_gpu = !options->no_gpu;
    // With only logs, diagnose the logs; the machine is probed when asked for (no --log) or with --pid.
    d.probe_machine = (options->logs.empty() && options->bundle.empty()) || options->pid.has_value();
    d.pid = options->pid;
    if (!options->capacity.empty()) {
      auto c = parse_capacity(options->capacity);
      if (!c.ok()) return fail(io, c.error().with_context("--capacity"));
      d.capacity_bytes = *c;
    }
    for (const std::string& path : options->logs) {
      auto text = read_file(path, kMaxLogBytes);
      if (!text.ok()) return fail(io, text.error());
      d.logs.push_back({path, std::move(text).value()});
    }
    auto report = run_doctor(d);
    if (!report.ok()) return fail(io, report.error());
    if (!options->bundle.empty()) {
      auto bundle = diagnose_bundle(options->bundle);
      if (!bundle.ok()) return fail(io, bundle.error());
      report->findings.insert(report->findings.end(), bundle->findings.begin(), bundle->findings.end());
      sort_findings(report->findings);
      report->facts["bundle"] = bundle->facts;
    }
    // Lease groups live in this machine's /dev/shm: shown when this machine (not a saved --root) is probed.
    if (d.probe_machine && options->root == "/") add_share_groups(*report);
    bool failure = false;
    for (const Finding& f : report->findings) failure = failure || f.severity == Severity::kError;
    if (options->json) {
      io.out << json_to_output(doctor_to_json(*report));
      return failure ? kExitFinding : kExitOk;
    }
    io.out << "memfit doctor: findings in the order allocation, location, shapes, sharding\n";
    const Json& facts = report->facts;
    if (facts.contains("gpus")) {
      for (const Json& g : facts["gpus"]) {
        io.out << fmt::format("  GPU {} {}: {} used of {}, {} process(es)\n", g["index"].get<int>(),
                              g["name"].get<std::string>(), format_bytes(g["used_bytes"].get<uint64_t>()),
                              format_bytes(g["total_bytes"].get<uint64_t>()), g["processes"].size());
      }
    }
    if (facts.contains("host")) {
      io.out << fmt::format("  host RAM: {} available of {}\n",
                            format_bytes(facts["host"]["available_bytes"].get<uint64_t>()),
                            format_bytes(facts["host"]["total_bytes"].get<uint64_t>()));
    }
    if (facts.contains("memory_pressure")) {
      io.out << fmt::format("  memory pressure (PSI, last 10 s): some {:.2f}%, full {:.2f}%\n",
                            facts["memory_pressure"]["some_avg10"].get<double>(),
                            facts["memory_pressure"]["full_avg10"].get<double>());
    }
    if (facts.contains("share_groups")) {
      for (const Json& g : facts["share_groups"]) {
        io.out << fmt::format("  share group '{}' on device {}: {} of {} leased, {} member(s)\n",
                              g["group"].get<std::string>(), g["device"].get<int>(),
                              format_bytes(g["leased_bytes"].get<uint64_t>()),
                              format_bytes(g["capacity_bytes"].get<uint64_t>()), g["members"].size());
        for (const Json& m : g["members"]) {
          io.out << fmt::format(
              "    pid {} ({}): lease {}, pool {}, in use {}\n", m["pid"].get<int64_t>(),
              m["command"].get<std::string>(), format_bytes(m["lease_bytes"].get<uint64_t>()),
              format_bytes(m["pool_bytes"].get<uint64_t>()), format_bytes(m["bytes_in_use"].get<uint64_t>()));
        }
      }
    }
    if (report->findings.empty()) io.out << "\n  nothing recognised\n";
    Step last = Step::kSharding;
    bool first = true;
    for (const Finding& f : report->findings) {
      if (first || f.step != last) io.out << fmt::format("\n{}\n", step_name(f.step));
      first = false;
      last = f.step;
      io.out << fmt::format("  [{}] {}: {}\n", severity_name(f.severity), f.code, f.message);
      io.out << fmt::format("      fix: {}\n", f.fix);
      if (!f.source.empty()) io.out << fmt::format("      seen in: {}\n", f.source);
    }
    for (const std::string& n : report->notes) io.out << "\n  note: " << n << "\n";
    return failure ? kExitFinding : kExitOk;
  };
}

}  // namespace memfit::cli
