// Internal to memfit_program: the lexical pieces of the StableHLO reader (program/stablehlo_module.cc).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "memfit/core/status.h"
#include "memfit/program/hlo_module.h"

namespace memfit::stablehlo_text {

// "[0, 2, 1]" after `key` (which ends with '['): the integers, or none when the list does not read.
std::vector<int64_t> int_list_after(std::string_view text, std::string_view key);
std::string_view trim(std::string_view s);
// The next line from `pos` that says something (trimmed; not blank, not a // comment), counting lines in
// `number`; false at the end. Attribute aliases ("#loc3 = loc(...)") are lines too.
bool next_line(std::string_view text, size_t& pos, std::string_view& line, uint64_t& number);
// Where a trailing " loc(...)" starts (debug_info=True), or npos.
size_t trailing_loc(std::string_view s);
// Where the bracket that `s[open]` opens is closed, outside quoted strings (every kind of bracket counted,
// '>' of "->" none); npos when it is not.
size_t closing_bracket(std::string_view s, size_t open);
// Where `what` first starts outside brackets and quotes, or s.size().
size_t find_top_level(std::string_view s, std::string_view what);
Error error_at(uint64_t line, std::string_view what);
// Split at top-level commas (outside brackets of every kind and quoted strings), each part trimmed.
std::vector<std::string_view> split_top_level(std::string_view s);
// The last " : " outside brackets (what follows is the op's type signature), and the top-level "->".
size_t signature_colon(std::string_view s);
size_t arrow(std::string_view s);
// "tensor<4x8xf32>" (dynamic dimensions refused, sizes checked; tuples at most 64 deep) and a list of
// them, "(t1, t2)" or "t1, t2".
Expected<Shape> parse_type(std::string_view t, uint64_t line, int depth = 0);
Expected<std::vector<Shape>> parse_type_list(std::string_view s, uint64_t line);
// A StableHLO (CHLO, MHLO, SDY, func) op name as the HLO opcode it is.
std::string hlo_opcode(std::string_view op);

}  // namespace memfit::stablehlo_text
