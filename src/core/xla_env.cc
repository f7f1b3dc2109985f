#include "memfit/core/xla_env.h"

#include <fmt/format.h>

#include <cctype>
#include <charconv>
#include <cmath>
#include <string>

#include "memfit/core/bytes.h"
#include "memfit/core/checked.h"
#include "memfit/core/text.h"

namespace memfit {
namespace {

constexpr std::string_view kAllocatorVar = "XLA_PYTHON_CLIENT_ALLOCATOR";
constexpr std::string_view kTfAllocatorVar = "TF_GPU_ALLOCATOR";
constexpr std::string_view kPreallocateVar = "XLA_PYTHON_CLIENT_PREALLOCATE";
constexpr std::string_view kFractionVar = "XLA_CLIENT_MEM_FRACTION";
constexpr std::string_view kDeprecatedFractionVar = "XLA_PYTHON_CLIENT_MEM_FRACTION";
constexpr std::string_view kCollectiveVar = "XLA_PYTHON_CLIENT_COLLECTIVE_MEM_SIZE_MB";
constexpr std::string_view kUnifiedVar = "TF_FORCE_UNIFIED_MEMORY";

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// The most a fraction can sensibly be: above 1 only oversubscribes unified memory, and XLA computes the pool
// as int64(total x fraction), which a large enough factor overflows.
constexpr double kMaxMemoryFraction = 1000.0;

// jaxlib 0.11 reads the fraction with Python's float(): surrounding whitespace, a sign, an exponent and '_'
// between digits are allowed; anything else raises ValueError inside backend initialisation, and JAX does
// not stop - it logs "An NVIDIA GPU may be present on this machine, but a CUDA-enabled jaxlib is not
// installed. Falling back to cpu." and runs the whole job on the CPU (../shared/FACTS.md, H200 runs).
Expected<double> parse_fraction(std::string_view var, std::string_view raw) {
  std::string text(trim(raw));
  if (!text.empty() && text.front() == '+') text.erase(0, 1);
  std::string digits;  // float() allows '_' between digits only
  bool underscores_ok = true;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '_') {
      digits.push_back(text[i]);
      continue;
    }
    const bool between = i > 0 && i + 1 < text.size() &&
                         std::isdigit(static_cast<unsigned char>(text[i - 1])) &&
                         std::isdigit(static_cast<unsigned char>(text[i + 1]));
    underscores_ok = underscores_ok && between;
  }
  double value = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (digits.empty() || !underscores_ok || ec != std::errc() || end != digits.data() + digits.size()) {
    return invalid_argument(fmt::format(
        "{}={} is not a number Python's float() reads, so jaxlib 0.11 raises ValueError and JAX silently "
        "falls "
        "back to the CPU (\"An NVIDIA GPU may be present on this machine, but a CUDA-enabled jaxlib is not "
        "installed\"): set a plain number such as 0.75 (forms like 0.75- or 0.5-0.9 are for newer XLA only)",
        var, excerpt(raw)));
  }
  if (!std::isfinite(value) || value <= 0) {
    return invalid_argument(
        fmt::format("{}={} must be a fraction greater than 0 (such as 0.5)", var, excerpt(raw)));
  }
  if (value > kMaxMemoryFraction) {
    return invalid_argument(fmt::format(
        "{}={} asks for {} times the device's memory: XLA sizes the pool as int64(total x fraction), which "
        "this overflows; use at most 1 (a small factor only with TF_FORCE_UNIFIED_MEMORY=1)",
        var, excerpt(raw), value));
  }
  return value;
}

// fraction x total as a byte count, saturating instead of the undefined double-to-integer overflow.
uint64_t fraction_of(double fraction, uint64_t total_bytes) {
  const double wanted = fraction * static_cast<double>(total_bytes);
  constexpr double kTwoTo64 = 18446744073709551616.0;
  if (!(wanted >= 0)) return 0;
  if (wanted >= kTwoTo64) return ~uint64_t{0};
  return static_cast<uint64_t>(wanted);
}

}  // namespace

std::string_view xla_allocator_kind_name(XlaAllocatorKind kind) {
  switch (kind) {
    case XlaAllocatorKind::kDefault:
      return "default";
    case XlaAllocatorKind::kBfc:
      return "bfc";
    case XlaAllocatorKind::kPlatform:
      return "platform";
    case XlaAllocatorKind::kCudaAsync:
      return "cuda_async";
    case XlaAllocatorKind::kVmm:
      return "vmm";
    case XlaAllocatorKind::kAddress:
      return "address";
  }
  return "default";
}

Expected<XlaAllocatorConfig> parse_xla_allocator_env(const Environment& env) {
  XlaAllocatorConfig config;

  if (auto raw = env.get(kAllocatorVar)) {
    const std::string value = lower(*raw);  // jaxlib lowercases the value
    bool known = false;
    for (auto kind : {XlaAllocatorKind::kDefault, XlaAllocatorKind::kBfc, XlaAllocatorKind::kPlatform,
                      XlaAllocatorKind::kCudaAsync, XlaAllocatorKind::kVmm, XlaAllocatorKind::kAddress}) {
      if (value == xla_allocator_kind_name(kind)) {
        config.kind = kind;
        known = true;
      }
    }
    if (!known) {
      return invalid_argument(
          fmt::format("{}={} is not an allocator JAX knows (expected default, bfc, platform, cuda_async, "
                      "vmm or address)",
                      kAllocatorVar, excerpt(*raw)));
    }
  }
  if (auto raw = env.get(kTfAllocatorVar)) {
    if (*raw == "cuda_malloc_async") {
      if (config.kind == XlaAllocatorKind::kDefault) {
        config.kind = XlaAllocatorKind::kCudaAsync;
        config.kind_from_tf_gpu_allocator = true;
      } else {
        config.warnings.push_back(fmt::format("{}=cuda_malloc_async is overridden by {}={}", kTfAllocatorVar,
                                              kAllocatorVar, xla_allocator_kind_name(config.kind)));
      }
    } else {
      config.warnings.push_back(fmt::format("{}={} is ignored by JAX (only cuda_malloc_async has an effect)",
                                            kTfAllocatorVar, excerpt(*raw)));
    }
  }

  if (auto raw = env.get(kPreallocateVar)) {
    // jaxlib: preallocate = value not in ('false', 'False', '0'). Anything else, even 'FALSE', is on.
    config.preallocate = !(*raw == "false" || *raw == "False" || *raw == "0");
    const std::string value = lower(trim(*raw));
    if (config.preallocate && (value == "false" || value == "0" || value == "no" || value == "off")) {
      config.warnings.push_back(
          fmt::format("{}={} leaves preallocation ON: JAX turns it off only for exactly false, False or 0",
                      kPreallocateVar, excerpt(*raw)));
    }
  }

  // jaxlib tests `if memory_fraction:`, so a variable set to the empty string is as good as unset.
  auto non_empty = [&](std::string_view var) {
    auto v = env.get(var);
    return v && !v->empty() ? v : std::nullopt;
  };
  const auto fraction_new = non_empty(kFractionVar);
  const auto fraction_old = non_empty(kDeprecatedFractionVar);
  if (fraction_new && fraction_old) {
    return invalid_argument(fmt::format("both {} and {} are set; JAX refuses that: keep only {}",
                                        kFractionVar, kDeprecatedFractionVar, kFractionVar));
  }
  if (fraction_new || fraction_old) {
    const std::string_view var = fraction_new ? kFractionVar : kDeprecatedFractionVar;
    MEMFIT_ASSIGN_OR_RETURN(config.memory_fraction,
                            parse_fraction(var, fraction_new ? *fraction_new : *fraction_old));
    config.fraction_variable = std::string(var);
    if (fraction_old) {
      config.warnings.push_back(fmt::format("{} is deprecated (JAX 0.11 still reads it); use {}",
                                            kDeprecatedFractionVar, kFractionVar));
    }
  }

  if (auto raw = env.get(kUnifiedVar)) {
    const std::string value = lower(trim(*raw));
    config.unified_memory = value == "1" || value == "true";
  }
  if (config.memory_fraction > 1.0 && !config.unified_memory) {
    config.warnings.push_back(fmt::format(
        "a memory fraction of {} asks for more than the device has; without {}=1 the pool cannot exceed "
        "physical memory and XLA backs off until the driver gives it something",
        config.memory_fraction, kUnifiedVar));
  }

  if (auto raw = env.get(kCollectiveVar)) {
    const std::string_view text = trim(*raw);
    uint64_t mb = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), mb);
    auto bytes = checked_mul(mb, 1ull << 20);
    if (text.empty() || ec != std::errc() || end != text.data() + text.size() || !bytes) {
      return invalid_argument(
          fmt::format("{}={} must be a whole number of MiB", kCollectiveVar, excerpt(*raw)));
    }
    config.collective_memory_bytes = *bytes;
  }
  return config;
}

uint64_t bfc_round_bytes(uint64_t size_bytes) {
  if (size_bytes < kBfcMinAllocationBytes) return kBfcMinAllocationBytes;
  return round_up(size_bytes, kBfcMinAllocationBytes);
}

Status validate_pool_fraction(double fraction) {
  if (fraction > 0 && fraction <= 1.0) return ok_status();  // written so that NaN fails
  return invalid_argument(fmt::format(
      "the memory fraction {} must be above 0 and at most 1: the share of the device XLA's pool takes",
      fraction));
}

uint64_t bfc_memory_limit(double fraction, uint64_t total_bytes) {
  const uint64_t bytes = fraction_of(fraction, total_bytes);
  return checked_round_up(bytes, kBfcLimitAlignmentBytes)
      .value_or(bytes / kBfcLimitAlignmentBytes * kBfcLimitAlignmentBytes);
}

uint64_t bfc_backpedal_bytes(uint64_t size_bytes) {
  // bfc_allocator.cc: `static constexpr float kBackpedalFactor = 0.9;` bytes = RoundedBytes(bytes * factor).
  // The product is a float, so the result is what a float gives, not the exact 0.9x.
  constexpr float kBackpedalFactor = 0.9f;
  const float scaled = static_cast<float>(size_bytes) * kBackpedalFactor;
  return bfc_round_bytes(static_cast<uint64_t>(scaled));
}

namespace {

// The region a BFC pool of `wanted` bytes gets where the driver has `free_bytes`: backed off by 0.9x until it
// fits (bfc_allocator.cc's Extend), 0 when nothing does.
uint64_t bfc_granted_bytes(uint64_t wanted, uint64_t free_bytes) {
  uint64_t pool = wanted;
  while (pool > free_bytes) {
    const uint64_t next = bfc_backpedal_bytes(pool);
    if (next >= pool) return 0;  // 0.9x of a few hundred bytes rounds back up: nothing left to try
    pool = next;
  }
  return pool;
}

}  // namespace

XlaAllocatorPlan plan_xla_allocator(const XlaAllocatorConfig& config, uint64_t capacity_bytes) {
  XlaAllocatorPlan plan;
  plan.config = config;
  plan.capacity_bytes = capacity_bytes;
  plan.warnings = config.warnings;
  const std::string capacity = format_bytes(capacity_bytes);
  const double sizing_fraction =
      config.unified_memory ? std::max(1.0, config.memory_fraction) : config.memory_fraction;

  switch (config.kind) {
    case XlaAllocatorKind::kDefault:
    case XlaAllocatorKind::kBfc: {
      plan.allocator = "bfc";
      plan.allocator_name = "GPU_0_bfc";
      plan.preallocate = config.preallocate;
      plan.limit_bytes = bfc_memory_limit(sizing_fraction, capacity_bytes);
      plan.limit_enforced = true;
      const std::string limit = format_bytes(*plan.limit_bytes);
      if (config.preallocate) {
        // A pool larger than what the driver can give (a fraction above 1 without unified memory): the
        // first region request is refused and bfc_allocator.cc's Extend backs off by 0.9x until one is
        // granted, so the process reserves that, not the limit.
        const uint64_t free_bytes =
            capacity_bytes > kCudaContextBytes ? capacity_bytes - kCudaContextBytes : 0;
        // (Only above a fraction of 1: just under it, whether the context leaves room is not certain.)
        const bool oversized = config.memory_fraction > 1.0 && !config.unified_memory;
        const uint64_t pool =
            oversized ? bfc_granted_bytes(*plan.limit_bytes, free_bytes) : *plan.limit_bytes;
        plan.reserved_at_first_allocation_bytes = pool;
        if (pool == *plan.limit_bytes) {
          plan.consequences.push_back(
              fmt::format("reserves {} of {} ({}) at the first allocation; nvidia-smi will show that much "
                          "(plus ~{} of CUDA "
                          "context) for this process whatever it uses",
                          limit, capacity, format_percent(*plan.limit_bytes, capacity_bytes),
                          format_bytes(kCudaContextBytes)));
        } else {
          plan.consequences.push_back(fmt::format(
              "asks the driver for {} of {} at the first allocation, is refused, and backs off by 0.9x to "
              "about {} ({}); nvidia-smi will show that much (plus ~{} of CUDA context) for this process "
              "whatever it uses, and an allocation past it runs out of memory below the limit of {}",
              limit, capacity, format_bytes(pool), format_percent(pool, capacity_bytes),
              format_bytes(kCudaContextBytes), limit));
        }
        plan.consequences.push_back(
            "buffers are carved out of that pool by XLA's BFC allocator; a freed buffer returns to the pool, "
            "never to the GPU, so memory_stats()['bytes_in_use'] is the figure to watch, not nvidia-smi");
      } else {
        plan.consequences.push_back(
            fmt::format("reserves nothing up front; the pool grows on demand in regions from {}, doubling, "
                        "up to a limit of "
                        "{}, and is never returned to the GPU while the process lives",
                        format_bytes(kBfcFirstRegionBytes), limit));
        plan.consequences.push_back(
            "a growing pool is more prone to fragmentation than a preallocated one: an OOM can come below "
            "the "
            "limit when no single free region is large enough");
      }
      // A second process with the same settings: the driver refuses the whole pool, XLA backs off by 0.9x
      // until a region fits in what the first process left.
      if (config.preallocate && *plan.limit_bytes > capacity_bytes / 2) {
        // The first process holds what it was granted (the limit, unless that was above the device).
        const uint64_t held = plan.reserved_at_first_allocation_bytes + 2 * kCudaContextBytes;
        const uint64_t free_bytes = capacity_bytes > held ? capacity_bytes - held : 0;
        const uint64_t pool = bfc_granted_bytes(*plan.limit_bytes, free_bytes);
        plan.second_process_pool_bytes = pool;
        const double even_split =
            std::floor(100.0 * static_cast<double>(capacity_bytes - 2 * kCudaContextBytes) / 2.0 /
                       static_cast<double>(capacity_bytes)) /
            100.0;
        plan.warnings.push_back(fmt::format(
            "several processes on one GPU: a second process with these settings does not fail at start - its "
            "pool request of {} is refused, XLA backs off by 0.9x and it runs with a pool of about {} while "
            "still "
            "reporting bytes_limit {}, then runs out of memory far below that limit. On a shared GPU set "
            "XLA_PYTHON_CLIENT_PREALLOCATE=false, or XLA_CLIENT_MEM_FRACTION={:.2f} or less in each of two "
            "jobs",
            limit, format_bytes(pool), *plan.limit_bytes, even_split));
      }
      break;
    }
    case XlaAllocatorKind::kPlatform:
    case XlaAllocatorKind::kAddress:
      plan.allocator = "platform";
      plan.allocator_name = "SE_0_space_0";
      plan.preallocate = false;
      plan.consequences.push_back(
          "no pool: every buffer is a cudaMalloc of exactly its size and is returned to the GPU when freed, "
          "so "
          "nvidia-smi shows what is really in use");
      plan.consequences.push_back(
          "each allocation is a driver call (about 18.7us for 1MiB and 89us for 1GiB on an H200, against "
          "well "
          "under 1us from a pool): use it to debug or to share a GPU, not for speed; memory_stats() returns "
          "None");
      break;
    case XlaAllocatorKind::kCudaAsync: {
      plan.allocator = "cuda_async";
      plan.preallocate = config.preallocate;
      plan.limit_bytes = fraction_of(sizing_fraction, capacity_bytes);
      plan.limit_enforced = false;
      if (config.preallocate) plan.reserved_at_first_allocation_bytes = *plan.limit_bytes;
      plan.consequences.push_back(fmt::format(
          "uses CUDA's stream-ordered pool (cudaMallocAsync){} with a reported limit of {}",
          config.kind_from_tf_gpu_allocator ? ", chosen by TF_GPU_ALLOCATOR=cuda_malloc_async," : "",
          format_bytes(*plan.limit_bytes)));
      if (config.preallocate) {
        plan.consequences.push_back(fmt::format("reserves {} for the pool at start-up; nvidia-smi shows it",
                                                format_bytes(*plan.limit_bytes)));
      }
      plan.warnings.push_back(fmt::format(
          "the cuda_async allocator does not enforce its limit: on an H200 a 135GB array went through a "
          "limit of {}; memory_stats() has no pool_bytes and largest_free_block_bytes is 0",
          format_bytes(*plan.limit_bytes)));
      break;
    }
    case XlaAllocatorKind::kVmm:
      plan.allocator = "vmm";
      plan.preallocate = false;
      plan.limit_bytes = fraction_of(sizing_fraction, capacity_bytes);
      plan.limit_enforced = true;
      plan.consequences.push_back(fmt::format(
          "maps physical memory on demand into a reserved virtual range (experimental in JAX), capped at {}; "
          "nothing is reserved up front",
          format_bytes(*plan.limit_bytes)));
      break;
  }

  if (config.collective_memory_bytes != 0) {
    plan.consequences.push_back(
        fmt::format("also preallocates {} for collectives (NCCL buffers) in a separate pool limited to {}",
                    format_bytes(config.collective_memory_bytes),
                    format_bytes(fraction_of(1.0 - std::min(1.0, config.memory_fraction), capacity_bytes))));
  }
  return plan;
}

}  // namespace memfit
