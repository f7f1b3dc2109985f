#include "memfit/alloc/microbench.h"

#include <dlfcn.h>
#include <gnu/libc-version.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <memory>

#include "memfit/alloc/allocator_factory.h"
#include "memfit/device/simulated_device.h"

namespace memfit {
namespace {

// Keeps the compiler from removing an allocation whose result is unused.
inline void escape(void* p) { asm volatile("" : : "g"(p) : "memory"); }

template <typename PairFn>
double median_ns_per_pair(const MicrobenchOptions& o, PairFn pair) {
  // Warm up and calibrate: with pairs_per_sample 0, each sample lasts about 5 ms.
  uint64_t pairs = o.pairs_per_sample;
  if (pairs == 0) {
    uint64_t n = 0;
    const auto start = std::chrono::steady_clock::now();
    std::chrono::duration<double, std::nano> took{};
    while (took < std::chrono::milliseconds(2)) {
      pair();
      ++n;
      took = std::chrono::steady_clock::now() - start;
    }
    pairs = std::max<uint64_t>(10, static_cast<uint64_t>(5e6 / (took.count() / static_cast<double>(n))));
  } else {
    for (uint64_t i = 0; i < pairs / 10 + 1; ++i) pair();
  }
  std::vector<double> samples;
  for (int s = 0; s < o.samples; ++s) {
    const auto start = std::chrono::steady_clock::now();
    for (uint64_t i = 0; i < pairs; ++i) pair();
    const std::chrono::duration<double, std::nano> took = std::chrono::steady_clock::now() - start;
    samples.push_back(took.count() / static_cast<double>(pairs));
  }
  std::nth_element(samples.begin(), samples.begin() + samples.size() / 2, samples.end());
  return samples[samples.size() / 2];
}

}  // namespace

std::string process_malloc() {
  // A sanitizer's runtime takes malloc over whatever the executable links (memfit_malloc is left out there).
#if defined(MEMFIT_SANITIZER_ADDRESS)
  return "AddressSanitizer's";
#elif defined(MEMFIT_SANITIZER_THREAD)
  return "ThreadSanitizer's";
#endif
  // jemalloc's control interface, looked up rather than linked: this library does not depend on jemalloc.
  using Mallctl = int (*)(const char*, void*, size_t*, void*, size_t);
  if (auto mallctl = reinterpret_cast<Mallctl>(dlsym(RTLD_DEFAULT, "mallctl"))) {
    const char* version = nullptr;
    size_t length = sizeof(version);
    if (mallctl("version", static_cast<void*>(&version), &length, nullptr, 0) == 0 && version != nullptr)
      return fmt::format("jemalloc {}", version);
    return "jemalloc";
  }
  return fmt::format("glibc {}", gnu_get_libc_version());
}

std::vector<MicrobenchResult> run_microbench(const MicrobenchOptions& options) {
  std::vector<MicrobenchResult> results;
  constexpr uint64_t kDeviceBytes = 16ull << 30;  // simulated: costs no host memory
  for (uint64_t size : options.sizes_bytes) {
    auto report = [&](const char* name) {
      if (options.progress) options.progress(fmt::format("{} {}", name, size));
    };
    report("malloc");
    const double malloc_ns = median_ns_per_pair(options, [&] {
      void* p = std::malloc(size);
      escape(p);
      std::free(p);
    });
    results.push_back({"malloc", size, malloc_ns, 1.0});

    for (AllocatorKind kind : kAllocatorKinds) {
      const std::string name(allocator_kind_name(kind));
      report(name.c_str());
      auto device = SimulatedDevice::create({kDeviceBytes, 512, false, "sim"});
      AllocatorSettings settings;
      if (kind == AllocatorKind::kBfc || kind == AllocatorKind::kBfcGrowth) settings.limit_bytes = 4ull << 30;
      auto allocator = std::move(make_allocator(kind, **device, settings)).value();
      const double ns = median_ns_per_pair(options, [&] {
        auto p = allocator->allocate(size);
        escape(p.ok() ? *p : nullptr);
        (void)allocator->deallocate(p.ok() ? *p : nullptr);
      });
      results.push_back({name, size, ns, malloc_ns > 0 ? ns / malloc_ns : 0.0});
    }
  }
  return results;
}

}  // namespace memfit
