#include "memfit/program/stablehlo_module.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <memory>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "memfit/core/checked.h"
#include "memfit/core/text.h"

#include "stablehlo_text.h"

namespace memfit {
namespace {

using stablehlo_text::arrow;
using stablehlo_text::closing_bracket;
using stablehlo_text::error_at;
using stablehlo_text::find_top_level;
using stablehlo_text::hlo_opcode;
using stablehlo_text::int_list_after;
using stablehlo_text::next_line;
using stablehlo_text::parse_type;
using stablehlo_text::parse_type_list;
using stablehlo_text::signature_colon;
using stablehlo_text::split_top_level;
using stablehlo_text::trailing_loc;
using stablehlo_text::trim;

struct Value {
  std::string instruction;  // the HLO instruction holding it in the current computation
  Shape shape;
};

struct Scope {
  size_t computation = 0;  // index into the module's computations (the vector grows while reading)
  std::unordered_map<std::string, Value> values;  // SSA name (without '%') -> value
};

// A stablehlo.while being read: its cond and do regions become computations over the carried tuple.
// The planner follows calls 256 deep (buffer_model_builder.h): regions nested deeper are refused when
// read, before a hostile text's nesting costs memory in proportion.
constexpr size_t kMaxRegionDepth = 256;

struct PendingWhile {
  std::string name;  // SSA name of its results
  std::vector<Shape> types;
  std::vector<std::string> iter_args;  // region argument names
  std::string init_tuple;              // the instruction that builds the initial carry
  size_t init_index = 0;               // and its index in the enclosing computation (only appended to)
  size_t cond = 0, body = 0;           // computation indices
  uint64_t line = 0;
  bool in_body = false;
  size_t region_scope = 0;  // the scope of the region being read (cond, then do)
  size_t captured = 0;      // values from outside the loop its regions read (the last carried elements)
};

// A shard_map being read (sdy.manual_computation): its region, over each device's share of the operands,
// becomes a computation called from where it stands, as XLA's importer makes it: the operands go through
// SPMDFullToShardShape custom calls into the call, its results through SPMDShardToFullShape (the same
// custom calls the program's HLO text holds, so both front ends plan it alike).
struct PendingManual {
  std::string name;  // SSA name of its results
  size_t count = 1;
  std::vector<std::string> to_local;  // the custom calls that hand the body its operands
  size_t body = 0;                    // computation index
};

class Reader {
 public:
  Expected<HloModule> read(std::string_view text) {
    size_t pos = 0;
    for (std::string_view line; next_line(text, pos, line, line_);) {
      if (line.starts_with("#")) {  // an attribute alias; "#loc12 = loc(...)" names ops, before or after
        location_alias(line);
        continue;
      }
      // An op's location names the JAX op that made it ("jit(step)/transpose(jvp())/dot_general"), as an
      // HLO module's metadata op_name does.
      location_ = {};
      if (const size_t at = trailing_loc(line); at != std::string_view::npos) {
        location_ = line.substr(at + 5, line.size() - at - 6);
        line = trim(line.substr(0, at));
      }
      MEMFIT_RETURN_IF_ERROR(statement(line));
    }
    location_ = {};
    if (skipping_) return error_at(line_, "the text ends inside an op's region (truncated?)");
    if (!scopes_.empty()) return error_at(line_, "the text ends inside a function (truncated?)");
    if (!saw_module_) return invalid_argument("not StableHLO: no 'module' or 'func.func' found");
    std::unordered_set<std::string_view> defined;  // looked up once per call: a search each was quadratic
    for (const HloComputation& c : module_.computations) defined.insert(c.name);
    for (HloComputation& c : module_.computations) {
      if (c.root() == nullptr || !has_root(c))
        return invalid_argument(fmt::format("function {} has no return", excerpt(c.name)));
      for (const HloInstruction& i : c.instructions) {
        for (const std::string& callee : i.called) {
          if (!defined.contains(callee))
            return error_at(i.line,
                            fmt::format("calls @{}, which the module does not define", one_line(callee, 60)));
        }
      }
    }
    // What main's result attributes say of each result: in host memory (out_shardings with
    // memory_kind="pinned_host"), split across devices (sdy.sharding, mhlo.sharding).
    for (HloComputation& c : module_.computations) {
      for (HloInstruction& root : c.instructions) {
        if (!c.is_entry || !root.is_root) continue;
        Shape& out = root.shape;
        for (size_t k = 0; k < host_results_.size(); ++k) {
          Shape* element = out.is_tuple() ? (k < out.elements.size() ? &out.elements[k] : nullptr) : &out;
          if (host_results_[k] && element != nullptr && !element->is_tuple())
            element->memory_space = kHostMemorySpace;
        }
        if (std::any_of(result_tiles_.begin(), result_tiles_.end(),
                        [](const auto& t) { return !t.empty(); })) {
          root.mutable_sharding_tiles() = result_tiles_;
          root.mutable_sharding_axes() = result_axes_;
        }
      }
    }
    for (const Located& l : located_) {
      std::string name = location_name(l.location, 0);
      if (!name.empty())
        module_.computations[l.computation].instructions[l.instruction].op_name = std::move(name);
    }
    module_.platform = HloPlatform::kUnknown;
    module_.is_scheduled = false;
    module_.from_stablehlo = true;
    MEMFIT_RETURN_IF_ERROR(validate_hlo_module(module_));
    return std::move(module_);
  }

 private:
  static bool has_root(const HloComputation& c) {
    for (const HloInstruction& i : c.instructions) {
      if (i.is_root) return true;
    }
    return false;
  }

  // "#loc12 = loc(...)": what the alias stands for (MLIR prints them after the module).
  void location_alias(std::string_view line) {
    const size_t eq = line.find(" = loc(");
    if (!line.starts_with("#loc") || eq == std::string_view::npos || !line.ends_with(")")) return;
    location_aliases_[std::string(line.substr(0, eq))] = line.substr(eq + 7, line.size() - eq - 8);
  }

  // The op name a location carries: a NameLoc's string ("name"(child) or "name"), through aliases
  // (#locN), call sites (the callee's) and fused locations (the first with a name); "" for file
  // positions ("file.py":3:11) and unknown. Depth-limited: aliases can be written to refer in a circle.
  std::string location_name(std::string_view loc, int depth) const {
    loc = trim(loc);
    if (depth > 32 || loc.empty()) return {};
    if (loc.starts_with("#")) {
      auto it = location_aliases_.find(std::string(loc));
      return it == location_aliases_.end() ? std::string() : location_name(it->second, depth + 1);
    }
    if (loc.starts_with("\"")) {
      std::string name;
      size_t i = 1;
      for (; i < loc.size() && loc[i] != '"'; ++i) {
        if (loc[i] == '\\' && i + 1 < loc.size()) ++i;
        name += loc[i];
      }
      const std::string_view after = i + 1 < loc.size() ? loc.substr(i + 1) : std::string_view();
      return after.starts_with(":") ? std::string() : name;  // "file":line:col is a position
    }
    if (loc.starts_with("callsite(")) {
      const size_t at = loc.find(" at ");
      return at == std::string_view::npos ? std::string() : location_name(loc.substr(9, at - 9), depth + 1);
    }
    if (loc.starts_with("fused")) {
      const size_t open = loc.find('[');
      if (open == std::string_view::npos || !loc.ends_with("]")) return {};
      for (std::string_view part : split_top_level(loc.substr(open + 1, loc.size() - open - 2))) {
        std::string name = location_name(part, depth + 1);
        if (!name.empty()) return name;
      }
    }
    return {};
  }

  // "sdy.mesh @mesh = <["data"=2, "model"=4]>": each axis's size, for the shardings that name it.
  Status mesh(std::string_view line) {
    const size_t at = line.find('@');
    const size_t eq = line.find(" = <[");
    if (at == std::string_view::npos || eq == std::string_view::npos || eq < at) return ok_status();
    const size_t close = line.find(']', eq);
    if (close == std::string_view::npos) return ok_status();
    auto& axes = meshes_[std::string(trim(line.substr(at + 1, eq - at - 1)))];
    for (std::string_view axis : split_top_level(line.substr(eq + 5, close - eq - 5))) {
      const size_t e = axis.rfind('=');
      if (e == std::string_view::npos || axis.size() < 2 || axis.front() != '"') continue;
      uint64_t size = 0;
      const std::string_view digits = trim(axis.substr(e + 1));
      const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), size);
      if (ec != std::errc() || size == 0) continue;
      axes[std::string(trim(axis.substr(0, e)))] = size;
    }
    return ok_status();
  }

  // How main's argument is split across devices: mhlo.sharding = "{devices=[8,1]<=[8]}" (GSPMD), or
  // sdy.sharding = #sdy.sharding<@mesh, [{"data"}, {}]> (Shardy: each dimension split by the product of the
  // sizes of the mesh axes it names; "x":(1)2, a sub-axis, by its size 2; "?" is open, not split).
  struct Split {
    std::vector<uint64_t> tiles;    // HloInstruction::sharding_tiles
    std::vector<std::string> axes;  // HloInstruction::sharding_axes
  };
  Split argument_split(std::string_view attrs, size_t rank) const {
    if (const size_t at = attrs.find("mhlo.sharding = \""); at != std::string_view::npos) {
      const std::string_view value = attrs.substr(at + 17, attrs.find('"', at + 17) - at - 17);
      return {sharding_tiles(value, rank), sharding_axis_tokens(value, rank)};
    }
    const size_t at = attrs.find("#sdy.sharding<@");
    if (at == std::string_view::npos) return {};
    const std::string_view rest = attrs.substr(at + 15);
    const size_t comma = rest.find(',');
    const size_t open = rest.find('[');
    if (comma == std::string_view::npos || open == std::string_view::npos || open < comma) return {};
    const auto mesh = meshes_.find(std::string(trim(rest.substr(0, comma))));
    const size_t close = closing_bracket(rest, open);
    if (mesh == meshes_.end() || close == std::string_view::npos) return {};
    Split split;
    for (std::string_view dim : split_top_level(rest.substr(open + 1, close - open - 1))) {
      if (dim.size() < 2 || dim.front() != '{' || dim.back() != '}') return {};
      uint64_t tile = 1;
      std::string token;  // the axes as named, major first: equal tokens split a dimension alike
      for (std::string_view axis : split_top_level(dim.substr(1, dim.size() - 2))) {
        if (axis.starts_with("\"") && axis.find(":(") != std::string_view::npos) {  // "x":(1)2
          uint64_t size = 0;
          const std::string_view digits = axis.substr(axis.find(')', axis.find(":(")) + 1);
          const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), size);
          if (ec != std::errc() || size == 0) return {};
          tile = checked_mul(tile, size).value_or(uint64_t{1} << 32);
          token += fmt::format("{}{}", token.empty() ? "" : ",", axis);
          continue;
        }
        const auto a = mesh->second.find(std::string(axis));
        if (a != mesh->second.end() && a->second > 1) {
          tile = checked_mul(tile, a->second).value_or(uint64_t{1} << 32);
          token += fmt::format("{}{}", token.empty() ? "" : ",", axis);
        }
      }
      split.tiles.push_back(std::min<uint64_t>(tile, uint64_t{1} << 32));
      split.axes.push_back(tile > 1 ? std::move(token) : std::string());
    }
    if (split.tiles.size() != rank) return {};
    if (std::all_of(split.tiles.begin(), split.tiles.end(), [](uint64_t t) { return t == 1; }))
      split.tiles.clear();  // given, and whole on every device
    return split;
  }

  static bool is_host_memory_kind(std::string_view attrs) {
    return attrs.find("mhlo.memory_kind = \"pinned_host\"") != std::string_view::npos ||
           attrs.find("mhlo.memory_kind = \"unpinned_host\"") != std::string_view::npos;
  }

  Scope& scope() { return scopes_.back(); }
  HloComputation& current() { return module_.computations[scope().computation]; }

  // An instruction appended to the current computation; returns its name.
  std::string add(HloInstruction inst) {
    inst.line = line_;
    if (!location_.empty())
      located_.push_back({scope().computation, current().instructions.size(), std::string(location_)});
    std::string name = inst.name;
    current().instructions.push_back(std::move(inst));
    return name;
  }

  // "%3", "%w#2", "%arg0", "%iterArg_5": the instruction holding it (making get-tuple-element for "#k").
  Expected<Value> use(std::string_view token) {
    if (token.size() < 2 || token[0] != '%')
      return error_at(line_, fmt::format("expected a value ('%name'), got {}", excerpt(token, 60)));
    std::string name(token.substr(1));
    std::optional<uint64_t> element;
    if (const size_t hash = name.find('#'); hash != std::string::npos) {
      uint64_t k = 0;
      const auto [end, ec] = std::from_chars(name.data() + hash + 1, name.data() + name.size(), k);
      if (ec != std::errc() || end != name.data() + name.size())
        return error_at(line_, fmt::format("bad result reference {}", excerpt(token)));
      element = k;
      name.resize(hash);
    }
    auto it = scope().values.find(name);
    if (it == scope().values.end()) {
      MEMFIT_RETURN_IF_ERROR(capture(name, scopes_.size() - 1));
      it = scope().values.find(name);
    }
    if (!element) return it->second;
    const std::string gte = fmt::format("{}#{}", name, *element);
    if (auto g = scope().values.find(gte); g != scope().values.end()) return g->second;
    const Shape& tuple = it->second.shape;
    if (!tuple.is_tuple() || *element >= tuple.elements.size())
      return error_at(line_, fmt::format("{} names a result the op does not have", excerpt(token)));
    HloInstruction g;
    g.name = gte;
    g.opcode = HloOpcode::kGetTupleElement;
    g.shape = tuple.elements[*element];
    g.operands = {it->second.instruction};
    g.tuple_index = static_cast<int64_t>(*element);
    add(std::move(g));
    Value v{gte, tuple.elements[*element]};
    scope().values[gte] = v;
    return v;
  }

  // `name` in scope `s`, carried into the loops around it that read it from outside. A while's regions
  // may read values defined above the loop (MLIR's while is not isolated from above); XLA's importer makes
  // each such value one more carried element, passed in with the loop's operands and returned unchanged by
  // its body (prepare_for_export.cc, tested there as while_with_implicit_capture). Other regions (a shard
  // map's, a function's) see only their own arguments.
  Status capture(const std::string& name, size_t s) {
    if (scopes_[s].values.contains(name)) return ok_status();
    PendingWhile* w = nullptr;
    for (PendingWhile& p : whiles_)
      if (p.region_scope == s) w = &p;
    if (w == nullptr || s == 0)
      return error_at(line_, fmt::format("%{} is not defined here (or is defined outside its region)",
                                         one_line(name, 60)));
    MEMFIT_RETURN_IF_ERROR(capture(name, s - 1));
    const Value outer = scopes_[s - 1].values.at(name);
    w->types.push_back(outer.shape);
    w->iter_args.push_back(name);
    ++w->captured;
    HloInstruction& init = module_.computations[scopes_[s - 1].computation].instructions[w->init_index];
    init.operands.push_back(outer.instruction);
    init.shape.elements.push_back(outer.shape);
    // The regions read so far take the longer carry, their parameter first (the do region, if not yet
    // open, is made with it).
    module_.computations[w->cond].instructions.front().shape.elements.push_back(outer.shape);
    if (w->in_body) module_.computations[w->body].instructions.front().shape.elements.push_back(outer.shape);
    // The element, appended to the region: a program before optimization is put in XLA's post order
    // before it is planned, so a reader written earlier (an inner loop's operands) is no matter. Inserting
    // it beside the parameter instead cost a move of the region per value read (10^4 values: 13 s).
    HloInstruction g;
    g.name = name;
    g.opcode = HloOpcode::kGetTupleElement;
    g.shape = outer.shape;
    g.operands = {"carry"};
    g.tuple_index = static_cast<int64_t>(w->types.size() - 1);
    g.line = line_;
    module_.computations[scopes_[s].computation].instructions.push_back(std::move(g));
    scopes_[s].values[name] = Value{name, outer.shape};
    return ok_status();
  }

  // Every "%name" or "%name#k" in `s` (outside quotes), in order.
  static std::vector<std::string_view> references(std::string_view s) {
    std::vector<std::string_view> out;
    bool quoted = false;
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] == '"' && (i == 0 || s[i - 1] != '\\')) quoted = !quoted;
      if (quoted || s[i] != '%') continue;
      size_t end = i + 1;
      while (end < s.size() && (std::isalnum(static_cast<unsigned char>(s[end])) || s[end] == '_' ||
                                s[end] == '#' || s[end] == '.' || s[end] == '$' || s[end] == '-'))
        ++end;
      if (end > i + 1) out.push_back(s.substr(i, end - i));
      i = end - 1;
    }
    return out;
  }

  Status statement(std::string_view line) {
    if (skipping_) return skip_region_line(line);
    if (line.starts_with("module")) {
      saw_module_ = true;
      if (const size_t at = line.find('@'); at != std::string_view::npos) {
        size_t end = at + 1;
        while (end < line.size() && !std::isspace(static_cast<unsigned char>(line[end]))) ++end;
        module_.name = std::string(line.substr(at + 1, end - at - 1));
      } else {
        module_.name = "module";
      }
      // attributes {mhlo.num_partitions = 8 : i32, ...}: the devices the program is sharded over.
      if (const size_t at = line.find("mhlo.num_partitions = "); at != std::string_view::npos) {
        uint64_t n = 0;
        const std::string_view digits = line.substr(at + 22);
        const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
        if (ec == std::errc() && n > 0) module_.num_partitions = std::min<uint64_t>(n, uint64_t{1} << 32);
      }
      return ok_status();
    }
    if (line.starts_with("func.func")) return function_header(line);
    if (line == "}") return close_block();
    if (line.starts_with("} do {")) return start_while_body();
    if (line == "cond {") return ok_status();  // the cond region was opened with its while
    if (line.starts_with("return") || line.starts_with("func.return") ||
        line.starts_with("stablehlo.return") || line.starts_with("\"stablehlo.return\"") ||
        line.starts_with("sdy.return"))
      return return_statement(line);
    if (line.starts_with("} : ")) return close_manual_computation(line);
    if (line.starts_with("sdy.mesh ")) return mesh(line);
    if (line.starts_with("sdy.") || line.starts_with("^bb")) return ok_status();  // block labels
    if (line.starts_with("reducer(") || line.starts_with("comparator(") ||
        (!line.starts_with("%") && line.ends_with("{"))) {
      // The region of an op already read (a variadic reduce's reducer): code inside that op.
      skipping_ = true;
      skip_depth_ = 0;
      for (char c : line) skip_depth_ += c == '{' ? 1 : c == '}' ? -1 : 0;
      return ok_status();
    }
    if (line.starts_with("%")) return op(line);
    if (scopes_.empty()) return ok_status();  // module-level attributes and declarations
    return error_at(line_, fmt::format("expected an op ('%name = ...'), got {}", excerpt(line, 80)));
  }

  Status function_header(std::string_view line) {
    saw_module_ = true;
    if (!scopes_.empty() || !whiles_.empty()) return error_at(line_, "a function inside a function");
    const size_t at = line.find('@');
    const size_t open = line.find('(', at == std::string_view::npos ? 0 : at);
    if (at == std::string_view::npos || open == std::string_view::npos)
      return error_at(line_, "expected 'func.func @name(...)'");
    const std::string name(trim(line.substr(at + 1, open - at - 1)));
    const bool is_main = name == "main";
    // The argument list: from '(' to its matching ')'.
    // Quoted strings are skipped: mhlo.sharding = "{devices=[8,1]<=[8]}" holds an unmatched '<'.
    const size_t close = closing_bracket(line, open);
    if (close == std::string_view::npos || !line.ends_with("{"))
      return error_at(line_, "a function header must fit on one line and end in '{'");
    HloComputation c;
    c.name = name;
    c.is_entry = is_main;
    if (is_main && module_.entry() != nullptr) return error_at(line_, "a second @main");
    module_.computations.push_back(std::move(c));
    scopes_.emplace_back();
    scope().computation = module_.computations.size() - 1;
    int64_t number = 0;
    for (std::string_view arg : split_top_level(line.substr(open + 1, close - open - 1))) {
      // "%arg0: tensor<4xf32> {tf.aliasing_output = 0 : i32, mhlo.sharding = ...} loc("x")"
      if (const size_t loc = trailing_loc(arg); loc != std::string_view::npos) arg = trim(arg.substr(0, loc));
      const size_t colon = arg.find(':');
      if (!arg.starts_with("%") || colon == std::string_view::npos)
        return error_at(line_, fmt::format("expected '%name: type', got {}", excerpt(arg, 80)));
      const std::string arg_name(trim(arg.substr(1, colon - 1)));
      std::string_view type = trim(arg.substr(colon + 1));
      std::string_view attrs;
      if (const size_t brace = type.find(" {"); brace != std::string_view::npos) {
        attrs = type.substr(brace);
        type = trim(type.substr(0, brace));
      }
      MEMFIT_ASSIGN_OR_RETURN(Shape shape, parse_type(type, line_));
      // jax.device_put(x, memory_kind="pinned_host") before the call: the argument is in host memory, as
      // PJRT lays it out (S(5)) from this attribute.
      if (is_main && is_host_memory_kind(attrs)) shape.memory_space = kHostMemorySpace;
      HloInstruction p;
      if (is_main) {
        Split split = argument_split(attrs, shape.dims.size());
        p.mutable_sharding_tiles() = {std::move(split.tiles)};
        p.mutable_sharding_axes() = {std::move(split.axes)};
      }
      p.name = arg_name;
      p.opcode = HloOpcode::kParameter;
      p.shape = shape;
      p.parameter_number = number;
      add(std::move(p));
      scope().values[arg_name] = Value{arg_name, shape};
      if (is_main) {
        if (const size_t a = attrs.find("tf.aliasing_output = "); a != std::string_view::npos) {
          uint64_t output = 0;
          const std::string_view digits = attrs.substr(a + 21);
          const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), output);
          if (ec != std::errc()) return error_at(line_, "tf.aliasing_output is not a number");
          module_.aliases.push_back({{output}, number, {}, false});
        } else if (attrs.find("jax.buffer_donor = true") != std::string_view::npos) {
          module_.buffer_donors.push_back({number, {}});
        }
      }
      ++number;
    }
    // The ENTRY's outputs are a tuple when there are several: the alias indexes then name its elements.
    results_of_main_ = 0;
    if (is_main) {
      const std::string_view rest = line.substr(close + 1);
      if (const size_t a = rest.find("->"); a != std::string_view::npos) {
        std::string_view r = trim(rest.substr(a + 2));
        r = trim(r.substr(0, r.size() - 1));  // the body's '{'
        // "-> (...) attributes {mhlo.frontend_attributes = ...}": the function's attributes, not a result.
        r = trim(r.substr(0, find_top_level(r, " attributes {")));
        MEMFIT_ASSIGN_OR_RETURN(std::vector<Shape> results, parse_type_list(r, line_));
        results_of_main_ = results.size();
        if (r.starts_with("(") && r.ends_with(")")) r = r.substr(1, r.size() - 2);
        const std::vector<std::string_view> each = split_top_level(r);
        for (size_t k = 0; k < each.size() && k < results.size(); ++k) {
          host_results_.push_back(is_host_memory_kind(each[k]));
          Split split = argument_split(each[k], results[k].dims.size());
          result_tiles_.push_back(std::move(split.tiles));
          result_axes_.push_back(std::move(split.axes));
        }
      }
    }
    return ok_status();
  }

  Status return_statement(std::string_view line) {
    if (scopes_.empty()) return error_at(line_, "'return' outside a function");
    std::string_view body = line;
    if (const size_t colon = signature_colon(body); colon != std::string_view::npos)
      body = body.substr(0, colon);
    std::vector<Value> values;
    for (std::string_view ref : references(body)) {
      MEMFIT_ASSIGN_OR_RETURN(Value v, use(ref));
      values.push_back(std::move(v));
    }
    HloComputation& c = current();
    const bool main = c.is_entry;
    const bool body_of_while =
        !whiles_.empty() && whiles_.back().in_body && scope().computation == whiles_.back().body;
    if (body_of_while) {  // the values read from outside the loop go around unchanged
      const PendingWhile& w = whiles_.back();
      const size_t written = w.types.size() - w.captured;  // the carry the text declares
      if (values.size() != written)
        return error_at(line_, fmt::format("the loop's do region returns {} values for a carry of {}",
                                           values.size(), written));
      for (size_t k = written; k < w.types.size(); ++k) values.push_back(scope().values.at(w.iter_args[k]));
    }
    if (values.size() == 1 && !body_of_while && !(main && results_of_main_ > 1)) {
      // The value itself is the result (HLO's root need not be a tuple).
      for (HloInstruction& i : c.instructions) i.is_root = i.name == values[0].instruction;
      return ok_status();
    }
    HloInstruction t;
    t.name = fmt::format("return.{}", line_);
    t.opcode = HloOpcode::kTuple;
    for (const Value& v : values) {
      t.operands.push_back(v.instruction);
      t.shape.elements.push_back(v.shape);
    }
    t.is_root = true;
    for (HloInstruction& i : c.instructions) i.is_root = false;
    add(std::move(t));
    return ok_status();
  }

  Status close_block() {
    if (scopes_.empty()) return ok_status();  // the module's closing brace
    if (!manuals_.empty() && scope().computation == manuals_.back().body)
      return error_at(line_, "a manual computation's region ends without its types ('} : (...) -> ...')");
    if (!whiles_.empty() && !whiles_.back().in_body && scope().computation == whiles_.back().cond)
      return error_at(line_, "a while's cond region ends without '} do {'");
    if (!whiles_.empty() && whiles_.back().in_body && scope().computation == whiles_.back().body) {
      // The while's do region ends: the loop itself goes into the enclosing computation.
      PendingWhile w = std::move(whiles_.back());
      whiles_.pop_back();
      scopes_.pop_back();
      HloInstruction loop;
      loop.name = w.name;
      loop.opcode = HloOpcode::kWhile;
      loop.operands = {w.init_tuple};
      loop.called = {module_.computations[w.cond].name, module_.computations[w.body].name};
      for (const Shape& t : w.types) loop.shape.elements.push_back(t);
      Shape shape = loop.shape;
      add(std::move(loop));
      scope().values[w.name] = Value{w.name, std::move(shape)};
      return ok_status();
    }
    scopes_.pop_back();
    return ok_status();
  }

  // A region's computation: named by its function, the op that owns it and a count of regions read, so
  // that sibling regions (which may reuse SSA names) differ and a name stays short however deep regions
  // nest (naming each by its parent's name grew quadratically: 10^5 nested loops took 24 GB).
  std::string region_name(std::string_view op, std::string_view kind) {
    return fmt::format("{}.{}.{}.{}", module_.computations[scopes_.front().computation].name, op,
                       regions_read_++, kind);
  }

  // A computation over the loop's carried tuple; each region argument is one of its elements.
  Status open_loop_region(PendingWhile& w, bool body) {
    HloComputation c;
    c.name = region_name(w.name, body ? "body" : "cond");
    module_.computations.push_back(std::move(c));
    const size_t index = module_.computations.size() - 1;
    (body ? w.body : w.cond) = index;
    Scope region;
    region.computation = index;
    scopes_.push_back(std::move(region));
    w.region_scope = scopes_.size() - 1;
    HloInstruction p;
    p.name = "carry";
    p.opcode = HloOpcode::kParameter;
    p.parameter_number = 0;
    for (const Shape& t : w.types) p.shape.elements.push_back(t);
    Shape carry = p.shape;
    add(std::move(p));
    for (size_t k = 0; k < w.iter_args.size(); ++k) {
      HloInstruction g;
      g.name = w.iter_args[k];
      g.opcode = HloOpcode::kGetTupleElement;
      g.shape = w.types[k];
      g.operands = {"carry"};
      g.tuple_index = static_cast<int64_t>(k);
      add(std::move(g));
      scope().values[w.iter_args[k]] = Value{w.iter_args[k], w.types[k]};
    }
    return ok_status();
  }

  Status start_while_body() {
    if (whiles_.empty() || whiles_.back().in_body || scopes_.size() < 2 ||
        scope().computation != whiles_.back().cond)
      return error_at(line_, "'} do {' without a while's cond");
    whiles_.back().in_body = true;
    scopes_.pop_back();
    return open_loop_region(whiles_.back(), /*body=*/true);
  }

  Status op(std::string_view line) {
    if (scopes_.empty()) return error_at(line_, "an op outside a function");
    const size_t eq = line.find(" = ");
    if (eq == std::string_view::npos) return error_at(line_, "expected '%name = op ...'");
    std::string result(trim(line.substr(1, eq - 1)));
    size_t count = 1;
    // "%output_state, %output = stablehlo.rng_bit_generator ...": results named one by one (an op that
    // names its results, OpAsmOpInterface) are the elements of one tuple, each name bound to its element.
    std::vector<std::string> names;
    if (result.find(',') != std::string::npos) {
      for (std::string_view n : split_top_level(result)) {
        if (n.starts_with("%")) n.remove_prefix(1);
        if (n.empty() || n.find_first_of("%:# ") != std::string_view::npos)
          return error_at(line_, fmt::format("bad result name in {}", excerpt(line, 80)));
        names.emplace_back(n);
      }
      result = names[0] + ".results";
      count = names.size();
    } else if (const size_t colon = result.find(':'); colon != std::string::npos) {
      const auto [end, ec] = std::from_chars(result.data() + colon + 1, result.data() + result.size(), count);
      if (ec != std::errc() || count == 0) return error_at(line_, "bad result count");
      result.resize(colon);
    }
    std::string_view rest = trim(line.substr(eq + 3));
    // The op name: `stablehlo.add`, `"stablehlo.reduce"(`, `func.call @f(`, `call @f(`.
    std::string opname;
    if (rest.starts_with("\"")) {
      const size_t q = rest.find('"', 1);
      if (q == std::string_view::npos) return error_at(line_, "unterminated op name");
      opname = std::string(rest.substr(1, q - 1));
      rest = rest.substr(q + 1);
    } else {
      size_t end = 0;
      while (end < rest.size() && !std::isspace(static_cast<unsigned char>(rest[end])) && rest[end] != '(')
        ++end;
      opname = std::string(rest.substr(0, end));
      rest = rest.substr(end);
    }
    if (opname.empty()) return error_at(line_, "an op without a name");
    if (opname == "stablehlo.while") return while_header(result, count, rest);
    if (opname == "sdy.manual_computation") return manual_computation_header(result, count, rest);
    // An op whose region follows on the next lines (reduce, sort, scatter, case ...): the region is code
    // inside the op; its types may come on the line that closes it.
    if (line.ends_with("{")) {
      pending_ = PendingOp{result, count, opname, std::string(rest), line_, std::move(names)};
      skipping_ = true;
      skip_depth_ = 0;
      for (char c : line) skip_depth_ += c == '{' ? 1 : c == '}' ? -1 : 0;
      return ok_status();
    }
    return finish_op(result, count, opname, rest, rest, HloOpcode::kUnknown, names);
  }

  // "(%arg0, %arg1) in_shardings=[...] out_shardings=[...] manual_axes={"x"} (%arg2: tensor<..>, ...) {"
  Status manual_computation_header(const std::string& result, size_t count, std::string_view rest) {
    if (whiles_.size() + manuals_.size() >= kMaxRegionDepth)
      return error_at(line_, "loops and shard maps nest deeper than 256");
    rest = trim(rest);
    if (!rest.starts_with("(") || !rest.ends_with("{"))
      return error_at(line_, "expected 'sdy.manual_computation(%operands) ... (%args) {' on one line");
    const size_t operands_end = rest.find(')');
    const size_t args_begin = rest.rfind(" (");
    const size_t args_end = rest.rfind(')');
    if (operands_end == std::string_view::npos || args_begin == std::string_view::npos ||
        args_begin < operands_end || args_end < args_begin)
      return error_at(line_, "a manual computation without its operands or region arguments");
    std::vector<Value> operands;
    for (std::string_view ref : references(rest.substr(0, operands_end))) {
      MEMFIT_ASSIGN_OR_RETURN(Value v, use(ref));
      operands.push_back(std::move(v));
    }
    const std::vector<std::string_view> args =
        split_top_level(rest.substr(args_begin + 2, args_end - args_begin - 2));
    if (args.size() != operands.size())
      return error_at(line_, fmt::format("a manual computation of {} operands with {} region arguments",
                                         operands.size(), args.size()));
    PendingManual m;
    m.name = result;
    m.count = count;
    std::vector<std::pair<std::string, Shape>> params;
    for (size_t k = 0; k < args.size(); ++k) {
      std::string_view arg = args[k];
      if (const size_t at = trailing_loc(arg); at != std::string_view::npos) arg = trim(arg.substr(0, at));
      const size_t colon = arg.find(':');
      if (!arg.starts_with("%") || colon == std::string_view::npos)
        return error_at(line_, fmt::format("expected '%name: type', got {}", excerpt(arg, 80)));
      MEMFIT_ASSIGN_OR_RETURN(Shape local, parse_type(trim(arg.substr(colon + 1)), line_));
      HloInstruction to_local;
      to_local.name = fmt::format("{}.to_local.{}", result, k);
      to_local.set_opcode("custom-call");
      to_local.custom_call_target = "SPMDFullToShardShape";
      to_local.op_name = "sdy.manual_computation";
      to_local.shape = local;
      to_local.operands = {operands[k].instruction};
      m.to_local.push_back(add(std::move(to_local)));
      params.emplace_back(std::string(trim(arg.substr(1, colon - 1))), std::move(local));
    }
    HloComputation c;
    c.name = region_name(result, "shmap_body");
    module_.computations.push_back(std::move(c));
    m.body = module_.computations.size() - 1;
    Scope region;
    region.computation = m.body;
    scopes_.push_back(std::move(region));
    for (size_t k = 0; k < params.size(); ++k) {
      HloInstruction p;
      p.name = params[k].first;
      p.opcode = HloOpcode::kParameter;
      p.shape = params[k].second;
      p.parameter_number = static_cast<int64_t>(k);
      add(std::move(p));
      scope().values[params[k].first] = Value{params[k].first, params[k].second};
    }
    manuals_.push_back(std::move(m));
    return ok_status();
  }

  // "} : (tensor<..>, ...) -> tensor<..>": the manual computation's region ends; the call and its results
  // go into the enclosing computation.
  Status close_manual_computation(std::string_view line) {
    if (manuals_.empty() || scopes_.size() < 2 || scope().computation != manuals_.back().body)
      return error_at(line_, "'} : ...' closes no manual computation");
    PendingManual m = std::move(manuals_.back());
    manuals_.pop_back();
    const HloComputation& body = module_.computations[m.body];
    if (body.root() == nullptr || !has_root(body))
      return error_at(line_, "a manual computation without sdy.return");
    const Shape local_results = body.root()->shape;
    scopes_.pop_back();
    const std::string_view signature = line.substr(4);
    const size_t a = arrow(signature);
    if (a == std::string_view::npos) return error_at(line_, "a manual computation without its result types");
    MEMFIT_ASSIGN_OR_RETURN(std::vector<Shape> results, parse_type_list(signature.substr(a + 2), line_));
    const size_t locals = local_results.is_tuple() ? local_results.elements.size() : 1;
    if (results.size() != m.count || locals != m.count)
      return error_at(line_, fmt::format("a manual computation of {} results returns {} and declares {}",
                                         m.count, locals, results.size()));
    HloInstruction call;
    call.name = m.name + ".body";
    call.opcode = HloOpcode::kCall;
    call.called = {body.name};
    call.operands = m.to_local;
    call.shape = local_results;
    call.op_name = "sdy.manual_computation";
    const std::string called = add(std::move(call));
    auto to_global = [&](const std::string& name, const std::string& operand, Shape shape) {
      HloInstruction g;
      g.name = name;
      g.set_opcode("custom-call");
      g.custom_call_target = "SPMDShardToFullShape";
      g.op_name = "sdy.manual_computation";
      g.shape = std::move(shape);
      g.operands = {operand};
      return add(std::move(g));
    };
    if (m.count == 1) {
      to_global(m.name, called, results[0]);
      scope().values[m.name] = Value{m.name, results[0]};
      return ok_status();
    }
    HloInstruction t;
    t.name = m.name;
    t.opcode = HloOpcode::kTuple;
    for (size_t k = 0; k < m.count; ++k) {
      HloInstruction g;
      g.name = fmt::format("{}.body#{}", m.name, k);
      g.opcode = HloOpcode::kGetTupleElement;
      g.shape = local_results.elements[k];
      g.operands = {called};
      g.tuple_index = static_cast<int64_t>(k);
      const std::string element = add(std::move(g));
      t.operands.push_back(to_global(fmt::format("{}.global.{}", m.name, k), element, results[k]));
      t.shape.elements.push_back(results[k]);
    }
    Shape shape = t.shape;
    add(std::move(t));
    scope().values[m.name] = Value{m.name, std::move(shape)};
    return ok_status();
  }

  Status while_header(const std::string& result, size_t count, std::string_view rest) {
    if (whiles_.size() + manuals_.size() >= kMaxRegionDepth)
      return error_at(line_, "loops and shard maps nest deeper than 256");
    // "(%iterArg = %a, %iterArg_1 = %b) : tensor<..>, tensor<..>"
    const size_t colon = signature_colon(rest);
    if (colon == std::string_view::npos) return error_at(line_, "a while without its types");
    MEMFIT_ASSIGN_OR_RETURN(std::vector<Shape> types, parse_type_list(rest.substr(colon + 2), line_));
    std::string_view args = trim(rest.substr(0, colon));
    if (args.starts_with("(") && args.ends_with(")")) args = args.substr(1, args.size() - 2);
    PendingWhile w;
    w.name = result;
    w.types = std::move(types);
    w.line = line_;
    HloInstruction init;
    init.name = result + ".init";
    init.opcode = HloOpcode::kTuple;
    for (std::string_view pair : split_top_level(args)) {
      const size_t e = pair.find('=');
      if (e == std::string_view::npos || !pair.starts_with("%"))
        return error_at(line_, "expected '%arg = %value' in the while's carry");
      w.iter_args.emplace_back(trim(pair.substr(1, e - 1)));
      MEMFIT_ASSIGN_OR_RETURN(Value v, use(trim(pair.substr(e + 1))));
      init.operands.push_back(v.instruction);
      init.shape.elements.push_back(v.shape);
    }
    if (w.iter_args.size() != w.types.size() || w.types.size() != count)
      return error_at(line_, "the while's carry, types and results do not match in number");
    w.init_index = current().instructions.size();
    w.init_tuple = add(std::move(init));
    whiles_.push_back(std::move(w));
    return open_loop_region(whiles_.back(), /*body=*/false);
  }

  Status skip_region_line(std::string_view line) {
    if (pending_ && line.starts_with("%")) {  // "%0 = stablehlo.add %arg1, %arg2 : tensor<f32>"
      if (const size_t eq = line.find(" = "); eq != std::string_view::npos) {
        std::string_view op = trim(line.substr(eq + 3));
        if (op.starts_with("\"")) op.remove_prefix(1);
        size_t end = 0;
        while (end < op.size() && op[end] != ' ' && op[end] != '"' && op[end] != '(') ++end;
        op = op.substr(0, end);
        pending_->region_op = hlo_opcode_from_name(hlo_opcode(op));
        ++pending_->region_ops;
      }
    }
    for (char c : line) skip_depth_ += c == '{' ? 1 : c == '}' ? -1 : 0;
    if (skip_depth_ > 0) return ok_status();
    skipping_ = false;
    if (!pending_) return ok_status();  // a region of an op already read
    PendingOp p = std::move(*pending_);
    pending_.reset();
    // The closing line ("}) {attrs} : (...) -> ...") carries the signature when the header did not.
    const std::string_view header = p.rest;
    const bool header_typed = signature_colon(header) != std::string_view::npos && !header.ends_with("{");
    const HloOpcode combiner = p.region_ops == 1 ? p.region_op : HloOpcode::kUnknown;
    return finish_op(p.result, p.count, p.opname, header, header_typed ? header : line, combiner, p.names);
  }

  Status finish_op(const std::string& result, size_t count, const std::string& opname,
                   std::string_view operands_text, std::string_view typed_text,
                   HloOpcode region_combiner = HloOpcode::kUnknown,
                   const std::vector<std::string>& names = {}) {
    const size_t colon = signature_colon(typed_text);
    if (colon == std::string_view::npos)
      return error_at(line_, fmt::format("{} without a type signature", excerpt(opname, 60)));
    std::string_view signature = typed_text.substr(colon + 2);
    std::string_view body = operands_text;
    if (const size_t c = signature_colon(body); c != std::string_view::npos) body = body.substr(0, c);
    const size_t a = arrow(signature);
    MEMFIT_ASSIGN_OR_RETURN(
        std::vector<Shape> results,
        parse_type_list(a == std::string_view::npos ? signature : signature.substr(a + 2), line_));
    if (results.empty()) return error_at(line_, "an op with no result type");
    HloInstruction inst;
    inst.name = result;
    inst.set_opcode(hlo_opcode(opname));
    // No JAX op names without debug info: the StableHLO op says what made the buffer (and groups alike ones).
    inst.op_name = opname;
    if (inst.opcode == HloOpcode::kCall || opname == "stablehlo.composite") {
      const size_t at = opname == "stablehlo.composite" ? body.find("decomposition = @") : body.find('@');
      if (at == std::string_view::npos) return error_at(line_, "a call without its function");
      size_t start = at + (opname == "stablehlo.composite" ? 17 : 1), end = start;
      while (end < body.size() && (std::isalnum(static_cast<unsigned char>(body[end])) || body[end] == '_' ||
                                   body[end] == '.' || body[end] == '$'))
        ++end;
      inst.opcode = HloOpcode::kCall;
      inst.called = {std::string(body.substr(start, end - start))};  // checked once every function is read
    } else if (inst.opcode == HloOpcode::kCustomCall) {
      if (const size_t at = body.find('@'); at != std::string_view::npos) {
        size_t end = at + 1;
        while (end < body.size() && body[end] != '(' && !std::isspace(static_cast<unsigned char>(body[end])))
          ++end;
        inst.custom_call_target = std::string(body.substr(at + 1, end - at - 1));
      }
      if (std::string placement = buffer_placement_attribute(body); !placement.empty())
        inst.mutable_buffer_placement() = std::move(placement);
    }
    // What the model of XLA:GPU needs to see a reduction over a dot's batch dimensions.
    if (opname == "stablehlo.transpose" || opname == "stablehlo.broadcast_in_dim") {
      inst.dimensions = int_list_after(body, "dims = [");
    } else if (opname == "stablehlo.reduce") {
      inst.dimensions = int_list_after(body, "dimensions = [");
      if (const size_t at = body.find("applies stablehlo."); at != std::string_view::npos) {
        size_t end = at + 18;
        while (end < body.size() && std::isalpha(static_cast<unsigned char>(body[end]))) ++end;
        inst.reducer = hlo_opcode_from_name(body.substr(at + 18, end - at - 18));
      }
    } else if (opname == "stablehlo.dot_general") {
      // "batching_dims = [0] x [0], contracting_dims = [2] x [1]"
      inst.lhs_batch_dims = int_list_after(body, "batching_dims = [");
      if (const size_t at = body.find("batching_dims = ["); at != std::string_view::npos)
        inst.rhs_batch_dims = int_list_after(body.substr(at), "] x [");
      inst.lhs_contracting_dims = int_list_after(body, "contracting_dims = [");
      if (const size_t at = body.find("contracting_dims = ["); at != std::string_view::npos)
        inst.rhs_contracting_dims = int_list_after(body.substr(at), "] x [");
    } else if (opname == "stablehlo.gather" || opname == "stablehlo.scatter") {
      HloInstruction::GatherDims& g = inst.mutable_gather_dims();
      const bool gather = opname == "stablehlo.gather";
      g.window = int_list_after(body, gather ? "offset_dims = [" : "update_window_dims = [");
      g.collapsed = int_list_after(body, gather ? "collapsed_slice_dims = [" : "inserted_window_dims = [");
      g.operand_batching =
          int_list_after(body, gather ? "operand_batching_dims = [" : "input_batching_dims = [");
      g.indices_batching = int_list_after(
          body, gather ? "start_indices_batching_dims = [" : "scatter_indices_batching_dims = [");
      if (const size_t at = body.find("index_vector_dim = "); at != std::string_view::npos)
        std::from_chars(body.data() + at + 19, body.data() + body.size(), g.index_vector_dim);
    } else if (opname == "stablehlo.get_tuple_element") {
      // "%t[1]" (pretty) or "<{index = 1 : i32}>" (generic): the element read.
      const size_t at = body.find("index = ");
      const size_t open = body.find('[');
      const size_t from = at != std::string_view::npos     ? at + 8
                          : open != std::string_view::npos ? open + 1
                                                           : body.size();
      uint64_t k = 0;
      const auto [end, ec] = std::from_chars(body.data() + from, body.data() + body.size(), k);
      if (ec != std::errc() || k > static_cast<uint64_t>(INT64_MAX))
        return error_at(line_, "get_tuple_element without its index");
      inst.tuple_index = static_cast<int64_t>(k);
    }
    // A scatter's (or a generic reduce's) combiner, from its region: XLA's simplifier folds an add of a
    // scatter-add into zeros (plan/xla_gpu_model.cc), as it does for the HLO text's to_apply=.
    if (inst.reducer == HloOpcode::kUnknown &&
        (inst.opcode == HloOpcode::kScatter || inst.opcode == HloOpcode::kReduce))
      inst.reducer = region_combiner;
    std::vector<Shape> operand_shapes;
    if (opname != "stablehlo.constant") {
      for (std::string_view ref : references(body)) {
        MEMFIT_ASSIGN_OR_RETURN(Value v, use(ref));
        inst.operands.push_back(v.instruction);
        operand_shapes.push_back(std::move(v.shape));
      }
    }
    if (inst.opcode == HloOpcode::kOptimizationBarrier && count > 1) {
      // HLO's barrier takes one tuple: StableHLO's takes the values themselves.
      HloInstruction in;
      in.name = result + ".in";
      in.opcode = HloOpcode::kTuple;
      in.operands = inst.operands;
      in.shape.elements = std::move(operand_shapes);
      inst.operands = {add(std::move(in))};
    }
    if (count > 1) {
      if (results.size() != count)
        return error_at(line_, fmt::format("{} results but {} types", count, results.size()));
      for (Shape& r : results) inst.shape.elements.push_back(std::move(r));
    } else {
      // One result: the signature's last type ("select %p, %a, %b : tensor<4xi1>, tensor<4xf32>" lists the
      // predicate's type first).
      inst.shape = std::move(results.back());
    }
    Shape shape = inst.shape;
    add(std::move(inst));
    scope().values[result] = Value{result, std::move(shape)};
    for (size_t k = 0; k < names.size(); ++k) {
      if (scope().values.count(names[k]) != 0)
        return error_at(line_, fmt::format("%{} is defined twice", one_line(names[k], 60)));
      MEMFIT_ASSIGN_OR_RETURN(Value element, use(fmt::format("%{}#{}", result, k)));
      scope().values[names[k]] = std::move(element);
    }
    return ok_status();
  }

  struct PendingOp {
    std::string result;
    size_t count;
    std::string opname;
    std::string rest;
    uint64_t line;
    // The ops of its region (a scatter's or reduce's combiner, written on the lines between): the one op,
    // when there is exactly one, is the combiner, as an HLO module names it through to_apply=.
    std::vector<std::string> names;  // results named one by one, if they are
    HloOpcode region_op = HloOpcode::kUnknown;
    size_t region_ops = 0;
  };

  HloModule module_;
  std::vector<Scope> scopes_;
  std::vector<PendingWhile> whiles_;
  std::vector<PendingManual> manuals_;
  std::vector<bool> host_results_;                   // main's results in host memory, by position
  std::vector<std::vector<uint64_t>> result_tiles_;  // and how each is split across devices
  std::vector<std::vector<std::string>> result_axes_;
  std::unordered_map<std::string, std::unordered_map<std::string, uint64_t>> meshes_;  // name -> axis sizes
  // Locations: the one on the line being read, each instruction's, and the module's aliases.
  struct Located {
    size_t computation;
    size_t instruction;
    std::string location;
  };
  std::string_view location_;
  std::vector<Located> located_;
  std::unordered_map<std::string, std::string_view> location_aliases_;
  std::optional<PendingOp> pending_;
  bool skipping_ = false;
  int skip_depth_ = 0;
  size_t results_of_main_ = 0;
  uint64_t regions_read_ = 0;
  bool saw_module_ = false;
  uint64_t line_ = 0;
};

}  // namespace

Expected<HloModule> parse_stablehlo_module(std::string_view text) {
  Reader reader;
  return reader.read(text);
}

ProgramTextKind program_text_kind(std::string_view text) {
  size_t pos = 0;
  uint64_t number = 0;
  for (std::string_view line; next_line(text, pos, line, number);) {
    if (line.starts_with("#")) continue;  // MLIR's attribute aliases may come first
    if (line.starts_with("HloModule ")) return ProgramTextKind::kHlo;
    if (line.starts_with("module") || line.starts_with("func.func")) return ProgramTextKind::kStableHlo;
    return ProgramTextKind::kUnknown;
  }
  return ProgramTextKind::kUnknown;
}

Expected<HloModule> parse_program_text(std::string_view text) {
  switch (program_text_kind(text)) {
    case ProgramTextKind::kStableHlo:
      return parse_stablehlo_module(text);
    case ProgramTextKind::kHlo:
    case ProgramTextKind::kUnknown:
      break;
  }
  return parse_hlo_module(text);  // its error names what was expected
}

}  // namespace memfit
