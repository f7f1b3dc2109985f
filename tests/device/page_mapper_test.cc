// The page mapper over a DeviceMemory (the simulated device's VMM backend): mapped bytes are device
// reservations, unmapped ones come back, and a host-backed range reads as fresh zeros after an unmap.
#include "memfit/device/page_mapper.h"

#include <gtest/gtest.h>

#include <cstring>

#include "memfit/device/simulated_device.h"

namespace memfit {
namespace {

constexpr uint64_t kPage = 2ull << 20;

TEST(DevicePageMapper, MapsDeviceReservationsAndGivesThemBack) {
  auto device = std::move(SimulatedDevice::create({64 * kPage, 512, false, "sim"})).value();
  auto mapper = make_device_page_mapper(*device, kPage);
  EXPECT_EQ(mapper->granularity_bytes(), kPage);
  auto range = mapper->reserve_range(256 * kPage);  // larger than the device: address space only
  ASSERT_TRUE(range.ok()) << range.error().message();
  EXPECT_EQ(*range % kPage, 0u);
  ASSERT_TRUE(mapper->map(*range + 3 * kPage, 2 * kPage).ok());
  EXPECT_EQ(device->free_bytes(), 62 * kPage);
  const Status misaligned = mapper->map(*range + kPage / 2, kPage);
  ASSERT_FALSE(misaligned.ok());
  EXPECT_EQ(misaligned.error().code(), ErrorCode::kFailedPrecondition);
  EXPECT_EQ(device->free_bytes(), 62 * kPage);                // the refused mapping gave its reservation back
  EXPECT_FALSE(mapper->map(*range + 4 * kPage, kPage).ok());  // inside a mapping already there
  EXPECT_FALSE(mapper->unmap(*range + 3 * kPage, kPage).ok());  // only part of one
  EXPECT_FALSE(mapper->unmap(*range + 4 * kPage, kPage).ok());
  const Status over = mapper->map(*range + 10 * kPage, 63 * kPage);  // more than the device has left
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.error().code(), ErrorCode::kResourceExhausted);
  ASSERT_TRUE(mapper->unmap(*range + 3 * kPage, 2 * kPage).ok());
  EXPECT_EQ(device->free_bytes(), 64 * kPage);
  const Status twice = mapper->unmap(*range + 3 * kPage, 2 * kPage);
  ASSERT_FALSE(twice.ok());
  EXPECT_EQ(twice.error().code(), ErrorCode::kFailedPrecondition);
  EXPECT_TRUE(mapper->free_range(*range, 256 * kPage).ok());
}

TEST(DevicePageMapper, HostBackedRangeReadsZerosAfterUnmap) {
  auto device = std::move(SimulatedDevice::create({8 * kPage, 512, true, "sim"})).value();
  auto mapper = make_device_page_mapper(*device, kPage);
  auto range = mapper->reserve_range(16 * kPage);
  ASSERT_TRUE(range.ok()) << range.error().message();
  auto* bytes = reinterpret_cast<unsigned char*>(*range + kPage);
  ASSERT_TRUE(mapper->map(*range + kPage, kPage).ok());
  std::memset(bytes, 0xab, kPage);
  EXPECT_EQ(bytes[kPage - 1], 0xab);
  ASSERT_TRUE(mapper->unmap(*range + kPage, kPage).ok());
  ASSERT_TRUE(mapper->map(*range + kPage, kPage).ok());
  EXPECT_EQ(bytes[0], 0);
  EXPECT_EQ(bytes[kPage - 1], 0);
  ASSERT_TRUE(mapper->unmap(*range + kPage, kPage).ok());
  EXPECT_TRUE(mapper->free_range(*range, 16 * kPage).ok());
}

}  // namespace
}  // namespace memfit
