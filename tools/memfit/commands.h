// tools/memfit/commands.h - one function per subcommand, each in its own file; cli.cc wires them up.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>

#include "cli.h"
#include "memfit/core/json.h"
#include "memfit/core/status.h"
#include "memfit/plan/live_profile.h"
#include "memfit/share/share_group.h"
#include "memfit/trace/device_profile.h"

namespace memfit::cli {

// A subcommand registers its options on `app` and returns the action run after a successful parse.
using Action = std::function<int()>;

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
// A device memory profile read from a file (memfit profile, --live-profile).
Expected<DeviceMemoryProfile> read_device_memory_profile(const std::string& path);
// --live-profile (memfit plan, memfit hlo): the step on top of what a live process holds.
Expected<NextStepFit> live_profile_fit(const std::string& path, const std::string& device,
                                       uint64_t peak_bytes, uint64_t argument_bytes,
                                       std::optional<uint64_t> limit_bytes);
Json next_step_json(const std::string& path, const NextStepFit& fit);
void print_next_step(std::ostream& out, const std::string& path, const NextStepFit& fit);
Json share_group_json(
    const ShareGroupInfo& group);  // `memfit share --json`, also in doctor's JSON  // prints "memfit:
                                   // <reason>" on stderr, returns 2 (or 1 for findings)

}  // namespace memfit::cli
