// memfit/core/checked.h - checked arithmetic for every size or offset read from a file.
//
// Sizes in memfit are unsigned 64-bit byte counts. Anything derived from untrusted input (a shape in an
// HLO file, a size in a trace) goes through these helpers so that overflow becomes an error, never a wrap.
#pragma once

#include <cstdint>
#include <optional>

namespace memfit {

// 128-bit intermediate for exact products of two 64-bit sizes (GCC/Clang extension).
__extension__ typedef unsigned __int128 uint128_t;

inline std::optional<uint64_t> checked_add(uint64_t a, uint64_t b) {
  uint64_t r;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}

inline std::optional<uint64_t> checked_mul(uint64_t a, uint64_t b) {
  uint64_t r;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

// a + b, or the largest uint64_t when it wraps (sums of counters read from other processes).
inline uint64_t saturating_add(uint64_t a, uint64_t b) { return checked_add(a, b).value_or(~uint64_t{0}); }

// Rounds `value` up to a multiple of `alignment` (> 0); nullopt on overflow.
inline std::optional<uint64_t> checked_round_up(uint64_t value, uint64_t alignment) {
  const uint64_t rem = value % alignment;
  if (rem == 0) return value;
  return checked_add(value, alignment - rem);
}

// Rounding for sizes already known to be far from overflow (internal use).
constexpr uint64_t round_up(uint64_t value, uint64_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

}  // namespace memfit
