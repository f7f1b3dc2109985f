// Prometheus's text format (0.0.4) from a fleet snapshot made by hand: families, labels, escaping, and one
// series per finding.
#include "memfit/report/prometheus.h"

#include <gtest/gtest.h>

namespace memfit {
namespace {

TEST(Prometheus, EscapesLabelValuesAndHelpText) {
  MetricFamily f{"memfit_x", "a \\ help\nline", "gauge", {{{{"command", "py \"train\"\\\n"}}, 2.5}}};
  EXPECT_EQ(render_prometheus({f}),
            "# HELP memfit_x a \\\\ help\\nline\n# TYPE memfit_x gauge\nmemfit_x{command=\"py "
            "\\\"train\\\"\\\\\\n\"} 2.5\n");
  // Not UTF-8: the label is still a valid UTF-8 string for Prometheus.
  MetricFamily g{"memfit_y", "h", "gauge", {{{{"name", std::string("GPU\xff", 4)}}, 1}}};
  EXPECT_EQ(render_prometheus({g}),
            "# HELP memfit_y h\n# TYPE memfit_y gauge\nmemfit_y{name=\"GPU\xEF\xBF\xBD\"} 1\n");
  MetricFamily empty{"memfit_none", "h", "gauge", {}};
  EXPECT_EQ(render_prometheus({empty}), "");  // a family with no samples is left out
}

TEST(Prometheus, FleetMetricsFromASnapshot) {
  FleetSnapshot s;
  s.host = HostMemory{100, 40, 0, 0};
  s.pressure = MemoryPressure{12.5, 1.0};
  GpuMemory gpu;
  gpu.index = 0;
  gpu.name = "NVIDIA H200";
  gpu.total_bytes = 150;
  gpu.used_bytes = 120;
  s.gpus = {gpu};
  s.processes = {{0, 4242, "python3", 110}};
  ShareGroupInfo group;
  group.name = "team";
  group.device = 0;
  group.capacity_bytes = 80;
  ShareMemberInfo m;
  m.pid = 4242;
  m.lease_bytes = 40;
  m.pool_bytes = 30;
  m.bytes_in_use = 20;
  m.peak_bytes_in_use = 25;
  group.members = {m};
  s.share_groups = {group};
  s.findings = {{"shrunken_pool", Severity::kWarning, 4242},
                {"shrunken_pool", Severity::kWarning, 4242},  // seen twice: one series
                {"host_memory_pressure", Severity::kWarning, std::nullopt}};
  const std::string text = render_prometheus(fleet_metrics(s));
  for (const char* line : {
           "memfit_up 1\n",
           "memfit_host_memory_total_bytes 100\n",
           "memfit_host_memory_available_bytes 40\n",
           "memfit_host_memory_pressure_ratio{window=\"10s\"} 0.125\n",
           "memfit_gpu_memory_total_bytes{gpu=\"0\",name=\"NVIDIA H200\"} 150\n",
           "memfit_gpu_memory_used_bytes{gpu=\"0\",name=\"NVIDIA H200\"} 120\n",
           "memfit_process_gpu_memory_bytes{gpu=\"0\",pid=\"4242\",command=\"python3\"} 110\n",
           "memfit_pool_bytes_in_use{group=\"team\",gpu=\"0\",pid=\"4242\"} 20\n",
           "memfit_pool_pool_bytes{group=\"team\",gpu=\"0\",pid=\"4242\"} 30\n",
           "memfit_pool_lease_bytes{group=\"team\",gpu=\"0\",pid=\"4242\"} 40\n",
           "memfit_pool_peak_bytes_in_use{group=\"team\",gpu=\"0\",pid=\"4242\"} 25\n",
           "memfit_finding{code=\"shrunken_pool\",severity=\"warning\",pid=\"4242\"} 1\n",
           "memfit_finding{code=\"host_memory_pressure\",severity=\"warning\",pid=\"\"} 1\n",
       }) {
    EXPECT_NE(text.find(line), std::string::npos) << line << "\n" << text;
  }
  size_t findings = 0;
  for (size_t at = text.find("\nmemfit_finding{"); at != std::string::npos;
       at = text.find("\nmemfit_finding{", at + 1))
    ++findings;
  EXPECT_EQ(findings, 2u);
  EXPECT_NE(text.find("# TYPE memfit_pool_lease_bytes gauge\n"), std::string::npos);
}

}  // namespace
}  // namespace memfit
