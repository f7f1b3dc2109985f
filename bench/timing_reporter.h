// bench/timing_reporter.h - Google Benchmark's console table, then a summary line computed from the runs'
// times (ratios, not absolute times: these machines are shared and noisy).
#pragma once

#include <benchmark/benchmark.h>

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
      if (r.run_type == Run::RT_Iteration && !r.error_occurred)
        times_[r.benchmark_name()] = r.GetAdjustedRealTime();
    }
  }
  void Finalize() override {
    ConsoleReporter::Finalize();
    summarize(GetOutputStream(), times_);
  }

 protected:
  // Adjusted real time per benchmark name, in the benchmark's unit.
  virtual void summarize(std::ostream& out, const std::map<std::string, double>& times) = 0;

 private:
  std::map<std::string, double> times_;
};

// The usual main, with `Reporter`.
template <typename Reporter>
int run_benchmarks(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  Reporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  benchmark::Shutdown();
  return 0;
}

}  // namespace memfit
