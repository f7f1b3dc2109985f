#include "memfit/core/json.h"

#include <fmt/format.h>

namespace memfit {
namespace {

Expected<const Json*> member(const Json& object, std::string_view key) {
  if (!object.is_object()) return invalid_argument(fmt::format("expected an object holding '{}'", key));
  auto it = object.find(key);
  if (it == object.end()) return invalid_argument(fmt::format("missing key '{}'", key));
  return &*it;
}

}  // namespace

Expected<Json> parse_json(std::string_view text, std::string_view source) {
  try {
    return Json::parse(text.begin(), text.end());
  } catch (const Json::exception& e) {
    // nlohmann reports the position in its message ("at line 3, column 5").
    std::string what = e.what();
    const size_t colon = what.find(": ");
    return invalid_argument(fmt::format("{}: not valid JSON ({})", source,
                                        colon == std::string::npos ? what : what.substr(colon + 2)));
  }
}

Expected<uint64_t> json_get_u64(const Json& object, std::string_view key) {
  MEMFIT_ASSIGN_OR_RETURN(const Json* v, member(object, key));
  if (!v->is_number_unsigned()) {
    if (v->is_number_integer()) return invalid_argument(fmt::format("'{}' must not be negative", key));
    return invalid_argument(fmt::format("'{}' must be a non-negative integer", key));
  }
  return v->get<uint64_t>();
}

Expected<double> json_get_number(const Json& object, std::string_view key) {
  MEMFIT_ASSIGN_OR_RETURN(const Json* v, member(object, key));
  if (!v->is_number()) return invalid_argument(fmt::format("'{}' must be a number", key));
  return v->get<double>();
}

Expected<std::string> json_get_string(const Json& object, std::string_view key) {
  MEMFIT_ASSIGN_OR_RETURN(const Json* v, member(object, key));
  if (!v->is_string()) return invalid_argument(fmt::format("'{}' must be a string", key));
  return v->get<std::string>();
}

std::string json_to_output(const Json& value) { return value.dump(2) + "\n"; }

Json error_to_json(const Error& error) {
  Json out;
  out["code"] = std::string(error_code_name(error.code()));
  out["message"] = error.message();
  if (error.detail() != nullptr) out["detail"] = error.detail()->to_json();
  return Json{{"error", out}};
}

}  // namespace memfit
