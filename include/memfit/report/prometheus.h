// memfit/report/prometheus.h - Prometheus's text exposition format, version 0.0.4
// (https://prometheus.io/docs/instrumenting/exposition_formats/): each family's HELP and TYPE lines, then one
// line per sample, `name{label="value",...} value`. Label values escape \, " and newline; HELP text escapes
// \ and newline. A family with no samples is left out.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "memfit/diagnose/fleet.h"

namespace memfit {

struct MetricSample {
  std::vector<std::pair<std::string, std::string>> labels;
  double value = 0;
};

struct MetricFamily {
  std::string name;  // [a-zA-Z_:][a-zA-Z0-9_:]*
  std::string help;
  std::string type = "gauge";
  std::vector<MetricSample> samples;
};

inline constexpr const char* kPrometheusContentType = "text/plain; version=0.0.4; charset=utf-8";

std::string render_prometheus(const std::vector<MetricFamily>& families);

// The fleet's metrics: memfit_up, host memory and pressure, GPUs and their processes, share-group pools,
// and one memfit_finding per current doctor finding.
std::vector<MetricFamily> fleet_metrics(const FleetSnapshot& snapshot);

}  // namespace memfit
