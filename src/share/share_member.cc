#include "memfit/share/share_member.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>

#include "memfit/core/bytes.h"
#include "memfit/core/checked.h"
#include "share_table.h"

namespace memfit {

using share_detail::Row;
using share_detail::Segment;
using share_detail::Table;

namespace {

constexpr auto kReapEvery = std::chrono::milliseconds(100);
constexpr auto kWaitPoll = std::chrono::milliseconds(2);

uint64_t sub_floor(uint64_t a, uint64_t b) { return a > b ? a - b : 0; }

}  // namespace

struct ShareMember::State {
  ShareMemberOptions options;
  std::unique_ptr<Segment> segment;
  int slot = -1;
  uint64_t member_id = 0;
  int64_t pid = 0;
  std::atomic<uint64_t> lease{0};
  std::atomic<uint64_t> pool{0};
  std::atomic<uint64_t> capacity{0};
  std::atomic<uint64_t> leased{0};  // the group's sum of leases when last seen
  std::atomic<uint64_t> operations{0};

  std::mutex hooks_mu;
  Hooks hooks;

  std::mutex stop_mu;
  std::condition_variable stop_cv;
  bool stop = false;
  std::thread agent;

  Table& table() { return segment->table(); }
  Row& row() { return table().rows[slot]; }

  // Under the lock. A live member's row is never reaped; should it have been cleared anyway (a /proc read
  // that failed), it is written again, so the group still counts what this process holds.
  void ensure_row() {
    Row& r = row();
    if (r.pid == pid && r.member_id == member_id) return;
    int free_slot = -1;
    for (int i = 0; i < kMaxShareMembers && free_slot < 0; ++i)
      if (table().rows[i].pid == 0) free_slot = i;
    if (free_slot < 0) return;  // full: keep the old index; the next operation tries again
    slot = free_slot;
    Row& fresh = row();
    std::memset(static_cast<void*>(&fresh), 0, sizeof(Row));
    fill_identity(fresh);
    fresh.lease_bytes = std::max(lease.load(), pool.load());
    fresh.pool_bytes = pool.load();
  }

  void fill_identity(Row& r) {
    r.pid = pid;
    r.start_ticks = share_detail::own_start_ticks();
    r.member_id = member_id;
    r.weight = options.weight;
    r.quota_bytes = options.quota_bytes;
    r.limit_bytes = options.limit_bytes;
    const std::string command = share_detail::own_command();
    std::memcpy(r.command, command.data(), std::min(command.size(), sizeof(r.command) - 1));
  }

  // Under the lock. Paced for the whole group through the table's header (share_table.h): whichever member
  // comes first after kReapEvery reaps for all of them.
  void maybe_reap(bool force) {
    const auto now_ns = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                                  std::chrono::steady_clock::now().time_since_epoch())
                                                  .count());
    uint64_t& last_ns = table().header.last_reap_ns;
    const auto every_ns = static_cast<uint64_t>(std::chrono::nanoseconds(kReapEvery).count());
    if (!force && last_ns <= now_ns && now_ns - last_ns < every_ns) return;
    last_ns = now_ns;
    share_detail::reap_dead(table());
  }

  void remember() {
    lease.store(row().lease_bytes, std::memory_order_relaxed);
    leased.store(share_detail::leased_bytes(table()), std::memory_order_relaxed);
  }

  uint64_t free_capacity() const {
    return sub_floor(segment->table().header.capacity_bytes, share_detail::leased_bytes(segment->table()));
  }

  // What the members waiting on others could still claim from them: each up to its fair share.
  uint64_t outstanding_claims(const std::vector<uint64_t>& fair) {
    uint64_t claims = 0;
    for (int i = 0; i < kMaxShareMembers; ++i) {
      const Row& r = table().rows[i];
      if (r.pid == 0 || r.demand_bytes == 0) continue;
      claims = saturating_add(
          claims, std::min(r.demand_bytes, sub_floor(fair[static_cast<size_t>(i)], r.lease_bytes)));
    }
    return claims;
  }

  std::string holders_text() {
    const ShareGroupInfo info = share_detail::describe(table(), options.group, /*check_alive=*/false);
    std::string out;
    for (const ShareMemberInfo& m : info.members)
      out += fmt::format("; pid {} ({}): lease {}, pool {}, in use {}, fair share {}", m.pid, m.command,
                         format_bytes(m.lease_bytes), format_bytes(m.pool_bytes),
                         format_bytes(m.bytes_in_use), format_bytes(m.fair_share_bytes));
    return out;
  }

  Error refused(uint64_t size_bytes, std::string why) {
    return resource_exhausted(
        fmt::format("share group '{}' ({} of {} on device {}): pid {} cannot grow its pool of {} by {}: {}{}",
                    options.group, format_bytes(table().header.capacity_bytes),
                    options.device_name.empty() ? "the device" : options.device_name, options.device, pid,
                    format_bytes(pool.load()), format_bytes(size_bytes), std::move(why), holders_text()));
  }

  // Under the lock: takes free capacity toward `need` more lease; returns what is still missing.
  uint64_t take_free(uint64_t need, uint64_t fair) {
    Row& r = row();
    const uint64_t free = free_capacity();
    if (free >= need) {
      // Up to the fair share in one step (few lease changes), beyond it only what is needed.
      const uint64_t wanted = std::max(need, std::min(free, sub_floor(fair, r.lease_bytes)));
      // (grow_pool checked pool + size <= limit, so this covers `need`)
      r.lease_bytes += std::min(wanted, sub_floor(options.limit_bytes, r.lease_bytes));
      return 0;
    }
    r.lease_bytes += free;
    return need - free;
  }

  // Waits (lock released between looks) until `need` more lease is granted, or every member above its fair
  // share has answered and nothing more came free, or the wait is over. Returns what is still missing.
  uint64_t wait_for_lease(uint64_t need) {
    const auto deadline = std::chrono::steady_clock::now() + options.wait;
    uint64_t epoch = 0;
    {
      Segment::Lock lock(*segment);
      ensure_row();
      epoch = ++table().header.epoch;
      row().demand_bytes = need;
      row().demand_epoch = epoch;
    }
    while (true) {
      std::this_thread::sleep_for(kWaitPoll);
      Segment::Lock lock(*segment);
      ensure_row();
      maybe_reap(false);
      Row& me = row();
      const uint64_t free = free_capacity();
      const uint64_t take = std::min(free, need);
      me.lease_bytes += take;
      need -= take;
      bool answered = true;
      const std::vector<uint64_t> fair = share_detail::fair_shares(table());
      for (int i = 0; i < kMaxShareMembers; ++i) {
        const Row& r = table().rows[i];
        if (i == slot || r.pid == 0 || r.lease_bytes <= fair[static_cast<size_t>(i)]) continue;
        if (r.answered_epoch < epoch) answered = false;
      }
      if (need == 0 || answered || std::chrono::steady_clock::now() >= deadline) {
        me.demand_bytes = 0;
        remember();
        return need;
      }
      me.demand_bytes = need;
      remember();
    }
  }

  // One round of the agent: publish figures, reap, answer demands.
  void agent_round() {
    Usage usage;
    {
      std::lock_guard<std::mutex> lock(hooks_mu);
      if (hooks.usage) usage = hooks.usage();
    }
    uint64_t trim = 0;
    uint64_t epoch = 0;
    {
      Segment::Lock lock(*segment);
      ensure_row();
      maybe_reap(false);
      Row& me = row();
      me.bytes_in_use = usage.bytes_in_use;
      me.peak_bytes_in_use = usage.peak_bytes_in_use;
      epoch = table().header.epoch;
      const std::vector<uint64_t> fair_all = share_detail::fair_shares(table());
      const uint64_t fair = fair_all[static_cast<size_t>(slot)];
      const uint64_t missing = sub_floor(outstanding_claims(fair_all), free_capacity());
      if (missing > 0 && me.lease_bytes > fair) {
        // Unused lease first: it costs nothing to give back.
        const uint64_t unused = sub_floor(me.lease_bytes, std::max(fair, me.pool_bytes));
        const uint64_t give = std::min(unused, missing);
        me.lease_bytes -= give;
        // Then free pool regions, down to the fair share.
        trim = std::min(missing - give, sub_floor(me.pool_bytes, fair));
      }
      if (trim == 0) me.answered_epoch = epoch;
      remember();
    }
    if (trim == 0) return;
    {
      std::lock_guard<std::mutex> lock(hooks_mu);
      if (hooks.release_free) hooks.release_free(trim);  // shrinks the pool through shrink_pool()
    }
    Segment::Lock lock(*segment);
    ensure_row();
    Row& me = row();
    const std::vector<uint64_t> fair_all = share_detail::fair_shares(table());
    const uint64_t fair = fair_all[static_cast<size_t>(slot)];
    const uint64_t missing = sub_floor(outstanding_claims(fair_all), free_capacity());
    me.lease_bytes -= std::min(missing, sub_floor(me.lease_bytes, std::max(fair, me.pool_bytes)));
    me.answered_epoch = epoch;
    remember();
  }

  void run_agent() {
    std::unique_lock<std::mutex> lock(stop_mu);
    while (!stop) {
      lock.unlock();
      agent_round();
      lock.lock();
      stop_cv.wait_for(lock, options.tick, [&] { return stop; });
    }
  }
};

Expected<ShareMemberOptions> share_options_from_env(const Environment& env, int device) {
  ShareMemberOptions o;
  o.device = device;
  const auto group = env.get("MEMFIT_SHARE");
  if (!group || group->empty()) return o;
  if (Status valid = validate_share_name(*group); !valid.ok())
    return valid.error().with_context("MEMFIT_SHARE");
  o.group = std::string(*group);
  if (auto quota = env.get("MEMFIT_SHARE_QUOTA"); quota && !quota->empty()) {
    auto bytes = parse_bytes(*quota);
    if (!bytes.ok()) return bytes.error().with_context("MEMFIT_SHARE_QUOTA");
    o.quota_bytes = *bytes;
  }
  if (auto weight = env.get("MEMFIT_SHARE_WEIGHT"); weight && !weight->empty()) {
    const std::string text(*weight);
    char* end = nullptr;
    errno = 0;
    const unsigned long value = std::strtoul(text.c_str(), &end, 10);
    if (errno != 0 || end == text.c_str() || *end != '\0' || value < 1 || value > 1000 || text[0] == '-')
      return invalid_argument(
          fmt::format("MEMFIT_SHARE_WEIGHT='{}' must be a whole number from 1 to 1000", text.substr(0, 40)));
    o.weight = static_cast<uint32_t>(value);
  }
  if (auto wait = env.get("MEMFIT_SHARE_WAIT"); wait && !wait->empty()) {
    const std::string text(*wait);
    char* end = nullptr;
    errno = 0;
    const double seconds = std::strtod(text.c_str(), &end);
    if (errno != 0 || end == text.c_str() || *end != '\0' || !(seconds >= 0 && seconds <= 600))
      return invalid_argument(
          fmt::format("MEMFIT_SHARE_WAIT='{}' must be seconds from 0 to 600", text.substr(0, 40)));
    o.wait = std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
  }
  return o;
}

ShareMember::ShareMember(std::unique_ptr<State> state) : state_(std::move(state)) {}

Expected<std::unique_ptr<ShareMember>> ShareMember::join(ShareMemberOptions options) {
  if (options.limit_bytes == 0) return invalid_argument("a share group member needs its allocator's limit");
  if (options.weight == 0) options.weight = 1;
  auto state = std::make_unique<State>();
  state->options = options;
  state->pid = ::getpid();
  MEMFIT_ASSIGN_OR_RETURN(state->segment, Segment::open(options.group, options.device, true,
                                                        options.capacity_bytes, options.device_name));
  uint64_t missing = 0;
  {
    Segment::Lock lock(*state->segment);
    Table& table = state->table();
    state->maybe_reap(true);
    for (int i = 0; i < kMaxShareMembers && state->slot < 0; ++i)
      if (table.rows[i].pid == 0) state->slot = i;
    if (state->slot < 0)
      return resource_exhausted(
          fmt::format("share group '{}' on device {} has {} members already, the most "
                      "it holds",
                      options.group, options.device, kMaxShareMembers));
    state->member_id = table.header.next_member_id++;
    Row& row = state->row();
    std::memset(static_cast<void*>(&row), 0, sizeof(Row));
    state->fill_identity(row);
    state->capacity.store(table.header.capacity_bytes);
    const uint64_t fair = share_detail::fair_shares(table)[static_cast<size_t>(state->slot)];
    const uint64_t target = std::min(options.limit_bytes, fair);
    row.lease_bytes = std::min(options.limit_bytes, state->free_capacity());
    missing = sub_floor(target, row.lease_bytes);
    state->remember();
  }
  // Below its fair share: members above theirs give back (the agents answer within a tick or two).
  if (missing > 0) state->wait_for_lease(missing);
  state->agent = std::thread([s = state.get()] { s->run_agent(); });
  return std::unique_ptr<ShareMember>(new ShareMember(std::move(state)));
}

ShareMember::~ShareMember() {
  {
    std::lock_guard<std::mutex> lock(state_->stop_mu);
    state_->stop = true;
  }
  state_->stop_cv.notify_all();
  if (state_->agent.joinable()) state_->agent.join();
  Segment::Lock lock(*state_->segment);
  Row& row = state_->row();
  if (row.pid == state_->pid && row.member_id == state_->member_id)
    std::memset(static_cast<void*>(&row), 0, sizeof(Row));
}

void ShareMember::set_hooks(Hooks hooks) {
  std::lock_guard<std::mutex> lock(state_->hooks_mu);
  state_->hooks = std::move(hooks);
}

Status ShareMember::grow_pool(uint64_t size_bytes) {
  State& s = *state_;
  s.operations.fetch_add(1, std::memory_order_relaxed);
  if (::getpid() != s.pid)
    return failed_precondition(
        fmt::format("share group '{}': a forked child cannot use its parent's lease", s.options.group));
  uint64_t missing = 0;
  {
    Segment::Lock lock(*s.segment);
    s.ensure_row();
    Row& me = s.row();
    const auto total = checked_add(me.pool_bytes, size_bytes);
    if (!total || *total > s.options.limit_bytes)
      return s.refused(size_bytes,
                       fmt::format("that passes its own limit of {}", format_bytes(s.options.limit_bytes)));
    if (*total <= me.lease_bytes) {  // inside the lease: nobody is asked
      me.pool_bytes = *total;
      s.pool.store(*total);
      return ok_status();
    }
    s.maybe_reap(true);
    const uint64_t fair = share_detail::fair_shares(s.table())[static_cast<size_t>(s.slot)];
    missing = s.take_free(*total - me.lease_bytes, fair);
    if (missing == 0) {
      me.pool_bytes = *total;
      s.pool.store(*total);
      s.remember();
      return ok_status();
    }
    s.remember();
    // Others give back only toward this member's fair share.
    if (missing > sub_floor(fair, me.lease_bytes))
      return s.refused(size_bytes,
                       fmt::format("its lease of {} is all it can have: the group has no free capacity "
                                   "and its fair share is {}",
                                   format_bytes(me.lease_bytes), format_bytes(fair)));
  }
  missing = s.wait_for_lease(missing);
  Segment::Lock lock(*s.segment);
  s.ensure_row();
  Row& me = s.row();
  if (missing > 0 || me.pool_bytes + size_bytes > me.lease_bytes)
    return s.refused(size_bytes, fmt::format("its lease is {} and no member above its fair share had more "
                                             "free memory to give back",
                                             format_bytes(me.lease_bytes)));
  me.pool_bytes += size_bytes;
  s.pool.store(me.pool_bytes);
  return ok_status();
}

void ShareMember::shrink_pool(uint64_t size_bytes) {
  State& s = *state_;
  s.operations.fetch_add(1, std::memory_order_relaxed);
  Segment::Lock lock(*s.segment);
  s.ensure_row();
  Row& me = s.row();
  me.pool_bytes = sub_floor(me.pool_bytes, size_bytes);
  s.pool.store(me.pool_bytes);
}

uint64_t ShareMember::lease_operations() const { return state_->operations.load(std::memory_order_relaxed); }
uint64_t ShareMember::lease_bytes() const { return state_->lease.load(std::memory_order_relaxed); }
uint64_t ShareMember::pool_bytes() const { return state_->pool.load(std::memory_order_relaxed); }
uint64_t ShareMember::capacity_bytes() const { return state_->capacity.load(std::memory_order_relaxed); }
uint64_t ShareMember::group_free_bytes() const {
  return sub_floor(state_->capacity.load(std::memory_order_relaxed),
                   state_->leased.load(std::memory_order_relaxed));
}
uint64_t ShareMember::headroom_bytes() const {
  return sub_floor(lease_bytes(), pool_bytes()) + group_free_bytes();
}
const ShareMemberOptions& ShareMember::options() const { return state_->options; }

}  // namespace memfit
