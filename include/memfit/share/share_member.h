// memfit/share/share_member.h - this process's membership in a lease group (memfit/share/share_group.h).
//
// A member is made when an allocator is made for a device under MEMFIT_SHARE=NAME. Its pool grows through
// grow_pool() (called before each reservation from the device; it is the only call that may wait) and
// shrinks through shrink_pool(). A pool hit never calls it: leases change only when a pool grows or gives
// memory back. A background agent answers other members' demands (giving back unused lease, then asking
// the allocator to release free regions) and publishes the allocator's figures, every `tick`.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "memfit/core/environment.h"
#include "memfit/core/status.h"
#include "memfit/share/share_group.h"

namespace memfit {

struct ShareMemberOptions {
  std::string group;  // MEMFIT_SHARE
  int device = 0;
  // The group's capacity, used only by the member that makes the table; later members take the table's.
  uint64_t capacity_bytes = 0;
  std::string device_name;
  uint64_t limit_bytes = 0;  // this member's allocator limit (bytes_limit before sharing); required
  uint32_t weight = 1;       // MEMFIT_SHARE_WEIGHT
  uint64_t quota_bytes = 0;  // MEMFIT_SHARE_QUOTA; 0 = none
  // How long a growth waits for other members to give memory back before it fails (MEMFIT_SHARE_WAIT).
  std::chrono::milliseconds wait{2000};
  std::chrono::milliseconds tick{10};
};

// The group settings of the environment for `device`: nullopt-like empty `group` when MEMFIT_SHARE is unset.
// Capacity, device name and limit are left for the caller. Bad values are kInvalidArgument naming the
// variable.
Expected<ShareMemberOptions> share_options_from_env(const Environment& env, int device);

class ShareMember {
 public:
  // Joins (making the table when it does not exist) and takes a lease of min(limit, free capacity); when
  // that is below its fair share, waits up to `wait` for members above theirs to give back.
  static Expected<std::unique_ptr<ShareMember>> join(ShareMemberOptions options);
  ~ShareMember();  // leaves: stops the agent and clears its row
  ShareMember(const ShareMember&) = delete;
  ShareMember& operator=(const ShareMember&) = delete;

  // What the allocator above offers the agent: its figures, and a way to give free pool memory back to the
  // device (whole regions; returns the bytes given back). Set once, before the first growth.
  struct Usage {
    uint64_t bytes_in_use = 0;
    uint64_t peak_bytes_in_use = 0;
  };
  struct Hooks {
    std::function<Usage()> usage;
    std::function<uint64_t(uint64_t wanted_bytes)> release_free;
  };
  void set_hooks(Hooks hooks);

  // Before reserving `size_bytes` more from the device: counts them in the pool, growing the lease from free
  // capacity or from members above their fair share. kResourceExhausted naming the group, and who holds
  // what, when it cannot.
  Status grow_pool(uint64_t size_bytes);
  // After giving `size_bytes` back to the device (or when a reservation counted by grow_pool failed).
  void shrink_pool(uint64_t size_bytes);

  // grow_pool and shrink_pool calls so far: a pool hit makes none (tests hold the allocators to that).
  uint64_t lease_operations() const;
  uint64_t lease_bytes() const;
  uint64_t pool_bytes() const;
  uint64_t capacity_bytes() const;
  // Free capacity the group could grant now without anyone giving back.
  uint64_t group_free_bytes() const;
  // What the pool could still grow by without anyone giving back: unused lease plus free capacity (what a
  // leased device reports as free).
  uint64_t headroom_bytes() const;
  const ShareMemberOptions& options() const;

  struct State;

 private:
  explicit ShareMember(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace memfit
