// NameMap against std::unordered_map on the same names: the passes over HLO computations swapped one for the
// other, so every answer must agree - found or not, the first value kept, counters, growth past many sizes.
#include "memfit/core/name_map.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <unordered_map>
#include <vector>

namespace memfit {
namespace {

TEST(NameMap, AgreesWithUnorderedMapOnInstructionNames) {
  // Names as an HLO text has them: opcode.N, many sharing a prefix and differing in the last digits.
  std::vector<std::string> names;
  for (const char* op : {"dot_general", "add", "broadcast_in_dim", "get-tuple-element", "p"})
    for (int i = 0; i < 20000; ++i) names.push_back(std::string(op) + "." + std::to_string(i));
  names.push_back("");  // an empty name is a name, not an empty slot
  NameIndex index;
  std::unordered_map<std::string_view, uint32_t> reference;
  for (uint32_t i = 0; i < names.size(); ++i) {
    const auto [entry, inserted] = index.emplace(names[i], i);
    EXPECT_TRUE(inserted);
    EXPECT_EQ(entry->second, i);
    reference.emplace(names[i], i);
  }
  EXPECT_EQ(index.size(), reference.size());
  // A second emplace keeps the first value, as unordered_map's does.
  const auto [again, inserted] = index.emplace(names[7], 12345);
  EXPECT_FALSE(inserted);
  EXPECT_EQ(again->second, 7u);
  for (const auto& [name, i] : reference) {
    const auto* e = index.find(name);
    ASSERT_NE(e, index.end()) << name;
    EXPECT_EQ(e->second, i);
    EXPECT_EQ(e->first, name);
  }
  std::mt19937 rng(7);
  for (int k = 0; k < 20000; ++k) {
    const std::string absent = "x" + std::to_string(rng());
    EXPECT_EQ(index.find(absent), index.end());
    EXPECT_FALSE(index.contains(absent));
  }
  EXPECT_TRUE(index.contains(""));
}

TEST(NameMap, CountsLikeOperatorBrackets) {
  const std::vector<std::string> operands = {"a.1", "b.2", "a.1", "c.3", "a.1", "b.2"};
  NameMap<uint32_t> uses;
  for (const std::string& o : operands) ++uses[o];
  EXPECT_EQ(uses["a.1"], 3u);
  EXPECT_EQ(uses["b.2"], 2u);
  EXPECT_EQ(uses["c.3"], 1u);
  EXPECT_EQ(uses.size(), 3u);
  EXPECT_EQ(uses["never"], 0u);  // read through [] inserts the default, as unordered_map's does
  EXPECT_EQ(uses.size(), 4u);
  NameMap<uint32_t> empty;
  EXPECT_EQ(empty.find("a.1"), empty.end());
}

}  // namespace
}  // namespace memfit
