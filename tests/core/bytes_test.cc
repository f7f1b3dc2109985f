#include "memfit/core/bytes.h"

#include <gtest/gtest.h>

#include "memfit/core/device_catalog.h"

namespace memfit {
namespace {

uint64_t parsed(std::string_view text) {
  auto r = parse_bytes(text);
  EXPECT_TRUE(r.ok()) << text << ": " << (r.ok() ? "" : r.error().message());
  return r.ok() ? *r : 0;
}

std::string parse_error(std::string_view text) {
  auto r = parse_bytes(text);
  EXPECT_FALSE(r.ok()) << text << " parsed as " << (r.ok() ? *r : 0);
  return r.ok() ? "" : r.error().message();
}

TEST(ParseBytes, PlainIntegers) {
  EXPECT_EQ(parsed("4096"), 4096u);
  EXPECT_EQ(parsed("0"), 0u);
  EXPECT_EQ(parsed("150109880320"), 150109880320u);
  EXPECT_EQ(parsed("18446744073709551615"), 18446744073709551615u);
}

TEST(ParseBytes, BinaryAndDecimalUnits) {
  EXPECT_EQ(parsed("1GiB"), 1073741824u);
  EXPECT_EQ(parsed("512MiB"), 536870912u);
  EXPECT_EQ(parsed("1.5 GB"), 1500000000u);
  EXPECT_EQ(parsed("80G"), 80ull * 1073741824ull);
  EXPECT_EQ(parsed("2 kib"), 2048u);
  EXPECT_EQ(parsed("3KB"), 3000u);
  EXPECT_EQ(parsed("1TiB"), 1099511627776u);
  EXPECT_EQ(parsed("7B"), 7u);
  EXPECT_EQ(parsed("  64 MiB  "), 64u << 20);
}

TEST(ParseBytes, FractionsAreExactAndRoundDown) {
  EXPECT_EQ(parsed("1.5GiB"), 1610612736u);
  EXPECT_EQ(parsed("1.1GiB"), 1181116006u);  // 1181116006.4 rounded down
  EXPECT_EQ(parsed("0.5KiB"), 512u);
  EXPECT_EQ(parsed(".25MiB"), 262144u);
  EXPECT_EQ(parsed("104.85GiB"), 112581830246u);
  EXPECT_EQ(parsed("1EiB"), 1ull << 60);
  EXPECT_EQ(parsed("15.5 EiB"), 31ull << 59);
  EXPECT_EQ(parsed("2EB"), 2000000000000000000ull);
}

TEST(ParseBytes, RejectsNegativesGarbageAndOverflow) {
  EXPECT_NE(parse_error("-1").find("negative"), std::string::npos);
  EXPECT_NE(parse_error("-1GiB").find("negative"), std::string::npos);
  EXPECT_NE(parse_error("abc").find("expected a number"), std::string::npos);
  EXPECT_NE(parse_error("").find("empty"), std::string::npos);
  EXPECT_NE(parse_error("12 parsecs").find("unknown unit"), std::string::npos);
  EXPECT_NE(parse_error("1.2.3").find("unknown unit"), std::string::npos);
  EXPECT_NE(parse_error("18446744073709551616").find("too large"), std::string::npos);
  // XLA prints 16.00EiB when a shape overflows: 2^64, one more than a byte count holds.
  EXPECT_NE(parse_error("16EiB").find("too large"), std::string::npos);
  EXPECT_NE(parse_error("16.00EiB").find("too large"), std::string::npos);
  // A megabyte of garbage is quoted by its first 200 characters, on one line.
  const std::string long_error = parse_error(std::string(1 << 20, 'x') + "\nGiB");
  EXPECT_LT(long_error.size(), 400u);
  EXPECT_NE(long_error.find("(1048580 bytes)"), std::string::npos);
  EXPECT_NE(parse_error("17179869184GiB").find("too large"), std::string::npos);
  EXPECT_NE(parse_error("99999999999999999999999999").find("too large"), std::string::npos);
  parse_error(".");
  parse_error("GiB");
}

TEST(ParseBytes, SaturatingReadsOverflowAsTheMaximum) {
  EXPECT_EQ(*parse_bytes_saturating("16.00EiB"), ~uint64_t{0});
  EXPECT_EQ(*parse_bytes_saturating("99999999999999999999999999 GiB"), ~uint64_t{0});
  EXPECT_EQ(*parse_bytes_saturating("1.5GiB"), 1610612736u);
  EXPECT_FALSE(parse_bytes_saturating("16 parsecs").ok());
  EXPECT_FALSE(parse_bytes_saturating("-1").ok());
}

TEST(FormatBytes, PrintsLikeJaxLogs) {
  EXPECT_EQ(format_bytes(0), "0B");
  EXPECT_EQ(format_bytes(512), "512B");
  EXPECT_EQ(format_bytes(1023), "1023B");
  EXPECT_EQ(format_bytes(1024), "1.00KiB");
  EXPECT_EQ(format_bytes(2 << 20), "2.00MiB");
  EXPECT_EQ(format_bytes(112583507968), "104.85GiB");  // the default pool on an H200
  EXPECT_EQ(format_bytes(150109880320), "139.80GiB");  // the H200 itself
  EXPECT_EQ(format_bytes(67550089216), "62.91GiB");    // the OOM request in FACTS.md
  EXPECT_EQ(format_bytes(66479423488), "61.91GiB");
  EXPECT_EQ(format_bytes(~uint64_t{0}), "16.00EiB");
}

TEST(FormatPercent, OneDecimal) {
  EXPECT_EQ(format_percent(3, 4), "75.0%");
  EXPECT_EQ(format_percent(1, 0), "n/a");
}

TEST(Capacity, KnownDevicesAndSizes) {
  EXPECT_EQ(*parse_capacity("h200"), 150109880320u);
  EXPECT_EQ(*parse_capacity("H200"), 150109880320u);
  EXPECT_EQ(*parse_capacity("80GiB"), 80ull << 30);
  EXPECT_FALSE(parse_capacity("0").ok());
  EXPECT_FALSE(parse_capacity("a100-ish").ok());
  // NVML's published totals less the driver's reservation measured on the H200 (644939776 B): within 0.3%
  // of the 79.11-79.25 GiB PyTorch reports for H100s.
  EXPECT_EQ(*parse_capacity("h100"), 81559ull * (1 << 20) - 644939776u);
  const double h100_gib = static_cast<double>(*parse_capacity("H100")) / (1ull << 30);
  EXPECT_GT(h100_gib, 79.11 * 0.997);
  EXPECT_LT(h100_gib, 79.25 * 1.003);
  EXPECT_LT(*parse_capacity("a100-40gb"), *parse_capacity("a100-80gb"));
  // An unknown name lists the ones memfit knows.
  const auto unknown = parse_capacity("h300");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.error().message().find("h100"), std::string::npos) << unknown.error().message();
}

}  // namespace
}  // namespace memfit
