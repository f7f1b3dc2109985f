#include "memfit/diagnose/log_classifier.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <optional>
#include <set>

#include "memfit/core/bytes.h"
#include "memfit/core/text.h"

namespace memfit {
namespace {

bool has(std::string_view line, std::string_view needle) {
  return line.find(needle) != std::string_view::npos;
}

// The token after `marker`, up to a delimiter; empty when the marker is absent.
std::string_view after(std::string_view line, std::string_view marker,
                       std::string_view delimiters = " )'(,\t") {
  const size_t at = line.find(marker);
  if (at == std::string_view::npos) return {};
  std::string_view rest = line.substr(at + marker.size());
  return rest.substr(0, rest.find_first_of(delimiters));
}

// "62.91GiB", "34912723376 bytes" (the unit is the next token), "200.00 GiB".
std::optional<uint64_t> size_after(std::string_view line, std::string_view marker) {
  const size_t at = line.find(marker);
  if (at == std::string_view::npos) return std::nullopt;
  std::string_view rest = line.substr(at + marker.size());
  size_t end = 0;
  while (end < rest.size() && (std::isdigit(static_cast<unsigned char>(rest[end])) || rest[end] == '.'))
    ++end;
  if (end == 0) return std::nullopt;
  std::string_view number = rest.substr(0, end);
  rest.remove_prefix(end);
  if (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
  size_t unit_end = 0;
  while (unit_end < rest.size() && std::isalpha(static_cast<unsigned char>(rest[unit_end]))) ++unit_end;
  std::string unit(rest.substr(0, unit_end));
  if (unit == "bytes") unit = "B";
  // A logged "16.00EiB" (an overflowed shape) stays that large rather than losing its unit as 16 B.
  auto bytes = parse_bytes_saturating(std::string(number) + unit);
  if (!bytes.ok()) bytes = parse_bytes(number);  // the next word was not a unit ("34912723376 with ...")
  if (!bytes.ok()) return std::nullopt;
  return *bytes;
}

constexpr std::string_view kEagerPrimitives[] = {"convert_element_type",
                                                 "broadcast_in_dim",
                                                 "add",
                                                 "sub",
                                                 "mul",
                                                 "div",
                                                 "dot_general",
                                                 "reshape",
                                                 "transpose",
                                                 "concatenate",
                                                 "slice",
                                                 "dynamic_slice",
                                                 "dynamic_update_slice",
                                                 "select_n",
                                                 "reduce_sum",
                                                 "reduce_max",
                                                 "reduce_min",
                                                 "exp",
                                                 "log",
                                                 "tanh",
                                                 "logistic",
                                                 "iota",
                                                 "squeeze",
                                                 "expand_dims",
                                                 "gather",
                                                 "scatter-add",
                                                 "scatter",
                                                 "integer_pow",
                                                 "sqrt",
                                                 "rsqrt",
                                                 "max",
                                                 "min",
                                                 "neg",
                                                 "abs",
                                                 "pow",
                                                 "erf",
                                                 "cumsum",
                                                 "argmax",
                                                 "argmin",
                                                 "sort",
                                                 "copy",
                                                 "copy_p",
                                                 "eq",
                                                 "ne",
                                                 "lt",
                                                 "gt",
                                                 "le",
                                                 "ge",
                                                 "and",
                                                 "or",
                                                 "not",
                                                 "sign",
                                                 "floor",
                                                 "ceil",
                                                 "round",
                                                 "clamp",
                                                 "pad",
                                                 "rev",
                                                 "square",
                                                 "sin",
                                                 "cos"};

bool is_eager_primitive(std::string_view name) {
  return std::find(std::begin(kEagerPrimitives), std::end(kEagerPrimitives), name) !=
         std::end(kEagerPrimitives);
}

struct DeviceOom {
  std::string allocator;
  uint64_t bytes = 0;
  std::optional<uint64_t> rounded;
  std::string executable;
  std::string where;
  int mentions = 0;
};

struct Compiles {
  std::vector<std::string> shapes;  // in order, one per compile
  std::string first_where;
};

// What the lines seen so far add up to; the matchers below fill it, summarize() turns it into findings.
struct LogState {
  std::string_view source;
  std::vector<Finding> findings;
  std::vector<DeviceOom> ooms;
  // The allocator's log line and the exception of one failure name the same size (to two decimals):
  // one OOM, found by that printed size in O(log n) (a log of a million OOM lines stays linear).
  std::map<std::string, std::vector<size_t>> ooms_by_size;
  std::map<std::string, Compiles> compiles;  // function -> shapes compiled
  std::vector<std::string> cache_miss_reasons;
  std::vector<std::pair<uint64_t, std::string>> refused_regions;  // "Failed to allocate device memory of"
  std::optional<uint64_t> base_limit;
  uint64_t benign = 0;
  uint64_t benign_bytes = 0;
  std::string benign_where;
  bool host_kill_seen = false;
  bool pmap_seen = false;
  bool async_seen = false;
  bool preallocation_seen = false;
  bool cpu_fallback_seen = false;
  std::string float_error;  // "could not convert string to float: '0.75-'"

  void record_oom(std::string allocator, uint64_t bytes, std::optional<uint64_t> rounded, std::string exe,
                  const std::string& where) {
    std::vector<size_t>& same_size = ooms_by_size[format_bytes(bytes)];
    for (size_t k : same_size) {
      DeviceOom& o = ooms[k];
      if (o.allocator == allocator || o.allocator.empty() || allocator.empty()) {
        if (o.allocator.empty()) o.allocator = allocator;
        if (!o.rounded) o.rounded = rounded;
        if (o.executable.empty()) o.executable = exe;
        ++o.mentions;
        return;
      }
    }
    same_size.push_back(ooms.size());
    ooms.push_back({std::move(allocator), bytes, rounded, std::move(exe), where, 1});
  }
};

// One kind of line: `matches` looks at it, `apply` records what it says. Matchers of one group are
// exclusive (the first that matches takes the line); group 0 matchers all run.
struct LineMatcher {
  int group;
  bool (*matches)(std::string_view line);
  void (*apply)(std::string_view line, const std::string& where, LogState& st);
};

void device_oom_finding_pytorch(std::string_view line, const std::string& where, LogState& st) {
  const auto bytes = size_after(line, "Tried to allocate ");
  if (!bytes) return;
  std::string detail;
  if (auto total = size_after(line, "total capacity of "))
    detail += fmt::format("; GPU total {}", format_bytes(*total));
  if (auto free = size_after(line, "of which ")) detail += fmt::format(", {} free", format_bytes(*free));
  const auto reserved_unused = size_after(line, "reserved by PyTorch but unallocated");
  const auto unallocated = size_after(line, "and ");
  const bool fragmented = reserved_unused.has_value() || (unallocated && *unallocated > (512ull << 20));
  st.findings.push_back({Step::kAllocation, "device_oom", Severity::kError,
                         fmt::format("PyTorch could not allocate {}{}", format_bytes(*bytes), detail),
                         fragmented
                             ? "memory reserved by PyTorch's cache is going unused: set "
                               "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, then make the peak "
                               "smaller (batch size, bf16 autocast, activation checkpointing)"
                             : "make the peak smaller: batch size, bf16 autocast, activation checkpointing "
                               "(torch.utils.checkpoint); check nvidia-smi for other processes",
                         where});
}

bool is_host_kill(std::string_view line) {
  return has(line, "Out of memory: Killed process") || has(line, "Memory cgroup out of memory") ||
         has(line, "invoked oom-killer") || has(line, "oom_kill event") ||
         (has(line, "OUT_OF_MEMORY") && !has(line, "ERROR_OUT_OF_MEMORY")) || line == "Killed" ||
         has(line, "exit code 137") || has(line, "exit status 137") || has(line, "exited with code 137");
}

void record_compile(std::string_view line, const std::string& where, LogState& st) {
  std::string_view name = line.substr(line.find("Compiling ") + 10);
  name = name.substr(0, name.find(" with global shapes"));
  if (name.starts_with("pmap(") || has(name, "xla_pmap")) st.pmap_seen = true;
  std::string_view shapes = line.substr(line.find(" with global shapes and types ") + 30);
  shapes = shapes.substr(0, shapes.find(". Argument mapping"));
  // "(ShapedArray(float32[2048,1024]),)" -> "float32[2048,1024]"
  std::string clean(shapes);
  for (size_t at; (at = clean.find("ShapedArray(")) != std::string::npos;) {
    clean.erase(at, 12);
    const size_t close = clean.find(')', at);
    if (close != std::string::npos) clean.erase(close, 1);
  }
  if (clean.size() >= 2 && clean.front() == '(' && clean.back() == ')')
    clean = clean.substr(1, clean.size() - 2);
  if (!clean.empty() && clean.back() == ',') clean.pop_back();
  Compiles& c = st.compiles[std::string(name)];
  if (c.shapes.empty()) c.first_where = where;
  c.shapes.push_back(clean);
}

// The table. Group 1: what an allocator said about one allocation; group 2: compile-time OOMs; 0: the rest.
const LineMatcher kMatchers[] = {
    {1, [](std::string_view l) { return has(l, "The caller indicates that this is not a failure"); },
     [](std::string_view l, const std::string& where, LogState& st) {
       if (st.benign++ == 0) st.benign_where = where;
       st.benign_bytes = std::max(st.benign_bytes, size_after(l, "trying to allocate ").value_or(0));
     }},
    {1, [](std::string_view l) { return has(l, "ran out of memory trying to allocate"); },
     [](std::string_view l, const std::string& where, LogState& st) {
       std::string allocator(after(l, "Allocator ("));
       if (!allocator.empty() && allocator.back() == ')') allocator.pop_back();
       if (auto bytes = size_after(l, "trying to allocate "))
         st.record_oom(allocator, *bytes, size_after(l, "(rounded to "), "", where);
     }},
    {1, [](std::string_view l) { return has(l, "Out of host memory while trying to allocate"); },
     [](std::string_view l, const std::string& where, LogState& st) {
       st.findings.push_back(
           {Step::kLocation, "host_memory_pressure", Severity::kError,
            fmt::format("pinned host memory ran out: {}", l.substr(l.find("Out of host"))),
            "raise XLA_PJRT_GPU_HOST_MEMORY_LIMIT_GB (default 64) or keep fewer arrays on the "
            "host (jax.device_put to the device, smaller host offload)",
            where});
     }},
    {1, [](std::string_view l) { return has(l, "Out of memory while trying to allocate"); },
     [](std::string_view l, const std::string& where, LogState& st) {
       if (auto bytes = size_after(l, "Out of memory while trying to allocate ")) {
         st.record_oom(std::string(after(l, "with allocator ")), *bytes, std::nullopt,
                       std::string(after(l, "executable_name='", "'")), where);
       }
     }},
    {1, [](std::string_view l) { return has(l, "Failed to allocate request for"); },
     [](std::string_view l, const std::string& where, LogState& st) {
       if (auto bytes = size_after(l, "Failed to allocate request for "))
         st.record_oom("", *bytes, std::nullopt, "", where);
     }},
    {1, [](std::string_view l) { return has(l, "Failed to allocate device memory of"); },
     [](std::string_view l, const std::string& where, LogState& st) {
       const std::string_view rest = l.substr(l.find("Failed to allocate device memory of"));
       if (auto bytes = size_after(rest, "(")) st.refused_regions.emplace_back(*bytes, where);
     }},
    {1, [](std::string_view l) { return has(l, "CUDA out of memory") || has(l, "OutOfMemoryError"); },
     device_oom_finding_pytorch},
    {2, [](std::string_view l) { return has(l, "exceeds the base limit"); },
     [](std::string_view l, const std::string& where, LogState& st) {
       if (auto limit = size_after(l, "base limit (")) st.base_limit = *limit;
       const auto args = size_after(l, "arguments (");
       st.findings.push_back(
           {Step::kShapes, "compile_time_oom", Severity::kWarning,
            fmt::format(
                "XLA's scheduler saw the program's arguments and outputs ({}) exceed the memory limit "
                "({}) before it ran",
                args ? format_bytes(*args) : "?", st.base_limit ? format_bytes(*st.base_limit) : "?"),
            "the inputs and outputs alone do not fit: donate inputs (donate_argnums), shard them "
            "(NamedSharding), or use a smaller batch",
            where});
     }},
    {2, [](std::string_view l) { return has(l, "Can't reduce memory use below"); },
     [](std::string_view l, const std::string& where, LogState& st) {
       st.findings.push_back(
           {Step::kShapes, "compile_time_oom", Severity::kWarning,
            fmt::format("XLA's rematerialization could not bring the program under its limit: {}",
                        l.substr(l.find("Can't reduce"))),
            "add jax.checkpoint (jax.remat) with a policy such as "
            "jax.checkpoint_policies.dots_with_no_batch_dims_saveable, or lower the batch size",
            where});
     }},
    {2, [](std::string_view l) { return has(l, "BufferAssignment OOM Debugging"); },
     [](std::string_view, const std::string& where, LogState& st) {
       st.findings.push_back(
           {Step::kShapes, "compile_time_oom", Severity::kError,
            "XLA printed its buffer assignment for an OOM: the compiled program's peak does not fit",
            "read the 'Peak buffers' list below it (or run `memfit hlo` on the dumped module) and cut "
            "the largest: jax.checkpoint, bf16, smaller batch",
            where});
     }},
    {0, is_host_kill,
     [](std::string_view l, const std::string& where, LogState& st) {
       if (st.host_kill_seen) return;
       st.host_kill_seen = true;
       std::string pid(after(l, "Killed process "));
       st.findings.push_back(
           {Step::kLocation, "host_oom_kill", Severity::kError,
            pid.empty() ? fmt::format("the host killed the process for lack of RAM: {}", excerpt(l))
                        : fmt::format("the Linux OOM killer killed process {} (host RAM, not the GPU)",
                                      one_line(pid, 40)),
            "this is host memory, not device memory: shrink the data loader's buffers and prefetch, "
            "avoid host copies of device arrays (np.asarray in the loop), call jax.clear_caches() "
            "between phases, or raise the cgroup/job memory limit",
            where});
     }},
    {0, [](std::string_view l) { return has(l, "Compiling ") && has(l, " with global shapes and types"); },
     record_compile},
    {0, [](std::string_view l) { return has(l, "pmap(") && has(l, "Compiling"); },
     [](std::string_view, const std::string&, LogState& st) { st.pmap_seen = true; }},
    {0, [](std::string_view l) { return has(l, "* at ") && has(l, ", now ") && has(l, " and before "); },
     [](std::string_view l, const std::string&, LogState& st) {
       st.cache_miss_reasons.emplace_back(l.substr(l.find("* at ") + 2));
     }},
    {0, [](std::string_view l) { return has(l, "bytes on device") && has(l, "BFCAllocator"); },
     [](std::string_view, const std::string&, LogState& st) { st.preallocation_seen = true; }},
    {0,
     [](std::string_view l) {
       return (has(l, "CudaMallocAsync") || has(l, "cuda_async")) && !has(l, "may improve the situation");
     },
     [](std::string_view, const std::string&, LogState& st) { st.async_seen = true; }},
    // jaxlib 0.11 reads XLA_CLIENT_MEM_FRACTION with float(); a form it cannot read (0.75-, 0.5-0.9) makes
    // GPU backend initialisation fail and JAX falls back to the CPU with only this warning.
    {0,
     [](std::string_view l) {
       return has(l, "CUDA-enabled jaxlib is not installed") || has(l, "Falling back to cpu");
     },
     [](std::string_view, const std::string&, LogState& st) { st.cpu_fallback_seen = true; }},
    {0, [](std::string_view l) { return has(l, "could not convert string to float"); },
     [](std::string_view l, const std::string&, LogState& st) {
       if (st.float_error.empty()) st.float_error = one_line(l.substr(l.find("could not convert")), 120);
     }},
};

void summarize(LogState& st) {
  auto& findings = st.findings;
  const auto& refused_regions = st.refused_regions;
  const auto& base_limit = st.base_limit;
  const auto& source = st.source;
  // Refused regions whose sizes step down by XLA's 0.9x back-off: the pool silently shrank.
  size_t backoff_steps = 0;
  for (size_t i = 1; i < refused_regions.size(); ++i) {
    const double ratio =
        static_cast<double>(refused_regions[i].first) / static_cast<double>(refused_regions[i - 1].first);
    if (ratio > 0.88 && ratio < 0.92) ++backoff_steps;
  }
  if (backoff_steps > 0) {
    const uint64_t first = refused_regions.front().first;
    const uint64_t last = refused_regions.back().first;
    findings.push_back(
        {Step::kAllocation, "shrunken_pool", Severity::kWarning,
         fmt::format("the driver refused this process's pool {} times, from {} down to {}: XLA backs "
                     "off by 0.9x and runs with a pool of at most {} while memory_stats() still "
                     "reports the full bytes_limit - it will run out of memory far below it. Another "
                     "process holds GPU memory",
                     refused_regions.size(), format_bytes(first), format_bytes(last),
                     format_bytes(static_cast<uint64_t>(static_cast<double>(last) * 0.9))),
         "on a shared GPU set XLA_PYTHON_CLIENT_PREALLOCATE=false in every job, or give each job "
         "XLA_CLIENT_MEM_FRACTION=0.45 (two jobs); `memfit doctor` without --log shows who holds the GPU",
         refused_regions.front().second});
  }

  for (const DeviceOom& o : st.ooms) {
    const bool platform = o.allocator.rfind("SE_", 0) == 0;
    std::string message = fmt::format(
        "{} could not allocate {}{}{}", o.allocator.empty() ? "the allocator" : o.allocator,
        format_bytes(o.bytes), o.rounded ? fmt::format(" (rounded to {})", *o.rounded) : std::string(),
        o.executable.empty() ? std::string() : " in " + o.executable);
    std::string fix;
    if (platform) {
      message += ": the platform allocator asks the driver directly, so the device itself is full";
      fix =
          "make the peak smaller (batch size, bfloat16, jax.checkpoint, donate_argnums) or shard over more "
          "devices; check nvidia-smi for other processes";
    } else if (base_limit && o.bytes > *base_limit) {
      message += fmt::format(", more than the whole pool limit of {}", format_bytes(*base_limit));
      fix = fmt::format(
          "one buffer is larger than the pool: make the peak smaller (batch size, bfloat16, jax.checkpoint) "
          "or shard "
          "it (NamedSharding); raising XLA_CLIENT_MEM_FRACTION helps only up to the device's {}",
          "capacity");
    } else {
      fix =
          "make the peak smaller (batch size, bfloat16 about halves activations, jax.checkpoint, "
          "donate_argnums), "
          "or raise XLA_CLIENT_MEM_FRACTION if nothing else uses the GPU; `memfit fit` finds the smallest "
          "change";
    }
    findings.push_back({Step::kAllocation, "device_oom", Severity::kError, message, fix, o.where});
  }

  if (st.benign > 0) {
    findings.push_back(
        {Step::kAllocation, "benign_allocator_warning", Severity::kInfo,
         fmt::format("{} allocator warning{} of up to {} marked 'not a failure': XLA's autotuner tried "
                     "bigger scratch space and fell back; the program went on",
                     st.benign, st.benign == 1 ? "" : "s", format_bytes(st.benign_bytes)),
         "nothing to fix; these lines are not the OOM", st.benign_where});
  }
  if (st.preallocation_seen) {
    findings.push_back(
        {Step::kAllocation, "preallocated_pool", Severity::kInfo,
         "the log shows XLA preallocating its BFC pool: nvidia-smi shows the pool, not what is in use",
         "on a shared GPU set XLA_PYTHON_CLIENT_PREALLOCATE=false or lower XLA_CLIENT_MEM_FRACTION",
         std::string(source)});
  }
  if (st.async_seen) {
    findings.push_back(
        {Step::kAllocation, "limit_not_enforced", Severity::kWarning,
         "the job uses the cuda_async allocator, whose reported limit is not enforced (a 135GB array "
         "went through a 112.6GB limit on an H200)",
         "do not rely on XLA_CLIENT_MEM_FRACTION to protect other processes under cuda_async; use "
         "the default BFC allocator or size the job yourself",
         std::string(source)});
  }

  if (st.cpu_fallback_seen) {
    findings.push_back({Step::kAllocation, "jax_cpu_fallback", Severity::kError,
                        fmt::format("JAX did not start its GPU backend and ran on the CPU{}",
                                    st.float_error.empty()
                                        ? std::string()
                                        : fmt::format(" (the backend failed with \"{}\": jaxlib 0.11 reads "
                                                      "XLA_CLIENT_MEM_FRACTION with Python's float())",
                                                      st.float_error)),
                        "check XLA_CLIENT_MEM_FRACTION and XLA_PYTHON_CLIENT_* with `memfit env`: a plain "
                        "number such as 0.75 "
                        "(forms like 0.75- are for newer XLA only); then jax.devices() must list the GPU",
                        std::string(source)});
  }
  uint64_t eager = 0;
  std::vector<std::string> eager_names;
  for (const auto& [name, c] : st.compiles) {
    std::string_view inner = name;
    if (inner.starts_with("jit(") && inner.ends_with(")")) inner = inner.substr(4, inner.size() - 5);
    if (is_eager_primitive(inner)) {
      eager += c.shapes.size();
      eager_names.push_back(fmt::format("{} x{}", inner, c.shapes.size()));
      continue;
    }
    std::vector<std::string> distinct;
    for (const std::string& s : c.shapes) {
      if (std::find(distinct.begin(), distinct.end(), s) == distinct.end()) distinct.push_back(s);
    }
    if (c.shapes.size() < 2) continue;
    std::string shapes;
    for (const std::string& s : distinct) shapes += (shapes.empty() ? "" : "; ") + s;
    std::string why;
    for (const std::string& r : st.cache_miss_reasons) why += (why.empty() ? " (" : "; ") + r;
    if (!why.empty()) why += ")";
    findings.push_back(
        {Step::kShapes, "recompilation", distinct.size() > 2 ? Severity::kWarning : Severity::kInfo,
         fmt::format("{} was compiled {} times for {} input shape{}: {}{}", name, c.shapes.size(),
                     distinct.size(), distinct.size() == 1 ? "" : "s", shapes, why),
         "keep shapes stable: pad or bucket inputs (e.g. sequence lengths to multiples of 128), or "
         "compile ahead of time for the expected shapes (jax.jit(f).lower(...).compile()); call "
         "jax.clear_caches() in long runs if host memory grows",
         c.first_where});
  }
  if (eager >= 10) {
    std::string names;
    for (const std::string& n : eager_names) names += (names.empty() ? "" : ", ") + n;
    findings.push_back(
        {Step::kShapes, "eager_op_storm", eager >= 100 ? Severity::kWarning : Severity::kInfo,
         fmt::format("{} one-operation programs were compiled ({}): code running eagerly, op by op, "
                     "outside jit",
                     eager, names),
         "wrap the step in jax.jit so XLA compiles it once and fuses it", std::string(source)});
  }
  if (st.pmap_seen) {
    findings.push_back({Step::kSharding, "replication", Severity::kInfo,
                        "the job uses pmap, which keeps a full copy of the parameters on every device",
                        "if the model does not fit on one device, shard the parameters instead: jax.jit with "
                        "NamedSharding(mesh, PartitionSpec(...)) (FSDP or tensor parallel)",
                        std::string(source)});
  }
}

}  // namespace

std::vector<Finding> classify_log(std::string_view text, std::string_view source) {
  LogState st;
  st.source = source;
  uint64_t number = 0;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++number;
    if (line.empty()) {
      if (end == text.size()) break;
      continue;
    }
    const std::string where = fmt::format("{}:{}", source, number);
    int taken = -1;  // the exclusive group that already took this line
    for (const LineMatcher& m : kMatchers) {
      if (m.group != 0 && m.group == taken) continue;
      if (!m.matches(line)) continue;
      m.apply(line, where, st);
      if (m.group != 0) taken = m.group;
    }
  }
  summarize(st);
  std::vector<Finding> findings = std::move(st.findings);
  // The same finding from several lines (XLA repeats its warnings per attempt): keep the first, count them.
  std::vector<Finding> merged;
  std::vector<int> repeats;
  std::map<std::pair<std::string, std::string>, size_t> seen;  // (code, message) -> index in merged
  for (Finding& f : findings) {
    auto [it, inserted] = seen.emplace(std::make_pair(f.code, f.message), merged.size());
    if (!inserted) {
      ++repeats[it->second];
      continue;
    }
    merged.push_back(std::move(f));
    repeats.push_back(1);
  }
  for (size_t i = 0; i < merged.size(); ++i) {
    if (repeats[i] > 1) merged[i].message += fmt::format(" (seen {} times)", repeats[i]);
  }
  sort_findings(merged);
  return merged;
}

}  // namespace memfit
