// Readers on the real PyTorch traces (tests/data) and on broken input.
#include "memfit/trace/readers.h"

#include <gtest/gtest.h>

#include "memfit/alloc/bfc_allocator.h"
#include "memfit/device/simulated_device.h"
#include "memfit/trace/writer.h"
#include "trace_data.h"

namespace memfit {
namespace {

using testing::load_trace;
using testing::pytorch_figures;

uint64_t count(const Timeline& t, EventKind kind) {
  uint64_t n = 0;
  for (const TraceEvent& e : t.events) n += e.kind == kind ? 1 : 0;
  return n;
}

// PyTorch's trace records requested sizes, so the peak of live bytes is its requested_bytes peak exactly
// (max_memory_allocated counts whole blocks, which the trace does not record); segment events give
// max_memory_reserved exactly.
TEST(Readers, PytorchCsvMatchesPytorchsOwnFigures) {
  for (const std::string run : {"gpt2_train_fp32", "resnet50_train_bf16amp"}) {
    SCOPED_TRACE(run);
    const Timeline t = load_trace(run + ".trace.csv.gz");
    const Json figures = pytorch_figures(run);
    EXPECT_EQ(t.source, "pytorch-csv");
    EXPECT_EQ(count(t, EventKind::kAlloc), figures["actions"]["alloc"].get<uint64_t>());
    EXPECT_EQ(count(t, EventKind::kFree), figures["actions"]["free_completed"].get<uint64_t>());
    EXPECT_EQ(peak_live_bytes(t), figures["stats"]["requested_bytes.all.peak"].get<uint64_t>());
    ASSERT_TRUE(t.recorded_peak_reserved_bytes.has_value());
    EXPECT_EQ(*t.recorded_peak_reserved_bytes, figures["max_reserved"].get<uint64_t>());
    EXPECT_TRUE(t.recorded_reserved_complete);  // recorded from the start: every segment is in it
    EXPECT_LE(peak_live_bytes(t), figures["max_allocated"].get<uint64_t>());
  }
}

TEST(Readers, SnapshotPickleGivesTheSameTimelineAsItsCsv) {
  const Timeline pickle = load_trace("resnet50_train_bf16amp.snapshot.pickle.gz");
  const Timeline csv = load_trace("resnet50_train_bf16amp.trace.csv.gz");
  EXPECT_EQ(pickle.source, "pytorch-snapshot");
  ASSERT_EQ(pickle.events.size(), csv.events.size());
  for (size_t i = 0; i < csv.events.size(); ++i) {
    ASSERT_EQ(pickle.events[i].buffer, csv.events[i].buffer) << i;
    ASSERT_EQ(pickle.events[i].size_bytes, csv.events[i].size_bytes) << i;
    ASSERT_EQ(pickle.events[i].kind, csv.events[i].kind) << i;
  }
  EXPECT_EQ(pickle.recorded_peak_reserved_bytes,
            pytorch_figures("resnet50_train_bf16amp")["max_reserved"].get<uint64_t>());
}

std::string error_of(std::string_view data) {
  auto t = parse_trace(data);
  EXPECT_FALSE(t.ok());
  return t.ok() ? "" : t.error().message();
}

TEST(Readers, BrokenCsvNamesTheLine) {
  const std::string header = "action,addr,size,stream,time_us\n";
  EXPECT_NE(error_of(header + "alloc,4096,512,0,1\nalloc,8192,51").find("line 3"), std::string::npos);
  EXPECT_NE(error_of(header + "alloc,4096,-5,0,1\n").find("line 2: size '-5'"), std::string::npos);
  EXPECT_NE(
      error_of(header + "alloc,4096,512,0,1\nfree_completed,4096,512,0,2\nfree_completed,4096,512,0,3\n")
          .find("line 4: free of 0x1000, which was already freed at line 3"),
      std::string::npos);
  EXPECT_NE(error_of(header + "alloc,4096,512,0,1\nalloc,4096,512,0,2\n").find("still live"),
            std::string::npos);
  EXPECT_NE(error_of(header + "teleport,4096,512,0,1\n").find("unknown action 'teleport'"),
            std::string::npos);
  // A plain "free" (not PyTorch's) is named with the actions a trace may hold.
  EXPECT_NE(
      error_of(header + "alloc,4096,512,0,1\nfree,4096,512,0,2\n").find("free_requested, free_completed"),
      std::string::npos);
  EXPECT_NE(error_of("hello world\n").find("not a trace memfit knows"), std::string::npos);
  EXPECT_NE(error_of("action,addr\nalloc,1\n").find("no 'size' column"), std::string::npos);
  EXPECT_NE(error_of(header + "alloc,99999999999999999999999,512,0,1\n").find("line 2"), std::string::npos);
}

// A trace begun after the run had reserved memory (recording started mid-run, or a ring buffer that dropped
// its oldest events) misses segments: its reserved figure is then a lower bound, said as one - it had
// printed 0 B reserved beside 1000 B in use. A segment reserved twice is an error, as an allocation is.
TEST(Readers, ATraceBegunMidRunSaysItsReservedFigureIsALowerBound) {
  const std::string header = "action,addr,size,stream,time_us\n";
  auto freed_before = parse_trace(header +
                                  "segment_free,4096,1000000,0,1\nalloc,8192,1000,0,2\n"
                                  "free_completed,8192,1000,0,3\n");
  ASSERT_TRUE(freed_before.ok()) << freed_before.error().message();
  EXPECT_FALSE(freed_before->recorded_reserved_complete);
  EXPECT_EQ(freed_before->segment_frees_before_recording, 1u);
  EXPECT_EQ(freed_before->recorded_peak_reserved_bytes, 1000u);  // in use: at least that was reserved
  auto beyond = parse_trace(header + "segment_alloc,4096,1000,0,1\nalloc,4096,5000,0,2\n");
  ASSERT_TRUE(beyond.ok()) << beyond.error().message();
  EXPECT_FALSE(beyond->recorded_reserved_complete);
  EXPECT_EQ(beyond->recorded_peak_reserved_bytes, 5000u);
  // A segment's free gives back what it reserved, whatever size the free names.
  auto whole = parse_trace(header +
                           "segment_alloc,4096,2048,0,1\nalloc,4096,1000,0,2\n"
                           "free_completed,4096,1000,0,3\nsegment_free,4096,1,0,4\n"
                           "segment_alloc,8192,4096,0,5\n");
  ASSERT_TRUE(whole.ok()) << whole.error().message();
  EXPECT_TRUE(whole->recorded_reserved_complete);
  EXPECT_EQ(whole->recorded_peak_reserved_bytes, 4096u);
  auto twice = parse_trace(header + "segment_alloc,4096,1000,0,1\nsegment_alloc,4096,1000,0,2\n");
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(twice.error().message().find("line 3: segment at 0x1000, which is still reserved"),
            std::string::npos)
      << twice.error().message();
}

// A buffer the trace frees but never allocated was allocated before the recording began (a ring buffer, or
// recording started mid-run - a training loop's weights): it was live from the trace's start. It had been
// skipped, and the peak live bytes - the lower bound every policy is judged by - left it out.
TEST(Readers, ABufferAllocatedBeforeTheRecordingIsLiveFromItsStart) {
  auto t = parse_trace(
      "action,addr,size,stream,time_us\nalloc,8192,1024,0,1\nfree_requested,4096,512,0,2\n"
      "free_completed,4096,512,0,2\nfree_completed,8192,1024,0,3\n");
  ASSERT_TRUE(t.ok()) << t.error().message();
  EXPECT_EQ(t->frees_before_recording, 1u);
  ASSERT_EQ(t->events.size(), 4u);
  EXPECT_EQ(t->events[0].kind, EventKind::kAlloc);  // the 512 bytes, first
  EXPECT_EQ(t->events[0].size_bytes, 512u);
  EXPECT_EQ(peak_live_bytes(*t), 1536u);  // both live until the first free
  // Freed again: an error, as before.
  auto twice = parse_trace(
      "action,addr,size,stream,time_us\nfree_completed,4096,512,0,2\n"
      "free_completed,4096,512,0,3\n");
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(twice.error().message().find("already freed"), std::string::npos) << twice.error().message();
  // Its segment was reserved before the recording too: a recorded reserved figure is a lower bound.
  auto with_segments = parse_trace(
      "action,addr,size,stream,time_us\nsegment_alloc,8192,2048,0,1\nalloc,8192,1024,0,1\n"
      "free_completed,4096,512,0,2\n");
  ASSERT_TRUE(with_segments.ok()) << with_segments.error().message();
  EXPECT_FALSE(with_segments->recorded_reserved_complete);
  EXPECT_EQ(with_segments->recorded_peak_reserved_bytes, 2048u);
}

TEST(Readers, TruncatedOrForeignPickleIsAnError) {
  auto data = read_file(testing::data_path("resnet50_train_bf16amp.snapshot.pickle.gz"));
  ASSERT_TRUE(data.ok());
  for (size_t cut : {size_t{3}, data->size() / 2, data->size() - 1}) {
    auto t = parse_trace(std::string_view(*data).substr(0, cut));
    ASSERT_FALSE(t.ok()) << cut;
    EXPECT_NE(t.error().message().find("pickle byte"), std::string::npos) << t.error().message();
  }
  // A pickle that would run code (GLOBAL) is refused, not executed.
  auto evil = parse_trace(std::string("\x80\x04\x63os\nsystem\n.", 14));
  ASSERT_FALSE(evil.ok());
  EXPECT_NE(evil.error().message().find("only plain data"), std::string::npos);
}

TEST(Readers, RmmLog) {
  auto t = parse_trace(
      "Thread,Time,Action,Pointer,Size,Stream\n"
      "140,10:00:00:000001,allocate,0x7f0000000000,1048576,0x0\n"
      "140,10:00:00:000002,allocate,0x7f0000100000,2097152,0x0\n"
      "140,10:00:00:000003,free,0x7f0000000000,1048576,0x0\n"
      "140,10:00:00:000004,allocate failure,0x0,999999999999,0x0\n");
  ASSERT_TRUE(t.ok()) << t.error().message();
  EXPECT_EQ(t->source, "rmm-csv");
  EXPECT_EQ(peak_live_bytes(*t), 3145728u);
  EXPECT_EQ(t->recorded_ooms, 1u);
}

TEST(Readers, MemfitTraceRoundTripsThroughTheTracingAllocator) {
  auto device = std::move(SimulatedDevice::create({1ull << 30, 512, false, "sim"})).value();
  BfcOptions o;
  o.memory_limit_bytes = 256 << 20;
  o.retry_wait = std::chrono::milliseconds(0);
  BfcAllocator bfc(*device, o);
  TracingAllocator tracing(bfc);
  void* a = *tracing.allocate(1000, "layer0/attention, scores");
  void* b = *tracing.allocate(5000);
  ASSERT_TRUE(tracing.deallocate(a).ok());
  void* c = *tracing.allocate(300, "params");
  ASSERT_TRUE(tracing.deallocate(b).ok());
  ASSERT_TRUE(tracing.deallocate(c).ok());
  const Timeline recorded = tracing.timeline();
  ASSERT_EQ(recorded.events.size(), 6u);
  auto parsed = parse_trace(to_memfit_trace(recorded));
  ASSERT_TRUE(parsed.ok()) << parsed.error().message();
  ASSERT_EQ(parsed->events.size(), 6u);
  EXPECT_EQ(parsed->tags[parsed->events[0].tag], "layer0/attention, scores");
  EXPECT_EQ(peak_live_bytes(*parsed), 6000u);
  EXPECT_EQ(to_memfit_trace(*parsed), to_memfit_trace(recorded));
}

}  // namespace
}  // namespace memfit
