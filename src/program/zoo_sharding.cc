// A step over several GPUs as JAX lowers it: jax.jit(step) of arguments placed with NamedShardings
// (reference_programs.py's spec_for) lowers to the one-device program of the global batch whose arguments
// carry their shardings; XLA's SPMD partitioner makes each device's program of it. The zoo writes the same:
// the lowered writer's program, annotated here, partitioned by the plan's model of the partitioner.
#include <algorithm>
#include <string>
#include <vector>

#include "zoo_sharding.h"

#include "zoo_lowered.h"

namespace memfit::zoo {

std::vector<std::string> parameter_split(const ModelSpec& spec, std::string_view name,
                                         const std::vector<uint64_t>& d) {
  std::vector<std::string> axes(d.size());
  if (d.empty()) return axes;
  auto has = [&](std::string_view part) { return name.find(part) != std::string_view::npos; };
  const uint64_t data = spec.axis_size("data"), model = spec.axis_size("model");
  if (spec.sharding == ShardingKind::kFsdp && data > 1) {
    const size_t ax = static_cast<size_t>(std::max_element(d.begin(), d.end()) - d.begin());
    if (d[ax] % data == 0) axes[ax] = "data";
  } else if (spec.sharding == ShardingKind::kTp && model > 1 && d.size() >= 2) {
    if ((has("wqkv") || has("w1")) && d.back() % model == 0)
      axes.back() = "model";
    else if ((has("'wo'") || has("w2")) && d[d.size() - 2] % model == 0)
      axes[d.size() - 2] = "model";
    else if (has("embed") && d[0] % model == 0)
      axes[0] = "model";
  }
  return axes;
}

namespace {

// An entry argument's split: the batch by its leading dimension over 'data', a parameter or its optimizer
// state by parameter_split, the rest whole.
std::vector<std::string> split_of(const ModelSpec& spec, const HloInstruction& p) {
  const std::vector<uint64_t>& d = p.shape.dims;
  if (p.op_name.starts_with("batch[")) {
    std::vector<std::string> axes(d.size());
    const uint64_t data = spec.axis_size("data");
    if (!d.empty() && data > 1 && d[0] % data == 0) axes[0] = "data";
    return axes;
  }
  if (p.category != "parameters" && p.category != "optimizer_state")
    return std::vector<std::string>(d.size());
  return parameter_split(spec, p.op_name, d);
}

}  // namespace

bool lowers_sharded(const ModelSpec& spec) {
  if (spec.backend != Backend::kGpu || spec.devices() <= 1 ||
      (spec.step != StepKind::kTrain && spec.step != StepKind::kInfer))
    return false;
  const ModelSpec one = unsharded(spec);
  return mlp_lowers(one) || transformer_lowers(one) || flax_cnn_lowers(one) || flax_encoder_lowers(one);
}

ModelSpec unsharded(const ModelSpec& spec) {
  ModelSpec one = spec;
  one.mesh.clear();
  one.mesh_axes.clear();
  one.sharding = ShardingKind::kReplicated;
  return one;
}

void shard_lowered_step(const ModelSpec& spec, HloModule& module, StepArguments& arguments) {
  module.num_partitions = spec.devices();
  HloComputation* entry = module.entry();
  if (entry == nullptr) return;
  arguments.parameter_bytes = arguments.optimizer_state_bytes = arguments.batch_bytes = 0;
  for (HloInstruction& p : entry->instructions) {
    if (p.opcode != HloOpcode::kParameter || p.shape.is_tuple()) continue;
    const std::vector<std::string> axes = split_of(spec, p);
    std::vector<uint64_t> tiles(axes.size(), 1);
    Shape share = p.shape;
    for (size_t k = 0; k < axes.size(); ++k) {
      if (axes[k].empty()) continue;
      tiles[k] = spec.axis_size(axes[k]);
      share.dims[k] = (share.dims[k] + tiles[k] - 1) / tiles[k];
    }
    const bool split = std::any_of(tiles.begin(), tiles.end(), [](uint64_t t) { return t > 1; });
    p.mutable_sharding_tiles() = {split ? tiles : std::vector<uint64_t>()};
    p.mutable_sharding_axes() = {axes};
    // Each device's share (sizes were checked whole, before the writer ran: a share is smaller).
    const uint64_t bytes = share.own_bytes();
    if (p.category == "parameters")
      arguments.parameter_bytes += bytes;
    else if (p.category == "optimizer_state")
      arguments.optimizer_state_bytes += bytes;
    else
      arguments.batch_bytes += bytes;
  }
  // JAX donates a sharded step's arguments as buffer donors: XLA pairs each with a result of its size in
  // each device's program (the shares may differ from the whole program's pairs).
  for (const HloAlias& a : module.aliases) module.buffer_donors.push_back({a.parameter, a.parameter_index});
  module.aliases.clear();
}

}  // namespace memfit::zoo
