// bench/timing_reporter.h - Google Benchmark's console table, then a summary line computed from the runs'
// times (ratios, not absolute times: these machines are shared and noisy). With repetitions, each benchmark's
// time is its median repetition, so one slow moment on a shared machine does not decide a ratio.
#pragma once

#include <benchmark/benchmark.h>

#include <algorithm>
#include <map>
#include <ostream>
#include <string>
#include <vector>

namespace memfit {

class TimingReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& r : runs) {
      if (r.error_occurred) continue;
      if (r.run_type == Run::RT_Iteration) {
        repetitions_[r.run_name.str()].push_back(r.GetAdjustedRealTime());
      } else if (r.aggregate_name == "median") {  // only aggregates reach a reporter that displays only them
        medians_[r.run_name.str()] = r.GetAdjustedRealTime();
      }
    }
  }
  void Finalize() override {
    ConsoleReporter::Finalize();
    std::map<std::string, double> times = medians_;
    for (auto& [name, values] : repetitions_) {
      std::nth_element(values.begin(), values.begin() + values.size() / 2, values.end());
      times.emplace(name, values[values.size() / 2]);
    }
    summarize(GetOutputStream(), times);
  }

 protected:
  // Adjusted real time per benchmark name, in the benchmark's unit.
  virtual void summarize(std::ostream& out, const std::map<std::string, double>& times) = 0;

 private:
  std::map<std::string, std::vector<double>> repetitions_;
  std::map<std::string, double> medians_;
};

// How a suite runs unless its command line says otherwise (later flags win).
enum class Repetitions {
  kOnce,
  // Medians of 5 repetitions run interleaved in random order, only the aggregates shown: drift on a shared
  // machine then falls on both sides of a ratio alike.
  kMedianOfFiveInterleaved,
};

// The usual main, with `Reporter`.
template <typename Reporter>
int run_benchmarks(int argc, char** argv, Repetitions repetitions = Repetitions::kOnce) {
  static const char* const kMedianOfFive[] = {"--benchmark_repetitions=5",
                                              "--benchmark_enable_random_interleaving=true",
                                              "--benchmark_display_aggregates_only=true"};
  std::vector<char*> args(argv, argv + argc);
  if (repetitions == Repetitions::kMedianOfFiveInterleaved && argc > 0) {
    for (const char* flag : kMedianOfFive) {
      args.insert(args.begin() + 1, const_cast<char*>(flag));  // Initialize only reads them
    }
  }
  argc = static_cast<int>(args.size());
  argv = args.data();
  benchmark::Initialize(&argc, argv);
  Reporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}

}  // namespace memfit
