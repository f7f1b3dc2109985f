#include "memfit/program/hlo_module.h"

#include "memfit/core/name_map.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "memfit/core/checked.h"
#include "memfit/core/text.h"

namespace memfit {
namespace {

class Cursor {
 public:
  Cursor(std::string_view text, uint64_t line) : s_(text), line_(line) {}

  void skip_space() {
    while (pos_ < s_.size()) {
      if (std::isspace(static_cast<unsigned char>(s_[pos_]))) {
        ++pos_;
      } else if (s_.substr(pos_, 2) == "/*") {  // "/*index=5*/" inside tuples
        const size_t end = s_.find("*/", pos_ + 2);
        pos_ = end == std::string_view::npos ? s_.size() : end + 2;
      } else {
        break;
      }
    }
  }
  bool eat(char c) {
    skip_space();
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  char peek() {
    skip_space();
    return pos_ < s_.size() ? s_[pos_] : '\0';
  }
  std::string_view word() {  // [A-Za-z0-9_.-]+
    skip_space();
    const size_t start = pos_;
    while (pos_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[pos_])) || s_[pos_] == '_' ||
                                s_[pos_] == '.' || s_[pos_] == '-')) {
      ++pos_;
    }
    return s_.substr(start, pos_ - start);
  }
  Expected<uint64_t> number() {
    skip_space();
    uint64_t v = 0;
    const auto [end, ec] = std::from_chars(s_.data() + pos_, s_.data() + s_.size(), v);
    if (ec != std::errc()) return error("a number");
    pos_ = static_cast<size_t>(end - s_.data());
    return v;
  }
  // The text up to the bracket that closes the one just consumed, respecting nesting and quotes.
  Expected<std::string_view> until_close(char open, char close) {
    int depth = 1;
    bool quoted = false;
    const size_t start = pos_;
    for (; pos_ < s_.size(); ++pos_) {
      const char c = s_[pos_];
      if (quoted) {
        if (c == '\\')
          ++pos_;
        else if (c == '"')
          quoted = false;
      } else if (c == '"') {
        quoted = true;
      } else if (c == open) {
        ++depth;
      } else if (c == close && --depth == 0) {
        return s_.substr(start, pos_++ - start);
      }
    }
    return error(fmt::format("a closing '{}'", close));
  }
  Error error(std::string_view expected) const {
    return invalid_argument(fmt::format("line {}: expected {} at column {}", line_, expected, pos_ + 1));
  }
  std::string_view rest() const { return s_.substr(std::min(pos_, s_.size())); }
  bool done() {
    skip_space();
    return pos_ >= s_.size();
  }

 private:
  std::string_view s_;
  size_t pos_ = 0;
  uint64_t line_;
};

Expected<Shape> parse_shape(Cursor& c, int depth = 0) {
  if (depth > 64) return c.error("a shape nested less than 64 deep");
  Shape shape;
  if (c.eat('(')) {
    if (c.eat(')')) return shape;  // the empty tuple
    while (true) {
      MEMFIT_ASSIGN_OR_RETURN(Shape element, parse_shape(c, depth + 1));
      shape.elements.push_back(std::move(element));
      if (c.eat(')')) return shape;
      if (!c.eat(',')) return c.error("',' or ')' in a tuple shape");
    }
  }
  const std::string_view type_name = c.word();
  auto type = parse_primitive_type(type_name);
  if (!type || *type == PrimitiveType::kTuple) return c.error(fmt::format("a shape, not '{}'", type_name));
  shape.type = *type;
  if (!c.eat('[')) return c.error("'[' after the element type");
  if (!c.eat(']')) {
    while (true) {
      c.eat('<');  // dynamic dimension "<=N": its bound is what is allocated
      c.eat('=');
      MEMFIT_ASSIGN_OR_RETURN(uint64_t d, c.number());
      shape.dims.push_back(d);
      if (c.eat(']')) break;
      if (!c.eat(',')) return c.error("',' or ']' in the dimensions");
    }
  }
  if (c.peek() == '{') {
    c.eat('{');
    MEMFIT_ASSIGN_OR_RETURN(std::string_view layout, c.until_close('{', '}'));
    // minor_to_major comes first, up to ':' (tiling, element size, memory space follow).
    const std::string_view order = layout.substr(0, layout.find(':'));
    for (size_t at = 0; at < order.size();) {
      uint32_t d = 0;
      const auto [end, ec] = std::from_chars(order.data() + at, order.data() + order.size(), d);
      if (ec != std::errc()) break;
      shape.minor_to_major.push_back(d);
      at = static_cast<size_t>(end - order.data());
      while (at < order.size() && (order[at] == ',' || order[at] == ' ')) ++at;
    }
    if (const size_t e = layout.find("E("); e != std::string_view::npos) {
      uint32_t bits = 0;
      std::from_chars(layout.data() + e + 2, layout.data() + layout.size(), bits);
      shape.packed_element_bits = bits;
    }
    if (const size_t m = layout.find("S("); m != std::string_view::npos) {
      uint32_t space = 0;
      std::from_chars(layout.data() + m + 2, layout.data() + layout.size(), space);
      shape.memory_space = space;
    }
  }
  return shape;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// Splits at top-level commas (outside (), {}, [] and quotes).
std::vector<std::string_view> split_top(std::string_view s) {
  std::vector<std::string_view> out;
  int depth = 0;
  bool quoted = false;
  size_t start = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const char ch = s[i];
    if (quoted) {
      if (ch == '\\')
        ++i;
      else if (ch == '"')
        quoted = false;
    } else if (ch == '"') {
      quoted = true;
    } else if (ch == '(' || ch == '{' || ch == '[') {
      ++depth;
    } else if (ch == ')' || ch == '}' || ch == ']') {
      --depth;
    } else if (ch == ',' && depth == 0) {
      out.push_back(trim(s.substr(start, i - start)));
      start = i + 1;
    }
  }
  if (!trim(s.substr(start)).empty()) out.push_back(trim(s.substr(start)));
  return out;
}

// Every "%name" in a value ("%a", "{%a, %b}").
bool is_name_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-';
}

// The instruction or computation names in `value`: "%a", "f32[4] %a", "{%a, %b}" as compiled modules print
// them, or bare "a", "{a, b}" as lowered modules (lowered.as_text(dialect="hlo")) do.
void names_in(std::string_view value, std::vector<std::string>& out) {
  if (value.find('%') == std::string_view::npos) {
    size_t at = 0;
    while (at < value.size()) {
      while (at < value.size() && !is_name_char(value[at])) ++at;
      size_t end = at;
      while (end < value.size() && is_name_char(value[end])) ++end;
      if (end > at) out.emplace_back(value.substr(at, end - at));
      at = end;
    }
    return;
  }
  for (size_t at = value.find('%'); at != std::string_view::npos; at = value.find('%', at + 1)) {
    size_t end = at + 1;
    while (end < value.size() && is_name_char(value[end])) ++end;
    // "%fusion#1": element 1 of a tuple-shaped value, as XLA's dumps (--xla_dump_to) print an operand
    // that is a get-tuple-element, which they leave out; expanded where the computation ends.
    while (end > at + 1 && end + 1 < value.size() && value[end] == '#' &&
           std::isdigit(static_cast<unsigned char>(value[end + 1]))) {
      ++end;
      while (end < value.size() && std::isdigit(static_cast<unsigned char>(value[end]))) ++end;
    }
    if (end > at + 1) out.emplace_back(value.substr(at + 1, end - at - 1));
  }
}

Expected<std::vector<uint64_t>> parse_index(std::string_view braces, uint64_t line) {
  std::vector<uint64_t> index;
  for (std::string_view part : split_top(trim(braces))) {
    uint64_t v = 0;
    const auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), v);
    if (ec != std::errc() || end != part.data() + part.size()) {
      return invalid_argument(fmt::format("line {}: bad shape index '{{{}}}'", line, braces));
    }
    index.push_back(v);
  }
  return index;
}

// "{out}: (number, {index}[, kind])" entries: input_output_alias (number = parameter, kind = may-/must-alias)
// and output_to_operand_aliasing (number = operand) print them alike.
struct AliasEntry {
  std::vector<uint64_t> output_index;
  uint64_t number = 0;
  std::vector<uint64_t> index;
  std::string_view kind;
};

Expected<std::vector<AliasEntry>> parse_alias_entries(std::string_view body, uint64_t line) {
  std::vector<AliasEntry> entries;
  Cursor c(body, line);
  while (!c.done()) {
    if (!c.eat('{')) return c.error("'{' opening an output index");
    MEMFIT_ASSIGN_OR_RETURN(std::string_view out_index, c.until_close('{', '}'));
    if (!c.eat(':') || !c.eat('(')) return c.error("': (' after an output index");
    MEMFIT_ASSIGN_OR_RETURN(std::string_view target, c.until_close('(', ')'));
    const auto parts = split_top(target);
    if (parts.size() < 2) return c.error("(number, {index}[, kind])");
    AliasEntry e;
    MEMFIT_ASSIGN_OR_RETURN(e.output_index, parse_index(out_index, line));
    const auto [end, ec] = std::from_chars(parts[0].data(), parts[0].data() + parts[0].size(), e.number);
    if (ec != std::errc() || end != parts[0].data() + parts[0].size())
      return c.error("a parameter or operand number");
    const std::string_view index = parts[1];
    if (index.size() < 2 || index.front() != '{' || index.back() != '}')
      return c.error("a shape index in braces");
    MEMFIT_ASSIGN_OR_RETURN(e.index, parse_index(index.substr(1, index.size() - 2), line));
    if (parts.size() > 2) e.kind = parts[2];
    entries.push_back(std::move(e));
    c.eat(',');
  }
  return entries;
}

// input_output_alias={ {0}: (0, {}, may-alias), {1, 2}: (1, {0}, must-alias) }
Expected<std::vector<HloAlias>> parse_aliases(std::string_view body, uint64_t line) {
  MEMFIT_ASSIGN_OR_RETURN(std::vector<AliasEntry> entries, parse_alias_entries(body, line));
  std::vector<HloAlias> aliases;
  for (AliasEntry& e : entries) {
    if (e.number > static_cast<uint64_t>(INT64_MAX))
      return invalid_argument(fmt::format("line {}: parameter number {} is out of range", line, e.number));
    aliases.push_back({std::move(e.output_index), static_cast<int64_t>(e.number), std::move(e.index),
                       e.kind == "must-alias"});
  }
  return aliases;
}

std::string_view unquote(std::string_view s) {
  if (s.size() >= 2 && s.front() == '"' && s.back() == '"') return s.substr(1, s.size() - 2);
  return s;
}

// output_to_operand_aliasing={{}: (0, {}), {1}: (2, {0})}
Expected<std::vector<HloInstruction::OperandAlias>> parse_operand_aliases(std::string_view value,
                                                                          uint64_t line) {
  if (value.size() < 2 || value.front() != '{' || value.back() != '}')
    return invalid_argument(fmt::format("line {}: output_to_operand_aliasing is not in braces", line));
  MEMFIT_ASSIGN_OR_RETURN(std::vector<AliasEntry> entries,
                          parse_alias_entries(value.substr(1, value.size() - 2), line));
  std::vector<HloInstruction::OperandAlias> out;
  for (AliasEntry& e : entries) out.push_back({std::move(e.output_index), e.number, std::move(e.index)});
  return out;
}

}  // namespace

namespace {

// The numbers of a list "4,1,2" (no brackets); none when one does not read.
std::optional<std::vector<uint64_t>> number_list(std::string_view list) {
  std::vector<uint64_t> out;
  for (std::string_view item : split_top(list)) {
    item = trim(item);
    uint64_t v = 0;
    const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (ec != std::errc() || end != item.data() + item.size()) return std::nullopt;
    out.push_back(v);
  }
  return out;
}

// The tile assignment's dimensions of an HLO sharding, "{devices=[2,1,4]<=[8] ...}" -> {2, 1, 4}; none when
// it has none ({replicated}, {maximal device=0}) or they do not read.
std::optional<std::vector<uint64_t>> tile_dimensions(std::string_view sharding) {
  const size_t at = sharding.find("devices=[");
  if (at == std::string_view::npos) return std::nullopt;
  const std::string_view rest = sharding.substr(at + 9);
  const size_t close = rest.find(']');
  if (close == std::string_view::npos) return std::nullopt;
  auto dims = number_list(rest.substr(0, close));
  if (!dims || std::find(dims->begin(), dims->end(), uint64_t{0}) != dims->end()) return std::nullopt;
  return dims;
}

}  // namespace

uint64_t sharding_devices(std::string_view sharding) {
  constexpr uint64_t kMost = uint64_t{1} << 32;
  const auto dims = tile_dimensions(sharding);
  if (!dims) return 1;
  // The iota form names the device count after "<=["; else the tile dimensions multiply to it.
  const std::string_view rest = sharding.substr(sharding.find("devices=[") + 9);
  if (const size_t iota = rest.find("]<=["); iota != std::string_view::npos && iota == rest.find(']')) {
    uint64_t n = 0;
    const std::string_view digits = rest.substr(iota + 4);
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
    if (ec == std::errc() && end != digits.data() + digits.size() && *end == ']' && n > 0)
      return std::min(n, kMost);
  }
  uint64_t product = 1;
  for (uint64_t d : *dims) {
    d = std::min(d, kMost);
    product = product > kMost / d ? kMost : product * d;
  }
  return product;
}

std::vector<uint64_t> sharding_tiles(std::string_view sharding, size_t rank) {
  auto tiles = tile_dimensions(sharding);
  // More tile dimensions than the array has: the last ones replicate (last_tile_dim_replicate,
  // last_tile_dims={...}); fewer is not a sharding of it.
  if (!tiles || rank == 0 || tiles->size() < rank) return {};
  tiles->resize(rank);
  if (std::all_of(tiles->begin(), tiles->end(), [](uint64_t t) { return t == 1; })) return {};
  return std::move(*tiles);
}

namespace {

// The device at each tile of an HLO sharding, tiles in row-major order: "<=[2,4]T(1,0)" is iota(8) shaped
// [2,4] and transposed (xla/hlo/ir/tile_assignment.h's IotaTileAssignment), else the devices listed.
std::optional<std::vector<uint64_t>> tile_devices(std::string_view sharding, uint64_t tiles) {
  constexpr uint64_t kMostDevices = 4096;  // beyond it the order is not compared (tokens by size alone)
  if (tiles == 0 || tiles > kMostDevices) return std::nullopt;
  const size_t at = sharding.find("devices=[");
  std::string_view rest = sharding.substr(at + 9);
  rest = rest.substr(rest.find(']') + 1);
  std::vector<uint64_t> devices;
  if (rest.starts_with("<=[")) {
    const size_t close = rest.find(']');
    if (close == std::string_view::npos) return std::nullopt;
    auto shape = number_list(rest.substr(3, close - 3));
    if (!shape || shape->empty()) return std::nullopt;
    std::vector<uint64_t> perm(shape->size());
    for (size_t k = 0; k < perm.size(); ++k) perm[k] = k;
    rest = rest.substr(close + 1);
    if (rest.starts_with("T(")) {
      const size_t end = rest.find(')');
      if (end == std::string_view::npos) return std::nullopt;
      auto p = number_list(rest.substr(2, end - 2));
      if (!p || p->size() != shape->size()) return std::nullopt;
      std::vector<bool> seen(p->size(), false);
      for (uint64_t d : *p) {
        if (d >= p->size() || seen[d]) return std::nullopt;
        seen[d] = true;
      }
      perm = *p;
    }
    uint64_t n = 1;
    for (uint64_t d : *shape) {
      if (d == 0 || n > kMostDevices / d) return std::nullopt;
      n *= d;
    }
    if (n != tiles) return std::nullopt;
    // Element at transposed index (i_0..i_k) is iota's at the source index i with source[perm[j]] = i_j.
    std::vector<uint64_t> tdims(perm.size()), stride(shape->size(), 1);
    for (size_t j = shape->size(); j-- > 1;) stride[j - 1] = stride[j] * (*shape)[j];
    for (size_t j = 0; j < perm.size(); ++j) tdims[j] = (*shape)[perm[j]];
    devices.resize(n);
    for (uint64_t t = 0; t < n; ++t) {
      uint64_t rem = t, src = 0;
      for (size_t j = tdims.size(); j-- > 0;) {
        src += (rem % tdims[j]) * stride[perm[j]];
        rem /= tdims[j];
      }
      devices[t] = src;
    }
  } else {
    const size_t end = rest.find_first_of(" }");
    auto list = number_list(rest.substr(0, end));
    if (!list || list->size() != tiles) return std::nullopt;
    devices = std::move(*list);
  }
  return devices;
}

}  // namespace

std::vector<std::string> sharding_axis_tokens(std::string_view sharding, size_t rank) {
  const std::vector<uint64_t> tiles = sharding_tiles(sharding, rank);
  // {replicated}, {maximal device=0}: every device holds it whole (a sharding given, not left open).
  if (tiles.empty()) return std::vector<std::string>(rank);
  const auto all = tile_dimensions(sharding);
  uint64_t count = 1;
  for (uint64_t t : *all) count = count > (uint64_t{1} << 32) / t ? (uint64_t{1} << 33) : count * t;
  const auto devices = tile_devices(sharding, count);
  std::vector<std::string> tokens(rank);
  for (size_t d = 0; d < rank; ++d) {
    if (tiles[d] == 1) continue;
    if (!devices) {  // too many devices, or an order that does not read: told apart by size alone
      tokens[d] = fmt::format("split{}", tiles[d]);
      continue;
    }
    // Each device's position along tile dimension d, devices in id order: equal for the same mesh axis.
    uint64_t inner = 1;
    for (size_t k = d + 1; k < all->size(); ++k) inner *= (*all)[k];
    std::vector<std::pair<uint64_t, uint64_t>> position;
    for (uint64_t t = 0; t < devices->size(); ++t)
      position.emplace_back((*devices)[t], (t / inner) % tiles[d]);
    std::sort(position.begin(), position.end());
    std::string token = fmt::format("split{}:", tiles[d]);
    for (const auto& [device, at] : position) token += fmt::format("{},", at);
    tokens[d] = std::move(token);
  }
  return tokens;
}

namespace {

// The list of dimension numbers an attribute of this name fills, or nullptr.
std::vector<int64_t>* dimension_list(HloInstruction& inst, std::string_view key) {
  if (key == "dimensions") return &inst.dimensions;
  if (key == "lhs_batch_dims") return &inst.lhs_batch_dims;
  if (key == "rhs_batch_dims") return &inst.rhs_batch_dims;
  if (key == "lhs_contracting_dims") return &inst.lhs_contracting_dims;
  if (key == "rhs_contracting_dims") return &inst.rhs_contracting_dims;
  // The rest are a gather's or scatter's: only those have their dimension numbers written apart.
  if (!key.ends_with("_dims")) return nullptr;
  HloInstruction::GatherDims& g = inst.mutable_gather_dims();
  if (key == "offset_dims" || key == "update_window_dims") return &g.window;
  if (key == "collapsed_slice_dims" || key == "inserted_window_dims") return &g.collapsed;
  if (key == "operand_batching_dims" || key == "input_batching_dims") return &g.operand_batching;
  if (key == "start_indices_batching_dims" || key == "scatter_indices_batching_dims")
    return &g.indices_batching;
  return nullptr;
}

// buffer_donor={ (0, {}), (1, {0}) }
Expected<std::vector<HloModule::BufferDonor>> parse_buffer_donors(std::string_view body, uint64_t line) {
  std::vector<HloModule::BufferDonor> donors;
  Cursor c(body, line);
  while (!c.done()) {
    if (!c.eat('(')) return c.error("'(' opening a buffer donor");
    MEMFIT_ASSIGN_OR_RETURN(std::string_view entry, c.until_close('(', ')'));
    const auto parts = split_top(entry);
    if (parts.size() != 2) return c.error("(parameter, {index})");
    uint64_t number = 0;
    const auto [end, ec] = std::from_chars(parts[0].data(), parts[0].data() + parts[0].size(), number);
    if (ec != std::errc() || end != parts[0].data() + parts[0].size() ||
        number > static_cast<uint64_t>(INT64_MAX))
      return c.error("a parameter number");
    const std::string_view index = parts[1];
    if (index.size() < 2 || index.front() != '{' || index.back() != '}')
      return c.error("a shape index in braces");
    HloModule::BufferDonor d;
    d.parameter = static_cast<int64_t>(number);
    MEMFIT_ASSIGN_OR_RETURN(d.parameter_index, parse_index(index.substr(1, index.size() - 2), line));
    donors.push_back(std::move(d));
    c.eat(',');
  }
  return donors;
}

Expected<HloInstruction> parse_instruction(std::string_view text, uint64_t line) {
  HloInstruction inst;
  inst.line = line;
  std::string_view s = trim(text);
  if (s.starts_with("ROOT ")) {
    inst.is_root = true;
    s.remove_prefix(5);
  }
  const size_t eq = s.find(" = ");
  if (eq == std::string_view::npos)
    return invalid_argument(fmt::format("line {}: expected 'name = shape opcode(...)'", line));
  std::string_view name = trim(s.substr(0, eq));
  if (name.starts_with('%')) name.remove_prefix(1);
  if (name.empty()) return invalid_argument(fmt::format("line {}: an instruction without a name", line));
  inst.name = std::string(name);
  Cursor c(s.substr(eq + 3), line);
  MEMFIT_ASSIGN_OR_RETURN(inst.shape, parse_shape(c));
  const std::string_view opcode = c.word();
  if (opcode.empty() || !c.eat('(')) return c.error("an opcode and '('");
  inst.set_opcode(opcode);
  MEMFIT_ASSIGN_OR_RETURN(std::string_view operands, c.until_close('(', ')'));
  if (inst.opcode == HloOpcode::kParameter) {
    int64_t n = -1;
    std::from_chars(operands.data(), operands.data() + operands.size(), n);
    if (n < 0) return c.error("parameter(N)");
    inst.parameter_number = n;
  } else if (inst.opcode != HloOpcode::kConstant) {
    for (std::string_view op : split_top(operands))
      names_in(op.substr(op.rfind(' ') == std::string_view::npos ? 0 : op.rfind(' ')), inst.operands);
  }
  std::string_view attributes = c.rest();
  for (std::string_view attr : split_top(attributes)) {
    const size_t e = attr.find('=');
    if (e == std::string_view::npos) continue;
    const std::string_view key = trim(attr.substr(0, e));
    const std::string_view value = trim(attr.substr(e + 1));
    if (key == "calls" || key == "to_apply" || key == "condition" || key == "body" ||
        key == "branch_computations" || key == "true_computation" || key == "false_computation" ||
        key == "called_computations") {
      names_in(value, inst.called);
    } else if (key == "index_vector_dim") {
      std::from_chars(value.data(), value.data() + value.size(), inst.mutable_gather_dims().index_vector_dim);
    } else if (key == "index") {
      std::from_chars(value.data(), value.data() + value.size(), inst.tuple_index);
    } else if (key == "kind") {
      inst.mutable_fusion_kind() = std::string(value);
    } else if (std::vector<int64_t>* numbers = dimension_list(inst, key)) {
      // "{0,2,1}": what the model of XLA:GPU needs to see a reduction over a dot's batch dimensions, and its
      // model of the SPMD partitioner to map a dot's, gather's or scatter's shardings.
      std::vector<int64_t>& out = *numbers;
      std::string_view list = value;
      if (list.starts_with("{")) list.remove_prefix(1);
      if (list.ends_with("}")) list.remove_suffix(1);
      for (std::string_view item : split_top(list)) {
        int64_t d = -1;
        item = trim(item);
        const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), d);
        if (ec != std::errc() || end != item.data() + item.size() || d < 0) {
          out.clear();
          break;
        }
        out.push_back(d);
      }
    } else if (key == "sharding" && (inst.opcode == HloOpcode::kParameter || inst.is_root ||
                                     inst.opcode == HloOpcode::kCustomCall)) {
      // What each device holds of an argument or a result: {devices=...} splits an array, {{...}, ...} each
      // element of a tuple.
      if (!inst.shape.is_tuple()) {
        inst.mutable_sharding_tiles() = {sharding_tiles(value, inst.shape.dims.size())};
        inst.mutable_sharding_axes() = {sharding_axis_tokens(value, inst.shape.dims.size())};
      } else if (value.starts_with("{{") && value.ends_with("}}")) {
        const auto parts = split_top(value.substr(1, value.size() - 2));
        for (size_t k = 0; k < parts.size() && k < inst.shape.elements.size(); ++k) {
          inst.mutable_sharding_tiles().push_back(
              sharding_tiles(parts[k], inst.shape.elements[k].dims.size()));
          inst.mutable_sharding_axes().push_back(
              sharding_axis_tokens(parts[k], inst.shape.elements[k].dims.size()));
        }
      }
    } else if (key == "custom_call_target") {
      inst.custom_call_target = std::string(unquote(value));
    } else if (key == "frontend_attributes") {
      if (std::string placement = buffer_placement_attribute(value); !placement.empty())
        inst.mutable_buffer_placement() = std::move(placement);
    } else if (key == "output_to_operand_aliasing") {
      MEMFIT_ASSIGN_OR_RETURN(inst.mutable_operand_aliases(), parse_operand_aliases(value, line));
    } else if (key == "backend_config") {
      // Which compiler wrote it: XLA:CPU partitions loops and calls XNNPACK/oneDNN fusions; XLA:GPU
      // configures fusions and operation queues.
      if (value.find("outer_dimension_partitions") != std::string_view::npos ||
          value.find("__ynn_fusion") != std::string_view::npos ||
          value.find("__onednn") != std::string_view::npos) {
        inst.platform = HloPlatform::kCpu;
      } else if (value.find("fusion_backend_config") != std::string_view::npos ||
                 value.find("operation_queue_id") != std::string_view::npos) {
        inst.platform = HloPlatform::kGpu;
      }
    } else if (key == "metadata") {
      if (const size_t at = value.find("op_name=\""); at != std::string_view::npos) {
        const size_t end = value.find('"', at + 9);
        if (end != std::string_view::npos) inst.op_name = std::string(value.substr(at + 9, end - at - 9));
      }
    }
  }
  return inst;
}

// XLA's parser refuses a module whose computations share a name, a computation whose instructions share a
// name, or two parameters with one number: memfit would silently plan only one of them.
Status check_unique_names(const HloModule& module) {
  std::unordered_set<std::string_view> computations;
  for (const HloComputation& c : module.computations) {
    if (!computations.insert(c.name).second)
      return invalid_argument(fmt::format("two computations are named {}", excerpt(c.name)));
    std::unordered_set<std::string_view> names;
    std::unordered_set<int64_t> parameters;
    for (const HloInstruction& i : c.instructions) {
      if (!names.insert(i.name).second)
        return invalid_argument(fmt::format("line {}: a second instruction named {} in computation {}",
                                            i.line, excerpt(i.name), excerpt(c.name)));
      if (i.opcode == HloOpcode::kParameter && !parameters.insert(i.parameter_number).second)
        return invalid_argument(fmt::format("line {}: a second parameter({}) in computation {}", i.line,
                                            i.parameter_number, excerpt(c.name)));
    }
  }
  return ok_status();
}

}  // namespace

uint64_t Shape::own_bytes() const {
  if (is_tuple()) return kTuplePointerBytes * elements.size();
  auto bytes = array_bytes(type, dims, packed_element_bits);
  return bytes.ok() ? *bytes : 0;  // sizes were checked when parsed
}

uint64_t Shape::leaf_bytes() const {
  if (!is_tuple()) return own_bytes();
  uint64_t total = 0;
  for (const Shape& e : elements) total += e.leaf_bytes();
  return total;
}

uint64_t Shape::leaf_count() const {
  if (!is_tuple()) return 1;
  uint64_t n = 0;
  for (const Shape& e : elements) n += e.leaf_count();
  return n;
}

const Shape* Shape::at(const std::vector<uint64_t>& index) const {
  const Shape* s = this;
  for (uint64_t i : index) {
    if (!s->is_tuple() || i >= s->elements.size()) return nullptr;
    s = &s->elements[i];
  }
  return s;
}

std::string Shape::to_string() const {
  if (is_tuple()) {
    std::string out = "(";
    for (size_t i = 0; i < elements.size(); ++i) out += (i ? ", " : "") + elements[i].to_string();
    return out + ")";
  }
  std::string out = fmt::format("{}[", primitive_type_name(type));
  for (size_t i = 0; i < dims.size(); ++i) out += fmt::format("{}{}", i ? "," : "", dims[i]);
  return out + "]";
}

const HloInstruction* HloComputation::root() const {
  // From the back: a computation's root is nearly always its last instruction, and a deep program's
  // instructions are hundreds of megabytes to walk (a computation has one root: validate_hlo_module).
  for (auto it = instructions.rbegin(); it != instructions.rend(); ++it) {
    if (it->is_root) return &*it;
  }
  return instructions.empty() ? nullptr : &instructions.back();
}

std::string buffer_placement_attribute(std::string_view attributes) {
  constexpr std::string_view kKey = "_xla_buffer_placement";
  const size_t at = attributes.find(kKey);
  if (at == std::string_view::npos) return {};
  size_t i = at + kKey.size();
  auto skip_spaces = [&] {
    while (i < attributes.size() && attributes[i] == ' ') ++i;
  };
  skip_spaces();
  if (i >= attributes.size() || attributes[i] != '=') return {};
  ++i;
  skip_spaces();
  if (i >= attributes.size() || attributes[i] != '"') return {};
  const size_t end = attributes.find('"', ++i);
  return end == std::string_view::npos ? std::string() : std::string(attributes.substr(i, end - i));
}

void reorder_instructions(std::vector<HloInstruction>& instructions, const std::vector<uint32_t>& order) {
  const size_t n = instructions.size();
  // The full permutation: position i takes what was at from[i] - those named first, the rest after (dropped).
  std::vector<uint32_t> from;
  from.reserve(n);
  std::vector<bool> named(n, false);
  for (uint32_t k : order) {
    if (k >= n || named[k]) continue;
    named[k] = true;
    from.push_back(k);
  }
  const size_t kept = from.size();
  for (uint32_t k = 0; k < n; ++k)
    if (!named[k]) from.push_back(k);
  // Each cycle of the permutation, followed with one instruction held aside.
  std::vector<bool> placed(n, false);
  for (size_t i = 0; i < n; ++i) {
    if (placed[i] || from[i] == i) continue;
    HloInstruction held = std::move(instructions[i]);
    size_t j = i;
    for (;;) {
      placed[j] = true;
      const size_t k = from[j];
      if (k == i) {
        instructions[j] = std::move(held);
        break;
      }
      instructions[j] = std::move(instructions[k]);
      j = k;
    }
  }
  instructions.resize(kept);
}

std::vector<uint32_t> instruction_post_order(const HloComputation& comp, PostOrderOf of) {
  const auto& insts = comp.instructions;
  NameIndex index;
  index.reserve(insts.size());
  for (uint32_t i = 0; i < insts.size(); ++i) index.emplace(insts[i].name, i);
  // Each instruction's operands, as indices: operand_list[first[i], first[i + 1]).
  std::vector<uint32_t> first(insts.size() + 1, 0);
  std::vector<uint32_t> operand_list;
  std::vector<bool> read(insts.size(), false);
  for (uint32_t i = 0; i < insts.size(); ++i) {
    for (const std::string& o : insts[i].operands) {
      auto it = index.find(o);
      if (it == index.end()) continue;
      operand_list.push_back(it->second);
      read[it->second] = true;
    }
    first[i + 1] = static_cast<uint32_t>(operand_list.size());
  }
  std::vector<uint32_t> stack;
  // kWhatTheRootReads: what the root reads, directly or through others; parameters; and each element of
  // a tuple it reads (a loop's or a call's results, read or not, as JAX's translation to HLO takes them).
  std::vector<bool> live;
  if (of == PostOrderOf::kWhatTheRootReads) {
    live.assign(insts.size(), false);
    for (uint32_t i = 0; i < insts.size(); ++i) {
      live[i] = insts[i].opcode == HloOpcode::kParameter;
      if (insts[i].is_root) {
        live[i] = true;
        stack.push_back(i);
      }
    }
    while (!stack.empty()) {
      const uint32_t x = stack.back();
      stack.pop_back();
      for (uint32_t k = first[x]; k < first[x + 1]; ++k) {
        if (live[operand_list[k]]) continue;
        live[operand_list[k]] = true;
        stack.push_back(operand_list[k]);
      }
    }
    for (uint32_t i = 0; i < insts.size(); ++i)
      if (!live[i] && insts[i].opcode == HloOpcode::kGetTupleElement && first[i + 1] == first[i] + 1)
        live[i] = live[operand_list[first[i]]];
    // Read, now, by what stays: a parameter only dead code read begins a walk of its own.
    read.assign(insts.size(), false);
    for (uint32_t i = 0; i < insts.size(); ++i)
      if (live[i])
        for (uint32_t k = first[i]; k < first[i + 1]; ++k) read[operand_list[k]] = true;
  }
  std::vector<uint32_t> order;
  order.reserve(insts.size());
  std::vector<uint8_t> state(insts.size(), 0);  // 0 new, 1 visiting, 2 done
  for (uint32_t r = 0; r < insts.size(); ++r) {
    if (read[r] || (!live.empty() && !live[r])) continue;  // walks start at instructions nothing reads
    stack.assign(1, r);
    while (!stack.empty()) {
      const uint32_t x = stack.back();
      if (state[x] == 2) {
        stack.pop_back();
      } else if (state[x] == 1) {
        stack.pop_back();
        state[x] = 2;
        order.push_back(x);
      } else {
        state[x] = 1;
        for (uint32_t k = first[x + 1]; k-- > first[x];)  // pushed last first: the first is walked first
          if (state[operand_list[k]] != 2) stack.push_back(operand_list[k]);
      }
    }
  }
  return order;
}

const HloComputation* HloModule::entry() const {
  for (const HloComputation& c : computations) {
    if (c.is_entry) return &c;
  }
  return nullptr;
}

const HloComputation* HloModule::find(std::string_view computation_name) const {
  for (const HloComputation& c : computations) {
    if (c.name == computation_name) return &c;
  }
  return nullptr;
}

namespace {

// The get-tuple-elements a dump leaves out ("%fusion#1" operands, see names_in) made explicit: each
// "name#k" an instruction reads becomes an instruction of that name, a get-tuple-element of element k of
// `name`, placed just before its first reader - where a compiled module's text prints it (it forwards a
// buffer and takes none of its own, so its place changes no figure). Nested elements ("%x#1#0") expand
// link by link.
Status expand_tuple_element_operands(HloComputation& comp) {
  std::unordered_map<std::string, uint32_t> defined;  // name -> index in `out`
  std::vector<HloInstruction> out;
  out.reserve(comp.instructions.size());
  // Makes `name` (with '#') defined in `out`, link by link from its base ("x#1#0": element 1 of x, then its
  // element 0) - a loop, not a recursion: a hostile operand can chain 10^5 links. `line` is the reader's.
  auto define = [&](const std::string& name, uint64_t line) -> Status {
    if (defined.contains(name)) return ok_status();
    for (size_t hash = name.find('#'); hash != std::string::npos;) {
      const size_t next = name.find('#', hash + 1);
      const size_t link_end = next == std::string::npos ? name.size() : next;
      std::string link = name.substr(0, link_end);
      if (!defined.contains(link)) {
        const std::string base = name.substr(0, hash);
        uint64_t k = 0;
        const auto [end, ec] = std::from_chars(name.data() + hash + 1, name.data() + link_end, k);
        const auto it = defined.find(base);
        if (ec != std::errc() || end != name.data() + link_end || it == defined.end()) {
          return invalid_argument(
              fmt::format("line {}: operand {} names an element of a value defined no earlier", line,
                          excerpt("%" + name)));
        }
        const Shape& tuple = out[it->second].shape;
        if (!tuple.is_tuple() || k >= tuple.elements.size()) {
          return invalid_argument(
              fmt::format("line {}: operand {} names element {} of {}, which has no such element", line,
                          excerpt("%" + link), k, excerpt(base)));
        }
        HloInstruction gte;
        gte.opcode = HloOpcode::kGetTupleElement;
        gte.shape = tuple.elements[k];
        gte.operands = {base};
        gte.tuple_index = static_cast<int64_t>(k);
        gte.op_name = out[it->second].op_name;
        gte.line = line;
        defined.emplace(link, static_cast<uint32_t>(out.size()));
        gte.name = std::move(link);
        out.push_back(std::move(gte));
      }
      hash = next;
    }
    return ok_status();
  };
  for (HloInstruction& inst : comp.instructions) {
    for (const std::string& o : inst.operands) MEMFIT_RETURN_IF_ERROR(define(o, inst.line));
    defined.emplace(inst.name, static_cast<uint32_t>(out.size()));
    out.push_back(std::move(inst));
  }
  comp.instructions = std::move(out);
  return ok_status();
}

}  // namespace

Expected<HloModule> parse_hlo_module(std::string_view text) {
  HloModule module;
  uint64_t number = 0;
  size_t pos = 0;
  bool saw_header = false;
  bool in_side_table = false;
  HloComputation* current = nullptr;
  uint64_t instruction_count = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = trim(text.substr(pos, end - pos));
    pos = end + 1;
    ++number;
    if (line.empty()) {
      in_side_table = false;
      continue;
    }
    if (line.starts_with("//") || in_side_table) continue;
    if (!saw_header) {
      if (!line.starts_with("HloModule ")) {
        // XLA's dump folder holds other reports beside the module: say which one this is.
        const std::string_view report = line.starts_with("BufferAssignment:")   ? "buffer assignment"
                                        : line.starts_with("Total bytes used:") ? "memory usage report"
                                                                                : "";
        if (!report.empty())
          return invalid_argument(fmt::format(
              "line {}: this is XLA's {}, not an HLO module: give the module (*after_optimizations.txt) "
              "or the dump folder, and memfit reads the buffer assignment beside it",
              number, report));
        return invalid_argument(fmt::format("line {}: not an HLO module (no 'HloModule' header)", number));
      }
      saw_header = true;
      const auto parts = split_top(line.substr(10));
      if (parts.empty()) return invalid_argument("line 1: the module has no name");
      module.name = std::string(parts[0]);
      for (size_t i = 1; i < parts.size(); ++i) {
        const size_t e = parts[i].find('=');
        if (e == std::string_view::npos) continue;
        const std::string_view key = parts[i].substr(0, e);
        const std::string_view value = trim(parts[i].substr(e + 1));
        if (key == "is_scheduled") module.is_scheduled = value == "true";
        if (key == "input_output_alias") {
          if (value.size() < 2 || value.front() != '{' || value.back() != '}') {
            return invalid_argument("line 1: input_output_alias is not in braces");
          }
          MEMFIT_ASSIGN_OR_RETURN(module.aliases, parse_aliases(value.substr(1, value.size() - 2), number));
        }
        if (key == "buffer_donor") {
          if (value.size() < 2 || value.front() != '{' || value.back() != '}')
            return invalid_argument("line 1: buffer_donor is not in braces");
          MEMFIT_ASSIGN_OR_RETURN(module.buffer_donors,
                                  parse_buffer_donors(value.substr(1, value.size() - 2), number));
        }
      }
      continue;
    }
    if (current == nullptr && (line == "FileNames" || line == "FunctionNames" || line == "FileLocations" ||
                               line == "StackFrames")) {
      in_side_table = true;  // stack-frame tables of newer XLA: numbered lines up to a blank line
      continue;
    }
    if (current == nullptr) {
      // "[ENTRY ]%name (params) -> shape {"
      if (line.back() != '{')
        return invalid_argument(fmt::format("line {}: expected a computation header ending in '{{'", number));
      HloComputation computation;
      std::string_view header = line;
      if (header.starts_with("ENTRY ")) {
        if (module.entry() != nullptr)
          return invalid_argument(
              fmt::format("line {}: a second ENTRY computation (a module has one)", number));
        computation.is_entry = true;
        header.remove_prefix(6);
      }
      std::string_view name = header.substr(0, header.find_first_of(" ("));
      if (name.starts_with('%')) name.remove_prefix(1);
      if (name.empty()) return invalid_argument(fmt::format("line {}: a computation without a name", number));
      computation.name = std::string(name);
      module.computations.push_back(std::move(computation));
      current = &module.computations.back();
      continue;
    }
    if (line == "}") {
      MEMFIT_RETURN_IF_ERROR(expand_tuple_element_operands(*current));
      current = nullptr;
      continue;
    }
    if (++instruction_count > kMaxHloInstructions) {
      return invalid_argument(
          fmt::format("line {}: more than {} instructions, more than memfit plans in one module", number,
                      kMaxHloInstructions));
    }
    MEMFIT_ASSIGN_OR_RETURN(HloInstruction inst, parse_instruction(line, number));
    // A compiled module's shardings describe one device's share of a program already partitioned.
    if (const size_t at = line.find("sharding={devices=[");
        !module.is_scheduled && at != std::string_view::npos)
      module.num_partitions = std::max(module.num_partitions, sharding_devices(line.substr(at + 9)));
    if (module.platform == HloPlatform::kUnknown) module.platform = inst.platform;
    current->instructions.push_back(std::move(inst));
  }
  if (!saw_header) return invalid_argument("empty input: not an HLO module");
  if (current != nullptr)
    return invalid_argument(
        fmt::format("line {}: the text ends inside computation '{}' (truncated?)", number, current->name));
  MEMFIT_RETURN_IF_ERROR(validate_hlo_module(module));
  return module;
}

Status validate_hlo_module(const HloModule& module) {
  if (module.entry() == nullptr) return invalid_argument("the module has no ENTRY computation");
  MEMFIT_RETURN_IF_ERROR(check_unique_names(module));
  // Shapes were parsed unchecked: reject any whose byte count, or the sum of a tuple's arrays, overflows,
  // so that Shape::leaf_bytes and own_bytes are exact from here on.
  for (const HloComputation& c : module.computations) {
    size_t roots = 0;
    for (const HloInstruction& i : c.instructions) {
      if (i.is_root && ++roots == 2) {
        return invalid_argument(fmt::format("line {}: {} is a second ROOT in computation {}", i.line,
                                            excerpt(i.name), excerpt(c.name)));
      }
      std::vector<const Shape*> stack{&i.shape};
      uint64_t total = 0;
      while (!stack.empty()) {
        const Shape* s = stack.back();
        stack.pop_back();
        auto bytes = s->is_tuple() ? Expected<uint64_t>(uint64_t{kTuplePointerBytes} * s->elements.size())
                                   : array_bytes(s->type, s->dims, s->packed_element_bits);
        const auto sum = bytes.ok() ? checked_add(total, *bytes) : std::nullopt;
        if (!sum) {
          return invalid_argument(
              fmt::format("line {}: the shape of {} overflows 64 bits", i.line, excerpt(i.name)));
        }
        total = *sum;
        for (const Shape& e : s->elements) stack.push_back(&e);
      }
    }
    // A program before optimization is a graph, not a schedule: its text may name an operand before
    // defining it, but no value may depend on itself. (A scheduled module's order is checked where its
    // buffers are built; StableHLO's parser already refuses a value used before it is defined.) In a post
    // order every operand comes before its reader unless they lie on a cycle.
    if (!module.is_scheduled && !module.from_stablehlo) {
      const std::vector<uint32_t> order = instruction_post_order(c);
      std::vector<uint32_t> position(c.instructions.size(), UINT32_MAX);
      for (uint32_t k = 0; k < order.size(); ++k) position[order[k]] = k;
      NameIndex index;
      index.reserve(c.instructions.size());
      for (uint32_t k = 0; k < c.instructions.size(); ++k) index.emplace(c.instructions[k].name, k);
      for (uint32_t k = 0; k < c.instructions.size(); ++k) {
        for (const std::string& o : c.instructions[k].operands) {
          const auto it = index.find(o);
          if (it == index.end()) continue;  // an undefined operand is reported where operands are resolved
          if (position[k] == UINT32_MAX || position[it->second] >= position[k]) {
            const HloInstruction& i = c.instructions[k];
            return invalid_argument(fmt::format(
                "line {}: {} depends on itself (its operands lead back to it)", i.line, excerpt(i.name)));
          }
        }
      }
    }
  }
  return ok_status();
}

Expected<EntrySizes> entry_sizes(const HloModule& module) {
  const HloComputation* entry = module.entry();
  if (entry == nullptr) return invalid_argument("the module has no ENTRY computation");
  const HloInstruction* root = entry->root();
  if (root == nullptr) return invalid_argument("the ENTRY computation is empty");
  // Each shape was checked when parsed; their sums are checked here (four f32[2^60] parameters are 2^64 B).
  const Error overflow = invalid_argument("the module's argument or output bytes overflow 64 bits");
  // Adds each array of `shape` to its memory space's total, and with `tables` each tuple's pointer table (on
  // the device).
  auto walk = [&](const Shape& shape, uint64_t& device, uint64_t& host, bool tables) -> Status {
    std::vector<const Shape*> stack{&shape};
    while (!stack.empty()) {
      const Shape* s = stack.back();
      stack.pop_back();
      const uint64_t bytes = s->is_tuple() && !tables ? 0 : s->own_bytes();
      uint64_t& total = s->memory_space == kHostMemorySpace ? host : device;
      const auto sum = checked_add(total, bytes);
      if (!sum) return overflow;
      total = *sum;
      for (const Shape& e : s->elements) stack.push_back(&e);
    }
    return ok_status();
  };
  EntrySizes sizes;
  for (const HloInstruction& i : entry->instructions)
    if (i.opcode == HloOpcode::kParameter)
      MEMFIT_RETURN_IF_ERROR(walk(i.shape, sizes.argument_bytes, sizes.host_argument_bytes, false));
  for (const HloAlias& a : module.aliases) {
    const Shape* out = root->shape.at(a.output_index);
    if (out == nullptr)
      return invalid_argument("input_output_alias names an output index the root does not have");
    MEMFIT_RETURN_IF_ERROR(walk(*out, sizes.alias_bytes, sizes.host_alias_bytes, false));
  }
  MEMFIT_RETURN_IF_ERROR(walk(root->shape, sizes.output_bytes, sizes.host_output_bytes, true));
  return sizes;
}

}  // namespace memfit
