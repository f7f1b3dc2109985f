#include "memfit/alloc/oom_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "memfit/core/bytes.h"
#include "memfit/core/checked.h"
#include "memfit/core/json.h"

namespace memfit {
namespace {

// The smallest fraction (two decimals, rounded up) whose limit holds `bytes` on `total`.
double fraction_for(uint64_t bytes, uint64_t total) {
  return std::ceil(100.0 * static_cast<double>(bytes) / static_cast<double>(total)) / 100.0;
}

}  // namespace

double OomReport::fragmentation() const {
  if (free_in_pool_bytes == 0) return 0.0;
  return 1.0 - static_cast<double>(largest_free_bytes) / static_cast<double>(free_in_pool_bytes);
}

std::string OomReport::summary() const {
  std::string pool = pool_bytes ? fmt::format("pool {}", format_bytes(*pool_bytes)) : std::string("no pool");
  std::string limit = bytes_limit ? fmt::format(" of limit {}", format_bytes(*bytes_limit)) : std::string();
  return fmt::format(
      "Out of memory while trying to allocate {} (rounded to {}) with allocator {}: in use {}, {}{}, largest "
      "free chunk {}",
      format_bytes(requested_bytes), rounded_bytes, allocator_name, format_bytes(bytes_in_use), pool, limit,
      format_bytes(largest_free_bytes));
}

void explain_oom(OomReport& r) {
  r.suggestions.clear();
  const uint64_t total = r.device_total_bytes;
  const uint64_t needed = r.bytes_in_use + r.rounded_bytes;  // what a perfectly packed pool would need
  const bool fits_in_limit = !r.bytes_limit || needed <= *r.bytes_limit;
  const bool fragmented = r.pool_bytes && r.rounded_bytes <= r.free_in_pool_bytes;
  const bool shrunken = r.pool_bytes && r.bytes_limit && !r.growth && *r.pool_bytes < *r.bytes_limit;

  // A lease group refused the growth: the memory is held by the group's members, under its rules.
  const bool lease = r.device_error.starts_with("share group '");
  if (lease && !fragmented && fits_in_limit) {
    r.cause = "the lease is used up: " + r.device_error;
    const size_t end = r.device_error.find('\'', 13);
    r.suggestions.push_back(fmt::format(
        "`memfit share {}` shows who holds the rest; give this process a larger fair share "
        "(MEMFIT_SHARE_WEIGHT=2, or MEMFIT_SHARE_QUOTA=BYTES), stop another member, or make the peak smaller",
        r.device_error.substr(13, end == std::string::npos ? 0 : end - 13)));
    return;
  }
  if (r.rounded_bytes > total) {
    r.cause = fmt::format("the request alone ({}) is larger than the whole device ({})",
                          format_bytes(r.rounded_bytes), format_bytes(total));
  } else if (fragmented) {
    r.cause = fmt::format(
        "fragmentation: the pool has {} free but in pieces; the largest is {} ({:.1f}% fragmented)",
        format_bytes(r.free_in_pool_bytes), format_bytes(r.largest_free_bytes), 100.0 * r.fragmentation());
  } else if (shrunken) {
    r.cause = fmt::format(
        "the pool is only {} of its {} limit: when it was reserved, the device did not have that much free - "
        "another process holds GPU memory",
        format_bytes(*r.pool_bytes), format_bytes(*r.bytes_limit));
  } else if (!fits_in_limit) {
    r.cause = fmt::format("the live buffers ({}) plus this request ({}) exceed the limit of {}",
                          format_bytes(r.bytes_in_use), format_bytes(r.rounded_bytes),
                          format_bytes(*r.bytes_limit));
  } else {
    r.cause =
        fmt::format("the device itself is out of memory: it has {} free of {}, fewer than this request needs",
                    format_bytes(r.device_free_bytes), format_bytes(total));
  }

  if (!r.device_error.empty() && r.rounded_bytes <= total) r.cause += " (device: " + r.device_error + ")";

  if (shrunken) {
    r.suggestions.push_back(fmt::format(
        "share the GPU deliberately: set XLA_PYTHON_CLIENT_PREALLOCATE=false in the other job(s), or give "
        "every "
        "job XLA_CLIENT_MEM_FRACTION={:.2f} or less so that two pools fit",
        std::floor(100.0 * 0.5 * static_cast<double>(total - std::min<uint64_t>(total, 2 * (550ull << 20))) /
                   static_cast<double>(total)) /
            100.0));
  }
  if (fragmented) {
    r.suggestions.push_back(
        "use an allocator that does not fragment: XLA_PYTHON_CLIENT_ALLOCATOR=platform (exact, slower) or "
        "TF_GPU_ALLOCATOR=cuda_malloc_async; keep preallocation on so the pool is one region");
  }
  if (r.bytes_limit && !fits_in_limit && needed <= total) {
    const double fraction = fraction_for(needed, total);
    if (fraction <= 0.99) {
      r.suggestions.push_back(fmt::format(
          "raise the limit: XLA_CLIENT_MEM_FRACTION={:.2f} (now {:.2f}) gives a pool of {}, enough for the "
          "{} "
          "this step needs - if no other process needs that memory",
          fraction, r.memory_fraction,
          format_bytes(static_cast<uint64_t>(fraction * static_cast<double>(total))), format_bytes(needed)));
    }
  }
  if (!fits_in_limit || r.rounded_bytes > total || needed > total) {
    r.suggestions.push_back(fmt::format(
        "make the peak smaller (it needs at least {}): a smaller batch, bfloat16 activations (about half), "
        "jax.checkpoint on the layers, donate_argnums for the training state; `memfit fit` finds the "
        "smallest change that fits",
        format_bytes(needed)));
  }
  if (needed > total) {
    const double per_device = 0.75 * static_cast<double>(total);
    r.suggestions.push_back(fmt::format(
        "it cannot fit on one device: shard the arrays over at least {} devices with NamedSharding "
        "(PartitionSpec over the batch or the parameters)",
        static_cast<uint64_t>(std::ceil(static_cast<double>(needed) / per_device))));
  }
  if (r.suggestions.empty()) {
    r.suggestions.push_back(
        "free device memory held elsewhere (other processes: nvidia-smi), or make the peak smaller: "
        "`memfit doctor` shows who holds the GPU");
  }
}

std::string occupancy_bar(const std::vector<ChunkExtent>& chunks, uint64_t pool_bytes) {
  // XLA's RenderOccupancy: start from '_', then paint each in-use chunk's rounding waste 'x' and its
  // requested bytes '*' over the cells they touch (first and last cell inclusive), left to right.
  constexpr uint64_t kWidth = 100;
  if (pool_bytes == 0) return {};
  std::string bar(kWidth, '_');
  auto paint = [&](uint64_t offset, uint64_t size, char c) {
    if (size == 0) return;
    const auto cell = [&](uint64_t at) {
      return static_cast<size_t>(std::min<uint64_t>(
          kWidth - 1, static_cast<uint64_t>(static_cast<uint128_t>(at) * kWidth / pool_bytes)));
    };
    for (size_t i = cell(offset); i <= cell(offset + size - 1); ++i) bar[i] = c;
  };
  for (const ChunkExtent& c : chunks) {
    if (!c.in_use) continue;
    const uint64_t requested = std::min(c.requested_bytes, c.size_bytes);
    paint(c.offset + requested, c.size_bytes - requested, 'x');
    paint(c.offset, requested, '*');
  }
  return bar;
}

Json OomReport::to_json() const {
  Json j;
  j["allocator"] = allocator_name;
  j["requested_bytes"] = requested_bytes;
  j["rounded_bytes"] = rounded_bytes;
  j["bytes_in_use"] = bytes_in_use;
  j["live_allocations"] = live_allocations;
  j["pool_bytes"] = pool_bytes ? Json(*pool_bytes) : Json(nullptr);
  j["bytes_limit"] = bytes_limit ? Json(*bytes_limit) : Json(nullptr);
  j["device_total_bytes"] = device_total_bytes;
  j["device_free_bytes"] = device_free_bytes;
  j["free_in_pool_bytes"] = free_in_pool_bytes;
  j["largest_free_bytes"] = largest_free_bytes;
  j["fragmentation"] = std::round(fragmentation() * 10000.0) / 10000.0;
  j["occupancy_bar"] = occupancy_bar;
  if (detail_omitted) j["detail_omitted"] = true;
  Json top = Json::array();
  for (const LiveAllocationGroup& g : top_live) {
    top.push_back(
        {{"tag", g.tag}, {"bytes", g.bytes}, {"count", g.count}, {"largest_bytes", g.largest_bytes}});
  }
  j["top_live"] = top;
  j["cause"] = cause;
  j["suggestions"] = suggestions;
  return j;
}

std::string OomReport::to_text() const {
  std::string out = summary() + "\n";
  auto row = [&](std::string_view key, const std::string& value) {
    out += fmt::format("  {:<16}{}\n", key, value);
  };
  row("request", fmt::format("{} (rounded to {})", format_bytes(requested_bytes), rounded_bytes));
  row("in use", fmt::format("{} in {} allocation{}", format_bytes(bytes_in_use), live_allocations,
                            live_allocations == 1 ? "" : "s"));
  if (pool_bytes) {
    row("pool",
        fmt::format("{}{}", format_bytes(*pool_bytes),
                    bytes_limit ? fmt::format(" (limit {})", format_bytes(*bytes_limit)) : std::string()));
    row("free in pool",
        fmt::format("{}, largest free chunk {}, fragmentation {:.1f}%", format_bytes(free_in_pool_bytes),
                    format_bytes(largest_free_bytes), 100.0 * fragmentation()));
  } else if (bytes_limit) {
    row("limit", format_bytes(*bytes_limit));
  }
  row("device",
      fmt::format("{} free of {}", format_bytes(device_free_bytes), format_bytes(device_total_bytes)));
  if (detail_omitted)
    out +=
        "  (the pool's occupancy and live allocations are left out: the allocator has failed many times)\n";
  if (!occupancy_bar.empty())
    out += "  pool occupancy ('*' in use, 'x' rounding waste, '_' free):\n  " + occupancy_bar + "\n";
  if (!top_live.empty()) {
    out += "  largest live allocations:\n";
    for (const LiveAllocationGroup& g : top_live) {
      out += fmt::format("    {:>10}  {:>5} x {:<10}  {}\n", format_bytes(g.bytes), g.count,
                         format_bytes(g.largest_bytes), g.tag);
    }
  }
  out += "  cause: " + cause + "\n";
  out += "  what would help:\n";
  for (const std::string& s : suggestions) out += "    - " + s + "\n";
  return out;
}

}  // namespace memfit
