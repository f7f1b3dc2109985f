// Allocator benchmarks, side by side in one run (ratios, not absolute times: machines are shared and noisy).
//   - alloc+free pair, pool hit, 256 B - 64 MiB, 1 thread: BFC (preallocated, growing), platform, std::malloc
//   - the same with two sizes taking turns (BM_*/two_sizes/SIZE: SIZE, then 2 x SIZE): a pair whose size
//     differs from the last one's, so the BFC pool searches its bins every time instead of replaying its
//     last split
//   - 2 threads contending on one allocator
//   - replay: a recorded-like stream of alloc/free events through the BFC pool (events per second)
//   - the bundled real traces (tests/data: PyTorch's record of a GPT-2 and a ResNet-50 training run on an
//     H200) replayed event by event through each allocator and through std::malloc with the same sizes
//     (BM_<allocator>/replay_<trace>); malloc maps and unmaps each buffer above its mmap threshold (32 MiB
//     at most), the cost a device pool exists to avoid
// After the run a table gives each allocator's time as a multiple of std::malloc's at the same size or on the
// same trace (medians of repetitions run interleaved in random order).
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <random>

#include "memfit/alloc/bfc_allocator.h"
#include "memfit/alloc/platform_allocator.h"
#include "memfit/device/simulated_device.h"
#include "memfit/trace/readers.h"
#include "timing_reporter.h"

namespace memfit {
namespace {

constexpr uint64_t kDeviceBytes = 64ull << 30;  // simulated: no host memory behind it

struct Fixture {
  std::unique_ptr<SimulatedDevice> device =
      std::move(SimulatedDevice::create({kDeviceBytes, 512, false, "sim"})).value();
  std::unique_ptr<Allocator> allocator;
};

std::unique_ptr<Allocator> make(const std::string& kind, DeviceMemory& device) {
  if (kind == "platform") return std::make_unique<PlatformAllocator>(device);
  BfcOptions o;
  o.memory_limit_bytes = 16ull << 30;
  o.allow_growth = kind == "bfc-growth";
  o.retry_wait = std::chrono::milliseconds(0);
  return std::make_unique<BfcAllocator>(device, o);
}

Fixture& shared_fixture(const std::string& kind) {
  static std::map<std::string, Fixture> fixtures;  // one per kind, shared by a benchmark's threads
  static std::mutex mu;                            // a threaded run's threads arrive here together
  std::lock_guard<std::mutex> lock(mu);
  Fixture& f = fixtures[kind];
  if (!f.allocator) f.allocator = make(kind, *f.device);
  return f;
}

// Alloc+free pairs of state.range(0) bytes, or of it and twice it taking turns (`sizes` = 2).
void malloc_loop(benchmark::State& state, int sizes) {
  const auto first = static_cast<uint64_t>(state.range(0));
  const uint64_t flip = sizes == 2 ? first ^ (2 * first) : 0;  // xor that turns one size into the other
  uint64_t size = first;
  for (auto _ : state) {
    void* p = std::malloc(size);
    benchmark::DoNotOptimize(p);
    std::free(p);
    size ^= flip;
  }
}

void pair_loop(benchmark::State& state, const std::string& kind, int sizes = 1) {
  Allocator& a = *shared_fixture(kind).allocator;
  const auto first = static_cast<uint64_t>(state.range(0));
  const uint64_t flip = sizes == 2 ? first ^ (2 * first) : 0;
  uint64_t size = first;
  for (auto _ : state) {
    auto p = a.allocate(size);
    benchmark::DoNotOptimize(p);
    if (!p.ok() || !a.deallocate(*p).ok()) state.SkipWithError("allocation failed");
    size ^= flip;
  }
}

void BM_Malloc(benchmark::State& state) { malloc_loop(state, 1); }
void BM_Bfc(benchmark::State& state) { pair_loop(state, "bfc"); }
void BM_BfcGrowth(benchmark::State& state) { pair_loop(state, "bfc-growth"); }
void BM_Platform(benchmark::State& state) { pair_loop(state, "platform"); }

#define MEMFIT_SIZES RangeMultiplier(16)->Range(256, 64 << 20)
BENCHMARK(BM_Malloc)->MEMFIT_SIZES;
BENCHMARK(BM_Bfc)->MEMFIT_SIZES;
BENCHMARK(BM_BfcGrowth)->MEMFIT_SIZES;
BENCHMARK(BM_Platform)->MEMFIT_SIZES;
// Named BM_<allocator>/two_sizes/<size>, so the ratio table pairs each with malloc's two-size run.
const bool kTwoSizesRegistered = [] {
  benchmark::RegisterBenchmark("BM_Malloc/two_sizes", [](benchmark::State& s) {
    malloc_loop(s, 2);
  })->Arg(256);
  benchmark::RegisterBenchmark("BM_Bfc/two_sizes", [](benchmark::State& s) {
    pair_loop(s, "bfc", 2);
  })->Arg(256);
  benchmark::RegisterBenchmark("BM_BfcGrowth/two_sizes", [](benchmark::State& s) {
    pair_loop(s, "bfc-growth", 2);
  })->Arg(256);
  return true;
}();
BENCHMARK(BM_Malloc)->Arg(4096)->Threads(2)->UseRealTime();
BENCHMARK(BM_Bfc)->Arg(4096)->Threads(2)->UseRealTime();

// A replay-like stream: log-uniform sizes, at most 2000 live buffers, half allocs, half frees.
void BM_BfcReplay(benchmark::State& state) {
  struct Event {
    bool alloc;
    uint32_t slot;
    uint64_t size;
  };
  std::mt19937_64 rng(1);
  std::vector<Event> events;
  std::vector<uint32_t> live_slots;
  uint32_t next_slot = 0;
  while (events.size() < 200000) {
    if (live_slots.size() < 2000 && (live_slots.empty() || rng() % 2 == 0)) {
      events.push_back({true, next_slot, 1 + rng() % (uint64_t{1} << (rng() % 24))});
      live_slots.push_back(next_slot++);
    } else {
      const size_t i = rng() % live_slots.size();
      events.push_back({false, live_slots[i], 0});
      live_slots[i] = live_slots.back();
      live_slots.pop_back();
    }
  }
  for (uint32_t s : live_slots) events.push_back({false, s, 0});
  std::vector<void*> ptrs(next_slot);
  Fixture f;
  f.allocator = make("bfc", *f.device);
  for (auto _ : state) {
    for (const Event& e : events) {
      if (e.alloc) {
        ptrs[e.slot] = *f.allocator->allocate(e.size);
      } else {
        (void)f.allocator->deallocate(ptrs[e.slot]);
      }
    }
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * events.size()));
}
BENCHMARK(BM_BfcReplay)->Unit(benchmark::kMillisecond);

// A real trace's events, loaded once per trace; an error message instead when the file cannot be read.
struct TraceEvents {
  std::vector<TraceEvent> events;
  uint64_t buffer_count = 0;
  std::string error;
};

const TraceEvents& trace_events(const std::string& file) {
  static std::map<std::string, TraceEvents> loaded;
  auto [it, fresh] = loaded.try_emplace(file);
  if (fresh) {
    Expected<Timeline> t = read_trace_file(std::string(MEMFIT_SOURCE_DIR) + "/tests/data/" + file);
    if (t.ok()) {
      it->second.events = std::move(t->events);
      it->second.buffer_count = t->buffer_count;
    } else {
      it->second.error = t.error().message();
    }
  }
  return it->second;
}

// One pass over the trace per iteration; what is still live at the end is freed, so each pass starts empty
// (the pools keep what they reserved).
template <typename Alloc, typename Free>
void replay_loop(benchmark::State& state, const std::string& file, Alloc alloc, Free release) {
  const TraceEvents& trace = trace_events(file);
  if (!trace.error.empty()) {
    state.SkipWithError(trace.error.c_str());
    return;
  }
  std::vector<void*> ptrs(trace.buffer_count, nullptr);
  for (auto _ : state) {
    for (const TraceEvent& e : trace.events) {
      void*& p = ptrs[e.buffer];
      if (e.kind == EventKind::kAlloc) {
        p = alloc(e.size_bytes);
        if (p == nullptr) {
          state.SkipWithError("allocation failed");
          return;
        }
      } else if (p != nullptr) {
        release(p);
        p = nullptr;
      }
    }
    for (void*& p : ptrs) {
      if (p != nullptr) release(p);
      p = nullptr;
    }
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * trace.events.size()));
}

void replay_through(benchmark::State& state, const std::string& file, const std::string& kind) {
  // Its own device and a limit the traces fit (GPT-2's high-water mark is 18.8 GiB).
  const std::unique_ptr<SimulatedDevice> device =
      std::move(SimulatedDevice::create({kDeviceBytes, 512, false, "sim"})).value();
  std::unique_ptr<Allocator> a;
  if (kind == "platform") {
    a = std::make_unique<PlatformAllocator>(*device);
  } else {
    BfcOptions o;
    o.memory_limit_bytes = 48ull << 30;
    o.allow_growth = kind == "bfc-growth";
    o.retry_wait = std::chrono::milliseconds(0);
    a = std::make_unique<BfcAllocator>(*device, o);
  }
  replay_loop(
      state, file,
      [&](uint64_t size) {
        Expected<void*> p = a->allocate(size);
        return p.ok() ? *p : nullptr;
      },
      [&](void* p) { (void)a->deallocate(p); });
}

const bool kRealTracesRegistered = [] {
  const std::pair<const char*, const char*> traces[] = {{"gpt2", "gpt2_train_fp32.trace.csv.gz"},
                                                        {"resnet50", "resnet50_train_bf16amp.trace.csv.gz"}};
  for (const auto& [name, file] : traces) {
    const std::string suffix = std::string("/replay_") + name;
    const std::string path = file;
    benchmark::RegisterBenchmark(("BM_Malloc" + suffix).c_str(), [path](benchmark::State& s) {
      replay_loop(
          s, path, [](uint64_t size) { return std::malloc(size); }, [](void* p) { std::free(p); });
    })->Unit(benchmark::kMicrosecond);
    for (const auto& [label, kind] : {std::pair{"BM_Bfc", "bfc"}, std::pair{"BM_BfcGrowth", "bfc-growth"},
                                      std::pair{"BM_Platform", "platform"}}) {
      const std::string k = kind;
      benchmark::RegisterBenchmark((label + suffix).c_str(), [path, k](benchmark::State& s) {
        replay_through(s, path, k);
      })->Unit(benchmark::kMicrosecond);
    }
  }
  return true;
}();

// Prints the usual table, then each allocator as a multiple of malloc at the same size or on the same trace.
class RatioReporter : public TimingReporter {
  void summarize(std::ostream& out, const std::map<std::string, double>& times) override {
    out << "\nratio to std::malloc at the same size or on the same trace (lower is faster):\n";
    for (const auto& [name, ns] : times) {
      if (name.rfind("BM_Malloc", 0) == 0 || name.find('/') == std::string::npos) continue;
      const std::string malloc_name = "BM_Malloc" + name.substr(name.find('/'));
      auto m = times.find(malloc_name);
      if (m == times.end() || m->second <= 0) continue;
      out << "  " << name << ": " << ns / m->second << "x\n";
    }
  }
};

}  // namespace
}  // namespace memfit

int main(int argc, char** argv) {
  return memfit::run_benchmarks<memfit::RatioReporter>(argc, argv,
                                                       memfit::Repetitions::kMedianOfFiveInterleaved);
}
