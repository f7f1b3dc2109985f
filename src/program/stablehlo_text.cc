// The text of StableHLO MLIR as memfit's reader takes it apart: lines, brackets, types and op names.
#include "stablehlo_text.h"

#include <fmt/format.h>

#include <cctype>
#include <charconv>
#include <unordered_map>

#include "memfit/core/checked.h"
#include "memfit/core/text.h"

namespace memfit::stablehlo_text {
namespace {

// Depth-aware scanning: brackets of every kind ('>' of "->" is none) and double-quoted strings (with
// escapes). Calls `visit(i, depth, opens, closes)` for each character outside quotes from `from`, `depth`
// counting the brackets open before it (less one if it closes one); stops when `visit` returns false.
template <typename F>
void walk_brackets(std::string_view s, size_t from, F&& visit) {
  int depth = 0;
  bool quoted = false;
  for (size_t i = from; i < s.size(); ++i) {
    const char c = s[i];
    if (quoted) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        quoted = false;
      }
      continue;
    }
    if (c == '"') {
      quoted = true;
      continue;
    }
    const bool opens = c == '(' || c == '[' || c == '{' || c == '<';
    const bool closes = c == ')' || c == ']' || c == '}' || (c == '>' && (i == 0 || s[i - 1] != '-'));
    if (closes && depth > 0) --depth;
    if (!visit(i, depth, opens, closes)) return;
    if (opens) ++depth;
  }
}

// Calls `at_top(i)` for each character outside brackets and quotes that is none itself.
template <typename F>
void scan_top_level(std::string_view s, F&& at_top) {
  walk_brackets(s, 0, [&](size_t i, int depth, bool opens, bool closes) {
    return depth != 0 || opens || closes || at_top(i);
  });
}

}  // namespace

// "[0, 2, 1]" after `key` (which ends with '['): the integers, or none when the list does not read.
std::vector<int64_t> int_list_after(std::string_view text, std::string_view key) {
  std::vector<int64_t> out;
  const size_t at = text.find(key);
  if (at == std::string_view::npos) return out;
  const size_t start = at + key.size();
  const size_t close = text.find(']', start);
  if (close == std::string_view::npos) return out;
  std::string_view list = text.substr(start, close - start);
  while (!list.empty()) {
    while (!list.empty() && (list.front() == ' ' || list.front() == ',')) list.remove_prefix(1);
    if (list.empty()) break;
    int64_t d = -1;
    const auto [end, ec] = std::from_chars(list.data(), list.data() + list.size(), d);
    if (ec != std::errc() || d < 0) return {};
    out.push_back(d);
    list.remove_prefix(static_cast<size_t>(end - list.data()));
  }
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// The next line of `text` from `pos` that says something (trimmed; not blank, not a comment), counting
// lines in `number`; false at the end.
bool next_line(std::string_view text, size_t& pos, std::string_view& line, uint64_t& number) {
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    line = trim(text.substr(pos, end - pos));
    pos = end + 1;
    ++number;
    if (!line.empty() && !line.starts_with("//")) return true;
  }
  return false;
}

// Where a trailing location starts: " loc(...)" whose parenthesis closes at the end of `s` (JAX prints
// them with lowered.as_text(debug_info=True) and in JAX_DUMP_IR_TO's files); npos when there is none.
size_t trailing_loc(std::string_view s) {
  if (!s.ends_with(")")) return std::string_view::npos;
  for (size_t p = s.find(" loc("); p != std::string_view::npos; p = s.find(" loc(", p + 1))
    if (closing_bracket(s, p + 4) == s.size() - 1) return p;
  return std::string_view::npos;
}

size_t closing_bracket(std::string_view s, size_t open) {
  size_t found = std::string_view::npos;
  walk_brackets(s, open, [&](size_t i, int depth, bool, bool closes) {
    if (closes && depth == 0) found = i;
    return found == std::string_view::npos;
  });
  return found;
}

size_t find_top_level(std::string_view s, std::string_view what) {
  size_t found = s.size();
  scan_top_level(s, [&](size_t i) {
    if (s.substr(i).starts_with(what)) found = i;
    return found == s.size();
  });
  return found;
}

Error error_at(uint64_t line, std::string_view what) {
  return invalid_argument(fmt::format("line {}: {}", line, what));
}

std::vector<std::string_view> split_top_level(std::string_view s) {
  std::vector<std::string_view> out;
  size_t start = 0;
  scan_top_level(s, [&](size_t i) {
    if (s[i] == ',') {
      out.push_back(trim(s.substr(start, i - start)));
      start = i + 1;
    }
    return true;
  });
  const std::string_view last = trim(s.substr(start));
  if (!last.empty()) out.push_back(last);
  return out;
}

// The last " : " outside brackets: what follows is the op's type signature.
size_t signature_colon(std::string_view s) {
  size_t found = std::string_view::npos;
  scan_top_level(s, [&](size_t i) {
    if (s[i] == ':' && i > 0 && s[i - 1] == ' ' && i + 1 < s.size() && s[i + 1] == ' ') found = i;
    return true;
  });
  return found;
}

// The top-level "->" in a signature, if any.
size_t arrow(std::string_view s) {
  size_t found = std::string_view::npos;
  scan_top_level(s, [&](size_t i) {
    if (s[i] == '-' && i + 1 < s.size() && s[i + 1] == '>') {
      found = i;
      return false;
    }
    return true;
  });
  return found;
}

// MLIR element types as HLO names them.
std::optional<PrimitiveType> element_type(std::string_view t) {
  static const std::unordered_map<std::string_view, std::string_view> kNames = {
      {"i1", "pred"},
      {"i2", "s2"},
      {"i4", "s4"},
      {"i8", "s8"},
      {"i16", "s16"},
      {"i32", "s32"},
      {"i64", "s64"},
      {"ui2", "u2"},
      {"ui4", "u4"},
      {"ui8", "u8"},
      {"ui16", "u16"},
      {"ui32", "u32"},
      {"ui64", "u64"},
      {"f16", "f16"},
      {"bf16", "bf16"},
      {"f32", "f32"},
      {"f64", "f64"},
      {"f8E5M2", "f8e5m2"},
      {"f8E4M3", "f8e4m3"},
      {"f8E4M3FN", "f8e4m3fn"},
      {"f8E4M3B11FNUZ", "f8e4m3b11fnuz"},
      {"f8E5M2FNUZ", "f8e5m2fnuz"},
      {"f8E4M3FNUZ", "f8e4m3fnuz"},
      {"f8E3M4", "f8e3m4"},
      {"f8E8M0FNU", "f8e8m0fnu"},
      {"f4E2M1FN", "f4e2m1fn"},
      {"complex<f32>", "c64"},
      {"complex<f64>", "c128"}};
  auto it = kNames.find(t);
  if (it == kNames.end()) return std::nullopt;
  return parse_primitive_type(it->second);
}

Expected<Shape> parse_type(std::string_view t, uint64_t line, int depth) {
  // As HLO text's shapes: a tuple nests at most 64 deep (each level rescans what it holds, so a hostile
  // text's depth would cost its square).
  if (depth > 64) return error_at(line, "a type nested more than 64 deep");
  t = trim(t);
  Shape s;
  if (t == "!stablehlo.token" || t == "!mhlo.token") {
    s.type = PrimitiveType::kToken;
    return s;
  }
  if (t.starts_with("tuple<") && t.ends_with(">")) {
    for (std::string_view e : split_top_level(t.substr(6, t.size() - 7))) {
      MEMFIT_ASSIGN_OR_RETURN(Shape inner, parse_type(e, line, depth + 1));
      s.elements.push_back(std::move(inner));
    }
    return s;
  }
  if (!t.starts_with("tensor<") || !t.ends_with(">"))
    return error_at(line, fmt::format("expected a tensor type, got {}", excerpt(t)));
  std::string_view body = t.substr(7, t.size() - 8);
  // An encoding after a top-level comma (sparsity, bounds) does not change the dense size.
  if (auto parts = split_top_level(body); parts.size() > 1) body = parts[0];
  std::vector<uint64_t> dims;
  while (true) {
    const size_t x = body.find('x');
    if (x == std::string_view::npos || body.empty() || !std::isdigit(static_cast<unsigned char>(body[0]))) {
      if (!body.empty() && body[0] == '?')
        return error_at(line, "a dynamic dimension ('?'): memfit plans static shapes");
      break;
    }
    uint64_t d = 0;
    const auto [end, ec] = std::from_chars(body.data(), body.data() + x, d);
    if (ec != std::errc() || end != body.data() + x) break;  // "complex<f32>" and friends start with a letter
    dims.push_back(d);
    body.remove_prefix(x + 1);
  }
  auto type = element_type(body);
  if (!type) return error_at(line, fmt::format("unknown element type {}", excerpt(body)));
  s.type = *type;
  s.dims = std::move(dims);
  if (!array_bytes(s.type, s.dims, 0).ok())
    return error_at(line, fmt::format("the type {} overflows 64 bits", excerpt(t)));
  return s;
}

Expected<std::vector<Shape>> parse_type_list(std::string_view s, uint64_t line) {
  s = trim(s);
  if (s.starts_with("(") && s.ends_with(")")) s = s.substr(1, s.size() - 2);
  std::vector<Shape> out;
  for (std::string_view t : split_top_level(s)) {
    // A result type may carry attributes: "tensor<4xf32> {jax.result_info = ...}".
    if (const size_t brace = t.find(" {"); brace != std::string_view::npos) t = trim(t.substr(0, brace));
    MEMFIT_ASSIGN_OR_RETURN(Shape shape, parse_type(t, line));
    out.push_back(std::move(shape));
  }
  return out;
}

// StableHLO (and the few CHLO/MHLO/SDY) op names as HLO opcodes.
std::string hlo_opcode(std::string_view op) {
  static const std::unordered_map<std::string_view, std::string_view> kOps = {
      {"stablehlo.dot_general", "dot"},
      {"stablehlo.dot", "dot"},
      {"stablehlo.broadcast_in_dim", "broadcast"},
      {"stablehlo.broadcast", "broadcast"},
      {"stablehlo.optimization_barrier", "opt-barrier"},
      {"stablehlo.custom_call", "custom-call"},
      {"stablehlo.get_tuple_element", "get-tuple-element"},
      {"stablehlo.is_finite", "is-finite"},
      {"stablehlo.exponential_minus_one", "exponential-minus-one"},
      {"stablehlo.log_plus_one", "log-plus-one"},
      {"stablehlo.round_nearest_even", "round-nearest-even"},
      {"stablehlo.round_nearest_afz", "round-nearest-afz"},
      {"stablehlo.count_leading_zeros", "count-leading-zeros"},
      {"stablehlo.shift_left", "shift-left"},
      {"stablehlo.shift_right_arithmetic", "shift-right-arithmetic"},
      {"stablehlo.shift_right_logical", "shift-right-logical"},
      {"stablehlo.cosine", "cosine"},
      {"stablehlo.sine", "sine"},
      {"chlo.square", "multiply"},
      {"chlo.erf", "erf"},
      {"chlo.erf_inv", "erf"},
      {"chlo.tan", "tan"},
      {"chlo.top_k", "topk"},
      // CHLO's other elementwise ops become StableHLO elementwise expressions before XLA sees them
      // (chlo_legalize_to_stablehlo): transcendental ones fuse as XLA's expensive ops do, the rest as
      // cheap ones. Named here by the HLO op of the same cost.
      {"chlo.lgamma", "log"},
      {"chlo.digamma", "log"},
      {"chlo.polygamma", "log"},
      {"chlo.zeta", "log"},
      {"chlo.sinh", "exponential"},
      {"chlo.cosh", "exponential"},
      {"chlo.bessel_i1e", "exponential"},
      {"chlo.asin", "atan2"},
      {"chlo.acos", "atan2"},
      {"chlo.atan", "atan2"},
      {"chlo.asinh", "log"},
      {"chlo.acosh", "log"},
      {"chlo.atanh", "log"},
      {"chlo.conj", "negate"},
      {"chlo.next_after", "select"},
      {"chlo.is_inf", "is-finite"},
      {"chlo.is_neg_inf", "is-finite"},
      {"chlo.is_pos_inf", "is-finite"},
      {"sdy.sharding_constraint", "bitcast"},
      {"sdy.reshard", "bitcast"},
      {"mhlo.sharding", "bitcast"},
      {"func.call", "call"},
      {"call", "call"},
  };
  if (auto it = kOps.find(op); it != kOps.end()) return std::string(it->second);
  // CHLO's implicitly broadcasting binary ops ("chlo.broadcast_add"): the op, on the result's shape.
  if (op.starts_with("chlo.broadcast_")) return hlo_opcode(fmt::format("stablehlo.{}", op.substr(15)));
  std::string_view name = op;
  if (const size_t dot = name.find('.'); dot != std::string_view::npos) name = name.substr(dot + 1);
  std::string out(name);
  for (char& c : out) {
    if (c == '_') c = '-';
  }
  return out;
}

}  // namespace memfit::stablehlo_text
