// memfit/core/bytes.h - byte counts: parse what users type, print what JAX logs print.
//
// Parsing accepts an integer or decimal number and an optional unit, case-insensitive, with optional
// spaces between: `4096`, `512MiB`, `1.5 GB`, `80G`. Units:
//   B; KiB MiB GiB TiB PiB EiB (powers of 1024); KB MB GB TB PB EB (powers of 1000, as disk and GPU vendors
//   print them); K M G T P E alone mean the binary unit (as `numfmt --from=iec` and nvidia-smi's MiB do).
// A fractional result is rounded down to whole bytes. Negative numbers, garbage and values above
// 2^64-1 are errors. Arithmetic is exact (no floating point), so `1.1GiB` is 1181116006 bytes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "memfit/core/status.h"

namespace memfit {

inline constexpr uint64_t kKiB = 1024;
inline constexpr uint64_t kMiB = 1024 * kKiB;
inline constexpr uint64_t kGiB = 1024 * kMiB;
inline constexpr uint64_t kTiB = 1024 * kGiB;

Expected<uint64_t> parse_bytes(std::string_view text);

// The same, but a well-formed size of 2^64 bytes or more (XLA prints "16.00EiB" when a shape computation
// overflows) reads as 2^64-1, which prints as 16.00EiB again.
Expected<uint64_t> parse_bytes_saturating(std::string_view text);

// Human-readable IEC size as TSL's HumanReadableNumBytes prints it (and so JAX's logs):
// below 1 KiB "512B", otherwise two decimals and the largest unit that keeps the number >= 1:
// "2.00MiB", "104.85GiB", "139.80GiB".
std::string format_bytes(uint64_t size_bytes);

// Percentage `part / whole` with one decimal, e.g. "75.0%"; "n/a" when whole is 0.
std::string format_percent(uint64_t part, uint64_t whole);

}  // namespace memfit
