// memfit/plan/hlo_plan.h - what an XLA program needs on the device, from its HLO alone: XLA's
// memory_analysis() figures (argument, output, alias, temp), the peak the device reaches, the
// no-fragmentation lower bound, and the buffers live at the peak with the JAX op that made them.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "memfit/core/device_catalog.h"
#include "memfit/core/status.h"
#include "memfit/plan/buffer_model.h"
#include "memfit/plan/heap_simulator.h"
#include "memfit/program/hlo_module.h"

namespace memfit {

struct HloPlanOptions {
  uint64_t alignment_bytes = 256;  // XLA:GPU's buffer alignment (kXlaAllocatedBufferAlignBytes)
  size_t top = 10;                 // groups of buffers listed at the peak
  // false: the temp block is not packed - temp_bytes (and temp_upper_bytes) are the bytes live at once, the
  // no-fragmentation bound, and no buffer has an offset. For a search that needs only to know a step cannot
  // fit (a deep plan's two packings are half its time); the peak it gives is a lower bound.
  bool pack = true;
  // The GPU a program before optimization is planned for (its memory): XLA's latency-hiding scheduler lets
  // a program that copies to the host grow up to a limit derived from it (latency_hiding_scheduled,
  // plan/xla_gpu_model.h). An H100's unless told (core/device_catalog.h).
  uint64_t device_memory_bytes = known_device_capacity("h100").value_or(80ull << 30);
};

struct PlannedBuffer {
  std::string name;      // the instruction that defines it
  std::string shape;     // "f32[8,16,1024,1024]"
  std::string op_name;   // metadata op_name: the JAX op
  std::string category;  // parameters, optimizer_state, gradients, activations, temporaries (model zoo)
  uint64_t bytes = 0;
  BufferKind kind = BufferKind::kTemp;
  uint64_t start = 0;  // flattened schedule times, inclusive
  uint64_t end = 0;
  uint64_t offset = 0;       // in the temp block (temps only)
  bool host_memory = false;  // in host memory (S(5), offloaded): not on the device
};

// Buffers live at the peak that came from the same op with the same shape: "8 x f32[8,16,1024,1024]".
struct BufferGroup {
  std::string op_name;
  std::string shape;
  uint64_t count = 0;
  uint64_t bytes_each = 0;  // the largest
  uint64_t total_bytes = 0;
  std::vector<std::string> names;
};

// The most temp bytes live (no fragmentation) while each pass of a step runs: the forward pass, the
// backward pass (JAX names its ops transpose(jvp(...))) and the rest (an inference step, the loss's
// scalars, the optimizer's update), told apart by the ops' JAX names. A deeper step's peak is in the pass
// whose bytes grow fastest with depth (plan/step_extrapolation.cc).
struct PassPeaks {
  uint64_t forward_bytes = 0;
  uint64_t backward_bytes = 0;
  uint64_t other_bytes = 0;
};

struct HloPlan {
  std::string module;
  // "optimized": the module XLA compiled, planned as XLA's buffer assignment does; "lowered-hlo": the
  // program before optimization, run through memfit's model of XLA:GPU (plan/xla_gpu_model.h) first - a
  // prediction for an H100/H200-class GPU.
  std::string source = "optimized";
  // A program before partitioning sharded over this many devices (HloModule::num_partitions).
  uint64_t partitions = 1;
  // Whether memfit partitioned it as XLA's SPMD partitioner would (HloModule::partitioned): every figure
  // below is then one device's (its arguments' share exact).
  bool partitioned = false;
  uint64_t instructions = 0;            // in sequential computations (fusion bodies not counted)
  uint64_t argument_bytes = 0;          // memory_analysis().argument_size_in_bytes
  uint64_t output_bytes = 0;            // output_size_in_bytes
  uint64_t alias_bytes = 0;             // alias_size_in_bytes
  uint64_t temp_bytes = 0;              // temp_size_in_bytes: the packed temp block
  uint64_t temp_lower_bound_bytes = 0;  // the temp block with no fragmentation
  PassPeaks pass_peaks;                 // the same within each pass
  uint64_t host_argument_bytes = 0;     // host_argument_size_in_bytes: parameters in host memory (S(5))
  uint64_t host_output_bytes = 0;       // host_output_size_in_bytes
  uint64_t host_alias_bytes = 0;        // host_alias_size_in_bytes
  uint64_t host_temp_bytes = 0;         // host_temp_size_in_bytes: temps in host memory (S(5), offload)
  uint64_t host_value_bytes = 0;        // every value put in host memory, summed: what the step copies there
  uint64_t constant_bytes = 0;
  uint64_t peak_bytes = 0;         // argument + output - alias + temp: what the device measured
  uint64_t lower_bound_bytes = 0;  // the same with the lower-bound temp
  // The top of the range XLA's choice of schedule spans, for a program before optimization: its temp and
  // peak in the program's own post order, the schedule XLA's memory scheduler falls back on (it keeps the
  // smallest of its list, DFS and post-order schedules, hlo_memory_scheduler.cc). temp_bytes is memfit's
  // prediction of the order XLA picks; an order needing more than this XLA does not keep. The same as
  // temp_bytes and peak_bytes for an optimized module, whose schedule is fixed.
  uint64_t temp_upper_bytes = 0;
  uint64_t peak_upper_bytes = 0;
  HeapPacking packing = HeapPacking::kSpatial;
  uint64_t peak_time = 0;        // flattened schedule time where the most temp bytes are live
  std::string peak_instruction;  // the instruction running then
  std::string peak_op_name;
  std::vector<PlannedBuffer> buffers;  // every buffer, by first definition
  std::vector<uint32_t> live_at_peak;  // indices into buffers, largest first
  std::vector<BufferGroup> groups;     // the live-at-peak buffers grouped, largest total first
  // What the prediction is known to miss for a program of this kind, as measured, said beside the figures
  // (a lowered program's host offload: kHostOffloadCaveat).
  std::vector<std::string> caveats;
};

// A lowered program that copies values to the host: XLA's latency-hiding scheduler reorders it after its
// memory scheduler (xla/service/latency_hiding_scheduler.cc runs only on computations holding asynchronous
// ops, the copies among them), and the model keeps the memory scheduler's order. Measured on the H200.
// Said of every program memfit partitions (xla_spmd_partitioner.cc), beside what it approximated there.
inline constexpr std::string_view kPartitionCaveat =
    "memfit partitioned this program as XLA's SPMD partitioner would, modeled: shardings propagated forward "
    "from the arguments' (XLA also propagates backward and weighs strategies by cost), a collective where a "
    "value is read with another sharding, each its own buffer (XLA combines small ones); the arguments' "
    "shares are exact";

inline constexpr std::string_view kHostOffloadCaveat =
    "this program copies values to the host, and XLA's latency-hiding scheduler reorders it around the "
    "copies, which memfit models approximately (by a roofline, not XLA's cost model): the one measured on "
    "the H200, gpt_mixed_donate_offload_dots_nb (8 layers), peaked 1.3% under memfit's prediction of it; "
    "deeper offloaded steps were not measured";

Expected<HloPlan> plan_hlo(const HloModule& module, const HloPlanOptions& options = {});
// The same, taking the module: a lowered one is modeled in place rather than copied first.
Expected<HloPlan> plan_hlo(HloModule&& module, const HloPlanOptions& options = {});

}  // namespace memfit
