#include "memfit/program/model_zoo.h"

#include <fmt/format.h>

#include "memfit/core/checked.h"
#include "zoo_lowered.h"
#include "zoo_step.h"
#include "zoo_transformer.h"

namespace memfit {

namespace {

// Every shape is checked like a parsed one: a spec can ask for more than 64 bits of bytes. The entry (made
// last) first: its instructions carry the op names a user knows.
Status check_sizes(const HloModule& built) {
  for (auto comp = built.computations.rbegin(); comp != built.computations.rend(); ++comp)
    for (const HloInstruction& i : comp->instructions)
      if (!i.shape.is_tuple() && !array_bytes(i.shape.type, i.shape.dims, 0).ok())
        return invalid_argument(
            fmt::format("the spec's {} tensor {} overflows 64 bits", i.op_name, i.shape.to_string()));
  return Status();
}

}  // namespace

Expected<HloModule> build_step_module(const ModelSpec& spec, StepArguments* arguments) {
  MEMFIT_RETURN_IF_ERROR(validate_model_spec(spec));
  if (!builds_whole(spec))
    return invalid_argument(fmt::format(
        "{}: {} layers unrolled is more than memfit builds whole (at most {}); plan_step extrapolates such a "
        "step from smaller depths",
        spec.blocks_key(), spec.blocks(), kMaxUnrolledLayers));
  HloModule module;
  module.name = "jit_step";
  module.is_scheduled = true;
  module.platform = spec.backend == Backend::kCpu ? HloPlatform::kCpu : HloPlatform::kGpu;
  const bool sharded = zoo::lowers_sharded(spec);
  if (sharded || zoo::mlp_lowers(spec) || zoo::transformer_lowers(spec) || zoo::flax_cnn_lowers(spec) ||
      zoo::flax_encoder_lowers(spec)) {
    // The program JAX traces, planned through the model of XLA:GPU (plan/xla_gpu_model.h); over several
    // devices, the whole program with its arguments' shardings, partitioned by that model.
    const ModelSpec one = sharded ? zoo::unsharded(spec) : spec;
    StepArguments args;
    if (one.model == ModelFamily::kMlp)
      zoo::build_mlp_lowered(one, module, args);
    else if (one.model == ModelFamily::kFlaxCnn)
      zoo::build_flax_cnn_lowered(one, module, args);
    else if (one.model == ModelFamily::kFlaxEncoder)
      zoo::build_flax_encoder_lowered(one, module, args);
    else
      zoo::build_transformer_lowered(one, module, args);
    if (sharded) zoo::shard_lowered_step(spec, module, args);
    if (arguments != nullptr) *arguments = args;
    MEMFIT_RETURN_IF_ERROR(check_sizes(module));
    return module;
  }
  zoo::Emitter e(module);
  const PrimitiveType pdt = spec.precision == Precision::kBf16 ? PrimitiveType::kBF16 : PrimitiveType::kF32;
  const PrimitiveType cdt = spec.precision == Precision::kFp32 ? PrimitiveType::kF32 : PrimitiveType::kBF16;
  zoo::Ctx c{spec,
             e,
             pdt,
             cdt,
             spec.sharding == ShardingKind::kFsdp,
             spec.backend == Backend::kCpu,
             spec.axis_size("data"),
             spec.sharding == ShardingKind::kTp ? spec.axis_size("model") : 1,
             spec.remat};
  zoo::Step step(c);
  if (spec.model == ModelFamily::kMlp) {
    zoo::build_mlp(c, step, module);
  } else if (spec.model == ModelFamily::kFlaxCnn) {
    zoo::build_flax_cnn(c, step, module);
  } else {
    auto family = spec.model == ModelFamily::kVit           ? zoo::vit_family()
                  : spec.model == ModelFamily::kFlaxEncoder ? zoo::flax_encoder_family()
                                                            : zoo::gpt_family();
    zoo::build_transformer(c, step, module, *family);
  }
  if (arguments != nullptr) *arguments = step.arguments();
  HloModule built = e.finish();
  MEMFIT_RETURN_IF_ERROR(check_sizes(built));
  return built;
}

}  // namespace memfit
