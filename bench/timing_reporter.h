// bench/timing_reporter.h - Google Benchmark's console table, then a summary line computed from the runs'
// times (ratios, not absolute times: these machines are shared and noisy). With repetitions, each benchmark's
// time is its median repetition, so one slow moment on a shared machine does not decide a ratio.
#pragma once

#include <benchmark/benchmark.h>

#include <algorithm>
#include <initializer_list>
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

// The usual main, with `Reporter`; `defaults` are flags the command line may override (later flags win).
template <typename Reporter>
int run_benchmarks(int argc, char** argv, std::initializer_list<const char*> defaults = {}) {
  std::vector<char*> args(argv, argv + argc);
  args.insert(args.begin() + (argc > 0 ? 1 : 0), defaults.size(), nullptr);
  size_t i = argc > 0 ? 1 : 0;
  for (const char* flag : defaults) args[i++] = const_cast<char*>(flag);  // Initialize only reads them
  argc = static_cast<int>(args.size());
  argv = args.data();
  benchmark::Initialize(&argc, argv);
  Reporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}

}  // namespace memfit
