// The check behind `--trace-out` on memfit hlo and memfit plan: the written trace replays through every
// allocator policy, its live bytes are the plan's no-fragmentation bound, and no pool holds less or runs out.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "cli_runner.h"

namespace memfit::testing {

inline void expect_replay_reaches_bound(const std::string& trace, uint64_t lower_bound_bytes) {
  const auto replay = run_cli({"replay", trace, "--policy", "all", "--json"});
  ASSERT_EQ(replay.code, 0) << replay.err;
  const auto r = nlohmann::json::parse(replay.out);
  EXPECT_EQ(r["peak_live_bytes"].get<uint64_t>(), lower_bound_bytes);
  ASSERT_GE(r["policies"].size(), 2u);
  for (const auto& pool : r["policies"]) {
    EXPECT_GE(pool["peak_reserved_bytes"].get<uint64_t>(), lower_bound_bytes) << pool["name"];
    EXPECT_EQ(pool["oom_events"], 0) << pool["name"];
  }
}

}  // namespace memfit::testing
