// tools/memfit/commands.h - one function per subcommand, each in its own file; cli.cc wires them up.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>

#include "cli.h"
#include "memfit/core/json.h"
#include "memfit/core/status.h"
#include "memfit/share/share_group.h"

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

// Shared by the subcommands.
int fail(Io& io, const Error& error);
Json share_group_json(
    const ShareGroupInfo& group);  // `memfit share --json`, also in doctor's JSON  // prints "memfit:
                                   // <reason>" on stderr, returns 2 (or 1 for findings)

}  // namespace memfit::cli
