// libmemfit_alloc.so as a program loads it (dlopen, the C symbols PyTorch's CUDAPluggableAllocator asks for),
// on a simulated device so it runs without a GPU.
#include "memfit/c/memfit_alloc.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

namespace {

struct Lib {
  void* handle = nullptr;
  decltype(&memfit_alloc) alloc = nullptr;
  decltype(&memfit_free) free = nullptr;
  decltype(&memfit_stats_json) stats = nullptr;
  decltype(&memfit_last_error) last_error = nullptr;
  decltype(&memfit_reset_peak) reset_peak = nullptr;
  decltype(&memfit_empty_cache) empty_cache = nullptr;
};

Lib load() {
  // Configured by the environment at the first allocation, like JAX at its first array.
  ::setenv("MEMFIT_SIMULATED_BYTES", "8GiB", 1);
  ::setenv("XLA_PYTHON_CLIENT_PREALLOCATE", "false", 1);
  ::setenv("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.5", 1);
  Lib lib;
  lib.handle = ::dlopen(MEMFIT_ALLOC_LIBRARY, RTLD_NOW | RTLD_LOCAL);
  EXPECT_NE(lib.handle, nullptr) << ::dlerror();
  if (lib.handle == nullptr) return lib;
  lib.alloc = reinterpret_cast<decltype(lib.alloc)>(::dlsym(lib.handle, "memfit_alloc"));
  lib.free = reinterpret_cast<decltype(lib.free)>(::dlsym(lib.handle, "memfit_free"));
  lib.stats = reinterpret_cast<decltype(lib.stats)>(::dlsym(lib.handle, "memfit_stats_json"));
  lib.last_error = reinterpret_cast<decltype(lib.last_error)>(::dlsym(lib.handle, "memfit_last_error"));
  lib.reset_peak = reinterpret_cast<decltype(lib.reset_peak)>(::dlsym(lib.handle, "memfit_reset_peak"));
  lib.empty_cache = reinterpret_cast<decltype(lib.empty_cache)>(::dlsym(lib.handle, "memfit_empty_cache"));
  return lib;
}

nlohmann::json stats(const Lib& lib, int device) {
  std::string text(4096, '\0');
  const int n = lib.stats(device, text.data(), text.size());
  EXPECT_GT(n, 0);
  text.resize(static_cast<size_t>(n));
  return nlohmann::json::parse(text);
}

std::string last_error(const Lib& lib) {
  std::string text(8192, '\0');
  const int n = lib.last_error(text.data(), text.size());
  text.resize(static_cast<size_t>(std::min<int>(n, 8191)));
  return text;
}

TEST(CApi, AllocatesFreesAndReportsLikeJax) {
  const Lib lib = load();
  ASSERT_TRUE(lib.alloc && lib.free && lib.stats && lib.last_error && lib.reset_peak && lib.empty_cache);
  EXPECT_EQ(lib.stats(0, nullptr, 0), -1);  // no allocator before the first allocation
  void* a = lib.alloc(1 << 20, 0, nullptr);
  void* b = lib.alloc(3 << 20, 0, nullptr);
  ASSERT_NE(a, nullptr) << last_error(lib);
  ASSERT_NE(b, nullptr);
  EXPECT_NE(a, b);
  auto s = stats(lib, 0);
  EXPECT_EQ(s["num_allocs"], 2);
  // XLA's BFC counts whole chunks: the 3 MiB request gets the 4 MiB region it grew, unsplit (the remainder
  // is under both split thresholds).
  EXPECT_EQ(s["bytes_in_use"], (1 << 20) + (4 << 20));
  EXPECT_EQ(s["bytes_limit"], 4294967296);  // 0.5 x 8 GiB, as XLA_PYTHON_CLIENT_MEM_FRACTION says
  lib.free(b, 3 << 20, 0, nullptr);
  lib.reset_peak(0);
  s = stats(lib, 0);
  EXPECT_EQ(s["bytes_in_use"], 1 << 20);
  EXPECT_EQ(s["peak_bytes_in_use"], 1 << 20);
  lib.free(a, 1 << 20, 0, nullptr);
  EXPECT_EQ(stats(lib, 0)["bytes_in_use"], 0);
}

TEST(CApi, OutOfMemoryIsNullWithTheReport) {
  const Lib lib = load();
  void* big = lib.alloc(int64_t{6} << 30, 0, nullptr);  // over the 4 GiB limit
  EXPECT_EQ(big, nullptr);
  const std::string report = last_error(lib);
  EXPECT_NE(report.find("GPU_0_bfc"), std::string::npos) << report;
  EXPECT_NE(report.find("6.00GiB"), std::string::npos) << report;
  EXPECT_EQ(lib.alloc(-5, 0, nullptr), nullptr);
  EXPECT_NE(last_error(lib).find("negative"), std::string::npos);
  EXPECT_EQ(lib.alloc(1024, 999, nullptr), nullptr);
  EXPECT_NE(last_error(lib).find("out of range"), std::string::npos);
  lib.free(nullptr, 0, 0, nullptr);  // a no-op, as cudaFree(nullptr)
}

TEST(CApi, EachDeviceHasItsOwnAllocator) {
  const Lib lib = load();
  void* p = lib.alloc(4096, 1, nullptr);
  ASSERT_NE(p, nullptr) << last_error(lib);
  EXPECT_EQ(stats(lib, 1)["num_allocs"], 1);
  lib.free(p, 4096, 1, nullptr);
}

TEST(CApi, VmmMapsPagesOnlyWhileBuffersLive) {
  const Lib lib = load();
  ::setenv("XLA_PYTHON_CLIENT_ALLOCATOR", "vmm", 1);  // read at device 3's first allocation
  void* p = lib.alloc(3 << 20, 3, nullptr);
  ::unsetenv("XLA_PYTHON_CLIENT_ALLOCATOR");
  ASSERT_NE(p, nullptr) << last_error(lib);
  auto s = stats(lib, 3);
  EXPECT_EQ(s["bytes_in_use"], 3 << 20);
  EXPECT_EQ(s["pool_bytes"], 4 << 20);      // two 2 MiB pages behind 3 MiB
  EXPECT_EQ(s["bytes_limit"], 4294967296);  // the fraction caps what may be mapped
  EXPECT_EQ(lib.alloc(int64_t{5} << 30, 3, nullptr), nullptr);
  EXPECT_NE(last_error(lib).find("GPU_3_vmm"), std::string::npos) << last_error(lib);
  lib.free(p, 3 << 20, 3, nullptr);
  s = stats(lib, 3);
  EXPECT_EQ(s["pool_bytes"], 4 << 20);  // freed pages stay mapped, cached for the next allocation
  void* again = lib.alloc(3 << 20, 3, nullptr);
  EXPECT_EQ(again, p);  // the same place, on the cached pages: no device call
  EXPECT_EQ(stats(lib, 3)["pool_bytes"], 4 << 20);
  lib.free(again, 3 << 20, 3, nullptr);
  EXPECT_EQ(lib.empty_cache(3), 0);  // torch.cuda.empty_cache(): the cache goes back to the device
  s = stats(lib, 3);
  EXPECT_EQ(s["pool_bytes"], 0);
  EXPECT_EQ(s["peak_pool_bytes"], 4 << 20);
  EXPECT_EQ(lib.empty_cache(63), -1);       // no allocator there yet
  void* bfc = lib.alloc(4096, 5, nullptr);  // device 5: the default BFC pool
  ASSERT_NE(bfc, nullptr) << last_error(lib);
  EXPECT_EQ(lib.empty_cache(5), 0);  // it keeps no cache apart from its pool: nothing to do
  lib.free(bfc, 4096, 5, nullptr);
}

TEST(CApi, VmmCacheBoundFromTheEnvironment) {
  const Lib lib = load();
  ::setenv("XLA_PYTHON_CLIENT_ALLOCATOR", "vmm", 1);
  ::setenv("MEMFIT_VMM_CACHE", "0", 1);  // give pages back as soon as their work is done
  void* p = lib.alloc(3 << 20, 4, nullptr);
  ::unsetenv("XLA_PYTHON_CLIENT_ALLOCATOR");
  ::unsetenv("MEMFIT_VMM_CACHE");
  ASSERT_NE(p, nullptr) << last_error(lib);
  lib.free(p, 3 << 20, 4, nullptr);
  EXPECT_EQ(stats(lib, 4)["pool_bytes"], 0);
}

}  // namespace
