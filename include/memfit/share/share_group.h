// memfit/share/share_group.h - a lease group: several processes budgeting one device together.
//
// Why: two JAX processes on one GPU each ask for 75% of it; the second is refused, backs off and runs with a
// pool far smaller than the bytes_limit it reports (../shared/FACTS.md §1). A lease group makes the budget
// explicit: one table per device in shared memory (POSIX shm, /dev/shm/memfit-share-NAME-devN) lists the
// members and what each holds, and a member's pool grows only inside its lease.
//
// Glossary:
//   capacity   - what the group may hand out: the device's capacity (simulated), or what the driver said was
//                free when the group was made less kShareContextMarginBytes for the members' CUDA contexts;
//   lease      - what the group has promised a member: its pool may grow to it without asking anyone;
//   pool       - what the member has reserved from the device (<= lease);
//   fair share - a member's quota (MEMFIT_SHARE_QUOTA) or, for the others, the capacity left after quotas
//                split by weight (MEMFIT_SHARE_WEIGHT, default 1). A member that needs more than its lease
//                takes free capacity first; if that is not enough, members above their fair share give back
//                unused lease and then free pool regions (never memory in use) until the newcomer has its
//                fair share or nothing more can be freed.
//
// Safety: every change happens under flock() on the segment (the kernel drops it when a holder dies, so a
// member killed inside the table holds nothing) and only writes the member's own row; sums are derived from
// the rows each time, never cached, so a torn row of a dead member is reaped whole. A member whose process
// has gone (or is a zombie, or whose pid was reused: /proc/PID/stat start time) is reaped by the next table
// operation of anyone; each member's agent operates at least every 100 ms.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "memfit/core/status.h"

namespace memfit {

inline constexpr int kMaxShareMembers = 64;
// CUDA contexts of members that join after the group is made: ~550 MiB each on the H200 (FACTS.md §1),
// room for three more.
inline constexpr uint64_t kShareContextMarginBytes = 2ull << 30;
// A shared pool's regions: it can give memory back only as whole free regions, so a pool in a group is
// made of regions of at most this (a larger request gets a region of its own size).
inline constexpr uint64_t kShareRegionBytes = 2ull << 30;

// One member as read from the table.
struct ShareMemberInfo {
  int64_t pid = 0;
  std::string command;  // the process's name (comm) when it joined
  uint32_t weight = 1;
  uint64_t quota_bytes = 0;  // 0 = none
  uint64_t fair_share_bytes = 0;
  uint64_t limit_bytes = 0;  // the member's own allocator limit: its lease never exceeds it
  uint64_t lease_bytes = 0;
  uint64_t pool_bytes = 0;
  uint64_t bytes_in_use = 0;
  uint64_t peak_bytes_in_use = 0;
  uint64_t demand_bytes = 0;  // what it is waiting for now, beyond its lease
};

struct ShareGroupInfo {
  std::string name;
  int device = 0;
  std::string device_name;
  uint64_t capacity_bytes = 0;
  uint64_t leased_bytes = 0;  // sum of the members' leases (<= capacity)
  std::vector<ShareMemberInfo> members;
};

// Group names are 1-64 of [A-Za-z0-9_.-] (they name a file).
Status validate_share_name(std::string_view name);
// The POSIX shm name of a group's table for `device`: "/memfit-share-NAME-devN".
std::string share_segment_name(std::string_view name, int device);

// Reads a group's table (reaping dead members first). kNotFound when the group does not exist on `device`.
Expected<ShareGroupInfo> read_share_group(std::string_view name, int device);
// The lease tables on this machine (only group `name`'s when given), each device's table as one entry,
// sorted by name and device: those that read, and for each that does not read as one (another program's
// file of the name, another table version, figures no member writes) why - kFailedPrecondition, with how to
// clear it. A table still being made (no magic yet) is neither.
struct UnreadableShareTable {
  std::string name;
  int device = 0;
  Error error;
};
struct ShareTables {
  std::vector<ShareGroupInfo> groups;
  std::vector<UnreadableShareTable> unreadable;
};
ShareTables read_share_tables(std::string_view name = {});
// read_share_tables().groups.
std::vector<ShareGroupInfo> list_share_groups();
// The lease tables' files in /dev/shm, by group name and device, whether or not each reads as a table;
// sorted by name and device.
struct ShareTableFile {
  std::string name;
  int device = 0;
};
std::vector<ShareTableFile> share_table_files();
// Removes a group's table (tests; a table outlives its members, so a group keeps its capacity).
Status remove_share_group(std::string_view name, int device);

// The weighted fair shares of members with `weights` and `quotas` (0 = none) on `capacity_bytes`.
std::vector<uint64_t> share_fair_shares(uint64_t capacity_bytes, const std::vector<uint32_t>& weights,
                                        const std::vector<uint64_t>& quotas);

}  // namespace memfit
