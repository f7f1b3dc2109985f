// memfit/core/json_fwd.h - the JSON type, declared only. nlohmann/json.hpp is among the slowest headers
// to compile; a header that only names `Json` in a signature includes this, and the files that build or
// read JSON include memfit/core/json.h.
#pragma once

#include <nlohmann/json_fwd.hpp>

namespace memfit {

using Json = nlohmann::ordered_json;

}  // namespace memfit
