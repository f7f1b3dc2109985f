#include "memfit/core/dtype.h"

#include <gtest/gtest.h>

#include <vector>

namespace memfit {
namespace {

uint64_t bytes_of(std::string_view type, std::vector<uint64_t> dims, uint32_t packed_bits = 0) {
  auto t = parse_primitive_type(type);
  EXPECT_TRUE(t.has_value()) << type;
  auto b = array_bytes(*t, dims, packed_bits);
  EXPECT_TRUE(b.ok());
  return b.ok() ? *b : ~uint64_t{0};
}

TEST(Dtype, ElementSizesOfFactsSection5) {
  for (auto name : {"pred", "s8", "u8", "f8e5m2", "f8e4m3fn", "f8e4m3b11fnuz", "f8e5m2fnuz", "f8e4m3fnuz",
                    "f8e4m3", "f8e3m4", "f8e8m0fnu"}) {
    EXPECT_EQ(bytes_of(name, {1}), 1u) << name;
  }
  for (auto name : {"s16", "u16", "f16", "bf16"}) EXPECT_EQ(bytes_of(name, {1}), 2u) << name;
  for (auto name : {"s32", "u32", "f32"}) EXPECT_EQ(bytes_of(name, {1}), 4u) << name;
  for (auto name : {"s64", "u64", "f64", "c64"}) EXPECT_EQ(bytes_of(name, {1}), 8u) << name;
  EXPECT_EQ(bytes_of("c128", {1}), 16u);
  EXPECT_EQ(bytes_of("token", {}), 0u);
}

TEST(Dtype, ArraysMultiplyDimensions) {
  EXPECT_EQ(bytes_of("f32", {2048, 1024}), 8u << 20);
  EXPECT_EQ(bytes_of("bf16", {8, 1024, 50257}), 8ull * 1024 * 50257 * 2);
  EXPECT_EQ(bytes_of("f32", {}), 4u);  // a scalar
  EXPECT_EQ(bytes_of("f32", {0, 7}), 0u);
}

TEST(Dtype, SubByteTypesTakeAByteUnlessPacked) {
  EXPECT_EQ(bytes_of("s4", {1000}), 1000u);
  EXPECT_EQ(bytes_of("s4", {1000}, 4), 500u);
  EXPECT_EQ(bytes_of("u4", {3}, 4), 2u);  // ceil(12 bits / 8)
  EXPECT_EQ(bytes_of("s2", {5}, 2), 2u);
  EXPECT_EQ(bytes_of("f4e2m1fn", {7}, 4), 4u);
}

TEST(Dtype, OverflowIsAnError) {
  const std::vector<uint64_t> dims = {1ull << 40, 1ull << 30};
  auto r = array_bytes(PrimitiveType::kF32, dims);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument);
  const std::vector<uint64_t> bytes_overflow = {1ull << 62};
  EXPECT_FALSE(array_bytes(PrimitiveType::kF32, bytes_overflow).ok());
}

TEST(Dtype, NamesRoundTripForEveryType) {
  for (int i = 0; i <= static_cast<int>(PrimitiveType::kOpaque); ++i) {
    const auto t = static_cast<PrimitiveType>(i);
    EXPECT_EQ(parse_primitive_type(primitive_type_name(t)), t) << i;
  }
  EXPECT_FALSE(parse_primitive_type("f31").has_value());
  EXPECT_FALSE(parse_primitive_type("F32").has_value());  // XLA spells types in lower case
}

}  // namespace
}  // namespace memfit
