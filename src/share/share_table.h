// share_table.h (private to the share layer) - the lease table's layout in shared memory, its lock, and the
// rules both members and readers apply to it.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "memfit/core/status.h"
#include "memfit/share/share_group.h"

namespace memfit::share_detail {

inline constexpr char kMagic[8] = {'M', 'F', 'S', 'H', 'A', 'R', 'E', '1'};
inline constexpr uint32_t kVersion = 1;

// One member. Written only by its owner under the lock (and cleared whole by whoever reaps it).
struct Row {
  int64_t pid;           // 0 = a free row
  uint64_t start_ticks;  // /proc/PID/stat field 22: tells a reused pid from the member
  uint64_t member_id;    // unique per join (several members may share a pid: one per device, or tests)
  uint64_t weight;
  uint64_t quota_bytes;
  uint64_t limit_bytes;
  uint64_t lease_bytes;
  uint64_t pool_bytes;
  uint64_t bytes_in_use;
  uint64_t peak_bytes_in_use;
  uint64_t demand_bytes;    // > 0 while it waits for others to give back
  uint64_t demand_epoch;    // the epoch its demand was posted at
  uint64_t answered_epoch;  // the latest demand epoch this member's agent has answered
  char command[64];
  char reserved[88];
};
static_assert(sizeof(Row) == 256 && std::is_trivially_copyable_v<Row>);

struct Header {
  char magic[8];
  uint32_t version;
  uint32_t row_bytes;
  uint64_t capacity_bytes;
  uint64_t epoch;  // bumped by every posted demand
  uint64_t next_member_id;
  int32_t device;
  char device_name[84];
  // CLOCK_MONOTONIC (one clock for every process on the machine) when a member last reaped dead rows: the
  // group reaps a few times a second, not each member (64 members each reading 64 /proc entries ten times
  // a second kept two cores busy). Zero in a table written by a member that predates it: reap then.
  uint64_t last_reap_ns;
  char reserved[120];
};
static_assert(sizeof(Header) == 256 && std::is_trivially_copyable_v<Header>);

struct Table {
  Header header;
  Row rows[kMaxShareMembers];
};
static_assert(std::is_trivially_copyable_v<Table>);

// An open, mapped table. lock() serializes against other processes (flock) and other threads here.
class Segment {
 public:
  // create: make the table when it does not exist (with `capacity_bytes`, `device_name`).
  static Expected<std::unique_ptr<Segment>> open(std::string_view group, int device, bool create,
                                                 uint64_t capacity_bytes, std::string_view device_name);
  ~Segment();
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;

  class Lock {
   public:
    explicit Lock(Segment& segment);
    ~Lock();
    Lock(const Lock&) = delete;
    Lock& operator=(const Lock&) = delete;

   private:
    Segment& segment_;
  };

  Table& table() { return *table_; }
  bool writable() const { return writable_; }

 private:
  Segment(int fd, Table* table, bool writable) : fd_(fd), table_(table), writable_(writable) {}
  int fd_;
  Table* table_;
  bool writable_;
  std::mutex mu_;  // flock does not exclude threads sharing the descriptor
};

// Whether the process `pid` started at `start_ticks` is alive (not gone, not a zombie, not a reused pid).
bool member_alive(int64_t pid, uint64_t start_ticks);
// This process's start time (ticks since boot), and its name.
uint64_t own_start_ticks();
std::string own_command();

// Under the lock: clears the rows of members that are gone; returns how many.
int reap_dead(Table& table);
// Under the lock: the sum of leases, and each live row's fair share (indexed like rows; 0 for free rows).
uint64_t leased_bytes(const Table& table);
std::vector<uint64_t> fair_shares(const Table& table);
// Under the lock: the group as read. `check_alive`: leave out members whose process is gone (for a table
// this user may only read, and so could not reap); a reaped table needs no second look at /proc.
ShareGroupInfo describe(const Table& table, std::string_view group, bool check_alive);

}  // namespace memfit::share_detail
