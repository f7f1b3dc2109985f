#include "memfit/core/json.h"

#include <fmt/format.h>

#include <optional>

#include "memfit/core/text.h"

namespace memfit {
namespace {

// Nesting deeper than any real spec or report; deeper input is refused before nlohmann builds (and later
// prints or destroys) a value that deep.
constexpr size_t kMaxJsonDepth = 256;

// The deepest nesting of arrays and objects in `text` and where it first exceeds the limit, found by one
// pass that skips strings (a '[' inside a string is not nesting).
std::optional<size_t> depth_exceeded_at(std::string_view text) {
  size_t depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth) return i;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return std::nullopt;
}

Expected<const Json*> member(const Json& object, std::string_view key) {
  if (!object.is_object()) return invalid_argument(fmt::format("expected an object holding '{}'", key));
  auto it = object.find(key);
  if (it == object.end()) return invalid_argument(fmt::format("missing key '{}'", key));
  return &*it;
}

}  // namespace

Expected<Json> parse_json(std::string_view text, std::string_view source) {
  if (auto at = depth_exceeded_at(text)) {
    return invalid_argument(
        fmt::format("{}: not valid JSON here: nested more than {} levels deep (at byte {})",
                    valid_utf8(source), kMaxJsonDepth, *at));
  }
  try {
    return Json::parse(text.begin(), text.end());
  } catch (const Json::exception& e) {
    // nlohmann reports the position in its message ("at line 3, column 5").
    std::string what = e.what();
    const size_t colon = what.find(": ");
    return invalid_argument(fmt::format("{}: not valid JSON ({})", valid_utf8(source),
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

std::string json_text(const Json& value, int indent) {
  // Names, paths and log lines may hold bytes that are not UTF-8: they become U+FFFD rather than an
  // exception (nlohmann's default throws type_error 316 and would abort the CLI).
  return value.dump(indent, ' ', false, Json::error_handler_t::replace);
}

std::string json_to_output(const Json& value) { return json_text(value, 2) + "\n"; }

Json error_to_json(const Error& error) {
  Json out;
  out["code"] = std::string(error_code_name(error.code()));
  out["message"] = error.message();
  if (error.detail() != nullptr) out["detail"] = error.detail()->to_json();
  return Json{{"error", out}};
}

}  // namespace memfit
