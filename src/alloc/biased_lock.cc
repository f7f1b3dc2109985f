#include "biased_lock.h"

#include <cstdio>
#include <cstdlib>
#include <thread>

#if defined(__linux__)
#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#if defined(__SANITIZE_THREAD__)
#define MEMFIT_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define MEMFIT_TSAN 1
#endif
#endif

namespace memfit::detail {

#if defined(__linux__) && !defined(MEMFIT_TSAN)
namespace {
long membarrier(int command) { return syscall(__NR_membarrier, command, 0, 0); }
}  // namespace

bool asymmetric_fence_available() {
  static const bool available = [] {
    const long commands = membarrier(MEMBARRIER_CMD_QUERY);
    if (commands < 0 || (commands & MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0) return false;
    if (membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) != 0) return false;
    return membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0;  // it works now, so it works later
  }();
  return available;
}

void asymmetric_fence_heavy() {
  // Registered and tried once (asymmetric_fence_available), and a fork keeps the registration: a failure
  // here would leave mutual exclusion unproven, so it stops the process rather than corrupt the pool.
  if (membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) != 0) {
    std::fputs("memfit: membarrier(PRIVATE_EXPEDITED) failed after it had worked; stopping\n", stderr);
    std::abort();
  }
}
#else
bool asymmetric_fence_available() { return false; }
void asymmetric_fence_heavy() {}
#endif

void BiasedLock::settle_bias() {
  const uint64_t owner = owner_.load(std::memory_order_relaxed);
  if (owner == 0) {
    // The first thread to lock takes the bias (from its next entry on) where the heavy fence exists to
    // revoke it; otherwise the lock is never biased.
    if (asymmetric_fence_available()) {
      owner_.store(this_thread(), std::memory_order_relaxed);
    } else {
      revoked_.store(true, std::memory_order_relaxed);
      owner_.store(kNobody, std::memory_order_relaxed);
    }
    return;
  }
  // Another thread (the owner itself only gets here once revoked_ is set): revoke the bias for good. After
  // the fence the owner either shows busy (wait for it to leave) or sees revoked_ at its next entry.
  revoked_.store(true, std::memory_order_seq_cst);
  asymmetric_fence_heavy();
  for (int spins = 0; owner_busy_.load(std::memory_order_acquire); ++spins) {
    if (spins < 64) {
      SpinLock::pause();
    } else {
      std::this_thread::yield();  // the owner may have been preempted inside
    }
  }
}

}  // namespace memfit::detail
