#include "cli.h"

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <ostream>

#include "commands.h"
#include "memfit/core/bytes.h"
#include "memfit/core/text.h"

namespace memfit::cli {

// One readable line, always: control characters and bytes that are not UTF-8 are replaced, and a message
// that quotes megabytes of input keeps its head and tail (the part that says what was wrong).
std::string error_line(const Error& error) { return one_line(error.message(), kMaxErrorChars); }

std::string order_caveat(uint64_t needed_upper_bytes, uint64_t limit_bytes) {
  if (needed_upper_bytes <= limit_bytes) return "";
  return fmt::format(
      "  but not in every order XLA may pick: in the program's own order it needs {}, {} over\n"
      "  (compile it for the device to be sure)\n",
      format_bytes(needed_upper_bytes), format_bytes(needed_upper_bytes - limit_bytes));
}

std::string caveat_lines(const std::vector<std::string>& caveats) {
  constexpr size_t kColumns = 110;
  std::string out;
  for (const std::string& caveat : caveats) {
    std::string line = "  caveat:";
    bool line_has_words = false;  // a word longer than a line goes on a line of its own, not an empty one
    size_t at = 0;
    while (at < caveat.size()) {
      size_t end = caveat.find(' ', at);
      if (end == std::string::npos) end = caveat.size();
      const std::string_view word(caveat.data() + at, end - at);
      if (line.size() + 1 + word.size() > kColumns && line_has_words) {
        out += line + "\n";
        line = "   ";
      }
      line += " ";
      line += word;
      line_has_words = true;
      at = end + 1;
    }
    out += line + "\n";
  }
  return out;
}

int fail(Io& io, const Error& error) {
  io.err << "memfit: " << error_line(error) << "\n";
  return kExitBadInput;
}

int run(const std::vector<std::string>& args, Io io) {
  CLI::App app{"memfit: see, plan and fix accelerator memory the way JAX/XLA allocates it", "memfit"};
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "Show help for every subcommand");

  std::vector<std::pair<CLI::App*, Action>> actions;
  auto add = [&](const char* name, const char* description, auto adder) {
    CLI::App* sub = app.add_subcommand(name, description);
    actions.emplace_back(sub, adder(*sub, io));
  };
  add("env", "Print the allocator configuration the XLA variables in force would produce", add_env_command);
  add("replay", "Replay a recorded allocation trace through allocator policies", add_replay_command);
  add("hlo",
      "Plan an XLA program - optimized HLO, or before optimization as HLO or StableHLO: temp, peak, who "
      "holds it",
      add_hlo_command);
  add("plan", "Plan a model's training or inference step: peak per device, what holds it, fits or not",
      add_plan_command);
  add("fit",
      "Find the cheapest change that makes a step fit a device (allocation, location, shapes, sharding)",
      add_fit_command);
  add("doctor", "Diagnose a machine, a process or a failed job's logs", add_doctor_command);
  add("bench", "Time every allocator against std::malloc on this machine", add_bench_command);
  add("share", "The members of a lease group (MEMFIT_SHARE) and what each holds", add_share_command);
  add("profile", "Read JAX's device memory profile: live buffers per device and the sites that made them",
      add_profile_command);
  add("exporter", "Serve this machine's memory, GPUs, share-group pools and findings to Prometheus",
      add_exporter_command);

  std::vector<const char*> argv;
  argv.push_back("memfit");
  for (const std::string& a : args) argv.push_back(a.c_str());
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e, io.out, io.err);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e, io.out, io.err);
  } catch (const CLI::ParseError& e) {
    std::string what = e.what();
    io.err << "memfit: " << what << " (try 'memfit --help')\n";
    return kExitBadInput;
  }
  for (auto& [sub, action] : actions) {
    if (!sub->parsed()) continue;
    // Errors are values (Expected) everywhere; this catches what escapes them - an allocation the machine
    // cannot give, a library's exception - so that even a bug ends as exit 2 with a reason, never an abort.
    try {
      return action();
    } catch (const std::bad_alloc&) {
      return fail(io, resource_exhausted("out of host memory: the input is too large for this machine"));
    } catch (const std::exception& e) {
      return fail(io, internal_error(fmt::format("internal error: {} (please report it)", e.what())));
    }
  }
  io.err << "memfit: no command given (try 'memfit --help')\n";
  return kExitBadInput;
}

}  // namespace memfit::cli
