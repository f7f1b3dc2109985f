// memfit/trace/timeline.h - the one seam of memfit: a memory timeline.
//
// A Timeline is an ordered list of alloc/free events of buffers (id, bytes, stream, time, tag). Readers turn
// recorded traces into one (PyTorch snapshots, RMM logs, memfit's own recorder), planners produce one, and
// replay() feeds one to an allocator policy. Buffer ids are dense (0..buffer_count-1), so consumers can
// keep per-buffer state in a vector.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "memfit/core/status.h"

namespace memfit {

enum class EventKind : uint8_t { kAlloc, kFree };

// No trace of a real device holds more than this live at once (1 PiB); anything above is corrupt input.
// Bounding it keeps every sum over a timeline far from 64-bit overflow.
inline constexpr uint64_t kMaxTraceLiveBytes = uint64_t{1} << 50;

struct TraceEvent {
  EventKind kind = EventKind::kAlloc;
  uint32_t tag = 0;  // index into Timeline::tags; 0 = untagged
  uint32_t stream = 0;
  uint64_t buffer = 0;  // dense id
  uint64_t size_bytes = 0;
  uint64_t time_us = 0;  // since the recording started; 0 where the source has no clock (a plan)
};

// What a buffer is, where the source knows it (a planned program does: the instruction, its shape and the
// JAX op that made it). Recorded traces carry only a tag.
struct BufferLabel {
  std::string name;
  std::string shape;
  std::string op_name;
};

struct Timeline {
  std::string source;              // "pytorch-snapshot", "pytorch-csv", "rmm-csv", "memfit", "plan", ...
  std::optional<uint32_t> device;  // a PyTorch snapshot's: the device whose trace this is
  std::vector<TraceEvent> events;
  std::vector<std::string> tags{"(untagged)"};
  uint64_t buffer_count = 0;
  std::vector<BufferLabel> labels;  // empty, or one per buffer id
  // What the recorded run reserved, when the trace has segment events (PyTorch's max_memory_reserved).
  // A trace that began after the run had reserved memory (recording started mid-run, or a ring buffer that
  // dropped its oldest events) does not hold every segment: then this is a lower bound - the most that
  // was either recorded as reserved or in use at once - and recorded_reserved_complete is false.
  std::optional<uint64_t> recorded_peak_reserved_bytes;
  bool recorded_reserved_complete = true;
  // segment_free events of segments reserved before the recording started.
  uint64_t segment_frees_before_recording = 0;
  // Frees of buffers allocated before recording started (ring-buffered traces, recording begun mid-run).
  // Such a buffer was live from the trace's start: where the free says its size, it is allocated by the
  // timeline's first events and freed where the trace frees it.
  uint64_t frees_before_recording = 0;
  uint64_t recorded_ooms = 0;
};

// The most bytes live at once: the lower bound for any allocator (PyTorch's max_memory_allocated).
uint64_t peak_live_bytes(const Timeline& timeline);

// Turns address-based records into a Timeline, checking them as it goes. `line` numbers the input record
// for error messages ("line 12: ...").
class TimelineBuilder {
 public:
  explicit TimelineBuilder(std::string source);

  Status alloc(uint64_t address, uint64_t size_bytes, uint32_t stream, uint64_t time_us, uint64_t line,
               std::string_view tag = {});
  // A free of an address never seen is a buffer from before the recording (counted; with `size_bytes`, the
  // size the record gives, it is live from the start); a free of an address already freed is an error.
  Status free(uint64_t address, uint64_t time_us, uint64_t line, uint64_t size_bytes = 0);
  // Device memory reserved by the recorded allocator. A segment (segment_alloc/segment_free: cudaMalloc and
  // cudaFree of one block) is known by its address: one reserved twice is an error, the free of one never
  // seen a segment from before the recording. Mapped ranges of expandable segments (segment_map and
  // segment_unmap, which need not unmap a range as it was mapped) are counted by size.
  enum class Reservation : uint8_t { kSegment, kMappedRange };
  Status reserve(Reservation kind, uint64_t address, uint64_t size_bytes, uint64_t line);
  Status unreserve(Reservation kind, uint64_t address, uint64_t size_bytes, uint64_t line);
  void count_oom() { ++timeline_.recorded_ooms; }

  Timeline finish() &&;

 private:
  struct Live {
    uint64_t buffer;
    uint64_t size_bytes;
    uint64_t line;
  };
  Timeline timeline_;
  std::unordered_map<uint64_t, Live> live_;          // address -> live buffer
  std::unordered_map<uint64_t, uint64_t> freed_at_;  // address -> line of its last free
  std::unordered_map<std::string, uint32_t> tag_ids_;
  std::unordered_map<uint64_t, std::pair<uint64_t, uint64_t>> segments_;  // address -> (size, line)
  uint64_t reserved_bytes_ = 0;
  uint64_t peak_reserved_bytes_ = 0;
  // The most bytes either recorded as reserved or in use at once: the recorded peak where the segments
  // do not cover the allocations.
  uint64_t peak_reserved_at_least_bytes_ = 0;
  uint64_t live_bytes_ = 0;
  std::vector<TraceEvent> live_before_recording_;  // their allocations, put first by finish()
  uint64_t live_before_recording_bytes_ = 0;
  bool saw_segments_ = false;
  bool reserved_complete_ = true;
  void note_reserved_against_live();
};

}  // namespace memfit
