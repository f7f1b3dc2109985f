#include "memfit/core/dtype.h"

#include <fmt/format.h>

#include <array>

#include "memfit/core/checked.h"

namespace memfit {
namespace {

struct TypeInfo {
  PrimitiveType type;
  std::string_view name;
  uint32_t storage_bits;
  uint32_t value_bits;
  bool floating;
};

constexpr std::array<TypeInfo, 31> kTypes = {{
    {PrimitiveType::kPred, "pred", 8, 8, false},
    {PrimitiveType::kS2, "s2", 8, 2, false},
    {PrimitiveType::kS4, "s4", 8, 4, false},
    {PrimitiveType::kS8, "s8", 8, 8, false},
    {PrimitiveType::kS16, "s16", 16, 16, false},
    {PrimitiveType::kS32, "s32", 32, 32, false},
    {PrimitiveType::kS64, "s64", 64, 64, false},
    {PrimitiveType::kU2, "u2", 8, 2, false},
    {PrimitiveType::kU4, "u4", 8, 4, false},
    {PrimitiveType::kU8, "u8", 8, 8, false},
    {PrimitiveType::kU16, "u16", 16, 16, false},
    {PrimitiveType::kU32, "u32", 32, 32, false},
    {PrimitiveType::kU64, "u64", 64, 64, false},
    {PrimitiveType::kF16, "f16", 16, 16, true},
    {PrimitiveType::kBF16, "bf16", 16, 16, true},
    {PrimitiveType::kF32, "f32", 32, 32, true},
    {PrimitiveType::kF64, "f64", 64, 64, true},
    {PrimitiveType::kC64, "c64", 64, 64, true},
    {PrimitiveType::kC128, "c128", 128, 128, true},
    {PrimitiveType::kF8E5M2, "f8e5m2", 8, 8, true},
    {PrimitiveType::kF8E4M3, "f8e4m3", 8, 8, true},
    {PrimitiveType::kF8E4M3FN, "f8e4m3fn", 8, 8, true},
    {PrimitiveType::kF8E4M3B11FNUZ, "f8e4m3b11fnuz", 8, 8, true},
    {PrimitiveType::kF8E5M2FNUZ, "f8e5m2fnuz", 8, 8, true},
    {PrimitiveType::kF8E4M3FNUZ, "f8e4m3fnuz", 8, 8, true},
    {PrimitiveType::kF8E3M4, "f8e3m4", 8, 8, true},
    {PrimitiveType::kF8E8M0FNU, "f8e8m0fnu", 8, 8, true},
    {PrimitiveType::kF4E2M1FN, "f4e2m1fn", 8, 4, true},
    {PrimitiveType::kToken, "token", 0, 0, false},
    {PrimitiveType::kTuple, "tuple", 0, 0, false},
    {PrimitiveType::kOpaque, "opaque", 0, 0, false},
}};

const TypeInfo& info(PrimitiveType type) { return kTypes[static_cast<size_t>(type)]; }

}  // namespace

std::optional<PrimitiveType> parse_primitive_type(std::string_view name) {
  for (const TypeInfo& t : kTypes) {
    if (t.name == name) return t.type;
  }
  return std::nullopt;
}

std::string_view primitive_type_name(PrimitiveType type) { return info(type).name; }
uint32_t element_storage_bits(PrimitiveType type) { return info(type).storage_bits; }
uint32_t element_value_bits(PrimitiveType type) { return info(type).value_bits; }
bool is_floating_point(PrimitiveType type) { return info(type).floating; }
bool is_array_type(PrimitiveType type) {
  return type != PrimitiveType::kToken && type != PrimitiveType::kTuple && type != PrimitiveType::kOpaque;
}

Expected<uint64_t> array_bytes(PrimitiveType type, std::span<const uint64_t> dims,
                               uint32_t packed_element_bits) {
  if (!is_array_type(type)) return uint64_t{0};
  uint64_t elements = 1;
  for (uint64_t d : dims) {
    auto next = checked_mul(elements, d);
    if (!next) return invalid_argument("array element count overflows 64 bits");
    elements = *next;
  }
  const uint32_t bits = packed_element_bits != 0 ? packed_element_bits : element_storage_bits(type);
  if (bits % 8 == 0) {
    auto bytes = checked_mul(elements, bits / 8);
    if (!bytes)
      return invalid_argument(fmt::format("array of {} x {} overflows 64 bits", elements, info(type).name));
    return *bytes;
  }
  // Packed sub-byte elements: ceil(elements * bits / 8) without overflowing the product.
  const uint128_t total_bits = static_cast<uint128_t>(elements) * bits;
  return static_cast<uint64_t>((total_bits + 7) / 8);
}

}  // namespace memfit
