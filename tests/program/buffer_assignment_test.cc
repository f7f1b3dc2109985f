// XLA's buffer-assignment dump of gpt_fp32_donate (tests/data/xla, from ../shared/data/xla) read back into
// the figures compiled.memory_analysis() gave for the same compile (programs.json), to the byte.
#include "memfit/program/buffer_assignment.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "memfit/core/file_io.h"

namespace memfit {
namespace {

const std::string kData = std::string(MEMFIT_TEST_DATA_DIR) + "/xla/";

TEST(BufferAssignment, GivesMemoryAnalysisToTheByte) {
  auto text = read_file(kData + "gpt_fp32_donate.buffer-assignment.txt.gz");
  ASSERT_TRUE(text.ok()) << text.error().message();
  auto ba = parse_buffer_assignment(*text);
  ASSERT_TRUE(ba.ok()) << ba.error().message();
  const auto programs = nlohmann::json::parse(*read_file(kData + "programs.json"));
  nlohmann::json xla;
  for (const auto& p : programs["programs"])
    if (p["name"] == "gpt_fp32_donate") xla = p["xla_memory_analysis"];
  ASSERT_FALSE(xla.is_null());
  EXPECT_EQ(ba->argument_bytes, xla["argument_size_in_bytes"].get<uint64_t>());
  EXPECT_EQ(ba->output_bytes, xla["output_size_in_bytes"].get<uint64_t>());
  EXPECT_EQ(ba->alias_bytes, xla["alias_size_in_bytes"].get<uint64_t>());
  EXPECT_EQ(ba->temp_bytes, xla["temp_size_in_bytes"].get<uint64_t>());
  EXPECT_EQ(ba->allocations.size(), 781u);
  const std::vector<XlaAssignedValue> temps = ba->temp_values();
  ASSERT_FALSE(temps.empty());
  EXPECT_GE(temps.front().size_bytes, temps.back().size_bytes);
  EXPECT_EQ(temps.front().shape.rfind("f32[", 0), 0u) << temps.front().shape;
}

TEST(BufferAssignment, BadTextNamesTheLine) {
  for (const char* text :
       {"hello\n", "BufferAssignment:\n value: <1 x @0> (size=4,offset=0): f32[]\n",
        "BufferAssignment:\nallocation 0: size 8, page 0, constant:\n value: <1 c @0> "
        "(size=16,offset=0): f32[4]\n",
        "BufferAssignment:\nallocation x: size, page 0:\n",
        "BufferAssignment:\nallocation 0: size 18446744073709551615, page 0, parameter 0:\n"
        "allocation 1: size 18446744073709551615, page 0, parameter 1:\n"}) {
    auto r = parse_buffer_assignment(text);
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument);
  }
  EXPECT_NE(parse_buffer_assignment("x\n").error().message().find("line 1"), std::string::npos);
  EXPECT_FALSE(parse_buffer_assignment("").ok());
}

}  // namespace
}  // namespace memfit
