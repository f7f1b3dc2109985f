// tools/memfit/commands.h - one function per subcommand, each in its own file; cli.cc wires them up.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "cli.h"
#include "memfit/core/json.h"
#include "memfit/core/status.h"
#include "memfit/core/xla_env.h"
#include "memfit/diagnose/doctor.h"
#include "memfit/plan/hlo_plan.h"
#include "memfit/plan/largest_fit.h"
#include "memfit/plan/live_profile.h"
#include "memfit/plan/step_plan.h"
#include "memfit/plan/xla_comparison.h"
#include "memfit/program/hlo_source.h"
#include "memfit/share/share_group.h"
#include "memfit/trace/device_profile.h"
#include "memfit/trace/replay.h"
#include "memfit/trace/timeline.h"

namespace memfit::cli {

// A subcommand registers its options on `app` and returns the action run after a successful parse.
using Action = std::function<int()>;

// The most rows a --top lists: more than any program has groups, and a bound that refuses "-1" (which an
// unsigned option would read as 2^64 - 1) with a reason.
inline constexpr size_t kMaxListed = size_t{1} << 20;

Action add_env_command(CLI::App& app, Io& io);
Action add_bench_command(CLI::App& app, Io& io);
Action add_replay_command(CLI::App& app, Io& io);
Action add_doctor_command(CLI::App& app, Io& io);
Action add_hlo_command(CLI::App& app, Io& io);
Action add_plan_command(CLI::App& app, Io& io);
Action add_fit_command(CLI::App& app, Io& io);
Action add_share_command(CLI::App& app, Io& io);
Action add_exporter_command(CLI::App& app, Io& io);
Action add_profile_command(CLI::App& app, Io& io);

// Shared by the subcommands.
int fail(Io& io, const Error& error);
// The line under a "fits" verdict that holds only in the order memfit predicts XLA picks: what the
// program's own order needs (`needed_upper_bytes`: HloPlan::peak_upper_bytes, or the next step's need with
// it) and how far over `limit_bytes`. Empty when that fits too.
std::string order_caveat(uint64_t needed_upper_bytes, uint64_t limit_bytes);
// A plan's caveats (HloPlan::caveats) as text lines: "  caveat: ...", wrapped at 110 columns.
std::string caveat_lines(const std::vector<std::string>& caveats);
// The --json objects, built from the library's results: the CLI and the Python module (python/) print and
// return the same.
Json hlo_to_json(const std::string& path, const HloPlan& plan, bool all_buffers);
// memfit hlo's work on a program read (CLI and Python module): parse, plan, and beside a dump's buffer
// assignment, compare with XLA's. `progress` (may be empty) hears each stage. `device_memory_bytes`: the GPU
// a program before optimization is planned for (HloPlanOptions::device_memory_bytes), when told.
struct HloRun {
  HloSource source;
  HloPlan plan;
  std::optional<XlaComparison> xla;
};
Expected<HloRun> run_hlo(HloSource source, size_t top,
                         std::optional<uint64_t> device_memory_bytes = std::nullopt,
                         const std::function<void(const std::string&)>& progress = {});
Json hlo_run_to_json(const HloRun& run,
                     bool all_buffers);  // hlo_to_json, with the comparison when there is one
Json xla_comparison_to_json(const std::string& path, const XlaComparison& comparison);
Json step_plan_to_json(const StepPlan& plan);
Json fit_to_json(const FitResult& fit);
Json largest_fit_to_json(const LargestFit& fit);
Json env_to_json(const XlaAllocatorPlan& plan, const Environment& env, std::string_view capacity_source);
Json doctor_to_json(const DoctorReport& report);
void add_share_groups(
    DoctorReport& report);  // report.share_groups (the machine's lease groups), into the facts
Json replay_to_json(const Timeline& timeline, const ReplayResult& result, bool capacity_given);
// The one line `fail` prints after "memfit: " (cut to kMaxErrorChars, control characters replaced).
std::string error_line(const Error& error);

// A device memory profile read from a file (memfit profile, --live-profile).
Expected<DeviceMemoryProfile> read_device_memory_profile(const std::string& path);
// --live-profile (memfit plan, memfit hlo): the step on top of what a live process holds.
Expected<NextStepFit> live_profile_fit(const std::string& path, const std::string& device,
                                       uint64_t peak_bytes, uint64_t argument_bytes,
                                       std::optional<uint64_t> limit_bytes, uint64_t peak_upper_bytes);
Json next_step_json(const std::string& path, const NextStepFit& fit);
void print_next_step(std::ostream& out, const std::string& path, const NextStepFit& fit);
Json share_group_json(
    const ShareGroupInfo& group);  // `memfit share --json`, also in doctor's JSON  // prints "memfit:
                                   // <reason>" on stderr, returns 2 (or 1 for findings)

}  // namespace memfit::cli
