// Allocator benchmarks, side by side in one run (ratios, not absolute times: machines are shared and noisy).
//   - alloc+free pair, pool hit, 256 B - 64 MiB, 1 thread: BFC (preallocated, growing), platform, std::malloc
//   - the same with two sizes taking turns (BM_*/two_sizes/SIZE: SIZE, then 2 x SIZE): a pair whose size
//     differs from the last one's, so the BFC pool searches its bins every time instead of replaying its
//     last split
//   - 2 threads contending on one allocator
//   - a growing BFC pool in a share group (BM_BfcShared) beside the same pool alone (BM_BfcGrowth): a pool
//     hit never asks the lease, so the two should be the same
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

#include <unistd.h>

#include "memfit/alloc/allocator_factory.h"
#include "memfit/device/simulated_device.h"
#include "memfit/share/leased_device.h"
#include "memfit/share/share_member.h"
#include "memfit/trace/readers.h"
#include "timing_reporter.h"

namespace memfit {
namespace {

constexpr uint64_t kDeviceBytes = 64ull << 30;  // simulated: no host memory behind it

struct Fixture {
  std::unique_ptr<SimulatedDevice> device =
      std::move(SimulatedDevice::create({kDeviceBytes, 512, false, "sim"})).value();
  std::unique_ptr<ShareMember> member;  // "bfc-shared": the pool grows inside a lease
  std::unique_ptr<LeasedDevice> leased;
  std::unique_ptr<Allocator> allocator;
};

std::unique_ptr<Allocator> make(const std::string& kind, DeviceMemory& device,
                                uint64_t bfc_limit_bytes = 16ull << 30) {
  const AllocatorKind k = std::move(parse_allocator_kind(kind)).value();
  AllocatorSettings settings;
  if (k == AllocatorKind::kBfc || k == AllocatorKind::kBfcGrowth) settings.limit_bytes = bfc_limit_bytes;
  return std::move(make_allocator(k, device, settings)).value();
}

// A BFC pool that grows inside the lease of a share group of its own (removed at exit).
void make_shared(Fixture& f, uint64_t bfc_limit_bytes = 16ull << 30) {
  static const std::string group = "memfit-bench-" + std::to_string(::getpid());
  static const bool removed_at_exit = [] {
    std::atexit([] { (void)remove_share_group(group, 0); });
    return true;
  }();
  (void)removed_at_exit;
  ShareMemberOptions o;
  o.group = group;
  o.capacity_bytes = kDeviceBytes;
  o.limit_bytes = bfc_limit_bytes;
  f.member = std::move(ShareMember::join(o)).value();
  f.leased = std::make_unique<LeasedDevice>(*f.device, *f.member);
  f.allocator = make("bfc-growth", *f.leased, bfc_limit_bytes);
}

Fixture& shared_fixture(const std::string& kind) {
  static std::map<std::string, Fixture> fixtures;  // one per kind, shared by a benchmark's threads
  static std::mutex mu;                            // a threaded run's threads arrive here together
  std::lock_guard<std::mutex> lock(mu);
  Fixture& f = fixtures[kind];
  if (!f.allocator) {
    if (kind == "bfc-shared") {
      make_shared(f);
    } else {
      f.allocator = make(kind, *f.device);
    }
  }
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
void BM_BfcShared(benchmark::State& state) { pair_loop(state, "bfc-shared"); }

#define MEMFIT_SIZES RangeMultiplier(16)->Range(256, 64 << 20)
BENCHMARK(BM_Malloc)->MEMFIT_SIZES;
BENCHMARK(BM_Bfc)->MEMFIT_SIZES;
BENCHMARK(BM_BfcGrowth)->MEMFIT_SIZES;
BENCHMARK(BM_Platform)->MEMFIT_SIZES;
BENCHMARK(BM_BfcShared)->MEMFIT_SIZES;
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

// A stream of alloc/free events to replay (a real trace's, or made up); `error` when it could not be read.
struct ReplayEvents {
  std::vector<TraceEvent> events;
  uint64_t buffer_count = 0;
  std::string error;
};

// A replay-like stream: log-uniform sizes, at most 2000 live buffers, half allocs, half frees.
const ReplayEvents& synthetic_stream() {
  static const ReplayEvents stream = [] {
    ReplayEvents r;
    std::mt19937_64 rng(1);
    std::vector<uint64_t> live;
    while (r.events.size() < 200000) {
      TraceEvent e;
      if (live.size() < 2000 && (live.empty() || rng() % 2 == 0)) {
        e.size_bytes = 1 + rng() % (uint64_t{1} << (rng() % 24));
        e.buffer = r.buffer_count++;
        live.push_back(e.buffer);
      } else {
        const size_t i = rng() % live.size();
        e.kind = EventKind::kFree;
        e.buffer = live[i];
        live[i] = live.back();
        live.pop_back();
      }
      r.events.push_back(e);
    }
    return r;
  }();
  return stream;
}

// A bundled real trace (tests/data), read once.
const ReplayEvents& real_trace(const std::string& file) {
  static std::map<std::string, ReplayEvents> loaded;
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

// One pass over the events per iteration; what is still live at the end is freed, so each pass starts empty
// (the pools keep what they reserved).
template <typename Alloc, typename Free>
void replay_loop(benchmark::State& state, const ReplayEvents& replay, Alloc alloc, Free release) {
  if (!replay.error.empty()) {
    state.SkipWithError(replay.error.c_str());
    return;
  }
  std::vector<void*> ptrs(replay.buffer_count, nullptr);
  for (auto _ : state) {
    for (const TraceEvent& e : replay.events) {
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
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * replay.events.size()));
}

void replay_through(benchmark::State& state, const ReplayEvents& replay, const std::string& kind) {
  Fixture f;  // its own pool, with a limit the traces fit (GPT-2's high-water mark is 18.8 GiB)
  if (kind == "bfc-shared") {
    make_shared(f, 48ull << 30);
  } else {
    f.allocator = make(kind, *f.device, 48ull << 30);
  }
  Allocator& a = *f.allocator;
  replay_loop(
      state, replay,
      [&](uint64_t size) {
        Expected<void*> p = a.allocate(size);
        return p.ok() ? *p : nullptr;
      },
      [&](void* p) { (void)a.deallocate(p); });
}

void BM_BfcReplay(benchmark::State& state) { replay_through(state, synthetic_stream(), "bfc"); }
BENCHMARK(BM_BfcReplay)->Unit(benchmark::kMillisecond);

const bool kRealTracesRegistered = [] {
  const std::pair<const char*, const char*> traces[] = {{"gpt2", "gpt2_train_fp32.trace.csv.gz"},
                                                        {"resnet50", "resnet50_train_bf16amp.trace.csv.gz"}};
  for (const auto& [name, file] : traces) {
    const std::string suffix = std::string("/replay_") + name;
    const std::string path = file;
    benchmark::RegisterBenchmark(("BM_Malloc" + suffix).c_str(), [path](benchmark::State& s) {
      replay_loop(
          s, real_trace(path), [](uint64_t size) { return std::malloc(size); },
          [](void* p) { std::free(p); });
    })->Unit(benchmark::kMicrosecond);
    for (const auto& [label, kind] :
         {std::pair{"BM_Bfc", "bfc"}, std::pair{"BM_BfcGrowth", "bfc-growth"},
          std::pair{"BM_Platform", "platform"}, std::pair{"BM_BfcShared", "bfc-shared"}}) {
      const std::string k = kind;
      benchmark::RegisterBenchmark((label + suffix).c_str(), [path, k](benchmark::State& s) {
        replay_through(s, real_trace(path), k);
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
    out << "\nsharing on / off: BM_BfcShared over BM_BfcGrowth (1.0 = no cost; leases change only on "
           "growth):\n";
    for (const auto& [name, ns] : times) {
      if (name.rfind("BM_BfcShared/", 0) != 0) continue;
      auto alone = times.find("BM_BfcGrowth" + name.substr(name.find('/')));
      if (alone == times.end() || alone->second <= 0) continue;
      out << "  " << name << ": " << ns / alone->second << "x\n";
    }
  }
};

}  // namespace
}  // namespace memfit

int main(int argc, char** argv) {
  return memfit::run_benchmarks<memfit::RatioReporter>(argc, argv,
                                                       memfit::Repetitions::kMedianOfFiveInterleaved);
}
