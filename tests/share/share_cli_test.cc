// `memfit share NAME` and `memfit doctor` on a live group: members are real processes (share_member_process),
// the CLI is the real binary.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <set>

#include "member_process.h"
#include "memfit/share/share_group.h"

namespace memfit {
namespace {

using testing::member_env;
using testing::Process;

struct CliRun {
  int exit_code = -1;
  std::string out;
};

CliRun run_cli(const std::string& args) {
  const std::string command = std::string(MEMFIT_CLI) + " " + args + " 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  CliRun r;
  char chunk[4096];
  size_t n = 0;
  while ((n = std::fread(chunk, 1, sizeof(chunk), pipe)) > 0) r.out.append(chunk, n);
  const int status = ::pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::set<int64_t> pids(const nlohmann::json& members) {
  std::set<int64_t> out;
  for (const auto& m : members) out.insert(m["pid"].get<int64_t>());
  return out;
}

class ShareCliTest : public ::testing::Test {
 protected:
  void TearDown() override { (void)remove_share_group(group_, 0); }
  std::string group_ = "cli-" + std::to_string(::getpid());
};

TEST_F(ShareCliTest, ListsExactlyTheLiveMembers) {
  Process a(member_env(group_, false));
  Process b(member_env(group_, false));
  ASSERT_EQ(a.ask("alloc 10GiB").value_or("hang").substr(0, 2), "ok");
  ASSERT_EQ(b.ask("alloc 5GiB").value_or("hang").substr(0, 2), "ok");

  const CliRun listed = run_cli("share " + group_ + " --json");
  ASSERT_EQ(listed.exit_code, 0) << listed.out;
  const nlohmann::json j = nlohmann::json::parse(listed.out);
  EXPECT_EQ(j["group"], group_);
  EXPECT_EQ(j["capacity_bytes"].get<uint64_t>(), 80ull << 30);
  EXPECT_EQ(pids(j["members"]), (std::set<int64_t>{a.pid(), b.pid()}));
  for (const auto& m : j["members"]) {
    for (const char* key : {"pid", "command", "lease_bytes", "bytes_in_use", "pool_bytes"})
      EXPECT_TRUE(m.contains(key)) << key;
    EXPECT_EQ(m["command"], "share_member_pr");  // comm: the first 15 characters of the program's name
    EXPECT_LE(m["pool_bytes"].get<uint64_t>(), m["lease_bytes"].get<uint64_t>());
    EXPECT_EQ(m["pool_bytes"].get<uint64_t>(), m["pid"].get<int64_t>() == a.pid() ? 10ull << 30 : 5ull << 30);
  }

  const CliRun table = run_cli("share " + group_);
  ASSERT_EQ(table.exit_code, 0) << table.out;
  EXPECT_NE(table.out.find(fmt::format("share group '{}' on device 0", group_)), std::string::npos)
      << table.out;
  EXPECT_NE(table.out.find(std::to_string(a.pid())), std::string::npos);

  const CliRun doctor = run_cli("doctor --no-gpu --json");
  const nlohmann::json d = nlohmann::json::parse(doctor.out, nullptr, false);
  ASSERT_TRUE(d.is_object()) << doctor.out;
  bool seen = false;
  for (const auto& g : d["facts"]["share_groups"]) {
    if (g["group"] != group_) continue;
    seen = true;
    EXPECT_EQ(pids(g["members"]), (std::set<int64_t>{a.pid(), b.pid()}));
  }
  EXPECT_TRUE(seen) << doctor.out.substr(0, 2000);

  a.kill9();
  const nlohmann::json after = nlohmann::json::parse(run_cli("share " + group_ + " --json").out);
  EXPECT_EQ(pids(after["members"]), (std::set<int64_t>{b.pid()}));
}

TEST_F(ShareCliTest, UnknownGroupOrBadNameIsExitTwo) {
  const CliRun none = run_cli("share no-such-group-" + group_ + " --json");
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_EQ(none.out.rfind("memfit: no share group", 0), 0u) << none.out;
  const CliRun bad = run_cli("share 'a/b' --json");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.out.find("must be 1-64 of"), std::string::npos) << bad.out;
}

}  // namespace
}  // namespace memfit
