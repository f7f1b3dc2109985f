// src/program/zoo_sharding.h - how reference_programs.py's spec_for places a model's arrays over a mesh,
// private to the program layer: both the fused per-device writer (zoo_step.h, XLA:CPU) and the lowered
// writer's annotations (zoo_sharding.cc, GPUs) split parameters by it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "memfit/program/model_spec.h"

namespace memfit::zoo {

// The mesh axis splitting each dimension of a parameter (or of the optimizer state kept for it) named `name`
// ("" where whole): FSDP splits the largest dimension (the first of the largest) over 'data' when it divides,
// else none; tensor parallelism splits wqkv and w1 by columns, wo and w2 by rows and the embedding by
// vocabulary over 'model', each where it divides.
std::vector<std::string> parameter_split(const ModelSpec& spec, std::string_view name,
                                         const std::vector<uint64_t>& dims);

}  // namespace memfit::zoo
