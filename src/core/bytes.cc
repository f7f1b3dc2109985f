#include "memfit/core/bytes.h"

#include <fmt/format.h>

#include <array>
#include <cctype>

#include "memfit/core/checked.h"
#include "memfit/core/text.h"

namespace memfit {
namespace {

struct Unit {
  std::string_view name;  // lower-case spelling
  uint64_t multiplier;
};

constexpr uint64_t kKB = 1000;
constexpr std::array<Unit, 20> kUnits = {{
    {"", 1},
    {"b", 1},
    {"k", kKiB},
    {"kib", kKiB},
    {"kb", kKB},
    {"m", kMiB},
    {"mib", kMiB},
    {"mb", kKB* kKB},
    {"g", kGiB},
    {"gib", kGiB},
    {"gb", kKB* kKB* kKB},
    {"t", kTiB},
    {"tib", kTiB},
    {"tb", kKB* kKB* kKB* kKB},
    {"p", 1024 * kTiB},
    {"pib", 1024 * kTiB},
    {"pb", kKB* kKB* kKB* kKB* kKB},
    // XLA prints "16.00EiB" when a shape computation overflows; 1 EiB = 2^60 fits, 16 EiB does not.
    {"e", 1024 * 1024 * kTiB},
    {"eib", 1024 * 1024 * kTiB},
    {"eb", kKB* kKB* kKB* kKB* kKB* kKB},
}};

std::string quote(std::string_view text) { return excerpt(text); }

// `saturate`: a well-formed size above 2^64-1 is 2^64-1 rather than an error.
Expected<uint64_t> parse_size(std::string_view text, bool saturate) {
  const std::string_view original = text;
  auto bad = [&](std::string_view why) {
    return invalid_argument(fmt::format("invalid size {}: {}", quote(original), why));
  };
  auto too_large = [&]() -> Expected<uint64_t> {
    if (saturate) return ~uint64_t{0};
    return bad("too large (the limit is 2^64-1 bytes)");
  };
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) text.remove_prefix(1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.remove_suffix(1);
  if (text.empty()) return bad("empty");
  if (text.front() == '-') return bad("sizes cannot be negative");
  if (text.front() == '+') text.remove_prefix(1);

  // Integer part and fraction digits, kept exact: value = (int_part + frac / 10^frac_digits) * unit.
  uint128_t int_part = 0;
  uint128_t frac = 0;
  uint128_t frac_scale = 1;
  size_t i = 0;
  size_t digits = 0;
  constexpr uint128_t kMax = ~uint64_t{0};
  for (; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])); ++i, ++digits) {
    int_part = int_part * 10 + static_cast<unsigned>(text[i] - '0');
    if (int_part > kMax) {
      // The rest must still be a size: skip the remaining digits, then read the unit as usual.
      if (!saturate) return too_large();
      int_part = kMax + 1;
    }
  }
  if (i < text.size() && text[i] == '.') {
    ++i;
    for (; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])); ++i, ++digits) {
      if (frac_scale < (uint128_t{1} << 64)) {  // digits past ~19 cannot change whole bytes
        frac = frac * 10 + static_cast<unsigned>(text[i] - '0');
        frac_scale *= 10;
      }
    }
  }
  if (digits == 0) return bad("expected a number, optionally followed by a unit such as GiB");
  while (i < text.size() && text[i] == ' ') ++i;
  std::string unit;
  for (; i < text.size(); ++i)
    unit.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(text[i]))));
  for (const Unit& u : kUnits) {
    if (u.name != unit) continue;
    if (int_part > kMax / u.multiplier) return too_large();
    const uint128_t total = int_part * u.multiplier + frac * u.multiplier / frac_scale;
    if (total > kMax) return too_large();
    return static_cast<uint64_t>(total);
  }
  return bad(fmt::format("unknown unit {} (use B, KiB, MiB, GiB, TiB, PiB, EiB, or KB, MB, GB, TB, PB, EB)",
                         quote(unit)));
}

}  // namespace

Expected<uint64_t> parse_bytes(std::string_view text) { return parse_size(text, false); }

Expected<uint64_t> parse_bytes_saturating(std::string_view text) { return parse_size(text, true); }

std::string format_bytes(uint64_t size_bytes) {
  static constexpr std::array<std::string_view, 6> kNames = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (size_bytes < kKiB) return fmt::format("{}B", size_bytes);
  double value = static_cast<double>(size_bytes) / 1024.0;
  size_t unit = 0;
  while (value >= 1024.0 && unit + 1 < kNames.size()) {
    value /= 1024.0;
    ++unit;
  }
  return fmt::format("{:.2f}{}", value, kNames[unit]);
}

std::string format_percent(uint64_t part, uint64_t whole) {
  if (whole == 0) return "n/a";
  return fmt::format("{:.1f}%", 100.0 * static_cast<double>(part) / static_cast<double>(whole));
}

}  // namespace memfit
