// memfit/plan/buffer_model.h - XLA's buffer model of a scheduled HLO module: which instructions define
// buffers, which buffers must be one (donation, while-loop carries, in-place ops), when each is live on the
// flattened schedule, and which temporaries XLA lets reuse an operand's memory.
//
// It follows xla/hlo/analysis/hlo_dataflow_analysis.cc, hlo_alias_analysis.cc, hlo_live_range.cc and
// HeapSimulator::RunComputation (../shared/reference/planner.md §1):
// - get-tuple-element, bitcast, while, call, add-dependency, domain and opt-barrier define no value; a tuple
//   defines only its pointer table; an async *-done returns what its *-start made;
// - the schedule is flattened: callees of call/conditional inline, a while's condition then body before it;
// - a value lives from its definition to its last use or position; a root lives to its computation's end;
// - a new value takes over an operand's chunk when the operand dies at that instruction and the op reads
//   it elementwise (GPU: the fusion's parameter reaches the output through elementwise ops and bitcasts).
// Fusion, reduction and other called bodies run in registers/thread-local memory and are not counted.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "memfit/core/status.h"
#include "memfit/plan/heap_simulator.h"
#include "memfit/program/hlo_module.h"

namespace memfit {

enum class BufferKind {
  kParameter,         // an entry parameter's own allocation (argument bytes), donated outputs included
  kOutput,            // live out of the module, not a parameter: its own allocation (output bytes)
  kConstant,          // a constant's own allocation
  kTemp,              // packed in the one preallocated temp block
  kReusesAllocation,  // a temporary placed in an output's or donated argument's allocation while it is free
};
const char* buffer_kind_name(BufferKind kind);

struct HloValue {
  uint32_t computation = 0;     // index into HloModule::computations
  uint32_t instruction = 0;     // index into that computation's instructions
  std::vector<uint64_t> index;  // shape index within the instruction's result
  uint64_t size_bytes = 0;
  uint32_t buffer = 0;
  uint64_t start = 0;  // flattened schedule time of the definition (inclusive)
  uint64_t end = 0;    // last use or position (inclusive)
};

struct HloBuffer {
  std::vector<uint32_t> values;  // in definition order
  uint64_t size_bytes = 0;       // the largest of its values
  BufferKind kind = BufferKind::kTemp;
  uint64_t start = 0;                   // earliest value start
  uint64_t end = 0;                     // latest value end
  uint32_t allocation_of = UINT32_MAX;  // kReusesAllocation: the buffer whose allocation it is placed in
};

struct BufferModel {
  std::vector<HloValue> values;
  std::vector<HloBuffer> buffers;
  uint64_t schedule_length = 0;  // flattened instructions

  // The temp buffers as XLA's heap simulator sees them: one interval per temp value, on the simulator's
  // clock (one tick per alloc, share or free), colocated by buffer and by operand reuse.
  std::vector<HeapInterval> heap_intervals;
  std::vector<uint32_t> heap_values;  // the value of each interval
  // The same for temps in host memory (layout S(5): host offload of saved activations), which XLA counts
  // in memory_analysis().host_temp_size_in_bytes, not in the device's temp.
  std::vector<HeapInterval> host_heap_intervals;
  std::vector<uint32_t> host_heap_values;
};

// A value's name as XLA's buffer-assignment dump prints it: "fusion.3", "fusion.3{1}", a tuple's table
// "tuple.2{}".
std::string value_name(const HloModule& module, const HloValue& value);

// Errors name what is malformed (an operand that does not exist, a get-tuple-element past the tuple...).
Expected<BufferModel> build_buffer_model(const HloModule& module);

// What XLA's memory scheduler weighs the scheduled module `order` by (DefaultMemoryScheduler,
// hlo_memory_scheduler.cc: HeapSimulator::MinimumMemoryForComputation over a NoFragmentationStatsHeap): the
// most bytes live at once over every value but constants and host values - arguments and outputs included,
// a read-only argument live to the end and a donated one to its last read (hlo_live_range.cc), a value that
// takes over a dying operand's memory counted once (heap_simulator.cc). A loop body's values count where
// the flattened schedule runs them (XLA weighs each computation apart; approximated). Not part of
// build_buffer_model: no plan reads it (plan/xla_gpu_model.h says why), so plans do not pay for it.
Expected<uint64_t> scheduler_estimate_bytes(const HloModule& order);

}  // namespace memfit
