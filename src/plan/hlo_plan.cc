#include "memfit/plan/hlo_plan.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <exception>
#include <map>
#include <optional>
#include <set>
#include <thread>
#include <tuple>

#include "memfit/core/checked.h"
#include "memfit/plan/xla_gpu_model.h"

namespace memfit {

namespace {

// Runs `a` on a thread of its own beside `b` on this one (both on this one where the machine has one core);
// an exception from `a` is thrown here once both have ended.
template <typename A, typename B>
void run_beside(A&& a, B&& b) {
  if (std::thread::hardware_concurrency() < 2) {
    a();
    b();
    return;
  }
  std::exception_ptr thrown;
  std::thread beside([&] {
    try {
      a();
    } catch (...) {
      thrown = std::current_exception();
    }
  });
  try {
    b();
  } catch (...) {
    beside.join();
    throw;
  }
  beside.join();
  if (thrown) std::rethrow_exception(thrown);
}

// The plan of `module` from its buffer model: the heap placed, the peak and what is live at it.
Expected<HloPlan> plan_modeled(const HloModule& module, const BufferModel& model,
                               const HloPlanOptions& options);
Expected<uint64_t> device_temp_total(const BufferModel& model, const HloPlanOptions& options);

}  // namespace

Expected<HloPlan> plan_hlo(HloModule&& module, const HloPlanOptions& options) {
  if (!is_lowered_module(module)) return plan_hlo(static_cast<const HloModule&>(module), options);
  // A program before optimization: the buffers XLA:GPU would materialize, under the better of two
  // schedules. XLA's DefaultMemoryScheduler keeps the one with the fewest bytes live at once, not counting
  // fragmentation ("choose whichever returns a lower min-memory, not accounting for fragmentation"), and
  // the list scheduler's on a tie (hlo_memory_scheduler.cc): so only the kept schedule is packed.
  const bool from_stablehlo = module.from_stablehlo;
  const uint64_t partitions = module.num_partitions;
  // A sharded program comes back as one device's (partition_for_each_device): every figure is that device's.
  MEMFIT_ASSIGN_OR_RETURN(HloModule in_program_order, model_xla_gpu(std::move(module)));
  copy_donated_parameters(in_program_order);
  // The two schedules, their buffer models, and then the kept one's packing and the post order's are
  // independent: each pair runs on two threads. A lone plan (`memfit plan`, `memfit hlo`, a fit's last row)
  // left a core idle for half its time: `memfit plan --model flax_encoder --layers 300 --precision mixed
  // --remat full --mesh data=2` 8.4-8.7 s -> 7.0-7.1 s, GPT's fit on 300 layers 8.5-9.0 s -> 7.8-8.1 s; the
  // encoder's fit, whose plans already fill both cores, the same (alternating runs, 2 cores, 2026-12-06).
  HloModule listed(in_program_order);
  std::optional<Expected<BufferModel>> program_model, listed_model;
  run_beside(
      [&] {
        listed = latency_hiding_scheduled(list_scheduled(std::move(listed)), options.device_memory_bytes);
        remove_unneeded_donation_copies(listed);
        listed_model.emplace(build_buffer_model(listed));
      },
      [&] {
        in_program_order = latency_hiding_scheduled(std::move(in_program_order), options.device_memory_bytes);
        remove_unneeded_donation_copies(in_program_order);
        program_model.emplace(build_buffer_model(in_program_order));
      });
  if (!program_model->ok()) return program_model->error();
  if (!listed_model->ok()) return listed_model->error();
  const BufferModel& program = **program_model;
  const BufferModel& list = **listed_model;
  const bool keep_listed =
      live_bytes_peak(list.heap_intervals).bytes <= live_bytes_peak(program.heap_intervals).bytes;
  // The top of the range: the post order's packed temp. Packing can make the kept schedule's block the
  // larger of the two.
  const bool upper_packed = keep_listed && options.pack;
  if (upper_packed) MEMFIT_RETURN_IF_ERROR(device_temp_total(program, options));
  std::optional<Expected<HloPlan>> kept;
  auto plan_kept = [&] {
    kept.emplace(keep_listed ? plan_modeled(listed, list, options)
                             : plan_modeled(in_program_order, program, options));
  };
  uint64_t post_order_temp = 0;
  if (upper_packed) {
    run_beside(
        [&] { post_order_temp = best_heap(program.heap_intervals, options.alignment_bytes).heap_bytes; },
        plan_kept);
  } else {
    plan_kept();  // nothing to pack beside it: no thread
  }
  if (!kept->ok()) return kept->error();
  HloPlan best = std::move(**kept);
  if (upper_packed) {
    best.temp_upper_bytes = std::max(best.temp_bytes, post_order_temp);
    const auto upper = checked_add(best.peak_bytes - best.temp_bytes, best.temp_upper_bytes);
    if (!upper) return invalid_argument("the module's sizes overflow 64 bits");
    best.peak_upper_bytes = *upper;
  }
  best.source = from_stablehlo ? "stablehlo" : "lowered-hlo";
  if (best.host_value_bytes > 0) best.caveats.emplace_back(kHostOffloadCaveat);
  best.partitions = partitions;
  best.partitioned = in_program_order.partitioned;
  if (best.partitioned) {
    best.caveats.emplace_back(kPartitionCaveat);
    for (const std::string& note : in_program_order.partition_notes) best.caveats.push_back(note);
  }
  return best;
}

Expected<HloPlan> plan_hlo(const HloModule& module, const HloPlanOptions& options) {
  if (is_lowered_module(module)) return plan_hlo(HloModule(module), options);
  MEMFIT_ASSIGN_OR_RETURN(BufferModel model, build_buffer_model(module));
  return plan_modeled(module, model, options);
}

namespace {

// Which pass of a step an op belongs to, by the name JAX gives it: the backward pass's ops are
// transpose(jvp(...)) of the forward's jvp(...).
enum Pass : uint8_t { kForwardPass = 0, kBackwardPass = 1, kOtherPass = 2 };
Pass pass_of(std::string_view op_name) {
  if (op_name.find("transpose(jvp") != std::string_view::npos) return kBackwardPass;
  if (op_name.find("jvp(") != std::string_view::npos) return kForwardPass;
  return kOtherPass;
}

PassPeaks pass_peaks(const HloModule& module, const BufferModel& model) {
  // Each time on the heap's clock takes the pass of the op whose value starts then; a time where none
  // starts, the pass before it.
  uint64_t times = 0;
  for (const HeapInterval& iv : model.heap_intervals) times = std::max(times, iv.end + 1);
  std::vector<uint8_t> pass(times, kOtherPass);
  std::vector<bool> known(times, false);
  for (size_t k = 0; k < model.heap_intervals.size(); ++k) {
    const HloValue& v = model.values[model.heap_values[k]];
    const HloInstruction& def = module.computations[v.computation].instructions[v.instruction];
    const uint64_t t = model.heap_intervals[k].start;
    pass[t] = pass_of(def.op_name);
    known[t] = true;
  }
  for (uint64_t t = 1; t < times; ++t)
    if (!known[t]) pass[t] = pass[t - 1];
  const std::vector<uint64_t> peaks = live_bytes_peaks_by_phase(model.heap_intervals, pass, 3);
  return PassPeaks{peaks[kForwardPass], peaks[kBackwardPass], peaks[kOtherPass]};
}

// The heap places chunks at offsets up to the sum of all device temp sizes (aligned): that sum must fit.
Expected<uint64_t> device_temp_total(const BufferModel& model, const HloPlanOptions& options) {
  uint64_t all_temp = 0;
  for (const HeapInterval& iv : model.heap_intervals) {
    const auto aligned = checked_round_up(iv.size_bytes, std::max<uint64_t>(options.alignment_bytes, 1));
    const auto sum = aligned ? checked_add(all_temp, *aligned) : std::nullopt;
    if (!sum) return invalid_argument("the module's temporary buffers total more than 2^64 bytes");
    all_temp = *sum;
  }
  return all_temp;
}

Expected<HloPlan> plan_modeled(const HloModule& module, const BufferModel& model,
                               const HloPlanOptions& options) {
  MEMFIT_ASSIGN_OR_RETURN(EntrySizes sizes, entry_sizes(module));
  HloPlan plan;
  plan.module = module.name;
  plan.instructions = model.schedule_length;
  plan.argument_bytes = sizes.argument_bytes;
  plan.output_bytes = sizes.output_bytes;
  plan.alias_bytes = sizes.alias_bytes;
  plan.host_argument_bytes = sizes.host_argument_bytes;
  plan.host_output_bytes = sizes.host_output_bytes;
  plan.host_alias_bytes = sizes.host_alias_bytes;

  MEMFIT_ASSIGN_OR_RETURN(uint64_t all_temp, device_temp_total(model, options));
  // The fullest moment of the temp block, on the heap's clock: its bytes are the no-fragmentation bound.
  const LiveBytesPeak temp_peak = live_bytes_peak(model.heap_intervals);
  HeapAssignment heap;
  if (options.pack) {
    heap = best_heap(model.heap_intervals, options.alignment_bytes);
  } else {
    heap.offsets.assign(model.heap_intervals.size(), 0);
    heap.heap_bytes = temp_peak.bytes;
  }
  // Host memory (offloaded activations) is its own heap: XLA reports it as host_temp, apart from the device.
  for (const HeapInterval& iv : model.host_heap_intervals) {
    const auto sum = checked_add(all_temp, iv.size_bytes + options.alignment_bytes);
    if (!sum) return invalid_argument("the module's temporary buffers total more than 2^64 bytes");
    all_temp = *sum;
  }
  // Each host value is one copy over the host link.
  for (const HeapInterval& iv : model.host_heap_intervals) plan.host_value_bytes += iv.size_bytes;
  if (!model.host_heap_intervals.empty())
    plan.host_temp_bytes = options.pack
                               ? best_heap(model.host_heap_intervals, options.alignment_bytes).heap_bytes
                               : live_bytes_peak(model.host_heap_intervals).bytes;
  plan.temp_bytes = heap.heap_bytes;
  plan.packing = heap.packing;
  plan.temp_lower_bound_bytes = temp_peak.bytes;
  plan.pass_peaks = pass_peaks(module, model);
  // Sizes come from checked shapes; the sums are checked too (a module can claim petabytes).
  const auto io = checked_add(plan.argument_bytes, plan.output_bytes);
  const uint64_t fixed = io ? (*io >= plan.alias_bytes ? *io - plan.alias_bytes : 0) : 0;
  const auto peak = checked_add(fixed, plan.temp_bytes);
  const auto bound = checked_add(fixed, plan.temp_lower_bound_bytes);
  if (!io || !peak || !bound) return invalid_argument("the module's sizes overflow 64 bits");
  plan.peak_bytes = *peak;
  plan.lower_bound_bytes = *bound;
  plan.temp_upper_bytes = plan.temp_bytes;  // one schedule: plan_hlo widens a lowered program's range
  plan.peak_upper_bytes = plan.peak_bytes;

  // One row per buffer, named by its first value's instruction.
  std::vector<uint64_t> temp_offset(model.buffers.size(), 0);
  for (size_t k = 0; k < model.heap_values.size(); ++k)
    temp_offset[model.values[model.heap_values[k]].buffer] = heap.offsets[k];
  std::vector<bool> in_host(model.buffers.size(), false);
  for (uint32_t v : model.host_heap_values) in_host[model.values[v].buffer] = true;
  plan.buffers.reserve(model.buffers.size());
  for (size_t b = 0; b < model.buffers.size(); ++b) {
    const HloBuffer& buffer = model.buffers[b];
    const HloValue& first = model.values[buffer.values.front()];
    const HloInstruction& def = module.computations[first.computation].instructions[first.instruction];
    const Shape* shape = def.shape.at(first.index);
    PlannedBuffer row;
    row.name = value_name(module, first);
    row.shape = shape != nullptr ? shape->to_string() : "";
    row.op_name = def.op_name;
    row.category = def.category;
    row.bytes = buffer.size_bytes;
    row.kind = buffer.kind;
    row.start = buffer.start;
    row.end = buffer.end;
    row.offset = temp_offset[b];
    row.host_memory = in_host[b];
    if (buffer.kind == BufferKind::kConstant) plan.constant_bytes += buffer.size_bytes;
    plan.buffers.push_back(std::move(row));
  }

  // The moment the most temp bytes are live (on the heap's clock, so a value that took over its operand's
  // chunk is counted once), and what is live then: per chunk, its newest value.
  std::map<uint32_t, uint32_t> newest;  // leader interval -> live interval with the latest start
  for (uint32_t k = 0; k < model.heap_intervals.size(); ++k) {
    const HeapInterval& iv = model.heap_intervals[k];
    if (iv.start > temp_peak.time || iv.end < temp_peak.time) continue;
    const uint32_t leader = colocation_leader(model.heap_intervals, k);
    auto [it, inserted] = newest.emplace(leader, k);
    if (!inserted && model.heap_intervals[it->second].start < iv.start) it->second = k;
    if (iv.start == temp_peak.time) {
      const HloValue& v = model.values[model.heap_values[k]];
      const HloInstruction& def = module.computations[v.computation].instructions[v.instruction];
      plan.peak_instruction = def.name;
      plan.peak_op_name = def.op_name;
      plan.peak_time = v.start;
    }
  }
  std::set<uint32_t> live_buffers;
  for (const auto& [leader, k] : newest) live_buffers.insert(model.values[model.heap_values[k]].buffer);
  plan.live_at_peak.assign(live_buffers.begin(), live_buffers.end());
  std::sort(plan.live_at_peak.begin(), plan.live_at_peak.end(), [&](uint32_t a, uint32_t b) {
    return std::tie(plan.buffers[b].bytes, a) < std::tie(plan.buffers[a].bytes, b);
  });

  std::map<std::tuple<std::string, std::string>, BufferGroup> groups;
  for (uint32_t b : plan.live_at_peak) {
    const PlannedBuffer& row = plan.buffers[b];
    BufferGroup& g = groups[{row.op_name, row.shape}];
    g.op_name = row.op_name;
    g.shape = row.shape;
    ++g.count;
    g.bytes_each = std::max(g.bytes_each, row.bytes);
    g.total_bytes += row.bytes;
    g.names.push_back(row.name);
  }
  for (auto& [key, g] : groups) plan.groups.push_back(std::move(g));
  std::sort(plan.groups.begin(), plan.groups.end(), [](const BufferGroup& a, const BufferGroup& b) {
    return std::tie(b.total_bytes, a.op_name, a.shape) < std::tie(a.total_bytes, b.op_name, b.shape);
  });
  if (plan.groups.size() > options.top) plan.groups.resize(options.top);
  return plan;
}

}  // namespace
}  // namespace memfit
