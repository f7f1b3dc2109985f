#include "memfit/diagnose/doctor.h"

#include <fmt/format.h>

#include <sys/stat.h>

#include "memfit/core/bytes.h"
#include "memfit/core/json.h"
#include "memfit/core/text.h"
#include "memfit/core/xla_env.h"
#include "memfit/diagnose/log_classifier.h"

namespace memfit {
namespace {

void add_env_findings(const Environment& env, const std::string& whose, std::vector<Finding>& out) {
  auto config = parse_xla_allocator_env(env);
  if (!config.ok()) {
    out.push_back({Step::kAllocation, "invalid_xla_variable", Severity::kError,
                   fmt::format("{}: {}", whose, config.error().message()), "fix or unset the variable",
                   whose});
    return;
  }
  for (const std::string& w : config->warnings) {
    out.push_back({Step::kAllocation, "xla_variable_trap", Severity::kWarning,
                   fmt::format("{}: {}", whose, w), "see `memfit env` for what these variables do", whose});
  }
}

void probe_host(const HostProbe& host, DoctorReport& r) {
  r.host = host.memory();
  r.pressure = host.pressure();
  if (const auto& m = r.host) {
    r.facts["host"] = {{"total_bytes", m->total_bytes}, {"available_bytes", m->available_bytes}};
    if (m->total_bytes > 0 && m->available_bytes * 10 < m->total_bytes) {
      r.findings.push_back(
          {Step::kLocation, "host_memory_pressure", Severity::kWarning,
           fmt::format("host RAM is nearly exhausted: {} available of {} ({})",
                       format_bytes(m->available_bytes), format_bytes(m->total_bytes),
                       format_percent(m->available_bytes, m->total_bytes)),
           "host memory, not the GPU: shrink data-loader buffers and prefetch, avoid keeping host "
           "copies of device arrays, jax.clear_caches() if compiles pile up",
           "/proc/meminfo"});
    }
  } else {
    r.notes.push_back("/proc/meminfo is not readable: host memory not checked");
  }
  if (const auto& p = r.pressure) {
    r.facts["memory_pressure"] = {{"some_avg10", p->some_avg10}, {"full_avg10", p->full_avg10}};
    if (p->full_avg10 >= 1.0 || p->some_avg10 >= 10.0) {
      r.findings.push_back(
          {Step::kLocation, "host_memory_pressure",
           p->full_avg10 >= 10.0 ? Severity::kError : Severity::kWarning,
           fmt::format("tasks were stalled on memory {:.1f}% of the last 10 s (all tasks: {:.1f}%): "
                       "the host is swapping or reclaiming",
                       p->some_avg10, p->full_avg10),
           "free host RAM: fewer data-loader workers, smaller prefetch, no host copies of device "
           "arrays",
           "/proc/pressure/memory"});
    }
  }
  if (auto c = host.cgroup()) {
    Json cj = {{"path", c->path}, {"oom_kills", c->oom_kills}};
    if (c->max_bytes) cj["max_bytes"] = *c->max_bytes;
    if (c->current_bytes) cj["current_bytes"] = *c->current_bytes;
    r.facts["cgroup"] = cj;
    if (c->oom_kills > 0) {
      r.findings.push_back(
          {Step::kLocation, "host_oom_kill", Severity::kError,
           fmt::format("the cgroup {} has had {} process{} killed for host memory (memory.events "
                       "oom_kill)",
                       c->path, c->oom_kills, c->oom_kills == 1 ? "" : "es"),
           "a job here was killed for host RAM, not GPU memory: raise the job's memory limit or "
           "cut host-side buffers",
           "memory.events"});
    }
    if (c->max_bytes && c->current_bytes && *c->current_bytes * 10 >= *c->max_bytes * 9) {
      r.findings.push_back(
          {Step::kLocation, "cgroup_limit", Severity::kWarning,
           fmt::format("the cgroup uses {} of its {} limit ({})", format_bytes(*c->current_bytes),
                       format_bytes(*c->max_bytes), format_percent(*c->current_bytes, *c->max_bytes)),
           "the next host allocation may be killed: raise memory.max (the job's memory request) or "
           "use less host RAM",
           "memory.max"});
    }
  }
}

// The machine's lease tables (memfit share). One that does not read as one is a finding: a group's members
// cannot join it, and the fleet view would leave the group out without a word. /dev/shm is the machine's
// own: read only when probing it (not a fixture tree).
void read_share_tables_into(DoctorReport& r) {
  ShareTables tables = read_share_tables();
  r.share_groups = std::move(tables.groups);
  for (const UnreadableShareTable& t : tables.unreadable) {
    r.findings.push_back(
        {Step::kAllocation, "share_table_unreadable", Severity::kWarning, t.error.message(),
         fmt::format("members of '{}' cannot join it: remove the file once no process uses it", t.name),
         "/dev/shm"});
  }
}

}  // namespace

bool pool_looks_shrunken(uint64_t held_bytes, uint64_t asked_bytes) {
  return held_bytes + (1ull << 30) < asked_bytes && held_bytes > (2ull << 30);
}

// The device memory JAX sizes its pool from: CUDA's total, which is NVML's total less the driver's own
// reservation (NVML v2 memory info). On an idle H200: 150754820096 - 644939776 = 150109880320, and 75% of
// that is JAX's bytes_limit, 112583507968 (../shared/FACTS.md, NVML).
uint64_t cuda_total_bytes(const GpuMemory& g) {
  return g.total_bytes > g.reserved_bytes ? g.total_bytes - g.reserved_bytes : g.total_bytes;
}

Expected<DoctorReport> run_doctor(const DoctorOptions& options) {
  DoctorReport r;
  r.facts = Json::object();
  if (options.pid && *options.pid <= 0) {
    return invalid_argument(fmt::format("--pid {} is not a process id (ids start at 1)", *options.pid));
  }
  if (options.probe_machine || options.pid) {
    struct stat st {};
    const std::string proc = options.root + "/proc";
    if (::stat(options.root.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      return invalid_argument(fmt::format("--root {} is not a folder", excerpt(options.root)));
    }
    if (::stat(proc.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      return invalid_argument(fmt::format(
          "--root {} has no proc/ folder: not a machine or a saved machine state", excerpt(options.root)));
    }
  }
  const HostProbe host(options.root);
  std::vector<GpuMemory> gpus;

  if (options.probe_machine) {
    add_env_findings(options.environment, "this shell's environment", r.findings);
    probe_host(host, r);
    if (options.root == "/") read_share_tables_into(r);
    if (options.gpus) {
      gpus = *options.gpus;
    } else if (options.query_gpu) {
      auto nvml = query_nvml();
      if (nvml.ok()) {
        gpus = std::move(nvml).value();
      } else {
        r.notes.push_back(nvml.error().message() + "; going on without the GPU view");
        r.findings.push_back(
            {Step::kAllocation, "no_gpu_view", Severity::kInfo, "no GPU view: " + nvml.error().message(),
             "run on the GPU machine (NVML comes with the NVIDIA driver) for per-process figures", "NVML"});
      }
    }
    Json gj = Json::array();
    for (const GpuMemory& g : gpus) {
      Json procs = Json::array();
      for (const GpuProcess& p : g.processes) procs.push_back({{"pid", p.pid}, {"used_bytes", p.used_bytes}});
      gj.push_back({{"index", g.index},
                    {"name", g.name},
                    {"total_bytes", g.total_bytes},
                    {"used_bytes", g.used_bytes},
                    {"free_bytes", g.free_bytes},
                    {"processes", procs}});
      if (g.processes.size() >= 2 && g.used_bytes * 10 >= g.total_bytes * 9) {
        std::string who;
        for (const GpuProcess& p : g.processes)
          who += fmt::format("{}pid {} {}", who.empty() ? "" : ", ", p.pid, format_bytes(p.used_bytes));
        r.findings.push_back(
            {Step::kAllocation, "shared_gpu_full", Severity::kWarning,
             fmt::format("GPU {} is {} full and shared by {} processes ({})", g.index,
                         format_percent(g.used_bytes, g.total_bytes), g.processes.size(), who),
             "with JAX, each process preallocates 75% by default: set "
             "XLA_PYTHON_CLIENT_PREALLOCATE=false, or XLA_CLIENT_MEM_FRACTION=0.45 in each of two jobs",
             "NVML"});
      }
    }
    if (!gpus.empty()) r.facts["gpus"] = gj;
  }

  // One process of a machine already probed (the exporter): the GPUs as given.
  if (!options.probe_machine && options.gpus) gpus = *options.gpus;

  if (options.pid) {
    MEMFIT_ASSIGN_OR_RETURN(ProcessMemory proc, host.process(*options.pid));
    const std::string whose = fmt::format("process {} ({})", proc.pid, proc.name);
    r.facts["process"] = {{"pid", proc.pid},
                          {"name", proc.name},
                          {"rss_bytes", proc.rss_bytes},
                          {"peak_rss_bytes", proc.peak_rss_bytes}};
    std::optional<uint64_t> gpu_used;
    std::optional<uint64_t> capacity = options.capacity_bytes;
    for (const GpuMemory& g : gpus) {
      for (const GpuProcess& p : g.processes) {
        if (static_cast<int>(p.pid) == proc.pid) {
          gpu_used = p.used_bytes;
          if (!capacity) capacity = cuda_total_bytes(g);
        }
      }
    }
    if (!capacity && !gpus.empty()) capacity = cuda_total_bytes(gpus.front());
    if (!proc.environment_readable) {
      r.notes.push_back(fmt::format(
          "cannot read /proc/{}/environ (another user's process?): its XLA variables are unknown", proc.pid));
    } else {
      add_env_findings(proc.environment, whose, r.findings);
      auto config = parse_xla_allocator_env(proc.environment);
      if (config.ok() && capacity) {
        const XlaAllocatorPlan plan = plan_xla_allocator(*config, *capacity);
        if (plan.preallocate && plan.reserved_at_first_allocation_bytes > 0) {
          // Say what the process holds (NVML), not what its settings ask for: a second tenant's pool is
          // whatever the driver let it have.
          const std::string pool = format_bytes(plan.reserved_at_first_allocation_bytes);
          const std::string share = format_percent(plan.reserved_at_first_allocation_bytes, *capacity);
          r.findings.push_back(
              {Step::kAllocation, "preallocated_pool", Severity::kInfo,
               gpu_used
                   ? fmt::format("{} holds {} on the GPU (NVML); its settings preallocate a pool of {} ({} "
                                 "of {}) at its first allocation; nvidia-smi shows the pool, not what is in "
                                 "use (ask jax.devices()[0].memory_stats()['bytes_in_use'])",
                                 whose, format_bytes(*gpu_used), pool, share, format_bytes(*capacity))
                   : fmt::format("{}'s settings preallocate a pool of {} ({} of {}) at its first "
                                 "allocation; nvidia-smi shows the pool, not what is in use (ask "
                                 "jax.devices()[0].memory_stats()['bytes_in_use'])",
                                 whose, pool, share, format_bytes(*capacity)),
               "nothing to fix on a dedicated GPU; to share it set XLA_PYTHON_CLIENT_PREALLOCATE=false "
               "or lower XLA_CLIENT_MEM_FRACTION",
               whose});
          // A pool far below what it should be: the driver refused the whole pool at start.
          if (gpu_used && pool_looks_shrunken(*gpu_used, plan.reserved_at_first_allocation_bytes)) {
            r.findings.push_back(
                {Step::kAllocation, "shrunken_pool", Severity::kWarning,
                 fmt::format("{} holds {} on the GPU, well below the {} pool its settings ask for: "
                             "when it started another process held memory, XLA backed off by 0.9x, "
                             "and it will run out of memory below its reported bytes_limit",
                             whose, format_bytes(*gpu_used),
                             format_bytes(plan.reserved_at_first_allocation_bytes)),
                 "give every job on this GPU XLA_PYTHON_CLIENT_PREALLOCATE=false or a fraction that "
                 "fits (0.45 for two)",
                 whose});
          }
        }
        if (!plan.limit_enforced && plan.limit_bytes) {
          r.findings.push_back({Step::kAllocation, "limit_not_enforced", Severity::kWarning,
                                fmt::format("{} uses {} whose {} limit is not enforced", whose,
                                            plan.allocator, format_bytes(*plan.limit_bytes)),
                                "use the default allocator to enforce the fraction", whose});
        }
      }
    }
    if (proc.rss_bytes > 0) {
      r.findings.push_back(
          {Step::kLocation, "host_footprint", Severity::kInfo,
           fmt::format("{} uses {} of host RAM (peak {})", whose, format_bytes(proc.rss_bytes),
                       format_bytes(proc.peak_rss_bytes)),
           "host RAM holds Python objects, data loaders and compiled programs; it grows with "
           "recompilation (jax.log_compiles)",
           fmt::format("/proc/{}/status", proc.pid)});
    }
  }

  for (const LogInput& log : options.logs) {
    std::vector<Finding> found = classify_log(log.text, log.name);
    if (found.empty()) r.notes.push_back(fmt::format("{}: nothing recognised", log.name));
    r.findings.insert(r.findings.end(), found.begin(), found.end());
  }
  sort_findings(r.findings);
  return r;
}

}  // namespace memfit
