// Memory of the planner on a module ten times the real GPT step (14.9 MB of text): it must stay under ten
// times the text. Every allocation is counted by replacing the global operator new. (Speed is measured by
// bench/plan_bench.cc, not here.)
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>

#include "memfit/core/file_io.h"
#include "memfit/plan/hlo_plan.h"
#include "scaled_hlo.h"

namespace {
std::atomic<size_t> g_live{0};
std::atomic<size_t> g_peak{0};
}  // namespace

namespace {
void* counted_new(size_t n) noexcept {
  // Each block carries its size in front so delete can subtract it.
  auto* p = static_cast<size_t*>(std::malloc(n + 16));
  if (p == nullptr) return nullptr;
  *p = n;
  const size_t live = g_live.fetch_add(n) + n;
  size_t peak = g_peak.load();
  while (live > peak && !g_peak.compare_exchange_weak(peak, live)) {
  }
  return reinterpret_cast<char*>(p) + 16;
}
void counted_delete(void* q) noexcept {
  if (q == nullptr) return;
  auto* p = reinterpret_cast<size_t*>(static_cast<char*>(q) - 16);
  g_live.fetch_sub(*p);
  std::free(p);
}
void* counted_new_or_throw(size_t n) {
  void* p = counted_new(n);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}
}  // namespace

// Every form the standard library uses, so no block is freed by a different allocator than made it
// (std::stable_sort's buffer comes from the nothrow form).
void* operator new(size_t n) { return counted_new_or_throw(n); }
void* operator new[](size_t n) { return counted_new_or_throw(n); }
void* operator new(size_t n, const std::nothrow_t&) noexcept { return counted_new(n); }
void* operator new[](size_t n, const std::nothrow_t&) noexcept { return counted_new(n); }
void operator delete(void* q) noexcept { counted_delete(q); }
void operator delete[](void* q) noexcept { counted_delete(q); }
void operator delete(void* q, size_t) noexcept { counted_delete(q); }
void operator delete[](void* q, size_t) noexcept { counted_delete(q); }
void operator delete(void* q, const std::nothrow_t&) noexcept { counted_delete(q); }
void operator delete[](void* q, const std::nothrow_t&) noexcept { counted_delete(q); }

namespace memfit {
namespace {

TEST(PlanScale, TenTimesTheGptModuleStaysUnderTenTimesItsText) {
  auto real = read_file(std::string(MEMFIT_TEST_DATA_DIR) + "/xla/gpt_fp32_donate.hlo.txt.gz");
  ASSERT_TRUE(real.ok());
  const std::string text = testing::scaled_module(*real, 10);
  ASSERT_GT(text.size(), 9 * real->size());
  const size_t before = g_live.load();
  g_peak.store(before);
  auto module = parse_hlo_module(text);
  ASSERT_TRUE(module.ok()) << module.error().message();
  auto plan = plan_hlo(*module);
  ASSERT_TRUE(plan.ok()) << plan.error().message();
  const size_t used = g_peak.load() - before;
  std::printf("text %zu B, planner peak heap %zu B (%.2fx)\n", text.size(), used,
              static_cast<double>(used) / static_cast<double>(text.size()));
  EXPECT_LT(used, 10 * text.size());
  // Ten steps in a row need no more temp than one step plus the copies of its arguments.
  EXPECT_GT(plan->temp_bytes, 16000000000u);
  EXPECT_LT(plan->temp_bytes, 16131614744u + 2 * plan->argument_bytes);
}

}  // namespace
}  // namespace memfit
