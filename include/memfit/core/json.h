// memfit/core/json.h - JSON helpers over nlohmann::json (key order kept as written).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "memfit/core/json_fwd.h"
#include "memfit/core/status.h"

namespace memfit {

// Parses `text`; errors name `source` and the byte offset. Nesting deeper than 256 levels is refused.
Expected<Json> parse_json(std::string_view text, std::string_view source);

// Required members with their types checked; errors name the key.
Expected<uint64_t> json_get_u64(const Json& object, std::string_view key);
Expected<double> json_get_number(const Json& object, std::string_view key);
Expected<std::string> json_get_string(const Json& object, std::string_view key);

// `value` as JSON text (indent -1 = one line). Bytes that are not UTF-8 become U+FFFD, never an exception.
std::string json_text(const Json& value, int indent = -1);

// The CLI's `--json` output: one object, pretty-printed, newline-terminated.
std::string json_to_output(const Json& value);

// An error as a JSON object: {"error": {"code": ..., "message": ..., "detail": ...}}.
Json error_to_json(const Error& error);

}  // namespace memfit
