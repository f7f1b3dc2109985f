#include "memfit/diagnose/finding.h"
#include "memfit/core/json.h"

#include <algorithm>

namespace memfit {

std::string_view step_name(Step step) {
  switch (step) {
    case Step::kAllocation:
      return "allocation";
    case Step::kLocation:
      return "location";
    case Step::kShapes:
      return "shapes";
    case Step::kSharding:
      return "sharding";
  }
  return "allocation";
}

std::string_view severity_name(Severity severity) {
  switch (severity) {
    case Severity::kInfo:
      return "info";
    case Severity::kWarning:
      return "warning";
    case Severity::kError:
      return "error";
  }
  return "info";
}

Json Finding::to_json() const {
  Json j;
  j["step"] = std::string(step_name(step));
  j["code"] = code;
  j["severity"] = std::string(severity_name(severity));
  j["message"] = message;
  j["fix"] = fix;
  if (!source.empty()) j["source"] = source;
  return j;
}

void sort_findings(std::vector<Finding>& findings) {
  std::stable_sort(findings.begin(), findings.end(), [](const Finding& a, const Finding& b) {
    if (a.step != b.step) return a.step < b.step;
    return a.severity > b.severity;
  });
}

}  // namespace memfit
