// Golden-file comparison for CLI output. MEMFIT_UPDATE_GOLDEN=1 rewrites the files instead of comparing.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace memfit::testing {

inline void expect_golden(const std::string& name, const std::string& actual) {
  const std::string path = std::string(MEMFIT_SOURCE_DIR) + "/tests/cli/golden/" + name;
  if (const char* update = std::getenv("MEMFIT_UPDATE_GOLDEN");
      update != nullptr && std::string(update) == "1") {
    std::ofstream(path, std::ios::binary) << actual;
    return;
  }
  std::ifstream in(path, std::ios::binary);
  ASSERT_TRUE(in.good()) << "missing golden file " << path << " (run with MEMFIT_UPDATE_GOLDEN=1)";
  std::stringstream expected;
  expected << in.rdbuf();
  EXPECT_EQ(actual, expected.str()) << "golden file " << path << " differs";
}

}  // namespace memfit::testing
