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

// Host memory allocations (", color 5", as BufferAllocation::ToString prints a nonzero color) are the
// host_* figures of memory_analysis(), not the device's (xla/pjrt/compiled_memory_stats.cc).
TEST(BufferAssignment, HostColoredAllocationsAreHostFigures) {
  constexpr const char* kText = R"(BufferAssignment:
allocation 0: size 4096, color 5, parameter 0, shape |f32[1024]| at ShapeIndex {}:
 value: <0 p0 @0> (size=4096,offset=0): f32[1024]{0:S(5)}
allocation 1: size 4096, parameter 1, shape |f32[1024]| at ShapeIndex {}, maybe-live-out:
 value: <1 p1 @0> (size=4096,offset=0): f32[1024]{0}
allocation 2: size 8192, color 5, maybe-live-out:
 value: <2 out @0> (size=8192,offset=0): f32[2048]{0:S(5)}
allocation 3: size 16, output shape is |(f32[2048], f32[1024])|, maybe-live-out:
 value: <3 tuple @0> (size=16,offset=0): (f32[2048]{0:S(5)}, f32[1024]{0})
allocation 4: size 65536, color 5, preallocated-temp:
 value: <4 copy-start.1 @0> (size=65536,offset=0): f32[16384]{0:S(5)}
allocation 5: size 1024, preallocated-temp:
 value: <5 fusion @0> (size=1024,offset=0): f32[256]{0}
)";
  auto ba = parse_buffer_assignment(kText);
  ASSERT_TRUE(ba.ok()) << ba.error().message();
  EXPECT_EQ(ba->allocations[0].color, 5u);
  EXPECT_EQ(ba->allocations[1].color, 0u);
  EXPECT_EQ(ba->argument_bytes, 4096u);
  EXPECT_EQ(ba->host_argument_bytes, 4096u);
  EXPECT_EQ(ba->alias_bytes, 4096u);
  EXPECT_EQ(ba->host_alias_bytes, 0u);
  EXPECT_EQ(ba->output_bytes, 4096u + 16);
  EXPECT_EQ(ba->host_output_bytes, 8192u);
  EXPECT_EQ(ba->temp_bytes, 1024u);
  EXPECT_EQ(ba->host_temp_bytes, 65536u);
  ASSERT_EQ(ba->temp_values().size(), 1u);  // the device's only
  EXPECT_EQ(ba->temp_values()[0].name, "fusion");
  EXPECT_FALSE(parse_buffer_assignment("BufferAssignment:\nallocation 0: size 8, color x, page 0:\n").ok());
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
