// src/alloc/spin_lock.h - the lock around an allocator's bookkeeping.
//
// Why not std::mutex: its unlock is an atomic read-modify-write (to find sleepers to wake), so an alloc+free
// pair pays four atomic operations; here unlock is a plain release store and the pair pays two (it took
// the BFC pool hit from ~5x glibc's malloc to ~3x before other changes; bench/alloc_bench.cc). It is
// only fit for critical sections of tens of nanoseconds that never block: waiters spin briefly, then yield
// the core, so a preempted holder is not spun against for a whole time slice. BasicLockable, so it works
// with std::lock_guard and std::condition_variable_any.
#pragma once

#include <atomic>
#include <thread>

namespace memfit::detail {

class SpinLock {
 public:
  // The uncontended case inline (one exchange); waiting out of line, so callers keep their registers.
  void lock() {
    if (locked_.exchange(true, std::memory_order_acquire)) [[unlikely]]
      lock_contended();
  }
  void unlock() { locked_.store(false, std::memory_order_release); }

 private:
  [[gnu::noinline, gnu::cold]] void lock_contended() {
    for (int spins = 0;; ++spins) {
      // Test before test-and-set: spin on a shared read, not on a cache-line-bouncing exchange.
      while (locked_.load(std::memory_order_relaxed)) {
        if (++spins < kSpinsBeforeYield) {
          pause();
        } else {
          std::this_thread::yield();
        }
      }
      if (!locked_.exchange(true, std::memory_order_acquire)) return;
    }
  }

  static constexpr int kSpinsBeforeYield = 64;
  static void pause() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
  }
  std::atomic<bool> locked_{false};
};

}  // namespace memfit::detail
