#include "plan_options.h"

#include <charconv>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "memfit/core/device_catalog.h"
#include "memfit/core/file_io.h"
#include "memfit/core/json.h"
#include "memfit/core/text.h"
#include "memfit/core/xla_env.h"

namespace memfit::cli {
namespace {

// "a,b,c" -> {"a", "b", "c"}; every part kept, empty ones too (the spec's checks name them).
std::vector<std::string> comma_separated(const std::string& v) {
  std::vector<std::string> parts;
  size_t at = 0;
  while (at <= v.size()) {
    const size_t end = std::min(v.find(',', at), v.size());
    parts.push_back(v.substr(at, end - at));
    at = end + 1;
  }
  return parts;
}

// "123" -> 123, "-5" -> -5 (the spec's check refuses it by name), anything else -> the text itself.
Json whole_number_or_text(const std::string& v) {
  const char* end = v.data() + v.size();
  auto whole = [&](auto n) -> std::optional<Json> {
    const auto [stop, ec] = std::from_chars(v.data(), end, n);
    if (ec == std::errc() && stop == end) return Json(n);
    return std::nullopt;
  };
  const std::optional<Json> n = !v.empty() && v[0] == '-' ? whole(int64_t{0}) : whole(uint64_t{0});
  return n ? *n : Json(v);
}

}  // namespace

void add_plan_options(CLI::App& app, PlanOptions& o) {
  app.add_option("SPEC", o.spec_file,
                 "A JSON spec with the config keys of programs.json (flags override it)");
  // A whole number as the spec reads it; text that is not one (or is beyond 64 bits) is passed on as text,
  // for the spec's check to name - an int64 option would clamp 2^64 - 1 to 2^63 - 1 without a word.
  auto integer = [&](const char* flag, const char* key, const char* help) {
    app.add_option_function<std::string>(
        flag, [&o, key](const std::string& v) { o.overrides[key] = whole_number_or_text(v); }, help);
  };
  auto text = [&](const char* flag, const char* key, const char* help) {
    app.add_option_function<std::string>(
        flag, [&o, key](const std::string& v) { o.overrides[key] = v; }, help);
  };
  text("--model", "model", "gpt, mlp, vit, flax_encoder or flax_cnn");
  integer("--vocab", "vocab", "GPT vocabulary");
  integer("--d-model", "d_model", "width of a transformer");
  integer("--heads", "heads", "attention heads");
  integer("--kv-heads", "kv_heads",
          "step decode: key/value heads of grouped-query attention (default: heads)");
  integer("--d-ff", "d_ff", "hidden width of a transformer block's MLP (default: 4 x d-model)");
  integer("--layers", "layers", "transformer blocks");
  integer("--seq", "seq", "sequence length");
  integer("--batch", "batch", "global batch");
  integer("--din", "din", "MLP input width");
  integer("--width", "width", "MLP hidden width");
  integer("--depth", "depth", "MLP hidden layers");
  integer("--dout", "dout", "MLP output width");
  integer("--image", "image", "ViT and flax_cnn image side");
  integer("--patch", "patch", "ViT patch side");
  integer("--classes", "classes", "ViT and flax_cnn classes");
  app.add_option_function<std::string>(
      "--widths",
      [&o](const std::string& v) {
        // "64,128,256,512": a number where one parses, else the text (the spec names it as an error).
        Json widths = Json::array();
        for (const std::string& part : comma_separated(v)) widths.push_back(whole_number_or_text(part));
        o.overrides["widths"] = widths;
      },
      "flax_cnn block widths, e.g. 64,128,256,512");
  integer("--accum", "accum", "gradient accumulation steps (optax.MultiSteps)");
  text("--precision", "precision", "fp32, mixed or bf16");
  text("--remat", "remat",
       "none, full (nothing_saveable), dots (dots_saveable), dots_no_batch, offload_dots_no_batch (saved to "
       "host)");
  text("--attn", "attn", "gpt and vit attention: xla (scores materialized) or cudnn (the fused kernel)");
  text("--optimizer", "optimizer", "adam, adamw, sgd or adafactor");
  text("--step", "step",
       "train, infer, vmap_grads or decode (one token against a KV cache of --seq positions)");
  text("--sharding", "sharding", "replicated, fsdp or tp (with --mesh)");
  text("--backend", "backend", "gpu or cpu");
  app.add_option_function<std::string>(
      "--mesh",
      [&o](const std::string& v) {
        // "data=8" or "data=2,model=4"
        Json sizes = Json::array(), names = Json::array();
        for (const std::string& part : comma_separated(v)) {
          const size_t eq = part.find('=');
          names.push_back(part.substr(0, eq));
          sizes.push_back(eq == std::string::npos ? Json(part) : Json(part.substr(eq + 1)));
        }
        o.overrides["mesh_text"] = v;
        o.overrides["mesh_axes"] = names;
        o.overrides["mesh"] = sizes;
      },
      "device mesh, e.g. data=8 or data=2,model=4");
  app.add_flag_function(
      "--donate", [&o](int64_t) { o.overrides["donate"] = true; }, "donate parameters and optimizer state");
  app.add_flag_function(
      "--scan", [&o](int64_t) { o.overrides["scan"] = true; }, "jax.lax.scan over the layers");
  app.add_option("--capacity", o.capacity, "device memory (bytes, 80GiB, h100, h200)");
  app.add_option("--device", o.device, "a device by name (h100, h200, a100-80gb, a100-40gb)");
  app.add_option(
         "--mem-fraction", o.memory_fraction,
         "the share of the device XLA's pool takes (default: XLA_CLIENT_MEM_FRACTION in force, else 0.75)")
      ->check(CLI::Validator(
          [](const std::string& value) -> std::string {
            // CLI::Range compares with < and >, which NaN passes; this is written so that NaN fails.
            double v = 0;
            const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
            if (ec != std::errc() || end != value.data() + value.size() || !(v >= 0.01 && v <= 1.0))
              return "must be a number from 0.01 to 1 (got " + excerpt(value) + ")";
            return {};
          },
          "FRACTION in [0.01, 1]"));
  app.add_flag("--json", o.json, "Print one JSON object");
}

namespace {

Expected<ModelSpec> resolve_spec(const PlanOptions& o) {
  Json config = Json::object();
  if (!o.spec_file.empty()) {
    MEMFIT_ASSIGN_OR_RETURN(std::string text, read_file(o.spec_file));
    MEMFIT_ASSIGN_OR_RETURN(config, parse_json(text, o.spec_file));
    if (config.contains("config") && config["config"].is_object()) config = Json(config["config"]);
    if (!config.is_object())
      return invalid_argument(fmt::format("{}: expected a JSON object of config keys", o.spec_file));
  }
  for (const auto& [key, value] : o.overrides.items()) {
    if (key == "mesh_text") continue;
    if (key == "mesh") {
      Json sizes = Json::array();
      for (const Json& v : value) {
        const std::string t = v.get<std::string>();
        int64_t n = 0;
        const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), n);
        if (ec != std::errc() || end != t.data() + t.size() || n <= 0)
          return invalid_argument(
              fmt::format("--mesh: '{}' is not name=size,...", o.overrides["mesh_text"].get<std::string>()));
        sizes.push_back(n);
      }
      config["mesh"] = sizes;
      continue;
    }
    config[key] = value;
  }
  return spec_from_config(std::move(config));
}

Expected<std::optional<uint64_t>> resolve_capacity(const PlanOptions& o) {
  if (!o.capacity.empty() && !o.device.empty())
    return invalid_argument("give --capacity or --device, not both");
  const std::string& c = o.capacity.empty() ? o.device : o.capacity;
  if (c.empty()) return std::optional<uint64_t>();
  auto bytes = parse_capacity(c);
  if (!bytes.ok()) return bytes.error().with_context(o.capacity.empty() ? "--device" : "--capacity");
  return std::optional<uint64_t>(*bytes);
}

}  // namespace

Expected<ModelSpec> spec_from_config(Json config) {
  if (!config.is_object()) return invalid_argument("a model spec is an object of config keys");
  if (config.contains("config") && config["config"].is_object()) config = Json(config["config"]);
  if (config.contains("mesh") && !config.contains("sharding")) config["sharding"] = "replicated";
  return model_spec_from_json(config);
}

Expected<PlanInputs> resolve_plan_inputs(const PlanOptions& o, const Environment& env) {
  PlanInputs in;
  MEMFIT_ASSIGN_OR_RETURN(in.spec, resolve_spec(o));
  MEMFIT_ASSIGN_OR_RETURN(in.capacity_bytes, resolve_capacity(o));
  // The fraction sizes a device's pool: without a device it would be ignored.
  if (o.memory_fraction && !in.capacity_bytes)
    return invalid_argument("--mem-fraction sizes the pool of a device: give --capacity or --device");
  in.memory_fraction = o.memory_fraction.value_or(kXlaDefaultMemoryFraction);
  if (!o.memory_fraction && in.capacity_bytes) {
    // The pool the process would have: XLA_CLIENT_MEM_FRACTION=.5 exported made `memfit hlo --capacity` say
    // 50% and `memfit plan` 75%. A fraction above 1 is the whole device here (the pool backs off to what the
    // driver grants: memfit env says how far).
    MEMFIT_ASSIGN_OR_RETURN(const XlaAllocatorConfig config, parse_xla_allocator_env(env));
    in.memory_fraction = std::min(1.0, config.memory_fraction);
  }
  return in;
}

}  // namespace memfit::cli
