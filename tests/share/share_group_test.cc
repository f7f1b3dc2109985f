// Lease groups in one process: two members, each a BFC pool over its own simulated 80 GiB device growing
// through a LeasedDevice, exactly as libmemfit_alloc.so wires them (the multi-process tests are in
// share_process_test.cc).
#include "memfit/share/share_group.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <thread>

#include "memfit/alloc/allocator_factory.h"
#include "memfit/device/simulated_device.h"
#include "memfit/share/leased_device.h"
#include "memfit/share/share_member.h"

namespace memfit {
namespace {

constexpr uint64_t kGiB = 1ull << 30;

std::string unique_group(const char* what) { return fmt::format("test-{}-{}", what, ::getpid()); }

struct Member {
  Member() = default;
  Member(Member&&) = default;
  Member& operator=(Member&&) = delete;
  // The agent must stop calling into the allocator before it goes; the allocator's regions go back through
  // the lease, so the member outlives it.
  ~Member() { reset(); }
  void reset() {
    if (member) member->set_hooks({});
    allocator.reset();
    leased.reset();
    member.reset();
    device.reset();
  }
  std::unique_ptr<SimulatedDevice> device;
  std::unique_ptr<ShareMember> member;
  std::unique_ptr<LeasedDevice> leased;
  std::unique_ptr<Allocator> allocator;
};

Member join(const std::string& group, AllocatorKind kind, uint64_t limit_bytes, uint64_t quota_bytes = 0) {
  Member m;
  m.device = std::move(SimulatedDevice::create({80 * kGiB, 512, false, "sim"})).value();
  ShareMemberOptions o;
  o.group = group;
  o.capacity_bytes = 80 * kGiB;
  o.device_name = "simulated GPU 0";
  o.limit_bytes = limit_bytes;
  o.quota_bytes = quota_bytes;
  o.wait = std::chrono::milliseconds(2000);
  m.member = std::move(ShareMember::join(o)).value();
  m.leased = std::make_unique<LeasedDevice>(*m.device, *m.member);
  AllocatorSettings settings;
  settings.limit_bytes = limit_bytes;
  settings.region_cap_bytes = kShareRegionBytes;
  settings.garbage_collection = true;
  m.allocator = std::move(make_allocator(kind, *m.leased, settings)).value();
  Allocator* a = m.allocator.get();
  m.member->set_hooks({[a] {
                         const AllocatorStats s = a->stats();
                         return ShareMember::Usage{s.bytes_in_use, s.peak_bytes_in_use};
                       },
                       [a](uint64_t wanted) { return a->release_free_memory(wanted); }});
  return m;
}

class ShareGroupTest : public ::testing::Test {
 protected:
  void TearDown() override { (void)remove_share_group(group_, 0); }
  std::string group_ = unique_group(::testing::UnitTest::GetInstance()->current_test_info()->name());
};

TEST(ShareFairShares, WeightsAndQuotasSplitTheCapacity) {
  EXPECT_EQ(share_fair_shares(80 * kGiB, {1, 1}, {0, 0}), (std::vector<uint64_t>{40 * kGiB, 40 * kGiB}));
  EXPECT_EQ(share_fair_shares(90 * kGiB, {2, 1}, {0, 0}), (std::vector<uint64_t>{60 * kGiB, 30 * kGiB}));
  // A quota is served first; the rest is split by weight among the others.
  EXPECT_EQ(share_fair_shares(80 * kGiB, {1, 1, 1}, {20 * kGiB, 0, 0}),
            (std::vector<uint64_t>{20 * kGiB, 30 * kGiB, 30 * kGiB}));
  // Quotas beyond the capacity get what is left, in join order.
  EXPECT_EQ(share_fair_shares(80 * kGiB, {1, 1}, {60 * kGiB, 60 * kGiB}),
            (std::vector<uint64_t>{60 * kGiB, 20 * kGiB}));
}

TEST(ShareNames, OnlyFileSafeNames) {
  EXPECT_TRUE(validate_share_name("team-a_1.x").ok());
  EXPECT_FALSE(validate_share_name("").ok());
  EXPECT_FALSE(validate_share_name("a/b").ok());
  EXPECT_FALSE(validate_share_name("..").ok());
  EXPECT_FALSE(validate_share_name(std::string(65, 'a')).ok());
  EXPECT_EQ(share_segment_name("x", 3), "/memfit-share-x-dev3");
  EXPECT_EQ(read_share_group("no-such-group-anywhere", 0).error().code(), ErrorCode::kNotFound);
}

TEST(ShareEnv, ReadsTheVariables) {
  Environment env;
  EXPECT_TRUE(std::move(share_options_from_env(env, 0)).value().group.empty());
  env.set("MEMFIT_SHARE", "team");
  env.set("MEMFIT_SHARE_QUOTA", "20GiB");
  env.set("MEMFIT_SHARE_WEIGHT", "2");
  env.set("MEMFIT_SHARE_WAIT", "0.5");
  const ShareMemberOptions o = std::move(share_options_from_env(env, 1)).value();
  EXPECT_EQ(o.group, "team");
  EXPECT_EQ(o.device, 1);
  EXPECT_EQ(o.quota_bytes, 20 * kGiB);
  EXPECT_EQ(o.weight, 2u);
  EXPECT_EQ(o.wait, std::chrono::milliseconds(500));
  for (const char* bad : {"0", "-1", "1001", "2x", "nan"}) {
    Environment e = env;
    e.set("MEMFIT_SHARE_WEIGHT", bad);
    auto r = share_options_from_env(e, 0);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.error().message().find("MEMFIT_SHARE_WEIGHT"), std::string::npos);
  }
  env.set("MEMFIT_SHARE", "a/b");
  EXPECT_FALSE(share_options_from_env(env, 0).ok());
}

// A file of the group's name that is not a lease table (another program's, a memfit of another table
// version's): found, left out of the list, and named with what is wrong - a member cannot join it.
TEST_F(ShareGroupTest, AFileOfTheNameThatIsNoTableIsNamedNotHidden) {
  const std::string path = "/dev/shm" + share_segment_name(group_, 0);
  {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    const std::string junk(4096, 'x');
    ASSERT_EQ(std::fwrite(junk.data(), 1, junk.size(), f), junk.size());
    std::fclose(f);
  }
  bool found = false;
  for (const ShareTableFile& t : share_table_files()) found |= t.name == group_ && t.device == 0;
  EXPECT_TRUE(found);
  for (const ShareGroupInfo& g : list_share_groups()) EXPECT_NE(g.name, group_);
  auto read = read_share_group(group_, 0);
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.error().code(), ErrorCode::kFailedPrecondition);
  EXPECT_NE(read.error().message().find("is 4096 bytes, not a memfit lease table"), std::string::npos)
      << read.error().message();
  ShareMemberOptions o;
  o.group = group_;
  o.capacity_bytes = 80 * kGiB;
  o.limit_bytes = kGiB;
  auto joined = ShareMember::join(o);
  ASSERT_FALSE(joined.ok());
  EXPECT_NE(joined.error().message().find("not a memfit lease table"), std::string::npos)
      << joined.error().message();
}

// A live member's row rewritten with a lease past the group's capacity (what no member writes: a pool grows
// inside its lease, a lease from free capacity): the table is refused with what is wrong, not shown as
// 16 EiB leased of 80 GiB, and the exporter's and doctor's listing leaves it out.
TEST_F(ShareGroupTest, ARowNoMemberWritesIsRefusedNotShown) {
  Member a = join(group_, AllocatorKind::kBfcGrowth, 80 * kGiB);
  void* p = std::move(a.allocator->allocate(kGiB)).value();
  auto before = read_share_group(group_, 0);
  ASSERT_TRUE(before.ok()) << before.error().message();
  ASSERT_EQ(before->members.size(), 1u);
  {
    // The table's layout (src/share/share_table.h): a 256-byte header, then 256-byte rows that begin with
    // the member's pid (int64); the lease is the row's seventh field, at byte 48.
    const std::string path = "/dev/shm" + share_segment_name(group_, 0);
    std::FILE* f = std::fopen(path.c_str(), "r+b");
    ASSERT_NE(f, nullptr);
    bool rewritten = false;
    for (long row = 0; row < 64 && !rewritten; ++row) {
      int64_t pid = 0;
      ASSERT_EQ(std::fseek(f, 256 + row * 256, SEEK_SET), 0);
      ASSERT_EQ(std::fread(&pid, sizeof(pid), 1, f), 1u);
      if (pid != ::getpid()) continue;
      const uint64_t lease = ~0ull;
      ASSERT_EQ(std::fseek(f, 256 + row * 256 + 48, SEEK_SET), 0);
      ASSERT_EQ(std::fwrite(&lease, sizeof(lease), 1, f), 1u);
      rewritten = true;
    }
    std::fclose(f);
    ASSERT_TRUE(rewritten);
  }
  auto read = read_share_group(group_, 0);
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.error().code(), ErrorCode::kFailedPrecondition);
  EXPECT_NE(read.error().message().find("figures no member writes"), std::string::npos)
      << read.error().message();
  for (const ShareGroupInfo& g : list_share_groups()) EXPECT_NE(g.name, group_);
  EXPECT_TRUE(a.allocator->deallocate(p).ok());
}

TEST_F(ShareGroupTest, NewcomerGetsItsFairShareAndNoOneOvercommits) {
  Member a = join(group_, AllocatorKind::kBfcGrowth, 80 * kGiB);
  EXPECT_EQ(a.member->lease_bytes(), 80 * kGiB);  // alone: all that is free, up to its limit
  std::vector<void*> held;
  for (int i = 0; i < 3; ++i) held.push_back(std::move(a.allocator->allocate(10 * kGiB)).value());
  EXPECT_EQ(a.member->pool_bytes(), 30 * kGiB);  // regions of the request's size, no doubling past it

  Member b = join(group_, AllocatorKind::kBfcGrowth, 80 * kGiB);
  EXPECT_GE(b.member->lease_bytes(), 40 * kGiB);  // A gave back unused lease
  std::vector<void*> b_held;
  for (int i = 0; i < 4; ++i) b_held.push_back(std::move(b.allocator->allocate(10 * kGiB)).value());
  auto more = b.allocator->allocate(10 * kGiB);
  ASSERT_FALSE(more.ok());
  ASSERT_NE(more.error().detail(), nullptr);  // the OOM report, whose cause is the lease's refusal
  const std::string report = more.error().detail()->to_text();
  EXPECT_NE(report.find("share group '" + group_ + "'"), std::string::npos) << report;
  EXPECT_NE(report.find(fmt::format("pid {}", ::getpid())), std::string::npos) << report;
  EXPECT_NE(report.find("cause: the lease is used up"), std::string::npos) << report;
  EXPECT_NE(report.find("`memfit share " + group_ + "` shows who holds the rest"), std::string::npos)
      << report;

  const ShareGroupInfo info = std::move(read_share_group(group_, 0)).value();
  ASSERT_EQ(info.members.size(), 2u);
  EXPECT_LE(info.leased_bytes, info.capacity_bytes);
  for (const ShareMemberInfo& m : info.members) EXPECT_LE(m.pool_bytes, m.lease_bytes);

  // A leaves: B can grow into what A held.
  for (void* p : held) ASSERT_TRUE(a.allocator->deallocate(p).ok());
  a.reset();
  for (int i = 0; i < 3; ++i) b_held.push_back(std::move(b.allocator->allocate(10 * kGiB)).value());
  EXPECT_EQ(std::move(read_share_group(group_, 0)).value().members.size(), 1u);
  for (void* p : b_held) ASSERT_TRUE(b.allocator->deallocate(p).ok());
}

TEST_F(ShareGroupTest, PreallocatedPoolGivesBackWholeFreeRegions) {
  // XLA's defaults: 75% preallocated. In a group the pool is reserved as 2 GiB regions it can hand back.
  Member a = join(group_, AllocatorKind::kBfc, 60 * kGiB);
  std::vector<void*> held;
  for (int i = 0; i < 3; ++i) held.push_back(std::move(a.allocator->allocate(10 * kGiB)).value());
  EXPECT_EQ(a.member->pool_bytes(), 60 * kGiB);

  Member b = join(group_, AllocatorKind::kBfc, 60 * kGiB);
  EXPECT_GE(b.member->lease_bytes(), 40 * kGiB);
  EXPECT_LE(a.member->pool_bytes(), 40 * kGiB);  // A's agent released free regions, never memory in use
  EXPECT_EQ(a.allocator->stats().bytes_in_use, 30 * kGiB);
  std::vector<void*> b_held;
  for (int i = 0; i < 4; ++i) b_held.push_back(std::move(b.allocator->allocate(10 * kGiB)).value());
  const ShareGroupInfo info = std::move(read_share_group(group_, 0)).value();
  EXPECT_LE(info.leased_bytes, 80 * kGiB);
  for (void* p : held) ASSERT_TRUE(a.allocator->deallocate(p).ok());
  for (void* p : b_held) ASSERT_TRUE(b.allocator->deallocate(p).ok());
}

TEST_F(ShareGroupTest, QuotaIsTheFairShare) {
  Member a = join(group_, AllocatorKind::kBfcGrowth, 80 * kGiB);
  void* big = std::move(a.allocator->allocate(50 * kGiB)).value();
  // B's quota of 20 GiB: A (fair share 60 GiB) has 30 GiB of unused lease to give.
  Member b = join(group_, AllocatorKind::kBfcGrowth, 80 * kGiB, 20 * kGiB);
  EXPECT_GE(b.member->lease_bytes(), 20 * kGiB);
  void* q = std::move(b.allocator->allocate(20 * kGiB)).value();
  const ShareGroupInfo info = std::move(read_share_group(group_, 0)).value();
  ASSERT_EQ(info.members.size(), 2u);
  for (const ShareMemberInfo& m : info.members)
    EXPECT_EQ(m.fair_share_bytes, m.quota_bytes != 0 ? 20 * kGiB : 60 * kGiB);
  ASSERT_TRUE(b.allocator->deallocate(q).ok());
  ASSERT_TRUE(a.allocator->deallocate(big).ok());
}

// What keeps a pool hit as cheap with sharing on as off (bench: BM_BfcShared against BM_BfcGrowth): once the
// pool holds the loop's buffers, alloc/free pairs never ask the lease.
TEST_F(ShareGroupTest, PoolHitsNeverTouchTheLease) {
  for (AllocatorKind kind : {AllocatorKind::kBfc, AllocatorKind::kBfcGrowth, AllocatorKind::kVmm}) {
    Member a = join(group_, kind, 16 * kGiB);
    for (int i = 0; i < 256; ++i) {  // one round of the loop's sizes fills the pool (and the vmm cache)
      void* warm = std::move(a.allocator->allocate((1 + i % 64) << 20)).value();
      ASSERT_TRUE(a.allocator->deallocate(warm).ok());
    }
    const uint64_t before = a.member->lease_operations();
    for (int i = 0; i < 100000; ++i) {
      void* p = std::move(a.allocator->allocate((1 + i % 64) << 20)).value();
      ASSERT_TRUE(a.allocator->deallocate(p).ok());
    }
    EXPECT_EQ(a.member->lease_operations(), before) << allocator_kind_name(kind);
  }
}

TEST_F(ShareGroupTest, ManyThreadsGrowingAtOnceNeverPassTheCapacity) {
  Member a = join(group_, AllocatorKind::kPlatform, 80 * kGiB);
  Member b = join(group_, AllocatorKind::kPlatform, 80 * kGiB);
  std::atomic<bool> over{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      Allocator& alloc = t % 2 == 0 ? *a.allocator : *b.allocator;
      std::vector<void*> mine;
      for (int i = 0; i < 200; ++i) {
        if (auto p = alloc.allocate((1 + (i * 7 + t) % 5) * kGiB); p.ok()) mine.push_back(*p);
        if (mine.size() > 6) {
          (void)alloc.deallocate(mine.front());
          mine.erase(mine.begin());
        }
        if (a.member->pool_bytes() + b.member->pool_bytes() > 80 * kGiB) over = true;
      }
      for (void* p : mine) (void)alloc.deallocate(p);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_FALSE(over.load());
  EXPECT_EQ(a.member->pool_bytes() + b.member->pool_bytes(), 0u);
}

}  // namespace
}  // namespace memfit
