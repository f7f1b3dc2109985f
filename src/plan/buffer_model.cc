#include "memfit/plan/buffer_model.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <functional>
#include <numeric>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "buffer_model_builder.h"
#include "memfit/core/text.h"

namespace memfit {

const char* buffer_kind_name(BufferKind kind) {
  switch (kind) {
    case BufferKind::kParameter:
      return "parameter";
    case BufferKind::kOutput:
      return "output";
    case BufferKind::kConstant:
      return "constant";
    case BufferKind::kTemp:
      return "temp";
    case BufferKind::kReusesAllocation:
      return "reuses-allocation";
  }
  return "?";
}

namespace buffer_model_internal {

Status Builder::analyze() {
  const size_t nc = m_.computations.size();
  for (uint32_t c = 0; c < nc; ++c) {
    comp_index_.emplace(m_.computations[c].name, c);
    auto& names = names_.emplace_back();
    const auto& insts = m_.computations[c].instructions;
    names.reserve(insts.size());
    for (uint32_t i = 0; i < insts.size(); ++i) names.emplace(insts[i].name, i);
  }
  positions_.resize(nc);
  operands_.resize(nc);
  time_.resize(nc);
  span_.assign(nc, {0, 0});
  processed_.assign(nc, false);
  in_progress_.assign(nc, false);
  users_.resize(nc);
  users_built_.assign(nc, false);
  heroes_.assign(nc, nullptr);
  heroes_built_.assign(nc, false);
  const HloComputation* entry = m_.entry();
  if (entry == nullptr) return invalid_argument("the module has no ENTRY computation");
  entry_ = static_cast<uint32_t>(entry - m_.computations.data());
  MEMFIT_RETURN_IF_ERROR(process(entry_, {}, 0));
  MEMFIT_RETURN_IF_ERROR(alias_donations());
  compute_liveness();
  assign_buffers();
  return ok_status();
}

Expected<BufferModel> Builder::build() {
  MEMFIT_RETURN_IF_ERROR(analyze());
  assign_allocations();
  simulate_heap();
  model_.schedule_length = clock_time_;
  return std::move(model_);
}

Expected<uint64_t> Builder::scheduler_estimate() {
  MEMFIT_RETURN_IF_ERROR(analyze());
  return estimate_scheduler_memory();
}

}  // namespace buffer_model_internal

std::string value_name(const HloModule& module, const HloValue& value) {
  const HloInstruction& def = module.computations[value.computation].instructions[value.instruction];
  if (!def.shape.is_tuple()) return def.name;
  return fmt::format("{}{{{}}}", def.name, fmt::join(value.index, ","));
}

Expected<BufferModel> build_buffer_model(const HloModule& module) {
  return buffer_model_internal::Builder(module).build();
}

Expected<uint64_t> scheduler_estimate_bytes(const HloModule& order) {
  return buffer_model_internal::Builder(order).scheduler_estimate();
}

}  // namespace memfit
