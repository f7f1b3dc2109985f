// src/alloc/biased_lock.h - the BFC pool's lock: free of atomic read-modify-writes while one thread uses it.
//
// Why: a shared allocator must lock, and every lock acquisition is a locked instruction (xchg/cmpxchg) that
// drains the store buffer. On an H200 host's Xeon those two per alloc+free pair were most of the gap between
// a pool hit and glibc's malloc, whose per-thread cache takes no lock at all. Most users of one pool are one
// thread at a time (the replay tool, a training loop's host thread), so the lock is biased, as HotSpot's
// monitors were: the first thread to take it becomes its owner and from then on enters with a plain store
// and a plain load (owner_busy_ = true; is revoked_ still false?).
//
// Another thread revokes the bias for good the first time it locks: it takes the inner spin lock, sets
// revoked_, and issues membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED), a full memory barrier on every running
// thread of the process (the asymmetric Dekker of liburcu and folly's asymmetric fence). After it, either
// the owner's busy flag is visible (the revoker waits for the owner to leave) or the owner's next check sees
// revoked_ (it takes the inner lock like everyone else). Then the lock is the plain SpinLock plus one
// predictable branch. Where membarrier is missing (not Linux, seccomp) or under ThreadSanitizer (which cannot
// see the kernel's barrier), the lock is never biased.
#pragma once

#include <pthread.h>

#include <atomic>
#include <cstdint>

#include "spin_lock.h"

namespace memfit::detail {

// Registers this process for membarrier's private expedited barrier (once); false where it cannot be used.
bool asymmetric_fence_available();
// A full memory barrier on every running thread of this process; only after asymmetric_fence_available().
void asymmetric_fence_heavy();

class BiasedLock {
 public:
  void lock() {
    if (owner_.load(std::memory_order_relaxed) == this_thread() &&
        !revoked_.load(std::memory_order_relaxed)) {
      owner_busy_.store(true, std::memory_order_relaxed);
      // Compiler-only: the CPU's store->load order is forced from the revoker's side
      // (asymmetric_fence_heavy).
      std::atomic_signal_fence(std::memory_order_seq_cst);
      if (!revoked_.load(std::memory_order_relaxed)) {
        entered_by_bias_ = true;
        return;
      }
      owner_busy_.store(false, std::memory_order_release);
    }
    inner_.lock();
    if (!revoked_.load(std::memory_order_relaxed)) settle_bias();  // at most twice in the lock's life
    // Only now: until settle_bias() has waited for the owner to leave, the owner may still read this.
    entered_by_bias_ = false;
  }

  void unlock() {
    if (entered_by_bias_) {
      owner_busy_.store(false, std::memory_order_release);
    } else {
      inner_.unlock();
    }
  }

  // True while one thread holds the bias (for tests).
  bool biased() const {
    const uint64_t owner = owner_.load(std::memory_order_relaxed);
    return owner != 0 && owner != kNobody && !revoked_.load(std::memory_order_relaxed);
  }

 private:
  static constexpr uint64_t kNobody = ~uint64_t{0};  // a thread's id is an address: never this
  // Unique among live threads: the thread pointer (one instruction where the compiler has it; glibc's
  // pthread_self() returns the same address, through a call).
  static uint64_t this_thread() {
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__aarch64__))
    return reinterpret_cast<uint64_t>(__builtin_thread_pointer());
#else
    return static_cast<uint64_t>(pthread_self());
#endif
  }
  // Holding inner_ while the bias stands: the first thread takes it, any other revokes it.
  [[gnu::noinline]] void settle_bias();

  SpinLock inner_;                       // every entry that is not the owner's
  std::atomic<uint64_t> owner_{0};       // pthread_self() of the thread that holds the bias; 0: none yet
  std::atomic<bool> owner_busy_{false};  // written by the owner alone
  std::atomic<bool> revoked_{false};     // once true, true for good
  bool entered_by_bias_ = false;         // how the holder entered; touched only by the holder
};

}  // namespace memfit::detail
