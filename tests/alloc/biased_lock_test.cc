// The BFC pool's biased lock (src/alloc/biased_lock.h): mutual exclusion through the owner's plain-store
// entry, the revocation by a second thread, and after it. Each critical section checks that nobody else is
// inside (an exchange on `inside`), so an overlap is counted, not merely likely to corrupt a sum.
#include "../../src/alloc/biased_lock.h"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

namespace memfit::detail {
namespace {

struct Guarded {
  BiasedLock lock;
  std::atomic<bool> inside{false};
  std::atomic<int> overlaps{0};
  uint64_t count = 0;  // plain: only ever touched under the lock

  void enter_and_count() {
    std::lock_guard<BiasedLock> hold(lock);
    if (inside.exchange(true, std::memory_order_relaxed)) overlaps.fetch_add(1);
    const uint64_t seen = count;
    for (int i = 0; i < 4; ++i) SpinLock::pause();  // widen the window an overlap would need
    count = seen + 1;
    inside.store(false, std::memory_order_relaxed);
  }
};

TEST(BiasedLock, TheFirstThreadTakesTheBiasWhereTheFenceExists) {
  Guarded g;
  for (int i = 0; i < 1000; ++i) g.enter_and_count();
  EXPECT_EQ(g.count, 1000u);
  // Where membarrier is usable (Linux, not under ThreadSanitizer) the owner now enters with plain stores;
  // elsewhere the lock is never biased and every entry takes the spin lock.
  EXPECT_EQ(g.lock.biased(), asymmetric_fence_available());
}

TEST(BiasedLock, ASecondThreadRevokesTheBiasAndBothStayExclusive) {
  // Many fresh locks, each biased to this thread, which keeps entering until B is done: B's first entry
  // (the revocation) and its later ones all race the owner's entries.
  constexpr int kRounds = 300;
  constexpr int kEntries = 2000;
  for (int round = 0; round < kRounds; ++round) {
    Guarded g;
    g.enter_and_count();  // the bias
    std::atomic<bool> b_done{false};
    std::thread b([&] {
      for (int i = 0; i < kEntries; ++i) g.enter_and_count();
      b_done.store(true);
    });
    uint64_t mine = 0;
    for (; !b_done.load() || mine < kEntries; ++mine) g.enter_and_count();
    b.join();
    ASSERT_EQ(g.overlaps.load(), 0) << "round " << round;
    ASSERT_EQ(g.count, 1u + mine + kEntries) << "round " << round;
    EXPECT_FALSE(g.lock.biased());
  }
}

TEST(BiasedLock, FourThreadsAfterTheOwnerLeft) {
  Guarded g;
  std::thread([&] { g.enter_and_count(); }).join();  // the owner exits holding nothing
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 20000; ++i) g.enter_and_count();
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(g.overlaps.load(), 0);
  EXPECT_EQ(g.count, 1u + 4 * 20000);
  EXPECT_FALSE(g.lock.biased());
}

}  // namespace
}  // namespace memfit::detail
