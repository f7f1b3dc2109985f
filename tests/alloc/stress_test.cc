// Random walks that write and verify fill patterns through a host-backed simulated device (STYLE.md 7):
// one thread for >= 10^6 operations per allocator, and several threads sharing one allocator (run under
// TSan).
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <thread>

#include "allocator_kinds.h"

namespace memfit::testing {
namespace {

struct Block {
  unsigned char* ptr;
  uint64_t size;
  uint8_t pattern;
};

// Writes the pattern into the first and last 64 bytes (and all of a small block).
void fill(const Block& b) {
  const uint64_t head = std::min<uint64_t>(b.size, 64);
  std::memset(b.ptr, b.pattern, head);
  std::memset(b.ptr + b.size - head, b.pattern, head);
}

bool intact(const Block& b) {
  const uint64_t head = std::min<uint64_t>(b.size, 64);
  for (uint64_t i = 0; i < head; ++i) {
    if (b.ptr[i] != b.pattern || b.ptr[b.size - 1 - i] != b.pattern) return false;
  }
  return true;
}

// Sizes log-uniform from 1 B to 256 KiB, like a mix of scalars and activations.
uint64_t random_size(std::mt19937_64& rng) {
  const int bits = static_cast<int>(rng() % 18);
  return 1 + rng() % (uint64_t{1} << bits);
}

template <typename Kind>
void random_walk(Allocator& a, uint64_t operations, uint64_t seed, int max_live) {
  std::mt19937_64 rng(seed);
  std::vector<Block> live;
  for (uint64_t op = 0; op < operations; ++op) {
    const bool do_alloc = live.empty() || (static_cast<int>(live.size()) < max_live && rng() % 2 == 0);
    if (do_alloc) {
      const uint64_t size = random_size(rng);
      auto p = a.allocate(size);
      if (!p.ok()) {
        ASSERT_EQ(p.error().code(), ErrorCode::kResourceExhausted);
        continue;
      }
      Block b{static_cast<unsigned char*>(*p), size, static_cast<uint8_t>(rng())};
      fill(b);
      live.push_back(b);
    } else {
      const size_t i = rng() % live.size();
      ASSERT_TRUE(intact(live[i])) << "pattern of a live block was overwritten at op " << op;
      ASSERT_TRUE(a.deallocate(live[i].ptr).ok());
      live[i] = live.back();
      live.pop_back();
    }
  }
  for (const Block& b : live) {
    ASSERT_TRUE(intact(b));
    ASSERT_TRUE(a.deallocate(b.ptr).ok());
  }
}

template <typename Kind>
class AllocatorStress : public ::testing::Test {};
using Kinds = ::testing::Types<BfcPreallocated, BfcGrowth, Platform, Vmm>;
TYPED_TEST_SUITE(AllocatorStress, Kinds);

TYPED_TEST(AllocatorStress, OneMillionOperationsKeepEveryPattern) {
  auto device = host_backed_device(512ull << 20);
  auto a = TypeParam::make(*device, 128ull << 20);
  random_walk<TypeParam>(*a, 1'000'000, 42, 2000);
  const AllocatorStats s = a->stats();
  EXPECT_EQ(s.bytes_in_use, 0u);
  EXPECT_GT(s.num_allocs, 400'000u);
}

TYPED_TEST(AllocatorStress, ThreadsSharingOneAllocator) {
  auto device = host_backed_device(512ull << 20);
  auto a = TypeParam::make(*device, 256ull << 20);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] { random_walk<TypeParam>(*a, 50'000, 1000 + t, 300); });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(a->stats().bytes_in_use, 0u);
}

}  // namespace
}  // namespace memfit::testing
