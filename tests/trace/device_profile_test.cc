// JAX's device memory profile: profiles written here with the protobuf library (pprof's Profile message,
// laid out as jaxlib's PyClient::HeapProfile writes it) and gzipped as JAX saves them, read back exactly.
#include "memfit/trace/device_profile.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <random>

#include "profile_writer.h"

namespace memfit {
namespace {

constexpr uint64_t kGiB = 1ull << 30;

using testing::gzip;
using testing::ProfileWriter;
using testing::ten_gib_array;

TEST(DeviceProfile, TenGibArrayReadsAsTenGibOfBuffersOnItsDevice) {
  auto p = parse_device_memory_profile(ten_gib_array().saved());
  ASSERT_TRUE(p.ok()) << p.error().message();
  EXPECT_EQ(p->buffer_bytes, 10 * kGiB);
  EXPECT_EQ(p->executable_bytes, 1u << 20);
  EXPECT_EQ(p->device_buffer_bytes("cuda:0"), 10 * kGiB);
  EXPECT_EQ(p->device_buffer_bytes(), 10 * kGiB);
  ASSERT_EQ(p->devices.size(), 2u);  // "" (the executable has no device label) and cuda:0
  EXPECT_EQ(p->devices[1].device, "cuda:0");
  EXPECT_EQ(p->devices[1].buffer_count, 1u);
  ASSERT_EQ(p->sites.size(), 2u);
  EXPECT_EQ(p->sites[0].frames,
            (std::vector<std::string>{"init_params (model.py:12)", "<module> (train.py:3)"}));
  EXPECT_EQ(p->sites[1].kind, "executable");
}

TEST(DeviceProfile, RandomProfilesRoundTripExactly) {
  std::mt19937_64 rng(7);
  for (int round = 0; round < 20; ++round) {
    ProfileWriter w;
    std::vector<uint64_t> frames;
    for (int i = 0; i < 8; ++i) frames.push_back(w.frame(fmt::format("f{}", i), "file.py", i + 1));
    std::map<std::string, uint64_t> buffer_bytes;
    std::map<std::string, uint64_t> buffer_count;
    uint64_t exe = 0;
    for (int i = 0; i < 200; ++i) {
      const std::string device = fmt::format("cuda:{}", rng() % 4);
      const auto bytes = static_cast<int64_t>(rng() % (64ull << 20));
      std::vector<uint64_t> stack = {frames[rng() % 8], frames[rng() % 8]};
      if (rng() % 10 == 0) {
        w.sample(stack, 1, bytes, "executable", "");
        exe += static_cast<uint64_t>(bytes);
      } else {
        w.sample(stack, 1, bytes, "buffer", device);
        buffer_bytes[device] += static_cast<uint64_t>(bytes);
        ++buffer_count[device];
      }
    }
    auto p = parse_device_memory_profile(round % 2 ? w.saved() : w.proto().SerializeAsString());
    ASSERT_TRUE(p.ok()) << p.error().message();
    EXPECT_EQ(p->executable_bytes, exe);
    for (const auto& [device, bytes] : buffer_bytes) {
      EXPECT_EQ(p->device_buffer_bytes(device), bytes) << device;
      const std::string& name = device;  // clang 14 cannot capture a structured binding
      const auto d = std::find_if(p->devices.begin(), p->devices.end(),
                                  [&](const ProfileDevice& x) { return x.device == name; });
      ASSERT_NE(d, p->devices.end());
      EXPECT_EQ(d->buffer_count, buffer_count[device]);
    }
    uint64_t sites = 0;
    for (const ProfileSite& s : p->sites) sites += s.bytes;
    EXPECT_EQ(sites, p->buffer_bytes + p->executable_bytes);
  }
}

TEST(DeviceProfile, DiffNamesWhatGrew) {
  ProfileWriter before = ten_gib_array();
  ProfileWriter after = ten_gib_array();
  const uint64_t leak = after.frame("cache_activations", "train.py", 40);
  const uint64_t module = after.frame("<module>", "train.py", 3);
  after.sample({leak, module}, 3, static_cast<int64_t>(3 * kGiB), "buffer", "cuda:0");
  const auto a = parse_device_memory_profile(before.saved());
  const auto b = parse_device_memory_profile(after.saved());
  ASSERT_TRUE(a.ok() && b.ok());
  const ProfileDiff d = diff_profiles(*a, *b);
  EXPECT_EQ(d.buffer_delta_bytes, static_cast<int64_t>(3 * kGiB));
  ASSERT_EQ(d.grown.size(), 1u);
  EXPECT_EQ(d.grown[0].site.frames.front(), "cache_activations (train.py:40)");
  EXPECT_EQ(d.grown[0].base_bytes, 0u);
  EXPECT_TRUE(d.shrunk.empty());
  EXPECT_EQ(diff_profiles(*b, *a).shrunk.size(), 1u);
}

TEST(DeviceProfile, BadInputIsAnError) {
  EXPECT_FALSE(parse_device_memory_profile("not a protobuf at all \xff\xff\xff").ok());
  EXPECT_FALSE(parse_device_memory_profile(gzip("\x08\x96\x01 garbage")).ok());
  {
    ProfileWriter w;
    w.proto().clear_sample_type();
    auto r = parse_device_memory_profile(w.proto().SerializeAsString());
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().message().find("no bytes sample type"), std::string::npos);
  }
  {
    ProfileWriter w = ten_gib_array();
    w.proto().mutable_sample(0)->mutable_label(0)->set_key(9999);
    EXPECT_NE(parse_device_memory_profile(w.saved()).error().message().find("string index 9999"),
              std::string::npos);
  }
  {
    ProfileWriter w = ten_gib_array();
    w.proto().mutable_sample(0)->add_location_id(77);
    EXPECT_NE(parse_device_memory_profile(w.saved()).error().message().find("location 77"),
              std::string::npos);
  }
  {
    ProfileWriter w = ten_gib_array();
    w.proto().mutable_sample(0)->set_value(1, -5);
    EXPECT_FALSE(parse_device_memory_profile(w.saved()).ok());
  }
}

}  // namespace
}  // namespace memfit
