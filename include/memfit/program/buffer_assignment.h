// memfit/program/buffer_assignment.h - XLA's own buffer assignment, as it dumps it
// (XLA_FLAGS=--xla_dump_to=DIR: `module_NNNN.<name>...-buffer-assignment.txt`).
//
// The text lists each allocation ("allocation 780: size 16131614744, page 0, preallocated-temp:") with its
// kind (parameter N, maybe-live-out, output shape is |...|, constant, thread-local, preallocated-temp) and
// the values it holds (" value: <6696 loop_broadcast_fusion @0> (size=1048576000,offset=1048576000):
// f32[8,1024,32000]{2,1,0}"). From it come the figures of `compiled.memory_analysis()`, exactly (checked
// on the shared programs): argument = parameter allocations; output = live-out allocations and the output
// tuple's table; alias = parameter allocations that are live out; temp = the rest, less constants and
// thread-local scratch. An allocation of color 5 (host memory) counts in the host_* figures instead.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "memfit/core/status.h"

namespace memfit {

struct XlaAssignedValue {
  std::string name;  // the instruction ("fusion.3"), with a tuple index when it has one ("fusion.3{1}")
  uint64_t size_bytes = 0;
  uint64_t offset_bytes = 0;
  std::string shape;
};

struct XlaAllocation {
  uint64_t index = 0;
  uint64_t size_bytes = 0;
  std::optional<uint64_t> parameter;  // the entry parameter it holds
  bool maybe_live_out = false;
  bool output_table = false;  // "output shape is |...|": the output tuple's pointer table
  bool constant = false;
  bool thread_local_ = false;
  bool preallocated_temp = false;
  uint64_t color = 0;  // ", color 5": XLA's memory space; 5 is host memory (S(5), pinned_host)
  std::vector<XlaAssignedValue> values;
};

struct XlaBufferAssignment {
  std::vector<XlaAllocation> allocations;
  uint64_t argument_bytes = 0;
  uint64_t output_bytes = 0;
  uint64_t alias_bytes = 0;
  uint64_t temp_bytes = 0;
  uint64_t constant_bytes = 0;
  // The same of host-memory allocations (color 5), which memory_analysis() reports apart
  // (xla/pjrt/compiled_memory_stats.cc): not in the figures above.
  uint64_t host_argument_bytes = 0;
  uint64_t host_output_bytes = 0;
  uint64_t host_alias_bytes = 0;
  uint64_t host_temp_bytes = 0;
  // argument + output - alias + temp, as memory_analysis() users compute the peak.
  uint64_t peak_bytes() const { return argument_bytes + output_bytes - alias_bytes + temp_bytes; }
  // The values in temp allocations, largest first.
  std::vector<XlaAssignedValue> temp_values() const;
};

// kInvalidArgument naming the line for text that is not a buffer-assignment dump; sizes are checked.
Expected<XlaBufferAssignment> parse_buffer_assignment(std::string_view text);

}  // namespace memfit
