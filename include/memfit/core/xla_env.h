// memfit/core/xla_env.h - the XLA/JAX allocator variables, applied exactly as JAX 0.11 applies them.
//
// Glossary (used across memfit):
//   capacity  - total device memory as CUDA reports it (cudaMemGetInfo total; 150109880320 B on an H200).
//   pool      - device memory an allocator has reserved from the driver (what nvidia-smi shows).
//   in use    - bytes of the pool handed to live buffers (BFC counts whole chunks, so 256-B rounded).
//   limit     - the most the allocator may ever reserve (`bytes_limit` in `Device.memory_stats()`).
//
// Sources: jaxlib/xla_client.py (variable names and parsing), xla/pjrt/gpu (allocator config), and the
// observations of ../shared/FACTS.md §1 on an H200 with jaxlib 0.11.2.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "memfit/core/environment.h"
#include "memfit/core/status.h"

namespace memfit {

enum class XlaAllocatorKind { kDefault, kBfc, kPlatform, kCudaAsync, kVmm, kAddress };

std::string_view xla_allocator_kind_name(XlaAllocatorKind kind);

inline constexpr double kXlaDefaultMemoryFraction = 0.75;
inline constexpr uint64_t kBfcMinAllocationBytes = 256;          // every BFC request is rounded up to this
inline constexpr uint64_t kBfcLimitAlignmentBytes = 2ull << 20;  // bytes_limit is rounded up to 2 MiB
inline constexpr uint64_t kBfcFirstRegionBytes = 2ull << 20;     // growth starts with a 2 MiB region
// Observed on the H200: a JAX process holds ~550 MiB of CUDA context beyond its pool.
inline constexpr uint64_t kCudaContextBytes = 550ull << 20;

// The variables as read, before they are applied to a device.
struct XlaAllocatorConfig {
  XlaAllocatorKind kind = XlaAllocatorKind::kDefault;
  bool kind_from_tf_gpu_allocator = false;  // TF_GPU_ALLOCATOR=cuda_malloc_async chose the async pool
  bool preallocate = true;
  double memory_fraction = kXlaDefaultMemoryFraction;
  std::string fraction_variable;  // the variable that set the fraction; empty = the default
  uint64_t collective_memory_bytes = 0;
  bool unified_memory = false;        // TF_FORCE_UNIFIED_MEMORY
  std::vector<std::string> warnings;  // traps seen while reading the variables
};

// Reads XLA_PYTHON_CLIENT_ALLOCATOR, TF_GPU_ALLOCATOR, XLA_PYTHON_CLIENT_PREALLOCATE,
// XLA_CLIENT_MEM_FRACTION / XLA_PYTHON_CLIENT_MEM_FRACTION, XLA_PYTHON_CLIENT_COLLECTIVE_MEM_SIZE_MB and
// TF_FORCE_UNIFIED_MEMORY. Values JAX rejects are errors here too (kInvalidArgument).
Expected<XlaAllocatorConfig> parse_xla_allocator_env(const Environment& env);

// XLA's BFC rules, shared by the prediction below and by the BfcAllocator.
uint64_t bfc_round_bytes(uint64_t size_bytes);
// bytes_limit = fraction x total, rounded up to 2 MiB.
uint64_t bfc_memory_limit(double fraction, uint64_t total_bytes);
// A pool's share of the device as a planner takes it: above 0 and at most 1 (kInvalidArgument otherwise, NaN
// included). Above 1 a pool is the whole device at most - the XLA variables' reading says so for itself.
Status validate_pool_fraction(double fraction);
// When the driver refuses a region, XLA retries at 0.9x (computed in float, as XLA does), 256-B rounded.
uint64_t bfc_backpedal_bytes(uint64_t size_bytes);

// What the process will do at its first allocation on a device of `capacity_bytes`.
struct XlaAllocatorPlan {
  XlaAllocatorConfig config;
  std::string allocator;       // "bfc", "platform", "cuda_async", "vmm"
  std::string allocator_name;  // as XLA names it in logs and OOM texts: "GPU_0_bfc", "SE_0_space_0", ...
  bool preallocate = false;    // whether the pool is reserved whole at the first allocation
  uint64_t capacity_bytes = 0;
  std::optional<uint64_t> limit_bytes;  // absent for the platform allocator (no pool, no limit)
  bool limit_enforced = false;
  uint64_t reserved_at_first_allocation_bytes = 0;
  // A second process with the same settings on the same device: the pool it would really get.
  std::optional<uint64_t> second_process_pool_bytes;
  std::vector<std::string> consequences;  // one human sentence each
  std::vector<std::string> warnings;
};

XlaAllocatorPlan plan_xla_allocator(const XlaAllocatorConfig& config, uint64_t capacity_bytes);

}  // namespace memfit
