// memfit/core/dtype.h - XLA primitive types and the bytes an array of them occupies.
//
// Sizes follow XLA's ShapeUtil (see ../shared/FACTS.md §5): pred, s8, u8 and every f8 type take 1 byte;
// 16-bit types 2; 32-bit 4; 64-bit and c64 8; c128 16; token 0. Sub-byte types (s2, u2, s4, u4, f4e2m1fn)
// take one byte per element unless the layout packs them (`{1,0:E(4)}`), in which case an array takes
// ceil(elements * bits / 8) bytes. A tuple is a table of 8-byte pointers, one per element.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "memfit/core/status.h"

namespace memfit {

enum class PrimitiveType : uint8_t {
  kPred,
  kS2,
  kS4,
  kS8,
  kS16,
  kS32,
  kS64,
  kU2,
  kU4,
  kU8,
  kU16,
  kU32,
  kU64,
  kF16,
  kBF16,
  kF32,
  kF64,
  kC64,
  kC128,
  kF8E5M2,
  kF8E4M3,
  kF8E4M3FN,
  kF8E4M3B11FNUZ,
  kF8E5M2FNUZ,
  kF8E4M3FNUZ,
  kF8E3M4,
  kF8E8M0FNU,
  kF4E2M1FN,
  kToken,
  kTuple,
  kOpaque,
};

inline constexpr uint64_t kTuplePointerBytes = 8;

// Parses XLA's lower-case spelling ("f32", "bf16", "f8e4m3fn", "token", ...).
std::optional<PrimitiveType> parse_primitive_type(std::string_view name);
std::string_view primitive_type_name(PrimitiveType type);

// Bits of one element as XLA stores it unpacked: 8 for sub-byte types, 0 for token/tuple/opaque.
uint32_t element_storage_bits(PrimitiveType type);
// Bits of the value itself (4 for s4); equals element_storage_bits for byte-sized types.
uint32_t element_value_bits(PrimitiveType type);
bool is_array_type(PrimitiveType type);
bool is_floating_point(PrimitiveType type);

// Bytes of a dense array with the given dimensions. `packed_element_bits` is the layout's `E(n)` (0 when
// the layout does not say). Checked: overflow of the element count or of the byte count is an error.
Expected<uint64_t> array_bytes(PrimitiveType type, std::span<const uint64_t> dims,
                               uint32_t packed_element_bits = 0);

}  // namespace memfit
