// The XLA variables, checked against what JAX 0.11.2 did on an H200 (../shared/FACTS.md §1).
#include "memfit/core/xla_env.h"

#include <gtest/gtest.h>

namespace memfit {
namespace {

constexpr uint64_t kH200 = 150109880320;

XlaAllocatorPlan plan_for(std::map<std::string, std::string, std::less<>> vars, uint64_t capacity = kH200) {
  auto config = parse_xla_allocator_env(Environment(std::move(vars)));
  EXPECT_TRUE(config.ok()) << (config.ok() ? "" : config.error().message());
  return plan_xla_allocator(config.ok() ? *config : XlaAllocatorConfig{}, capacity);
}

std::string error_for(std::map<std::string, std::string, std::less<>> vars) {
  auto config = parse_xla_allocator_env(Environment(std::move(vars)));
  EXPECT_FALSE(config.ok());
  return config.ok() ? "" : config.error().message();
}

bool any_contains(const std::vector<std::string>& lines, std::string_view needle) {
  for (const auto& l : lines) {
    if (l.find(needle) != std::string::npos) return true;
  }
  return false;
}

TEST(XlaEnv, DefaultIsAPreallocatedBfcPoolOfThreeQuarters) {
  const XlaAllocatorPlan plan = plan_for({});
  EXPECT_EQ(plan.allocator, "bfc");
  EXPECT_EQ(plan.allocator_name, "GPU_0_bfc");
  EXPECT_TRUE(plan.preallocate);
  EXPECT_EQ(plan.limit_bytes, 112583507968u);  // observed bytes_limit
  EXPECT_EQ(plan.reserved_at_first_allocation_bytes, 112583507968u);
  EXPECT_TRUE(plan.limit_enforced);
  EXPECT_TRUE(
      any_contains(plan.consequences, "reserves 104.85GiB of 139.80GiB (75.0%) at the first allocation"));
}

TEST(XlaEnv, LimitIsFractionOfTotalRoundedUpTo2MiB) {
  EXPECT_EQ(bfc_memory_limit(0.75, kH200), 112583507968u);
  EXPECT_EQ(bfc_memory_limit(0.30, kH200), 45034242048u);
  EXPECT_EQ(bfc_memory_limit(0.45, kH200), 67551363072u);
  EXPECT_EQ(plan_for({{"XLA_PYTHON_CLIENT_MEM_FRACTION", "0.30"}}).limit_bytes, 45034242048u);
  EXPECT_EQ(plan_for({{"XLA_CLIENT_MEM_FRACTION", "0.45"}}).limit_bytes, 67551363072u);
}

TEST(XlaEnv, PreallocateOffOnlyForExactSpellings) {
  for (auto off : {"false", "False", "0"}) {
    const auto plan = plan_for({{"XLA_PYTHON_CLIENT_PREALLOCATE", off}});
    EXPECT_FALSE(plan.preallocate) << off;
    EXPECT_EQ(plan.limit_bytes, 112583507968u) << off;  // same limit, growing pool
    EXPECT_EQ(plan.reserved_at_first_allocation_bytes, 0u);
  }
  for (auto on : {"FALSE", "no", "true", "1"}) {
    EXPECT_TRUE(plan_for({{"XLA_PYTHON_CLIENT_PREALLOCATE", on}}).preallocate) << on;
  }
  EXPECT_TRUE(any_contains(plan_for({{"XLA_PYTHON_CLIENT_PREALLOCATE", "FALSE"}}).warnings,
                           "leaves preallocation ON"));
}

TEST(XlaEnv, CudaAsyncLimitIsExactAndNotEnforced) {
  for (auto vars :
       {std::map<std::string, std::string, std::less<>>{{"XLA_PYTHON_CLIENT_ALLOCATOR", "cuda_async"}},
        std::map<std::string, std::string, std::less<>>{{"TF_GPU_ALLOCATOR", "cuda_malloc_async"}}}) {
    const auto plan = plan_for(vars);
    EXPECT_EQ(plan.allocator, "cuda_async");
    EXPECT_EQ(plan.limit_bytes, 112582410240u);  // observed: exactly 0.75 x total
    EXPECT_FALSE(plan.limit_enforced);
    EXPECT_TRUE(any_contains(plan.warnings, "does not enforce its limit"));
  }
}

TEST(XlaEnv, ExplicitAllocatorBeatsTfGpuAllocator) {
  const auto plan =
      plan_for({{"XLA_PYTHON_CLIENT_ALLOCATOR", "bfc"}, {"TF_GPU_ALLOCATOR", "cuda_malloc_async"}});
  EXPECT_EQ(plan.allocator, "bfc");
  EXPECT_TRUE(any_contains(plan.warnings, "overridden"));
}

TEST(XlaEnv, PlatformHasNoPoolAndNoLimit) {
  for (auto kind : {"platform", "address", "PLATFORM"}) {
    const auto plan = plan_for({{"XLA_PYTHON_CLIENT_ALLOCATOR", kind}});
    EXPECT_EQ(plan.allocator, "platform") << kind;
    EXPECT_FALSE(plan.limit_bytes.has_value());
    EXPECT_FALSE(plan.preallocate);
    EXPECT_EQ(plan.reserved_at_first_allocation_bytes, 0u);
  }
}

TEST(XlaEnv, VmmIsCappedButNotPreallocated) {
  const auto plan = plan_for({{"XLA_PYTHON_CLIENT_ALLOCATOR", "vmm"}, {"XLA_CLIENT_MEM_FRACTION", "0.5"}});
  EXPECT_EQ(plan.allocator, "vmm");
  EXPECT_FALSE(plan.preallocate);
  EXPECT_EQ(plan.limit_bytes, kH200 / 2);
}

TEST(XlaEnv, SecondProcessGetsTheBackedOffPool) {
  // Observed: the second default process logged a refused 61.91GiB (66479423488 bytes) region, the
  // fifth 0.9x step, and ran with a pool of 35330719744 bytes.
  uint64_t bytes = 112583507968;
  for (int i = 0; i < 5; ++i) bytes = bfc_backpedal_bytes(bytes);
  EXPECT_EQ(bytes, 66479423488u);
  const auto plan = plan_for({});
  ASSERT_TRUE(plan.second_process_pool_bytes.has_value());
  const double observed = 35330719744.0;
  EXPECT_NEAR(static_cast<double>(*plan.second_process_pool_bytes), observed, observed * 0.001);
  EXPECT_TRUE(any_contains(plan.warnings, "several processes on one GPU"));
  // With a fraction of 0.45 both processes fit: no warning.
  EXPECT_FALSE(plan_for({{"XLA_CLIENT_MEM_FRACTION", "0.45"}}).second_process_pool_bytes.has_value());
}

TEST(XlaEnv, DeprecatedNameWarnsAndBothNamesAreAnError) {
  EXPECT_TRUE(any_contains(plan_for({{"XLA_PYTHON_CLIENT_MEM_FRACTION", "0.5"}}).warnings, "deprecated"));
  EXPECT_NE(
      error_for({{"XLA_PYTHON_CLIENT_MEM_FRACTION", "0.5"}, {"XLA_CLIENT_MEM_FRACTION", "0.5"}}).find("both"),
      std::string::npos);
}

TEST(XlaEnv, BadValuesAreErrors) {
  EXPECT_NE(error_for({{"XLA_PYTHON_CLIENT_ALLOCATOR", "foo"}}).find("'foo' is not an allocator"),
            std::string::npos);
  EXPECT_NE(error_for({{"XLA_CLIENT_MEM_FRACTION", "abc"}}).find("not a number"), std::string::npos);
  EXPECT_NE(error_for({{"XLA_CLIENT_MEM_FRACTION", "-1"}}).find("greater than 0"), std::string::npos);
  EXPECT_NE(error_for({{"XLA_CLIENT_MEM_FRACTION", "0"}}).find("greater than 0"), std::string::npos);
  EXPECT_NE(error_for({{"XLA_CLIENT_MEM_FRACTION", "nan"}}).find("greater than 0"), std::string::npos);
  EXPECT_NE(error_for({{"XLA_CLIENT_MEM_FRACTION", "0.5x"}}).find("not a number"), std::string::npos);
  EXPECT_NE(error_for({{"XLA_PYTHON_CLIENT_COLLECTIVE_MEM_SIZE_MB", "-3"}}).find("whole number"),
            std::string::npos);
}

TEST(XlaEnv, FractionAboveOneWarnsUnlessUnifiedMemory) {
  EXPECT_TRUE(
      any_contains(plan_for({{"XLA_CLIENT_MEM_FRACTION", "1.5"}}).warnings, "more than the device has"));
  const auto unified = plan_for({{"XLA_CLIENT_MEM_FRACTION", "1.5"}, {"TF_FORCE_UNIFIED_MEMORY", "1"}});
  EXPECT_FALSE(any_contains(unified.warnings, "more than the device has"));
  EXPECT_EQ(unified.limit_bytes, bfc_memory_limit(1.5, kH200));
  EXPECT_EQ(unified.reserved_at_first_allocation_bytes, unified.limit_bytes);  // unified memory holds it
}

// Preallocating 1.5x the device: the driver refuses the pool and the BFC allocator backs off by 0.9x until a
// region is granted, so what the process reserves is that region - under what the device has left after the
// CUDA context - not the 1.5x it said it held (it printed 'reserves 157% of the device').
TEST(XlaEnv, AFractionAboveOneReservesWhatTheDriverGrants) {
  const auto plan = plan_for({{"XLA_CLIENT_MEM_FRACTION", "1.5"}});
  ASSERT_TRUE(plan.limit_bytes.has_value());
  EXPECT_EQ(*plan.limit_bytes, bfc_memory_limit(1.5, kH200));
  uint64_t expected = *plan.limit_bytes;
  while (expected > kH200 - kCudaContextBytes) expected = bfc_backpedal_bytes(expected);
  EXPECT_EQ(plan.reserved_at_first_allocation_bytes, expected);
  EXPECT_LE(plan.reserved_at_first_allocation_bytes, kH200 - kCudaContextBytes);
  EXPECT_GT(plan.reserved_at_first_allocation_bytes, (kH200 - kCudaContextBytes) / 10 * 9 - (1u << 20));
  EXPECT_TRUE(any_contains(plan.consequences, "is refused, and backs off by 0.9x"));
  EXPECT_FALSE(any_contains(plan.consequences, "(150.0%)"));
  // Below 1 the pool is reserved whole, as observed (0.75 above).
  EXPECT_EQ(plan_for({{"XLA_CLIENT_MEM_FRACTION", "0.95"}}).reserved_at_first_allocation_bytes,
            bfc_memory_limit(0.95, kH200));
}

TEST(XlaEnv, CollectiveMemory) {
  const auto plan = plan_for({{"XLA_PYTHON_CLIENT_COLLECTIVE_MEM_SIZE_MB", "512"}});
  EXPECT_EQ(plan.config.collective_memory_bytes, 512u << 20);
  EXPECT_TRUE(any_contains(plan.consequences, "512.00MiB for collectives"));
}

TEST(XlaEnv, RoundBytes) {
  EXPECT_EQ(bfc_round_bytes(1), 256u);
  EXPECT_EQ(bfc_round_bytes(256), 256u);
  EXPECT_EQ(bfc_round_bytes(257), 512u);
  EXPECT_EQ(bfc_round_bytes(67550089216), 67550089216u);
}

TEST(Environment, ParsesProcEnvironBlocks) {
  const std::string block("A=1\0XLA_CLIENT_MEM_FRACTION=0.3\0BROKEN\0EMPTY=\0", 45);
  const Environment env = Environment::from_environ_block(block);
  EXPECT_EQ(env.get("A"), "1");
  EXPECT_EQ(env.get("XLA_CLIENT_MEM_FRACTION"), "0.3");
  EXPECT_EQ(env.get("EMPTY"), "");
  EXPECT_FALSE(env.get("BROKEN").has_value());
}

}  // namespace
}  // namespace memfit

namespace memfit {
namespace {

// jaxlib 0.11 reads the fraction with Python's float() and tests `if memory_fraction:`.
TEST(XlaEnv, FractionAsJaxlibReadsIt) {
  EXPECT_EQ(plan_for({{"XLA_CLIENT_MEM_FRACTION", ""}}).limit_bytes, 112583507968u);  // empty = unset
  EXPECT_EQ(plan_for({{"XLA_CLIENT_MEM_FRACTION", " +0.3_0 "}}).limit_bytes, 45034242048u);
  // Both set but one empty: only one counts, so JAX does not refuse.
  EXPECT_EQ(
      plan_for({{"XLA_CLIENT_MEM_FRACTION", "0.30"}, {"XLA_PYTHON_CLIENT_MEM_FRACTION", ""}}).limit_bytes,
      45034242048u);
  for (const char* form : {"0.75-0.75", "0.75+", "0.5-0.9", "75%", "0._5", "_0.5"}) {
    EXPECT_NE(error_for({{"XLA_CLIENT_MEM_FRACTION", form}}).find("falls back to the CPU"), std::string::npos)
        << form;
  }
  EXPECT_NE(error_for({{"XLA_CLIENT_MEM_FRACTION", "1e9"}}).find("overflows"), std::string::npos);
  EXPECT_NE(error_for({{"XLA_CLIENT_MEM_FRACTION", "nan"}}).find("greater than 0"), std::string::npos);
}

TEST(XlaEnv, LimitsSaturateInsteadOfWrapping) {
  EXPECT_EQ(bfc_memory_limit(1000.0, ~uint64_t{0}),
            ~uint64_t{0} / kBfcLimitAlignmentBytes * kBfcLimitAlignmentBytes);
  EXPECT_EQ(bfc_memory_limit(0.75, 0), 0u);
}

}  // namespace
}  // namespace memfit
