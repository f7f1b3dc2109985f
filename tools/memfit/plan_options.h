// tools/memfit/plan_options.h - the model options `memfit plan` and `memfit fit` share: a spec file with
// programs.json's config keys, overridden by flags.
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>

#include "memfit/core/environment.h"
#include "memfit/core/json.h"
#include "memfit/core/status.h"
#include "memfit/program/model_zoo.h"

namespace memfit::cli {

struct PlanOptions {
  std::string spec_file;
  Json overrides = Json::object();  // flags given, by config key
  std::string capacity;
  std::string device;
  std::optional<double>
      memory_fraction;  // --mem-fraction; unset: the XLA variables in force (resolve_plan_inputs)
  bool json = false;
};

void add_plan_options(CLI::App& app, PlanOptions& options);

// What the flags and the spec file say: the model, the device's memory when given, and the share of it XLA's
// pool takes - --mem-fraction, else the XLA variables in force (`env`), as `memfit hlo --capacity` reads
// them.
struct PlanInputs {
  ModelSpec spec;
  std::optional<uint64_t> capacity_bytes;
  double memory_fraction = 0.75;
};
Expected<PlanInputs> resolve_plan_inputs(const PlanOptions& options, const Environment& env);
// A model from config keys alone (a spec file's object, a Python dict): what resolve_plan_inputs does last.
Expected<ModelSpec> spec_from_config(Json config);

}  // namespace memfit::cli
