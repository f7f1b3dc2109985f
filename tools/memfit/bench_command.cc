// memfit bench: every allocator against the process's std::malloc, side by side from one run.
#include <fmt/format.h>

#include <ostream>

#include "commands.h"
#include "memfit/alloc/microbench.h"
#include "memfit/core/bytes.h"
#include "memfit/core/json.h"
#include "progress.h"

namespace memfit::cli {

Action add_bench_command(CLI::App& app, Io& io) {
  struct Options {
    bool json = false;
    int samples = 9;
    uint64_t pairs = 0;
  };
  auto options = std::make_shared<Options>();
  app.add_flag("--json", options->json, "Print one JSON object");
  app.add_option("--samples", options->samples, "Samples per allocator and size (the median is reported)")
      ->check(CLI::Range(1, 1000));
  app.add_option("--pairs", options->pairs, "alloc+free pairs per sample (default: about 5 ms a sample)")
      ->check(CLI::Range(0, 100000000));
  return [options, &io]() -> int {
    Progress progress(io.err, io.stderr_is_terminal);
    MicrobenchOptions o;
    o.samples = options->samples;
    o.pairs_per_sample = options->pairs;
    o.progress = [&](const std::string& what) { progress.update("memfit bench: " + what); };
    const std::vector<MicrobenchResult> results = run_microbench(o);
    progress.done();
    if (options->json) {
      Json rows = Json::array();
      for (const auto& r : results) {
        rows.push_back({{"allocator", r.allocator},
                        {"size_bytes", r.size_bytes},
                        {"median_ns", std::round(r.median_ns * 10) / 10},
                        {"ratio_to_malloc", r.ratio_to_malloc}});
      }
      io.out << json_to_output(
          Json{{"device", "simulated"}, {"malloc", process_malloc()}, {"results", rows}});
      return kExitOk;
    }
    io.out << "memfit bench: median ns per alloc+free pair (allocators serve a simulated device; compare "
              "ratios)\n";
    io.out << "malloc is this process's: " << process_malloc() << "\n\n";
    io.out << fmt::format("  {:<12} {:>10} {:>12} {:>10}\n", "allocator", "size", "median ns", "x malloc");
    for (const auto& r : results) {
      const std::string ratio = r.ratio_to_malloc < 0.01 ? "<0.01" : fmt::format("{:.2f}", r.ratio_to_malloc);
      io.out << fmt::format("  {:<12} {:>10} {:>12.1f} {:>10}\n", r.allocator, format_bytes(r.size_bytes),
                            r.median_ns, ratio);
    }
    return kExitOk;
  };
}

}  // namespace memfit::cli
