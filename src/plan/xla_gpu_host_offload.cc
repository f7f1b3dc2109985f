// XLA:GPU's host offload over the modeled program (memfit/plan/xla_gpu_model.h): which values live in host
// memory. When the copies run is the latency-hiding scheduler's (xla_gpu_latency_hiding.cc).
#include <algorithm>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "xla_gpu_model_internal.h"

namespace memfit::xla_gpu_internal {
namespace {

// Host offload. JAX marks a value it wants in host memory (jax.device_put(x, memory_kind="pinned_host"), the
// remat policies offload_dot_with_no_batch_dims and save_and_offload_only_these_names) with a custom call
// annotate_device_placement whose _xla_buffer_placement is "pinned_host", and the value's way back with one
// whose placement is "device". XLA turns them into MoveToHost/MoveToDevice
// (xla/hlo/transforms/convert_memory_placement_to_internal_annotations.cc), then HostOffloader
// (xla/service/host_offloader.cc) gives the annotated value and everything that only forwards it (bitcast,
// tuple, get-tuple-element, optimization barrier) the host memory space S(5), and makes MoveToDevice a copy
// into a device buffer. So: a to-host annotation is the host buffer (its device operand is freed once
// copied), host memory spaces flow through the forwarding ops, a to-device annotation of a host value is a
// device buffer of its own, and one of a value already on the device is nothing (a bitcast). Approximated: an
// offload into a scan's stacked residuals (a dynamic-update-slice into a host buffer inside a loop) stays on
// the device.
bool is_host_placement(std::string_view placement) {
  return placement == "pinned_host" || placement == "unpinned_host";
}

void copy_memory_spaces(const Shape& from, Shape& to) {
  if (from.is_tuple() != to.is_tuple()) return;
  if (!to.is_tuple()) {
    to.memory_space = from.memory_space;
    return;
  }
  for (size_t k = 0; k < to.elements.size() && k < from.elements.size(); ++k)
    copy_memory_spaces(from.elements[k], to.elements[k]);
}

bool holds_host_memory(const Shape& s) {
  if (!s.is_tuple()) return s.memory_space == kHostMemorySpace;
  return std::any_of(s.elements.begin(), s.elements.end(), holds_host_memory);
}

bool is_placement_annotation(const HloInstruction& x) {
  return x.opcode == HloOpcode::kCustomCall && x.custom_call_target == "annotate_device_placement";
}

}  // namespace

void place_offloaded_values(HloComputation& comp) {
  // Most programs place nothing: no map of shapes for them.
  if (std::none_of(comp.instructions.begin(), comp.instructions.end(), is_placement_annotation)) return;
  std::unordered_map<std::string_view, const Shape*> shape_of;
  bool offloads = false;
  for (HloInstruction& x : comp.instructions) {
    auto operand = [&](size_t k) -> const Shape* {
      if (k >= x.operands.size()) return nullptr;
      auto it = shape_of.find(x.operands[k]);
      return it == shape_of.end() ? nullptr : it->second;
    };
    if (is_placement_annotation(x)) {
      if (is_host_placement(x.buffer_placement()) && !x.shape.is_tuple()) {
        x.shape.memory_space = kHostMemorySpace;
        offloads = true;
      } else if (x.buffer_placement() == "device" && (!operand(0) || !holds_host_memory(*operand(0)))) {
        x.set_opcode(HloOpcode::kBitcast);  // already on the device: the annotation moves nothing
      }
    } else if (offloads) {
      switch (x.opcode) {
        case HloOpcode::kBitcast:
          if (const Shape* o = operand(0)) copy_memory_spaces(*o, x.shape);
          break;
        case HloOpcode::kGetTupleElement:
          if (const Shape* o = operand(0); o && o->is_tuple() && x.tuple_index >= 0 &&
                                           static_cast<uint64_t>(x.tuple_index) < o->elements.size())
            copy_memory_spaces(o->elements[static_cast<size_t>(x.tuple_index)], x.shape);
          break;
        case HloOpcode::kOptimizationBarrier:
          if (const Shape* o = operand(0); o && x.operands.size() == 1 && o->is_tuple()) {
            copy_memory_spaces(*o, x.shape);
            break;
          }
          [[fallthrough]];  // StableHLO's barrier takes its values one by one, as a tuple does
        case HloOpcode::kTuple:
          for (size_t k = 0; k < x.shape.elements.size(); ++k)
            if (const Shape* o = operand(k)) copy_memory_spaces(*o, x.shape.elements[k]);
          break;
        default:
          break;
      }
    }
    shape_of[x.name] = &x.shape;
  }
}

}  // namespace memfit::xla_gpu_internal
