#include "memfit/diagnose/log_classifier.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <optional>
#include <set>

#include "memfit/core/bytes.h"

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
  auto bytes = parse_bytes(std::string(number) + unit);
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

}  // namespace

std::vector<Finding> classify_log(std::string_view text, std::string_view source) {
  std::vector<Finding> findings;
  std::vector<DeviceOom> ooms;
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

  auto record_oom = [&](std::string allocator, uint64_t bytes, std::optional<uint64_t> rounded,
                        std::string exe, const std::string& where) {
    for (DeviceOom& o : ooms) {
      // The allocator's log line and the exception of one failure name the same size (to two decimals).
      if (format_bytes(o.bytes) == format_bytes(bytes) &&
          (o.allocator == allocator || o.allocator.empty() || allocator.empty())) {
        if (o.allocator.empty()) o.allocator = allocator;
        if (!o.rounded) o.rounded = rounded;
        if (o.executable.empty()) o.executable = exe;
        ++o.mentions;
        return;
      }
    }
    ooms.push_back({std::move(allocator), bytes, rounded, std::move(exe), where, 1});
  };

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

    if (has(line, "The caller indicates that this is not a failure")) {
      if (benign++ == 0) benign_where = where;
      benign_bytes = std::max(benign_bytes, size_after(line, "trying to allocate ").value_or(0));
    } else if (has(line, "ran out of memory trying to allocate")) {
      std::string allocator(after(line, "Allocator ("));
      if (!allocator.empty() && allocator.back() == ')') allocator.pop_back();
      if (auto bytes = size_after(line, "trying to allocate ")) {
        record_oom(allocator, *bytes, size_after(line, "(rounded to "), "", where);
      }
    } else if (has(line, "Out of host memory while trying to allocate")) {
      findings.push_back(
          {Step::kLocation, "host_memory_pressure", Severity::kError,
           fmt::format("pinned host memory ran out: {}", line.substr(line.find("Out of host"))),
           "raise XLA_PJRT_GPU_HOST_MEMORY_LIMIT_GB (default 64) or keep fewer arrays on the host "
           "(jax.device_put to the device, smaller host offload)",
           where});
    } else if (has(line, "Out of memory while trying to allocate")) {
      if (auto bytes = size_after(line, "Out of memory while trying to allocate ")) {
        std::string allocator(after(line, "with allocator "));
        std::string exe(after(line, "executable_name='", "'"));
        record_oom(allocator, *bytes, std::nullopt, exe, where);
      }
    } else if (has(line, "Failed to allocate request for")) {
      if (auto bytes = size_after(line, "Failed to allocate request for "))
        record_oom("", *bytes, std::nullopt, "", where);
    } else if (has(line, "Failed to allocate device memory of")) {
      const std::string_view rest = line.substr(line.find("Failed to allocate device memory of"));
      if (auto bytes = size_after(rest, "(")) refused_regions.emplace_back(*bytes, where);
    } else if (has(line, "CUDA out of memory") || has(line, "OutOfMemoryError")) {
      if (auto bytes = size_after(line, "Tried to allocate ")) {
        std::string detail;
        if (auto total = size_after(line, "total capacity of "))
          detail += fmt::format("; GPU total {}", format_bytes(*total));
        if (auto free = size_after(line, "of which "))
          detail += fmt::format(", {} free", format_bytes(*free));
        const auto reserved_unused = size_after(line, "reserved by PyTorch but unallocated");
        const auto unallocated = size_after(line, "and ");
        const bool fragmented = reserved_unused.has_value() || (unallocated && *unallocated > (512ull << 20));
        findings.push_back(
            {Step::kAllocation, "device_oom", Severity::kError,
             fmt::format("PyTorch could not allocate {}{}", format_bytes(*bytes), detail),
             fragmented ? "memory reserved by PyTorch's cache is going unused: set "
                          "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, then make the peak "
                          "smaller (batch size, bf16 autocast, activation checkpointing)"
                        : "make the peak smaller: batch size, bf16 autocast, activation checkpointing "
                          "(torch.utils.checkpoint); check nvidia-smi for other processes",
             where});
      }
    }

    if (has(line, "exceeds the base limit")) {
      if (auto limit = size_after(line, "base limit (")) base_limit = *limit;
      const auto args = size_after(line, "arguments (");
      findings.push_back(
          {Step::kShapes, "compile_time_oom", Severity::kWarning,
           fmt::format("XLA's scheduler saw the program's arguments and outputs ({}) exceed the "
                       "memory limit ({}) before it ran",
                       args ? format_bytes(*args) : "?", base_limit ? format_bytes(*base_limit) : "?"),
           "the inputs and outputs alone do not fit: donate inputs (donate_argnums), shard them "
           "(NamedSharding), or use a smaller batch",
           where});
    } else if (has(line, "Can't reduce memory use below")) {
      findings.push_back(
          {Step::kShapes, "compile_time_oom", Severity::kWarning,
           fmt::format("XLA's rematerialization could not bring the program under its limit: {}",
                       line.substr(line.find("Can't reduce"))),
           "add jax.checkpoint (jax.remat) with a policy such as "
           "jax.checkpoint_policies.dots_with_no_batch_dims_saveable, or lower the batch size",
           where});
    } else if (has(line, "BufferAssignment OOM Debugging")) {
      findings.push_back(
          {Step::kShapes, "compile_time_oom", Severity::kError,
           "XLA printed its buffer assignment for an OOM: the compiled program's peak does not fit",
           "read the 'Peak buffers' list below it (or run `memfit hlo` on the dumped module) and cut "
           "the largest: jax.checkpoint, bf16, smaller batch",
           where});
    }

    if (has(line, "Out of memory: Killed process") || has(line, "Memory cgroup out of memory") ||
        has(line, "invoked oom-killer") || has(line, "oom_kill event") ||
        (has(line, "OUT_OF_MEMORY") && !has(line, "ERROR_OUT_OF_MEMORY")) || line == "Killed" ||
        has(line, "exit code 137") || has(line, "exit status 137") || has(line, "exited with code 137")) {
      if (!host_kill_seen) {
        host_kill_seen = true;
        std::string pid(after(line, "Killed process "));
        findings.push_back(
            {Step::kLocation, "host_oom_kill", Severity::kError,
             pid.empty() ? fmt::format("the host killed the process for lack of RAM: '{}'", line)
                         : fmt::format("the Linux OOM killer killed process {} (host RAM, not the GPU)", pid),
             "this is host memory, not device memory: shrink the data loader's buffers and prefetch, "
             "avoid host copies of device arrays (np.asarray in the loop), call jax.clear_caches() "
             "between phases, or raise the cgroup/job memory limit",
             where});
      }
    }

    if (has(line, "Compiling ") && has(line, " with global shapes and types")) {
      std::string_view name = line.substr(line.find("Compiling ") + 10);
      name = name.substr(0, name.find(" with global shapes"));
      if (name.starts_with("pmap(") || has(name, "xla_pmap")) pmap_seen = true;
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
      Compiles& c = compiles[std::string(name)];
      if (c.shapes.empty()) c.first_where = where;
      c.shapes.push_back(clean);
    }
    if (has(line, "pmap(") && has(line, "Compiling")) pmap_seen = true;
    if (has(line, "* at ") && has(line, ", now ") && has(line, " and before ")) {
      cache_miss_reasons.emplace_back(line.substr(line.find("* at ") + 2));
    }
    if (has(line, "bytes on device") && has(line, "BFCAllocator")) preallocation_seen = true;
    if ((has(line, "CudaMallocAsync") || has(line, "cuda_async")) &&
        !has(line, "may improve the situation")) {
      async_seen = true;
    }
  }

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

  for (const DeviceOom& o : ooms) {
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

  if (benign > 0) {
    findings.push_back(
        {Step::kAllocation, "benign_allocator_warning", Severity::kInfo,
         fmt::format("{} allocator warning{} of up to {} marked 'not a failure': XLA's autotuner tried "
                     "bigger scratch space and fell back; the program went on",
                     benign, benign == 1 ? "" : "s", format_bytes(benign_bytes)),
         "nothing to fix; these lines are not the OOM", benign_where});
  }
  if (preallocation_seen) {
    findings.push_back(
        {Step::kAllocation, "preallocated_pool", Severity::kInfo,
         "the log shows XLA preallocating its BFC pool: nvidia-smi shows the pool, not what is in use",
         "on a shared GPU set XLA_PYTHON_CLIENT_PREALLOCATE=false or lower XLA_CLIENT_MEM_FRACTION",
         std::string(source)});
  }
  if (async_seen) {
    findings.push_back(
        {Step::kAllocation, "limit_not_enforced", Severity::kWarning,
         "the job uses the cuda_async allocator, whose reported limit is not enforced (a 135GB array "
         "went through a 112.6GB limit on an H200)",
         "do not rely on XLA_CLIENT_MEM_FRACTION to protect other processes under cuda_async; use "
         "the default BFC allocator or size the job yourself",
         std::string(source)});
  }

  uint64_t eager = 0;
  std::vector<std::string> eager_names;
  for (const auto& [name, c] : compiles) {
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
    for (const std::string& r : cache_miss_reasons) why += (why.empty() ? " (" : "; ") + r;
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
  if (pmap_seen) {
    findings.push_back({Step::kSharding, "replication", Severity::kInfo,
                        "the job uses pmap, which keeps a full copy of the parameters on every device",
                        "if the model does not fit on one device, shard the parameters instead: jax.jit with "
                        "NamedSharding(mesh, PartitionSpec(...)) (FSDP or tensor parallel)",
                        std::string(source)});
  }
  // The same finding from several lines (XLA repeats its warnings per attempt): keep the first, count them.
  std::vector<Finding> merged;
  std::vector<int> repeats;
  for (Finding& f : findings) {
    auto same = std::find_if(merged.begin(), merged.end(),
                             [&](const Finding& m) { return m.code == f.code && m.message == f.message; });
    if (same != merged.end()) {
      ++repeats[static_cast<size_t>(same - merged.begin())];
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
