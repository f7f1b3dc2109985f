// The model of XLA's SPMD partitioning (xla/service/spmd/spmd_partitioner.cc, after sharding propagation,
// xla/service/sharding_propagation.cc): a program JAX lowered for a mesh - its arguments and results
// annotated with shardings, the rest left to the compiler - becomes one device's program, each array its
// share, with the collectives that move data between the shares. XLA:GPU runs it before every pass that
// decides memory (gpu_compiler.cc's RunSPMDPasses), so the rest of the model then plans one device.
//
// What is modeled, each an approximation of XLA's rule named where it is made:
// - Propagation runs forward through the program (operands before users), each op taking its operands'
//   shardings; XLA's propagation also runs backward from users and weighs alternatives by cost.
// - A value read with a sharding other than its own is resharded where it is read: an all-gather of the
//   dimensions split another way, a slice (fused into the reader: no buffer) of the ones it holds whole.
// - A dot or reduce over a split dimension leaves each device a partial sum, summed where it is read: an
//   all-reduce, or a reduce-scatter when the reader wants that axis split (XLA's ReduceScatterCreator).
// - A dot whose operands split one axis two ways gathers the weight (a parameter as read), else the smaller
//   operand (XLA's dot handler chooses by cost among more strategies; gathering the weight is what it does
//   for FSDP's weights). An elementwise op's split follows its activations, not a weight it reads.
// - Gathers and scatters split along their batch (index and batching) dimensions; a table split along the
//   rows it indexes is each device's partial sum where the result's split leaves the axis free, else
//   gathered whole.
// - A loop's body runs on each device's share of the carried values: tried once on a copy to see which
//   values it splits (a scan's stacked outputs), with a look at the readers of its results, and at the
//   body's readers of what it carries unchanged, for the ones XLA's backward propagation would split (an
//   accumulator beside a split parameter, an attention mask beside the split scores).
// - cuDNN's fused attention, convolutions and pooling split by batch; calls (inlined before), sorts,
//   conditionals and other custom calls run whole on every device, named in a caveat.
// Collectives are not combined (XLA's AllReduceCombiner groups small ones): each is its own buffer; a
// weight's gather is tied to its reader's other operands so the memory scheduler does not hoist it.
#include <fmt/format.h>

#include <algorithm>
#include <deque>
#include <map>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "memfit/core/checked.h"
#include "memfit/core/name_map.h"
#include "memfit/plan/xla_gpu_model.h"
#include "xla_gpu_model_internal.h"

namespace memfit::xla_gpu_internal {

namespace {

// A value per name, for the tables the partitioner fills for every instruction it places (a deep step's
// 6 x 10^4): the names kept once, in a deque (NameMap's keys must outlive it), the values in another
// (references stay valid as entries are added, as unordered_map's do). Against node-allocating
// std::unordered_map<std::string, ...> tables, partitioning GPT's 300-layer stacked change over 4 devices
// took 7% less time (2026-12-07: the rest of its time is spread thin, no other table stood out).
template <typename V>
class ByName {
 public:
  void reserve(size_t n) { ids_.reserve(n); }
  V* find(std::string_view name) {
    const auto* e = ids_.find(name);
    return e == nullptr ? nullptr : &values_[e->second];
  }
  const V* find(std::string_view name) const {
    const auto* e = ids_.find(name);
    return e == nullptr ? nullptr : &values_[e->second];
  }
  bool contains(std::string_view name) const { return ids_.contains(name); }
  V& operator[](std::string_view name) {
    if (const auto* e = ids_.find(name)) return values_[e->second];
    names_.emplace_back(name);
    ids_.emplace(names_.back(), static_cast<uint32_t>(values_.size()));
    return values_.emplace_back();
  }

 private:
  NameMap<uint32_t> ids_;
  std::deque<std::string> names_;
  std::deque<V> values_;
};

constexpr int kWhole = -1;
constexpr size_t kMostAxes = 64;  // partial sums are a bit per axis

// How one array is held by each device: the axis splitting each dimension, and the axes over which each
// device holds a partial sum still to be added.
struct Sh {
  std::vector<int> axis;
  uint64_t partial = 0;
  bool operator==(const Sh&) const = default;
  bool split() const {
    return partial != 0 || std::any_of(axis.begin(), axis.end(), [](int a) { return a != kWhole; });
  }
};

Sh whole(size_t rank) { return Sh{std::vector<int>(rank, kWhole), 0}; }
Sh resolved(Sh s) {
  s.partial = 0;
  return s;
}

std::string key_of(const Sh& s) {
  std::string k;
  for (int a : s.axis) k += fmt::format("{},", a);
  return k + fmt::format("p{}", s.partial);
}

// What an op does with its operands' shardings: its result's (one per tuple element) and, for each operand,
// the sharding it reads it with (nullopt: as it is, a tuple passed on).
struct Rule {
  std::vector<Sh> out;
  std::vector<std::optional<Sh>> want;
};

bool is_sharding_call(const HloInstruction& x) {
  return x.opcode == HloOpcode::kCustomCall &&
         (x.custom_call_target == "Sharding" || x.custom_call_target == "xla.sdy.Sharding");
}

class Partitioner {
 public:
  explicit Partitioner(HloModule& m) : m_(m) {}

  Status run() {
    HloComputation* entry = m_.entry();
    if (entry == nullptr) return ok_status();
    bool any = false;
    for (const HloInstruction& x : entry->instructions)
      for (const auto& axes : x.sharding_axes())
        for (const std::string& t : axes) any = any || !t.empty();
    if (!any) {  // every device runs the whole program: it is each device's already
      m_.partitioned = true;
      return ok_status();
    }
    // What the passes look up by name, gathered once. Readers are kept only where they are asked for: of
    // tuples (whether a loop or a call reads them), and of everything when the program has loops (a loop's
    // results read beside a split value). A deep step is 10^5 instructions: no more strings than needed.
    size_t count = 0;
    bool loops = false;
    for (size_t c = 0; c < m_.computations.size(); ++c) {
      computation_[m_.computations[c].name] = c;
      for (const HloInstruction& x : m_.computations[c].instructions) {
        ++count;
        loops = loops || x.opcode == HloOpcode::kWhile;
        if (x.opcode == HloOpcode::kTuple) users_[x.name];
        // Names the partitioner could make are kept, so that it makes none twice.
        if (x.name.find(".spmd_") != std::string::npos) names_.insert(x.name);
      }
    }
    for (const HloComputation& c : m_.computations) {
      for (const HloInstruction& x : c.instructions) {
        for (const std::string& o : x.operands)
          if (auto u = users_.find(o); u != users_.end()) u->second.push_back(x.opcode);
        if (!loops) continue;
        const auto at = static_cast<uint32_t>(readers_all_.size());
        reader_index_[x.name] = at;
        readers_all_.push_back({x.name, x.opcode, x.operands, x.tuple_index, x.shape.dims.size()});
        for (const std::string& o : x.operands) readers_[o].push_back(at);
      }
    }
    global_.reserve(count + count / 4);
    sh_.reserve(count + count / 4);
    for (const HloInstruction& p : entry->instructions)
      if (p.opcode == HloOpcode::kParameter && !p.shape.is_tuple())
        if (auto g = given(p, 0, p.shape)) given_parameters_[p.name] = *g;
    MEMFIT_RETURN_IF_ERROR(partition(*entry, nullptr, nullptr));
    for (HloInstruction& x : entry->instructions) {
      if (x.opcode == HloOpcode::kParameter || x.is_root) {
        if (!x.sharding_tiles().empty()) x.mutable_sharding_tiles().clear();
        if (!x.sharding_axes().empty()) x.mutable_sharding_axes().clear();
      }
    }
    m_.partitioned = true;
    m_.partition_notes.assign(notes_.begin(), notes_.end());
    return ok_status();
  }

 private:
  // Partitions one computation in place: the entry (`params` null: its parameters' own shardings), or a
  // loop's body or condition, whose one parameter is the loop's tuple, held as `params` says; a body's
  // results are resharded to `root_want` so that every iteration sees its values alike.
  Status partition(HloComputation& comp, const std::vector<Sh>* params, const std::vector<Sh>* root_want) {
    std::vector<HloInstruction> outer = std::move(out_);
    std::unordered_map<std::string, size_t> outer_placed = std::move(placed_);
    const std::vector<Sh>* outer_params = loop_params_;
    const std::vector<Sh>* outer_root = root_want_;
    out_.clear();
    placed_.clear();
    loop_params_ = params;
    root_want_ = root_want;
    const std::vector<uint32_t> order = instruction_post_order(comp);
    std::vector<HloInstruction> in = std::move(comp.instructions);
    comp.instructions.clear();
    out_.reserve(in.size() + in.size() / 4);
    Status status = ok_status();
    for (uint32_t k : order)
      if (status.ok()) status = place(std::move(in[k]));
    comp.instructions = std::move(out_);
    out_ = std::move(outer);
    placed_ = std::move(outer_placed);
    loop_params_ = outer_params;
    root_want_ = outer_root;
    return status;
  }

  int axis_id(const std::string& token, uint64_t parts) {
    for (size_t k = 0; k < axes_.size(); ++k)
      if (axes_[k].first == token) return static_cast<int>(k);
    if (axes_.size() >= kMostAxes) {
      if (status_.ok())
        status_ =
            invalid_argument(fmt::format("the program's shardings name more than {} device axes", kMostAxes));
      return kWhole;
    }
    axes_.emplace_back(token, std::max<uint64_t>(parts, 1));
    return static_cast<int>(axes_.size() - 1);
  }
  uint64_t parts(int axis) const { return axis == kWhole ? 1 : axes_[static_cast<size_t>(axis)].second; }

  // The sharding an annotation gives the array at tuple element `k` (or the array itself), else nullopt.
  std::optional<Sh> given(const HloInstruction& x, size_t k, const Shape& array) {
    if (k >= x.sharding_axes().size() || k >= x.sharding_tiles().size()) return std::nullopt;
    const auto& tokens = x.sharding_axes()[k];
    const auto& tiles = x.sharding_tiles()[k];
    // No tokens: none given (the compiler's choice); tokens but no tiles: held whole.
    if (tokens.size() != array.dims.size() || (!tiles.empty() && tiles.size() != array.dims.size()) ||
        (tokens.empty() && !array.dims.empty()))
      return std::nullopt;
    Sh s = whole(array.dims.size());
    for (size_t d = 0; d < tokens.size(); ++d)
      if (!tokens[d].empty() && !tiles.empty() && tiles[d] > 1) s.axis[d] = axis_id(tokens[d], tiles[d]);
    // One axis splitting two dimensions is no sharding XLA writes: the second is taken whole.
    for (size_t d = 0; d < s.axis.size(); ++d)
      for (size_t e = 0; e < d; ++e)
        if (s.axis[d] != kWhole && s.axis[d] == s.axis[e]) s.axis[d] = kWhole;
    return s;
  }

  Shape local(const Shape& global, const Sh& s) const {
    Shape l = global;
    for (size_t d = 0; d < l.dims.size() && d < s.axis.size(); ++d) {
      const uint64_t p = parts(s.axis[d]);
      l.dims[d] = (l.dims[d] + p - 1) / p;  // XLA pads an uneven split
    }
    return l;
  }

  const std::vector<Sh>& sh(const std::string& name) {
    static const std::vector<Sh> none;
    const std::vector<Sh>* found = sh_.find(name);
    return found == nullptr ? none : *found;
  }
  Sh array_sh(const std::string& name, size_t rank) {
    const auto& v = sh(name);
    if (v.size() == 1 && v[0].axis.size() == rank) return v[0];
    return whole(rank);
  }
  const Shape* global_shape(const std::string& name) const { return global_.find(name); }

  std::string fresh(const std::string& base, std::string_view what) {
    for (;;) {
      std::string n = fmt::format("{}.spmd_{}{}", base, what, counter_++);
      if (names_.insert(n).second) return n;
    }
  }

  // Emits the collectives and slices that turn `value` (held as `have`) into `want` before `reader`.
  std::string reshard(const std::string& value, Sh have, const Sh& want, const HloInstruction& reader) {
    if (have == want) return value;
    const Shape* global = global_shape(value);
    if (global == nullptr || global->is_tuple() || have.axis.size() != global->dims.size() ||
        want.axis.size() != global->dims.size())
      return value;
    // A sum is made once for all its readers; a gather once per reader, as XLA's partitioner reshards each
    // use (collectives carry channel ids, which HloCSE does not merge: the compiled cpu8_gpt_fsdp8 gathers
    // each weight twice, for the forward and the backward pass).
    std::string cur = value;
    auto emit = [&](HloOpcode op, std::string_view what, const Sh& to, std::vector<int64_t> dims) {
      HloInstruction c;
      c.name = fresh(value, what);
      c.opcode = op;
      c.shape = local(*global, to);
      c.operands = {cur};
      c.dimensions = std::move(dims);
      c.op_name = reader.op_name;
      c.line = reader.line;
      cur = c.name;
      out_.push_back(std::move(c));
      have = to;
    };
    if (have.partial != 0) {
      // The sum over the devices: scattered along a dimension the reader wants split by a summed axis.
      const std::string key = value + "|" + key_of(want);
      if (auto it = sums_.find(key); it != sums_.end()) {
        cur = it->second.first;
        have = it->second.second;
      }
    }
    if (have.partial != 0) {
      int scatter_dim = -1;
      for (size_t d = 0; d < want.axis.size(); ++d)
        if (want.axis[d] != kWhole && have.axis[d] == kWhole && ((have.partial >> want.axis[d]) & 1) != 0 &&
            std::find(have.axis.begin(), have.axis.end(), want.axis[d]) == have.axis.end()) {
          scatter_dim = static_cast<int>(d);
          break;
        }
      const uint64_t rest =
          scatter_dim < 0 ? have.partial : have.partial & ~(uint64_t{1} << want.axis[scatter_dim]);
      if (rest != 0) {
        Sh to = have;
        to.partial &= ~rest;
        emit(HloOpcode::kAllReduce, "all_reduce", to, {});
      }
      if (scatter_dim >= 0) {
        Sh to = have;
        to.partial = 0;
        to.axis[scatter_dim] = want.axis[scatter_dim];
        emit(HloOpcode::kReduceScatter, "reduce_scatter", to, {scatter_dim});
      }
      sums_[value + "|" + key_of(want)] = {cur, have};
    }
    Sh gathered = have;
    std::vector<int64_t> gather_dims;
    // A broadcast is made again from its operand, resharded: XLA gathers a bias, not the activation-sized
    // broadcast of it (sharding propagation shards the broadcast like its reader).
    if (have.partial == 0) {
      auto at = placed_.find(value);
      if (at != placed_.end() && out_[at->second].opcode == HloOpcode::kBroadcast &&
          out_[at->second].operands.size() == 1) {
        const HloInstruction b = out_[at->second];
        const Shape* os = global_shape(b.operands[0]);
        if (os != nullptr && !os->is_tuple() && b.dimensions.size() == os->dims.size()) {
          Sh operand_want = whole(os->dims.size());
          for (size_t k = 0; k < b.dimensions.size(); ++k) {
            const auto d = static_cast<size_t>(b.dimensions[k]);
            if (d < want.axis.size() && os->dims[k] == global->dims[d]) operand_want.axis[k] = want.axis[d];
          }
          const std::string operand =
              reshard(b.operands[0], array_sh(b.operands[0], os->dims.size()), operand_want, reader);
          HloInstruction c = b;
          c.name = fresh(value, "broadcast");
          c.shape = local(*global, want);
          c.operands = {operand};
          c.op_name = reader.op_name;
          c.line = reader.line;
          c.is_root = false;
          cur = c.name;
          placed_[cur] = out_.size();
          out_.push_back(std::move(c));
          return cur;
        }
      }
    }
    for (size_t d = 0; d < have.axis.size(); ++d)
      if (have.axis[d] != kWhole && have.axis[d] != want.axis[d]) {
        gathered.axis[d] = kWhole;
        gather_dims.push_back(static_cast<int64_t>(d));
      }
    if (!gather_dims.empty()) {
      emit(HloOpcode::kAllGather, "all_gather", gathered, gather_dims);
      // A weight's gather runs shortly before the op that reads it: XLA's latency-hiding scheduler overlaps
      // it with the work just before and caps the collectives in flight. Its only operand is a parameter,
      // ready from the start, so memory's list scheduler would start every weight's gather at once; it is
      // tied to the reader's other operands (read there anyway: no value lives longer) to keep it near.
      if (weights_.contains(value)) {
        HloInstruction& g = out_.back();
        for (const std::string& o : reader.operands)
          if (o != value && global_.contains(o) && !global_shape(o)->is_tuple() && !weights_.contains(o))
            g.operands.push_back(o);
      }
    }
    if (!(have == want)) emit(HloOpcode::kSlice, "slice", resolved(want), {});  // each device's share
    return cur;
  }

  // The sharding of a split array of `rank` that an elementwise op combines with element k of loop `loop`'s
  // results, within six elementwise steps of it; none when there is none. Six: an optimizer reaches the
  // parameter or its moment from an accumulated gradient in three (the mean's divide, the moment's product
  // and sum: adam, adamw, sgd's product with the rate), a cast in and out of mixed precision adds two.
  std::optional<Sh> split_read_beside(const std::string& loop, size_t k, size_t rank) {
    std::vector<std::string> frontier;
    for (uint32_t u : readers_[loop])
      if (readers_all_[u].op == HloOpcode::kGetTupleElement &&
          readers_all_[u].tuple_index == static_cast<int64_t>(k))
        frontier.push_back(readers_all_[u].name);
    for (int depth = 0; depth < 6 && !frontier.empty(); ++depth) {
      std::vector<std::string> next;
      for (const std::string& v : frontier) {
        for (uint32_t u : readers_[v]) {
          const Reader& r = readers_all_[u];
          const Role role = role_of(r.op);
          if ((role != Role::kCheap && role != Role::kExpensive) || r.rank != rank) continue;
          for (const std::string& o : r.operands) {
            if (o == v) continue;
            const Shape* os = global_shape(o);  // null: not placed yet (split_of looks further)
            if (os != nullptr && (os->is_tuple() || os->dims.size() != rank)) continue;
            if (auto split = split_of(o, rank, 3)) return split;
          }
          next.push_back(r.name);
        }
      }
      frontier = std::move(next);
    }
    return std::nullopt;
  }

  // A value the loop carries unchanged (the body returns it as it came) and the body reads beside a split
  // value of its rank in an elementwise op - a scan's attention mask, broadcast to the whole batch before
  // the loop and read by the select beside the batch-split scores - is carried split like it: XLA's
  // sharding propagation also runs backward from readers, and splits the broadcast. `body` is the body as the
  // trial partitioned it.
  void split_invariants_by_their_readers(const HloComputation& body, std::vector<Sh>& carried) {
    const HloInstruction* root = body.root();
    const HloInstruction* param = nullptr;
    for (const HloInstruction& x : body.instructions)
      if (x.opcode == HloOpcode::kParameter) param = &x;
    if (root == nullptr || param == nullptr || root->operands.size() != carried.size()) return;
    std::unordered_map<std::string, size_t> element_of;  // get-tuple-element of the parameter -> index
    for (const HloInstruction& x : body.instructions)
      if (x.opcode == HloOpcode::kGetTupleElement && x.operands.size() == 1 && x.operands[0] == param->name &&
          x.tuple_index >= 0 && static_cast<size_t>(x.tuple_index) < carried.size())
        element_of.emplace(x.name, static_cast<size_t>(x.tuple_index));
    // What the trial read of such an element: the element itself, or the share reshard() sliced out of it
    // for a split reader (a slice; a dynamic-slice is the program's own, a layer of a stack).
    std::unordered_map<std::string, size_t> read_of = element_of;
    for (const HloInstruction& x : body.instructions)
      if (x.opcode == HloOpcode::kSlice && !x.operands.empty())
        if (auto e = element_of.find(x.operands[0]); e != element_of.end())
          read_of.emplace(x.name, e->second);
    for (const HloInstruction& y : body.instructions) {
      const Role role = role_of(y.opcode);
      if (role != Role::kCheap && role != Role::kExpensive) continue;
      for (const std::string& o : y.operands) {
        auto e = read_of.find(o);
        if (e == read_of.end()) continue;
        const size_t k = e->second;
        auto back = element_of.find(root->operands[k]);
        if (back == element_of.end() || back->second != k || carried[k].split()) continue;  // not unchanged
        const size_t rank = carried[k].axis.size();
        if (y.shape.is_tuple() || y.shape.dims.size() != rank) continue;
        for (const std::string& other : y.operands) {
          if (other == o) continue;
          const auto& have = sh(other);
          if (have.size() == 1 && have[0].axis.size() == rank && have[0].split()) {
            carried[k] = resolved(have[0]);
            break;
          }
        }
      }
    }
  }

  // How value `name` of `rank` is split: as placed, else (not placed yet) as the entry parameter it is or
  // that an elementwise op of it within `depth` steps reads says. None when whole or not known.
  std::optional<Sh> split_of(const std::string& name, size_t rank, int depth) {
    const auto& have = sh(name);
    if (have.size() == 1 && have[0].axis.size() == rank)
      return have[0].axis == whole(rank).axis ? std::nullopt : std::optional<Sh>(resolved(have[0]));
    auto at = reader_index_.find(name);
    if (at == reader_index_.end() || depth == 0) return std::nullopt;
    const Reader& r = readers_all_[at->second];
    if (r.op == HloOpcode::kParameter) {
      auto g = given_parameters_.find(name);
      if (g == given_parameters_.end() || !g->second.split()) return std::nullopt;
      return g->second;
    }
    const Role role = role_of(r.op);
    if ((role != Role::kCheap && role != Role::kExpensive) || r.rank != rank) return std::nullopt;
    for (const std::string& o : r.operands) {
      const Shape* os = global_shape(o);
      if (os != nullptr && (os->is_tuple() || os->dims.size() != rank)) continue;
      if (auto split = split_of(o, rank, depth - 1)) return split;
    }
    return std::nullopt;
  }

  // The tuple `tuple` (held as `have`) rebuilt with its elements resharded to `want`, before `reader`.
  std::string retuple(const std::string& tuple, const std::vector<Sh>& have, const std::vector<Sh>& want,
                      const HloInstruction& reader) {
    auto at = placed_.find(tuple);
    if (at == placed_.end() || out_[at->second].opcode != HloOpcode::kTuple) return tuple;
    HloInstruction t = out_[at->second];
    if (t.operands.size() != want.size()) return tuple;
    Shape global = *global_shape(tuple);
    for (size_t k = 0; k < want.size(); ++k) {
      t.operands[k] = reshard(t.operands[k], have[k], want[k], reader);
      if (k < t.shape.elements.size() && k < global.elements.size())
        t.shape.elements[k] = local(global.elements[k], want[k]);
    }
    t.name = fresh(tuple, "tuple");
    t.is_root = false;
    t.line = reader.line;
    global_[t.name] = global;
    sh_[t.name] = want;
    placed_[t.name] = out_.size();
    const std::string name = t.name;
    out_.push_back(std::move(t));
    return name;
  }

  // Whether a tuple's reader runs whole on every device (so the tuple's elements are read whole).
  bool read_whole(const HloInstruction& tuple) {
    for (HloOpcode u : users_[tuple.name])
      if (u != HloOpcode::kGetTupleElement && u != HloOpcode::kOptimizationBarrier &&
          u != HloOpcode::kTuple && u != HloOpcode::kWhile)
        return true;
    return false;
  }

  void note(std::string what) { notes_.insert(std::move(what)); }

  Rule decide(HloInstruction& x) {
    Rule r;
    const size_t n = x.operands.size();
    r.want.assign(n, std::nullopt);
    const Shape& s = x.shape;
    auto op_shape = [&](size_t k) -> const Shape* { return global_shape(x.operands[k]); };
    auto op_sh = [&](size_t k) {
      const Shape* os = op_shape(k);
      return array_sh(x.operands[k], os == nullptr || os->is_tuple() ? 0 : os->dims.size());
    };
    auto all_whole = [&](std::string_view why) {
      bool any = false;
      for (size_t k = 0; k < n; ++k) {
        const Shape* os = op_shape(k);
        if (os == nullptr || os->is_tuple()) continue;
        any = any || op_sh(k).split();
        r.want[k] = whole(os->dims.size());
      }
      if (s.is_tuple())
        for (const Shape& e : s.elements) r.out.push_back(whole(e.is_tuple() ? 0 : e.dims.size()));
      else
        r.out.push_back(whole(s.dims.size()));
      if (any) note(fmt::format("{} runs whole on every device (memfit does not partition it)", why));
      return r;
    };

    switch (x.opcode) {
      case HloOpcode::kParameter: {
        if (loop_params_ != nullptr) {  // a loop's tuple, held as the loop's operand is
          if (s.is_tuple() && loop_params_->size() == s.elements.size()) {
            r.out = *loop_params_;
          } else if (s.is_tuple()) {
            for (const Shape& e : s.elements) r.out.push_back(whole(e.is_tuple() ? 0 : e.dims.size()));
          } else {
            r.out.push_back(whole(s.dims.size()));
          }
          return r;
        }
        if (s.is_tuple()) {
          for (size_t k = 0; k < s.elements.size(); ++k)
            r.out.push_back(given(x, k, s.elements[k]).value_or(whole(s.elements[k].dims.size())));
        } else {
          r.out.push_back(given(x, 0, s).value_or(whole(s.dims.size())));
        }
        return r;
      }
      case HloOpcode::kConstant:
      case HloOpcode::kIota:
        r.out.push_back(whole(s.is_tuple() ? 0 : s.dims.size()));
        return r;
      case HloOpcode::kTuple: {
        const bool whole_reader = read_whole(x);
        for (size_t k = 0; k < n; ++k) {
          const Shape* os = op_shape(k);
          if (os == nullptr || os->is_tuple()) {
            r.out.push_back(whole(0));
            continue;
          }
          Sh w = whole_reader ? whole(os->dims.size()) : resolved(op_sh(k));
          if (x.is_root && root_want_ != nullptr && k < root_want_->size() &&
              (*root_want_)[k].axis.size() == os->dims.size())
            w = (*root_want_)[k];
          else if (x.is_root)
            if (auto g = given(x, k, *os)) w = *g;
          r.want[k] = w;
          r.out.push_back(w);
        }
        if (whole_reader && std::any_of(x.operands.begin(), x.operands.end(), [&](const std::string& o) {
              const Shape* os = global_shape(o);
              return os != nullptr && !os->is_tuple() && array_sh(o, os->dims.size()).split();
            }))
          note(
              "a loop's (or call's) values are held whole on every device (memfit does not partition "
              "inside loops)");
        return r;
      }
      case HloOpcode::kGetTupleElement: {
        if (n != 1) return all_whole("a get-tuple-element");
        const auto& v = sh(x.operands[0]);
        const size_t k = static_cast<size_t>(std::max<int64_t>(x.tuple_index, 0));
        if (!s.is_tuple() && k < v.size() && v[k].axis.size() == s.dims.size())
          r.out.push_back(v[k]);
        else
          r.out.push_back(whole(s.is_tuple() ? 0 : s.dims.size()));
        return r;
      }
      case HloOpcode::kWhile: {
        // jax.lax.scan and fori_loop: the body runs on each device's share of the carried values, held
        // as the loop's operand holds them (the body's results resharded to match).
        const std::vector<Sh> init = n == 1 ? sh(x.operands[0]) : std::vector<Sh>();
        if (!s.is_tuple() || init.size() != s.elements.size()) return all_whole("a loop");
        HloComputation* body = nullptr;
        HloComputation* condition = nullptr;
        for (const std::string& c : x.called) {
          auto at = computation_.find(c);
          if (at == computation_.end()) continue;
          HloComputation& comp = m_.computations[at->second];
          const HloInstruction* root = comp.root();
          if (root != nullptr && root->shape.type == PrimitiveType::kPred && !root->shape.is_tuple())
            condition = &comp;
          else
            body = &comp;
        }
        if (body == nullptr || partitioned_.contains(body->name) ||
            (condition != nullptr && partitioned_.contains(condition->name)))
          return all_whole("a loop whose body another loop runs too");
        if (trial_) {  // a loop inside a loop being tried: taken as it comes
          r.out = init;
          return r;
        }
        // A carried value the loop starts whole but its body splits (a scan's stacked outputs, begun as
        // zeros and written a split layer at a time) is carried split: XLA's propagation splits the zeros
        // too. The body is tried once on a copy to see what it makes of each value.
        std::vector<Sh> carried = init;
        {
          HloComputation copy = *body;
          const auto saved_sums = sums_;
          const auto saved_notes = notes_;
          trial_ = true;
          Status tried = partition(copy, &init, nullptr);
          trial_ = false;
          const HloInstruction* root = copy.root();
          if (tried.ok() && root != nullptr && root->opcode == HloOpcode::kTuple &&
              root->operands.size() == init.size()) {
            for (size_t k = 0; k < init.size(); ++k) {
              const auto& got = sh(root->operands[k]);
              if (got.size() != 1 || got[0].axis.size() != init[k].axis.size()) continue;
              for (size_t d = 0; d < init[k].axis.size(); ++d) {
                const int a = got[0].axis[d];
                if (carried[k].axis[d] == kWhole && a != kWhole &&
                    std::find(carried[k].axis.begin(), carried[k].axis.end(), a) == carried[k].axis.end())
                  carried[k].axis[d] = a;
              }
            }
            split_invariants_by_their_readers(copy, carried);
          }
          sums_ = saved_sums;
          notes_ = saved_notes;
        }
        // A value the loop adds to and the step later combines with a split one (FSDP's accumulated
        // gradients, read by the update beside the split parameter) is carried split like it: XLA's
        // propagation, which also runs backward from readers, splits the accumulator's zeros.
        for (size_t k = 0; k < carried.size(); ++k)
          if (!carried[k].split())
            if (auto hint = split_read_beside(x.name, k, carried[k].axis.size())) carried[k] = *hint;
        if (!(carried == init)) x.operands[0] = retuple(x.operands[0], init, carried, x);
        partitioned_.insert(body->name);
        if (condition != nullptr) partitioned_.insert(condition->name);
        status_ = partition(*body, &carried, &carried);
        if (status_.ok() && condition != nullptr) status_ = partition(*condition, &carried, nullptr);
        r.out = carried;
        return r;
      }
      case HloOpcode::kOptimizationBarrier: {
        if (n == 1 && s.is_tuple() && sh(x.operands[0]).size() == s.elements.size()) {
          r.out = sh(x.operands[0]);
          return r;
        }
        if (n == 1 && !s.is_tuple()) {
          r.out.push_back(resolved(op_sh(0)));
          r.want[0] = r.out[0];
          return r;
        }
        return all_whole("an optimization barrier");
      }
      default:
        break;
    }
    if (x.opcode == HloOpcode::kCustomCall && x.custom_call_target.starts_with("__cudnn$fmha"))
      return batched_kernel(x, r);
    if (s.is_tuple() || n == 0) return all_whole(fmt::format("a {}", x.opcode_name()));
    const size_t rank = s.dims.size();
    for (size_t k = 0; k < n; ++k)
      if (op_shape(k) == nullptr || op_shape(k)->is_tuple())
        return all_whole(fmt::format("a {}", x.opcode_name()));

    // shard_map's manual region: its values are each device's already (SPMDFullToShardShape's result has
    // the share's shape); SPMDShardToFullShape returns to the program, split as it says (else along the
    // dimensions it widens, by an axis of its own).
    if (x.opcode == HloOpcode::kCustomCall && n == 1 &&
        (x.custom_call_target == "SPMDFullToShardShape" ||
         x.custom_call_target == "xla.sdy.GlobalToLocalShape")) {
      r.want[0] = resolved(op_sh(0));
      r.out.push_back(whole(rank));
      return r;
    }
    if (x.opcode == HloOpcode::kCustomCall && n == 1 &&
        (x.custom_call_target == "SPMDShardToFullShape" ||
         x.custom_call_target == "xla.sdy.LocalToGlobalShape")) {
      const Shape& os = *op_shape(0);
      r.want[0] = resolved(op_sh(0));
      Sh out = given(x, 0, s).value_or(whole(rank));
      if (!out.split() && os.dims.size() == rank)
        for (size_t d = 0; d < rank; ++d)
          if (os.dims[d] > 0 && s.dims[d] > os.dims[d])
            out.axis[d] = axis_id(fmt::format("manual{}:{}", d, s.dims[d] / os.dims[d]),
                                  (s.dims[d] + os.dims[d] - 1) / os.dims[d]);
      r.out.push_back(out);
      return r;
    }
    if (is_sharding_call(x) && n == 1) {
      Sh g = given(x, 0, s).value_or(resolved(op_sh(0)));
      r.want[0] = g;
      r.out.push_back(g);
      return r;
    }
    switch (x.opcode) {
      case HloOpcode::kBroadcast: {
        const Shape& os = *op_shape(0);
        if (x.dimensions.size() != os.dims.size()) return all_whole("a broadcast");
        Sh in = resolved(op_sh(0));
        Sh out = whole(rank);
        for (size_t k = 0; k < x.dimensions.size(); ++k) {
          const auto d = static_cast<size_t>(x.dimensions[k]);
          if (d >= rank || os.dims[k] != s.dims[d]) {
            in.axis[k] = kWhole;
            continue;
          }
          out.axis[d] = in.axis[k];
        }
        r.want[0] = in;
        r.out.push_back(out);
        return r;
      }
      case HloOpcode::kTranspose: {
        if (x.dimensions.size() != rank || op_shape(0)->dims.size() != rank) return all_whole("a transpose");
        Sh in = resolved(op_sh(0));
        Sh out = whole(rank);
        for (size_t d = 0; d < rank; ++d) {
          const auto p = static_cast<size_t>(x.dimensions[d]);
          if (p >= rank) return all_whole("a transpose");
          out.axis[d] = in.axis[p];
        }
        r.want[0] = in;
        r.out.push_back(out);
        return r;
      }
      case HloOpcode::kReshape:
      case HloOpcode::kBitcast: {
        if (n != 1) return all_whole(fmt::format("a {}", x.opcode_name()));
        if (op_shape(0)->dims != s.dims) return reshape(x, r);
        r.want[0] = resolved(op_sh(0));
        r.out.push_back(*r.want[0]);
        return r;
      }
      case HloOpcode::kDot:
        return dot(x, r);
      case HloOpcode::kReduce: {
        if (n != 2) return all_whole("a variadic reduce");
        Sh in = resolved(op_sh(0));
        const Shape& os = *op_shape(0);
        std::vector<bool> reduced(os.dims.size(), false);
        for (int64_t d : x.dimensions)
          if (d >= 0 && static_cast<size_t>(d) < reduced.size()) reduced[static_cast<size_t>(d)] = true;
        Sh out = whole(rank);
        size_t kept = 0;
        for (size_t d = 0; d < os.dims.size(); ++d) {
          if (reduced[d]) {
            if (in.axis[d] != kWhole) out.partial |= uint64_t{1} << in.axis[d];
          } else if (kept < rank) {
            out.axis[kept++] = in.axis[d];
          }
        }
        if (kept != rank) return all_whole("a reduce");
        r.want[0] = in;
        r.want[1] = whole(op_shape(1)->dims.size());
        r.out.push_back(out);
        return r;
      }
      case HloOpcode::kGather:
        if (n != 2) return all_whole("a gather");
        return gather(x, r);
      case HloOpcode::kScatter:
        if (n != 3) return all_whole("a variadic scatter");
        return scatter(x, r);
      case HloOpcode::kConvolution: {
        // Without its dimension labels, the batch-leading layout JAX's NHWC convolutions use: a result as
        // long as the input in its leading dimension is split like it (the forward convolution and the
        // input's gradient); a kernel's gradient, which sums over that dimension of both operands, is each
        // device's partial sum. The kernel is read whole.
        if (n != 2) return all_whole("a convolution");
        const Shape& a = *op_shape(0);
        const Shape& b = *op_shape(1);
        const int batch = a.dims.empty() ? kWhole : op_sh(0).axis[0];
        Sh wa = whole(a.dims.size()), wb = whole(b.dims.size());
        Sh out = whole(rank);
        if (batch != kWhole && rank == a.dims.size() && s.dims[0] == a.dims[0]) {
          out.axis[0] = wa.axis[0] = batch;
        } else if (batch != kWhole && !b.dims.empty() && b.dims[0] == a.dims[0]) {
          wa.axis[0] = wb.axis[0] = batch;
          out.partial = uint64_t{1} << batch;
        } else if (op_split(x, 0) || op_split(x, 1)) {
          note("a convolution split other than by its leading dimension runs whole on every device");
        }
        r.want[0] = wa;
        r.want[1] = wb;
        r.out.push_back(out);
        return r;
      }
      case HloOpcode::kSlice:
      case HloOpcode::kDynamicSlice:
      case HloOpcode::kPad:
      case HloOpcode::kReduceWindow:  // pooling: split where the window leaves the size (batch, channels)
      case HloOpcode::kReverse: {
        const Shape& os = *op_shape(0);
        if (os.dims.size() != rank) return all_whole(fmt::format("a {}", x.opcode_name()));
        Sh in = resolved(op_sh(0));
        for (size_t d = 0; d < rank; ++d) {
          const bool reversed =
              x.opcode == HloOpcode::kReverse && std::find(x.dimensions.begin(), x.dimensions.end(),
                                                           static_cast<int64_t>(d)) != x.dimensions.end();
          // A slice of a split dimension stays split when each share of the result is whole elements of
          // it (jnp.split of a column-split qkv projection): each device takes its share of the slice, which
          // XLA's partitioner realigns by exchanging halos (collective-permutes of a share's size, not
          // modeled as buffers).
          const bool sliced_alike = x.opcode == HloOpcode::kSlice && in.axis[d] != kWhole &&
                                    s.dims[d] % parts(in.axis[d]) == 0 && os.dims[d] % parts(in.axis[d]) == 0;
          if ((os.dims[d] != s.dims[d] && !sliced_alike) || reversed) in.axis[d] = kWhole;
        }
        r.want[0] = in;
        for (size_t k = 1; k < n; ++k) r.want[k] = whole(op_shape(k)->dims.size());
        r.out.push_back(in);
        return r;
      }
      case HloOpcode::kConcatenate:
      case HloOpcode::kDynamicUpdateSlice: {
        // The dimensions whose sizes differ between the pieces are held whole; the rest merged.
        const size_t pieces = x.opcode == HloOpcode::kConcatenate ? n : std::min<size_t>(n, 2);
        std::vector<bool> fixed(rank, false);
        for (size_t k = 0; k < pieces; ++k) {
          const Shape& os = *op_shape(k);
          if (os.dims.size() != rank) return all_whole(fmt::format("a {}", x.opcode_name()));
          for (size_t d = 0; d < rank; ++d) fixed[d] = fixed[d] || os.dims[d] != s.dims[d];
        }
        Sh out = merge(x, pieces, rank);
        for (size_t d = 0; d < rank; ++d) {
          if (!fixed[d]) continue;
          // Pieces split alike along the joined dimension, each in whole shares, stay split (the transpose
          // of a slice kept split above).
          bool alike = x.opcode == HloOpcode::kConcatenate && out.axis[d] != kWhole;
          for (size_t k = 0; k < pieces && alike; ++k)
            alike = array_sh(x.operands[k], rank).axis[d] == out.axis[d] &&
                    global_shape(x.operands[k])->dims[d] % parts(out.axis[d]) == 0;
          if (!alike) out.axis[d] = kWhole;
        }
        for (size_t k = 0; k < n; ++k) r.want[k] = k < pieces ? out : whole(op_shape(k)->dims.size());
        r.out.push_back(out);
        return r;
      }
      default:
        break;
    }
    // Elementwise: every operand of the result's shape read with one merged sharding, scalars whole.
    const Role role = role_of(x.opcode);
    if (role != Role::kCheap && role != Role::kExpensive && x.opcode != HloOpcode::kCustomCall)
      return all_whole(fmt::format("a {}", x.opcode_name()));
    if (x.opcode == HloOpcode::kCustomCall)
      return all_whole(fmt::format("a custom call ({})", x.custom_call_target));
    for (size_t k = 0; k < n; ++k) {
      const Shape& os = *op_shape(k);
      if (!os.dims.empty() && os.dims != s.dims) return all_whole(fmt::format("a {}", x.opcode_name()));
    }
    Sh out = merge(x, n, rank);
    for (size_t k = 0; k < n; ++k) r.want[k] = op_shape(k)->dims.empty() ? whole(0) : out;
    r.out.push_back(out);
    return r;
  }

  // One sharding for operands [0, count) of the result's rank: each dimension split by the first operand
  // (largest first) that splits it with an axis no other dimension took.
  Sh merge(const HloInstruction& x, size_t count, size_t rank) {
    std::vector<size_t> order;
    for (size_t k = 0; k < count; ++k) {
      const Shape* os = global_shape(x.operands[k]);
      if (os != nullptr && os->dims.size() == rank) order.push_back(k);
    }
    // A weight (or a broadcast of one) goes last: XLA's propagation splits the activations by batch and
    // gathers what they are combined with - a layer norm's scale, FSDP-split along the features, would
    // otherwise split the activations it scales by feature instead of by batch.
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      const bool wa = weights_.contains(x.operands[a]), wb = weights_.contains(x.operands[b]);
      if (wa != wb) return wb;
      return global_shape(x.operands[a])->leaf_bytes() > global_shape(x.operands[b])->leaf_bytes();
    });
    std::vector<const Sh*> held;
    for (size_t k : order) {
      const auto& v = sh(x.operands[k]);
      if (v.size() == 1 && v[0].axis.size() == rank) held.push_back(&v[0]);
    }
    Sh out = whole(rank);
    for (size_t d = 0; d < rank; ++d) {
      for (const Sh* h : held) {
        const int a = h->axis[d];
        if (a == kWhole || std::find(out.axis.begin(), out.axis.end(), a) != out.axis.end()) continue;
        out.axis[d] = a;
        break;
      }
    }
    return out;
  }

  // A reshape keeps a split on the major dimension of each group of dimensions it regroups (equal
  // products of sizes) when the split divides the new major dimension; else the operand is read whole
  // along that group.
  Rule reshape(const HloInstruction& x, Rule& r) {
    const std::vector<uint64_t>& in = global_shape(x.operands[0])->dims;
    const std::vector<uint64_t>& out_dims = x.shape.dims;
    Sh have = resolved(array_sh(x.operands[0], in.size()));
    Sh out = whole(out_dims.size());
    size_t i = 0, j = 0;
    while (i < in.size() || j < out_dims.size()) {
      const size_t gi = i, gj = j;
      uint64_t pi = 1, pj = 1;
      if (i < in.size()) pi = checked_mul(pi, in[i++]).value_or(0);
      if (j < out_dims.size()) pj = checked_mul(pj, out_dims[j++]).value_or(0);
      while (pi != pj) {
        if (pi < pj && i < in.size())
          pi = checked_mul(pi, in[i++]).value_or(0);
        else if (pj < pi && j < out_dims.size())
          pj = checked_mul(pj, out_dims[j++]).value_or(0);
        else
          break;
      }
      // The group's major dimensions past any of size 1.
      size_t mi = gi, mj = gj;
      while (mi + 1 < i && in[mi] == 1) ++mi;
      while (mj + 1 < j && out_dims[mj] == 1) ++mj;
      bool keep = pi == pj && mj < j;
      for (size_t d = gi; d < i; ++d)
        if (have.axis[d] != kWhole && (d != mi || !keep)) keep = false;
      if (keep && mi < i && have.axis[mi] != kWhole) {
        // The split lands on the group's major dimension; where that does not divide (a batch of 64 over 8
        // devices reshaped into 4 microbatches of 16), on the first that does: each device then holds
        // another set of rows, which XLA's partitioner brings about with an all-to-all of a share's size
        // (not modeled as a buffer).
        size_t target = mj;
        while (target < j && out_dims[target] % parts(have.axis[mi]) != 0) ++target;
        if (target < j)
          out.axis[target] = have.axis[mi];
        else
          keep = false;
      }
      if (!keep)
        for (size_t d = gi; d < i; ++d) have.axis[d] = kWhole;
    }
    r.want[0] = have;
    r.out.push_back(out);
    return r;
  }

  // The dimensions of `rank` not in `a` or `b`, in order.
  static std::vector<size_t> rest_of(size_t rank, const std::vector<int64_t>& a,
                                     const std::vector<int64_t>& b, int64_t also = -1) {
    std::vector<size_t> out;
    for (size_t d = 0; d < rank; ++d) {
      const auto sd = static_cast<int64_t>(d);
      if (std::find(a.begin(), a.end(), sd) == a.end() && std::find(b.begin(), b.end(), sd) == b.end() &&
          sd != also)
        out.push_back(d);
    }
    return out;
  }
  static bool in_range(const std::vector<int64_t>& v, size_t rank) {
    return std::all_of(v.begin(), v.end(),
                       [&](int64_t d) { return d >= 0 && static_cast<size_t>(d) < rank; });
  }
  // Sets dimension d of `out` to axis a unless another dimension has it; says whether it did.
  static bool take(Sh& out, size_t d, int a) {
    if (a == kWhole || std::find(out.axis.begin(), out.axis.end(), a) != out.axis.end()) return false;
    out.axis[d] = a;
    return true;
  }

  // A gather (xla/service/spmd/gather_scatter_handler.cc, simplified): the result's batch dimensions split
  // as the indices' (or the operand's batching dimensions) are, its offset dimensions as the operand's
  // where the slice takes the whole dimension; the dimensions indexed into are read whole.
  Rule gather(const HloInstruction& x, Rule& r) {
    const HloInstruction::GatherDims& g = x.gather_dims();
    const Shape& os = *global_shape(x.operands[0]);
    const Shape& is = *global_shape(x.operands[1]);
    const size_t rank = x.shape.dims.size();
    const int64_t ivd = g.index_vector_dim;
    const auto ib = rest_of(is.dims.size(), {}, {}, ivd);  // the indices' batch dimensions
    const auto ob = rest_of(rank, g.window, {});           // the result's batch dimensions
    const auto od = rest_of(os.dims.size(), g.collapsed, g.operand_batching);
    if (ivd < 0 || !in_range(g.window, rank) || !in_range(g.collapsed, os.dims.size()) ||
        !in_range(g.operand_batching, os.dims.size()) || !in_range(g.indices_batching, is.dims.size()) ||
        g.operand_batching.size() != g.indices_batching.size() || ib.size() != ob.size() ||
        od.size() != g.window.size()) {
      r.want[0] = whole(os.dims.size());
      r.want[1] = whole(is.dims.size());
      r.out.push_back(whole(rank));
      if (op_split(x, 0) || op_split(x, 1))
        note("a gather without its dimension numbers runs whole on every device");
      return r;
    }
    const Sh O = resolved(array_sh(x.operands[0], os.dims.size()));
    const Sh I = resolved(array_sh(x.operands[1], is.dims.size()));
    Sh out = whole(rank);
    Sh wo = whole(os.dims.size()), wi = whole(is.dims.size());
    for (size_t k = 0; k < ib.size(); ++k) {
      int a = I.axis[ib[k]];
      // An operand batching dimension paired with this indices dimension can give the axis too.
      for (size_t j = 0; j < g.indices_batching.size(); ++j)
        if (static_cast<size_t>(g.indices_batching[j]) == ib[k] && a == kWhole)
          a = O.axis[static_cast<size_t>(g.operand_batching[j])];
      if (!take(out, ob[k], a)) continue;
      wi.axis[ib[k]] = a;
      for (size_t j = 0; j < g.indices_batching.size(); ++j)
        if (static_cast<size_t>(g.indices_batching[j]) == ib[k])
          wo.axis[static_cast<size_t>(g.operand_batching[j])] = a;
    }
    for (size_t k = 0; k < od.size(); ++k) {
      const auto w = static_cast<size_t>(g.window[k]);
      if (x.shape.dims[w] == os.dims[od[k]] && take(out, w, O.axis[od[k]])) wo.axis[od[k]] = O.axis[od[k]];
    }
    // A dimension indexed into (a slice of one element) split by an axis the result does not use: each
    // device gathers the rows it holds, zeros elsewhere, a partial sum (XLA's gather handler for a
    // trivially sliced operand dimension: a vocabulary-split embedding or logits).
    for (int64_t c : g.collapsed) {
      const int a = O.axis[static_cast<size_t>(c)];
      if (a == kWhole || std::find(out.axis.begin(), out.axis.end(), a) != out.axis.end() ||
          ((out.partial >> a) & 1) != 0 || std::find(wo.axis.begin(), wo.axis.end(), a) != wo.axis.end())
        continue;
      wo.axis[static_cast<size_t>(c)] = a;
      out.partial |= uint64_t{1} << a;
    }
    if (O.split() && !(O == wo))
      note("a gather reads its operand whole along the dimensions it indexes (an all-gather)");
    r.want[0] = wo;
    r.want[1] = wi;
    r.out.push_back(out);
    return r;
  }

  // A scatter into a target: the target's batching dimensions split as the updates' are; each device
  // scatters its share of the other update rows, a partial sum over the axes splitting them (jnp's
  // x.at[i].add, the gradient of a gather: summed where read).
  Rule scatter(const HloInstruction& x, Rule& r) {
    const HloInstruction::GatherDims& g = x.gather_dims();
    const Shape& ts = *global_shape(x.operands[0]);
    const Shape& is = *global_shape(x.operands[1]);
    const Shape& us = *global_shape(x.operands[2]);
    const size_t rank = x.shape.dims.size();
    const int64_t ivd = g.index_vector_dim;
    const auto ib = rest_of(is.dims.size(), {}, {}, ivd);
    const auto usd = rest_of(us.dims.size(), g.window, {});  // the updates' scatter dimensions
    const auto td = rest_of(ts.dims.size(), g.collapsed, g.operand_batching);
    if (ivd < 0 || rank != ts.dims.size() || !in_range(g.window, us.dims.size()) ||
        !in_range(g.collapsed, rank) || !in_range(g.operand_batching, rank) ||
        !in_range(g.indices_batching, is.dims.size()) ||
        g.operand_batching.size() != g.indices_batching.size() || ib.size() != usd.size() ||
        td.size() != g.window.size()) {
      for (size_t k = 0; k < 3; ++k) r.want[k] = whole(global_shape(x.operands[k])->dims.size());
      r.out.push_back(whole(rank));
      if (op_split(x, 1) || op_split(x, 2))
        note("a scatter without its dimension numbers runs whole on every device");
      return r;
    }
    const Sh U = resolved(array_sh(x.operands[2], us.dims.size()));
    Sh out = whole(rank);
    Sh wu = whole(us.dims.size()), wi = whole(is.dims.size());
    const Sh I = resolved(array_sh(x.operands[1], is.dims.size()));
    for (size_t k = 0; k < usd.size(); ++k) {
      // A row dimension split by the updates or else by the indices (updates broadcast from a scalar).
      const int a = U.axis[usd[k]] != kWhole ? U.axis[usd[k]] : I.axis[ib[k]];
      if (a == kWhole) continue;
      int target = -1;  // the target's batching dimension paired with this row dimension, if any
      for (size_t j = 0; j < g.indices_batching.size(); ++j)
        if (static_cast<size_t>(g.indices_batching[j]) == ib[k])
          target = static_cast<int>(g.operand_batching[j]);
      if (target >= 0 ? !take(out, static_cast<size_t>(target), a) : ((out.partial >> a) & 1) != 0) continue;
      if (target < 0) out.partial |= uint64_t{1} << a;
      wu.axis[usd[k]] = a;
      wi.axis[ib[k]] = a;
    }
    for (size_t k = 0; k < td.size(); ++k) {
      const auto w = static_cast<size_t>(g.window[k]);
      const int a = U.axis[w];
      if (a != kWhole && us.dims[w] == ts.dims[td[k]] && ((out.partial >> a) & 1) == 0 && take(out, td[k], a))
        wu.axis[w] = a;
    }
    Sh wt = out;
    wt.partial = 0;
    r.want[0] = wt;
    r.want[1] = wi;
    r.want[2] = wu;
    r.out.push_back(out);
    return r;
  }

  bool op_split(const HloInstruction& x, size_t k) {
    const Shape* os = global_shape(x.operands[k]);
    return os != nullptr && !os->is_tuple() && array_sh(x.operands[k], os->dims.size()).split();
  }

  // cuDNN's fused attention (dot_product_attention with implementation='cudnn'): batch-parallel, as its
  // SPMD rule in JAX (jax/_src/cudnn/fused_attention_stablehlo.py) keeps q, k, v and the results split by
  // batch (and heads); each device runs the kernel on its share. Operands and results of one leading size
  // are split by the axis that splits the first operand's leading dimension; the rest is read whole.
  Rule batched_kernel(const HloInstruction& x, Rule& r) {
    const Shape& s = x.shape;
    const Shape* first = x.operands.empty() ? nullptr : global_shape(x.operands[0]);
    int axis = kWhole;
    uint64_t lead = 0;
    if (first != nullptr && !first->is_tuple() && !first->dims.empty()) {
      axis = array_sh(x.operands[0], first->dims.size()).axis[0];
      lead = first->dims[0];
    }
    auto split_lead = [&](const Shape& a) {
      Sh w = whole(a.is_tuple() ? 0 : a.dims.size());
      if (axis != kWhole && !a.is_tuple() && !a.dims.empty() && a.dims[0] == lead) w.axis[0] = axis;
      return w;
    };
    for (size_t k = 0; k < x.operands.size(); ++k) {
      const Shape* os = global_shape(x.operands[k]);
      if (os != nullptr && !os->is_tuple()) r.want[k] = split_lead(*os);
    }
    if (s.is_tuple())
      for (const Shape& e : s.elements) r.out.push_back(split_lead(e));
    else
      r.out.push_back(split_lead(s));
    return r;
  }

  Rule dot(const HloInstruction& x, Rule& r) {
    if (x.operands.size() != 2) {
      for (size_t k = 0; k < x.operands.size(); ++k)
        r.want[k] = whole(global_shape(x.operands[k])->dims.size());
      r.out.push_back(whole(x.shape.dims.size()));
      return r;
    }
    const Shape& ls = *global_shape(x.operands[0]);
    const Shape& rs = *global_shape(x.operands[1]);
    const auto& lb = x.lhs_batch_dims;
    const auto& rb = x.rhs_batch_dims;
    const auto& lc = x.lhs_contracting_dims;
    const auto& rc = x.rhs_contracting_dims;
    auto valid = [](const std::vector<int64_t>& v, size_t rank) {
      return std::all_of(v.begin(), v.end(),
                         [&](int64_t d) { return d >= 0 && static_cast<size_t>(d) < rank; });
    };
    if (x.operands.size() != 2 || lb.size() != rb.size() || lc.size() != rc.size() ||
        !valid(lb, ls.dims.size()) || !valid(lc, ls.dims.size()) || !valid(rb, rs.dims.size()) ||
        !valid(rc, rs.dims.size())) {
      for (size_t k = 0; k < x.operands.size(); ++k) {
        const Shape* os = global_shape(x.operands[k]);
        r.want[k] = whole(os->dims.size());
      }
      r.out.push_back(whole(x.shape.dims.size()));
      if (array_sh(x.operands[0], ls.dims.size()).split() || array_sh(x.operands[1], rs.dims.size()).split())
        note("a dot without its dimension numbers runs whole on every device");
      return r;
    }
    auto free_dims = [](size_t rank, const std::vector<int64_t>& b, const std::vector<int64_t>& c) {
      std::vector<size_t> f;
      for (size_t d = 0; d < rank; ++d)
        if (std::find(b.begin(), b.end(), static_cast<int64_t>(d)) == b.end() &&
            std::find(c.begin(), c.end(), static_cast<int64_t>(d)) == c.end())
          f.push_back(d);
      return f;
    };
    const auto lf = free_dims(ls.dims.size(), lb, lc);
    const auto rf = free_dims(rs.dims.size(), rb, rc);
    if (lb.size() + lf.size() + rf.size() != x.shape.dims.size()) {
      r.want[0] = whole(ls.dims.size());
      r.want[1] = whole(rs.dims.size());
      r.out.push_back(whole(x.shape.dims.size()));
      return r;
    }
    Sh L = resolved(array_sh(x.operands[0], ls.dims.size()));
    Sh R = resolved(array_sh(x.operands[1], rs.dims.size()));
    // Which operand gives up a split the other needs: a weight (a parameter as read, cast or transposed)
    // beside an activation, as FSDP's weights are gathered; else the smaller, the right one on a tie
    // (x @ W: the weight).
    const bool lhs_weight = weights_.contains(x.operands[0]), rhs_weight = weights_.contains(x.operands[1]);
    const bool lhs_smaller = lhs_weight != rhs_weight ? lhs_weight : ls.leaf_bytes() < rs.leaf_bytes();
    Sh out;
    for (int round = 0; round < 16; ++round) {
      out = whole(x.shape.dims.size());
      // Two axes on one pair of dimensions: the smaller operand is read whole along its dimension.
      auto give_up = [&](size_t lhs_dim, size_t rhs_dim) {
        if (lhs_smaller)
          L.axis[lhs_dim] = kWhole;
        else
          R.axis[rhs_dim] = kWhole;
      };
      bool changed = false;
      size_t o = 0;
      for (size_t k = 0; k < lb.size(); ++k, ++o) {
        const auto a = L.axis[static_cast<size_t>(lb[k])], b = R.axis[static_cast<size_t>(rb[k])];
        if (a != kWhole && b != kWhole && a != b) {
          give_up(static_cast<size_t>(lb[k]), static_cast<size_t>(rb[k]));
          changed = true;
        }
        out.axis[o] = a != kWhole ? a : b;
      }
      for (size_t d : lf) out.axis[o++] = L.axis[d];
      for (size_t d : rf) out.axis[o++] = R.axis[d];
      for (size_t k = 0; k < lc.size(); ++k) {
        const auto a = L.axis[static_cast<size_t>(lc[k])], b = R.axis[static_cast<size_t>(rc[k])];
        if (a != kWhole && b != kWhole && a != b) {
          give_up(static_cast<size_t>(lc[k]), static_cast<size_t>(rc[k]));
          changed = true;
        }
        const int p = a != kWhole ? a : b;
        if (p != kWhole) out.partial |= uint64_t{1} << p;
      }
      if (changed) continue;
      // An axis used twice (two result dimensions, or a result dimension and a sum): the smaller operand
      // is gathered along it.
      std::map<int, int> uses;
      for (int a : out.axis)
        if (a != kWhole) ++uses[a];
      for (size_t a = 0; a < kMostAxes; ++a)
        if ((out.partial >> a) & 1) ++uses[static_cast<int>(a)];
      int twice = kWhole;
      for (const auto& [a, count] : uses)
        if (count > 1) twice = a;
      if (twice == kWhole) break;
      Sh& smaller = lhs_smaller ? L : R;
      Sh& larger = lhs_smaller ? R : L;
      bool dropped = false;
      for (int& a : smaller.axis)
        if (a == twice) {
          a = kWhole;
          dropped = true;
        }
      if (!dropped)
        for (int& a : larger.axis)
          if (a == twice) {
            a = kWhole;
            break;
          }
    }
    // Contracting dimensions: both operands read split by the summed axis (one held whole is sliced).
    for (size_t k = 0; k < lc.size(); ++k) {
      const auto li = static_cast<size_t>(lc[k]), ri = static_cast<size_t>(rc[k]);
      const int p = L.axis[li] != kWhole ? L.axis[li] : R.axis[ri];
      L.axis[li] = R.axis[ri] = p;
    }
    for (size_t k = 0; k < lb.size(); ++k)
      L.axis[static_cast<size_t>(lb[k])] = R.axis[static_cast<size_t>(rb[k])] = out.axis[k];
    r.want[0] = L;
    r.want[1] = R;
    r.out.push_back(out);
    return r;
  }

  Status place(HloInstruction x) {
    if (!status_.ok()) return status_;
    for (std::string& o : x.operands)
      if (auto f = forward_.find(o); f != forward_.end()) o = f->second;
    global_[x.name] = x.shape;
    // A weight as read: an entry parameter, or a cast, transpose, reshape, copy or broadcast of one.
    if ((x.opcode == HloOpcode::kParameter && loop_params_ == nullptr && !x.shape.is_tuple()) ||
        ((x.opcode == HloOpcode::kConvert || x.opcode == HloOpcode::kTranspose ||
          x.opcode == HloOpcode::kReshape || x.opcode == HloOpcode::kBitcast ||
          x.opcode == HloOpcode::kCopy || x.opcode == HloOpcode::kBroadcast) &&
         x.operands.size() == 1 && weights_.contains(x.operands[0])))
      weights_.insert(x.name);
    Rule r = decide(x);
    if (!status_.ok()) return status_;
    for (size_t k = 0; k < x.operands.size() && k < r.want.size(); ++k) {
      if (!r.want[k]) continue;
      const Shape* os = global_shape(x.operands[k]);
      if (os == nullptr || os->is_tuple()) continue;
      x.operands[k] = reshard(x.operands[k], array_sh(x.operands[k], os->dims.size()), *r.want[k], x);
    }
    if (x.shape.is_tuple()) {
      for (size_t k = 0; k < x.shape.elements.size() && k < r.out.size(); ++k)
        if (!x.shape.elements[k].is_tuple()) x.shape.elements[k] = local(x.shape.elements[k], r.out[k]);
    } else if (!r.out.empty()) {
      x.shape = local(x.shape, r.out[0]);
    }
    // A sharding annotation's operand now holds what it says: readers read that (XLA's partitioner leaves
    // no instruction for it; a bitcast left between would keep the reshard from fusing into them).
    if (is_sharding_call(x) && x.operands.size() == 1 && !x.is_root && !r.out.empty() &&
        !x.shape.is_tuple() && global_.contains(x.operands[0]) &&
        global_[x.operands[0]].dims == x.shape.dims) {
      sh_[x.name] = std::move(r.out);
      forward_[x.name] = x.operands[0];
      return ok_status();
    }
    const bool root_array = x.is_root && !x.shape.is_tuple();
    const std::string name = x.name;
    std::optional<Sh> root_want;
    if (root_array && !r.out.empty()) {
      const Shape global = global_[name];
      root_want = given(x, 0, global).value_or(resolved(r.out[0]));
    }
    sh_[name] = std::move(r.out);
    // Only broadcasts (remade from their operand) and tuples (rebuilt for a loop) are looked for again.
    if (x.opcode == HloOpcode::kBroadcast || x.opcode == HloOpcode::kTuple) placed_[name] = out_.size();
    out_.push_back(std::move(x));
    // A result returned with a sharding other than the one it was computed with.
    if (root_want && !(sh_[name][0] == *root_want)) {
      const size_t at = out_.size() - 1;
      const std::string moved = reshard(name, sh_[name][0], *root_want, out_[at]);
      if (moved != name) {
        out_[at].is_root = false;
        for (HloInstruction& y : out_)
          if (y.name == moved) y.is_root = true;
      }
    }
    return ok_status();
  }

  HloModule& m_;
  std::vector<std::pair<std::string, uint64_t>> axes_;  // token, parts
  ByName<std::vector<Sh>> sh_;
  ByName<Shape> global_;
  std::unordered_map<std::string, std::vector<HloOpcode>> users_;
  std::unordered_map<std::string, size_t> computation_;  // by name
  // Every instruction as read, for looking ahead at a value's readers (the instructions themselves move).
  struct Reader {
    std::string name;
    HloOpcode op;
    std::vector<std::string> operands;
    int64_t tuple_index;
    size_t rank;
  };
  std::vector<Reader> readers_all_;
  std::unordered_map<std::string, std::vector<uint32_t>> readers_;
  std::unordered_map<std::string, uint32_t> reader_index_;
  std::unordered_map<std::string, Sh> given_parameters_;  // the entry's, as annotated
  std::unordered_set<std::string> weights_;               // values that are a parameter as read
  std::unordered_set<std::string> partitioned_;           // loop bodies and conditions done
  const std::vector<Sh>* loop_params_ = nullptr;          // the computation being partitioned is a loop's
  const std::vector<Sh>* root_want_ = nullptr;
  Status status_ = ok_status();
  bool trial_ = false;  // a loop body tried on a copy: nested loops are not entered
  std::unordered_set<std::string> names_;
  std::unordered_map<std::string, std::pair<std::string, Sh>> sums_;  // value|want -> summed value
  std::unordered_map<std::string, size_t> placed_;        // where each broadcast and tuple is in out_
  std::unordered_map<std::string, std::string> forward_;  // an annotation -> the value it names
  std::vector<HloInstruction> out_;
  std::set<std::string> notes_;
  uint64_t counter_ = 0;
};

}  // namespace

}  // namespace memfit::xla_gpu_internal

namespace memfit {

Status partition_for_each_device(HloModule& m) {
  if (m.num_partitions <= 1 || m.partitioned) return ok_status();
  return xla_gpu_internal::Partitioner(m).run();
}

}  // namespace memfit
