// memfit env: what the XLA variables in force make JAX do at its first allocation.
#include <fmt/format.h>

#include <ostream>

#include "commands.h"
#include "memfit/core/bytes.h"
#include "memfit/core/device_catalog.h"
#include "memfit/core/json.h"
#include "memfit/core/xla_env.h"
#include "memfit/device/cuda_probe.h"

namespace memfit::cli {
namespace {

struct EnvOptions {
  std::string capacity;
  bool json = false;
};

constexpr const char* kVariables[] = {
    "XLA_PYTHON_CLIENT_ALLOCATOR",    "TF_GPU_ALLOCATOR",
    "XLA_PYTHON_CLIENT_PREALLOCATE",  "XLA_CLIENT_MEM_FRACTION",
    "XLA_PYTHON_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_COLLECTIVE_MEM_SIZE_MB",
    "TF_FORCE_UNIFIED_MEMORY"};

}  // namespace

Json env_to_json(const XlaAllocatorPlan& plan, const Environment& env, std::string_view capacity_source) {
  Json variables = Json::object();
  for (const char* name : kVariables) {
    if (auto v = env.get(name)) variables[name] = std::string(*v);
  }
  Json j;
  j["allocator"] = plan.allocator;
  if (!plan.allocator_name.empty()) j["allocator_name"] = plan.allocator_name;
  j["preallocate"] = plan.preallocate;
  j["memory_fraction"] = plan.config.memory_fraction;
  j["memory_fraction_source"] =
      plan.config.fraction_variable.empty() ? "default" : plan.config.fraction_variable;
  j["capacity_bytes"] = plan.capacity_bytes;
  j["capacity_source"] = capacity_source;
  j["limit_bytes"] = plan.limit_bytes ? Json(*plan.limit_bytes) : Json(nullptr);
  j["limit_enforced"] = plan.limit_enforced;
  j["reserved_at_first_allocation_bytes"] = plan.reserved_at_first_allocation_bytes;
  j["collective_memory_bytes"] = plan.config.collective_memory_bytes;
  if (plan.second_process_pool_bytes) j["second_process_pool_bytes"] = *plan.second_process_pool_bytes;
  j["variables"] = variables;
  j["consequences"] = plan.consequences;
  j["warnings"] = plan.warnings;
  return j;
}

namespace {

void print_table(std::ostream& out, const XlaAllocatorPlan& plan, std::string_view capacity_source) {
  auto row = [&](std::string_view key, const std::string& value) {
    out << fmt::format("  {:<30} {}\n", key, value);
  };
  out << "memfit env: what JAX 0.11 will do with the XLA variables in force\n\n";
  row("allocator", plan.allocator_name.empty() ? plan.allocator
                                               : fmt::format("{} ({})", plan.allocator, plan.allocator_name));
  row("preallocate", plan.preallocate ? "yes, the whole pool at the first allocation" : "no");
  row("memory fraction",
      fmt::format("{} ({})", plan.config.memory_fraction,
                  plan.config.fraction_variable.empty() ? "default" : plan.config.fraction_variable));
  row("capacity",
      fmt::format("{} ({} B, {})", format_bytes(plan.capacity_bytes), plan.capacity_bytes, capacity_source));
  row("limit", plan.limit_bytes
                   ? fmt::format("{} ({} B), {}", format_bytes(*plan.limit_bytes), *plan.limit_bytes,
                                 plan.limit_enforced ? "enforced" : "NOT enforced")
                   : std::string("none (no pool)"));
  row("reserved at first allocation", format_bytes(plan.reserved_at_first_allocation_bytes));
  if (plan.config.collective_memory_bytes != 0)
    row("collective memory", format_bytes(plan.config.collective_memory_bytes));
  out << "\nWhat happens:\n";
  for (const std::string& c : plan.consequences) out << "  - " << c << "\n";
  if (!plan.warnings.empty()) {
    out << "\nWarnings:\n";
    for (const std::string& w : plan.warnings) out << "  ! " << w << "\n";
  }
}

}  // namespace

Action add_env_command(CLI::App& app, Io& io) {
  auto options = std::make_shared<EnvOptions>();
  app.add_option("--capacity", options->capacity,
                 "Device memory in bytes (150109880320, 80GiB) or a device name (h100, h200, a100-80gb, "
                 "a100-40gb); default: the GPU present");
  app.add_flag("--json", options->json, "Print one JSON object");
  return [options, &io]() -> int {
    auto config = parse_xla_allocator_env(io.env);
    if (!config.ok()) return fail(io, config.error());
    uint64_t capacity_bytes = 0;
    std::string source;
    if (!options->capacity.empty()) {
      auto parsed = parse_capacity(options->capacity);
      if (!parsed.ok()) return fail(io, parsed.error().with_context("--capacity"));
      capacity_bytes = *parsed;
      source = "--capacity";
    } else {
      auto gpu = query_cuda_device(0);
      if (!gpu.ok()) {
        return fail(
            io, invalid_argument(fmt::format(
                    "the device capacity is needed: pass --capacity BYTES (for example --capacity h200 or "
                    "--capacity 80GiB), or run where a GPU is visible ({})",
                    gpu.error().message())));
      }
      capacity_bytes = gpu->total_bytes;
      source = fmt::format("GPU 0: {}", gpu->name);
    }
    const XlaAllocatorPlan plan = plan_xla_allocator(*config, capacity_bytes);
    if (options->json) {
      io.out << json_to_output(env_to_json(plan, io.env, source));
    } else {
      print_table(io.out, plan, source);
    }
    return kExitOk;
  };
}

}  // namespace memfit::cli
