#include "zoo_lowered.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <string_view>
#include <utility>

namespace memfit::zoo {
namespace {

// The jax primitive an HLO opcode comes from, as the op_name metadata of a lowered program names it.
std::string_view primitive_of(std::string_view opcode) {
  static constexpr std::pair<std::string_view, std::string_view> kNames[] = {
      {"dot", "dot_general"},
      {"multiply", "mul"},
      {"subtract", "sub"},
      {"divide", "div"},
      {"reduce", "reduce_sum"},
      {"convert", "convert_element_type"},
      {"power", "pow"},
      {"broadcast", "broadcast_in_dim"},
      {"convolution", "conv_general_dilated"},
      {"reduce-window", "reduce_window_sum"},
      {"opt-barrier", "optimization_barrier"}};
  for (const auto& [hlo, jax] : kNames)
    if (hlo == opcode) return jax;
  return opcode;
}

}  // namespace

HloInstruction LoweredEmitter::make(const Shape& shape, const char* opcode,
                                    std::vector<std::string> operands) {
  HloInstruction i;
  // "opcode.N" and "scope/primitive" appended by hand rather than by fmt::format: two strings for each of
  // a 300-layer step's 2 x 10^5 instructions, where fmt's formatting was 6.6% of a whole plan's
  // instructions (callgrind, a 48-layer bf16 ViT).
  const std::string_view op(opcode);
  char digits[24];
  char* digits_end = std::to_chars(digits, digits + sizeof digits, counter_++).ptr;
  i.name.reserve(op.size() + 1 + static_cast<size_t>(digits_end - digits));
  i.name.append(op).append(1, '.').append(std::string_view(digits, static_cast<size_t>(digits_end - digits)));
  i.set_opcode(op);
  i.shape = shape;
  i.operands = std::move(operands);
  const std::string_view primitive = primitive_of(op);
  i.op_name.reserve(op_name_.size() + 1 + primitive.size());
  i.op_name.append(op_name_).append(1, '/').append(primitive);
  i.category = category_;
  return i;
}

LoweredEmitter::V LoweredEmitter::push(HloInstruction i) {
  V v{i.name, i.shape};
  entry_.push_back(std::move(i));
  return v;
}

LoweredEmitter::V LoweredEmitter::parameter(const Shape& shape, const std::string& op_name,
                                            const std::string& category) {
  HloInstruction i = make(shape, "parameter", {});
  i.parameter_number = static_cast<int64_t>(parameters_++);
  i.op_name = op_name;
  i.category = category;
  return push(std::move(i));
}

LoweredEmitter::V LoweredEmitter::scalar(PrimitiveType type) {
  for (const auto& [t, v] : scalars_)
    if (t == type) return v;
  scalars_.emplace_back(type, push(make(array(type, {}), "constant", {})));
  return scalars_.back().second;
}

LoweredEmitter::V LoweredEmitter::splat(PrimitiveType type, const std::vector<uint64_t>& dims) {
  return broadcast(scalar(type), dims, {});
}

LoweredEmitter::V LoweredEmitter::zeros(PrimitiveType type, const std::vector<uint64_t>& dims) {
  for (const V& z : zeros_)
    if (z.shape.type == type && z.shape.dims == dims) return z;
  zeros_.push_back(splat(type, dims));
  return zeros_.back();
}

LoweredEmitter::V LoweredEmitter::broadcast(const V& x, const std::vector<uint64_t>& dims,
                                            const std::vector<int64_t>& kept) {
  HloInstruction i = make(array(x.shape.type, dims), "broadcast", {x.name});
  i.dimensions = kept;
  return push(std::move(i));
}

LoweredEmitter::V LoweredEmitter::reshape(const V& x, const std::vector<uint64_t>& dims) {
  return push(make(array(x.shape.type, dims), "reshape", {x.name}));
}

LoweredEmitter::V LoweredEmitter::transpose(const V& x, const std::vector<int64_t>& permutation) {
  std::vector<uint64_t> dims;
  for (int64_t p : permutation) dims.push_back(x.shape.dims[static_cast<size_t>(p)]);
  HloInstruction i = make(array(x.shape.type, dims), "transpose", {x.name});
  i.dimensions = permutation;
  return push(std::move(i));
}

LoweredEmitter::V LoweredEmitter::convert(const V& x, PrimitiveType type) {
  return push(make(array(type, x.shape.dims), "convert", {x.name}));
}

LoweredEmitter::V LoweredEmitter::unary(const char* opcode, const V& x) {
  return push(make(x.shape, opcode, {x.name}));
}

LoweredEmitter::V LoweredEmitter::place(const V& x, const char* placement) {
  HloInstruction i = make(x.shape, "custom-call", {x.name});
  i.custom_call_target = "annotate_device_placement";
  i.mutable_buffer_placement() = placement;
  return push(std::move(i));
}

std::vector<LoweredEmitter::V> LoweredEmitter::custom_call(const char* target, const char* primitive,
                                                           const std::vector<V>& operands,
                                                           const std::vector<Shape>& results) {
  Shape shape;
  shape.elements = results;
  std::vector<std::string> names;
  for (const V& v : operands) names.push_back(v.name);
  HloInstruction i = make(shape, "custom-call", std::move(names));
  i.custom_call_target = target;
  i.op_name = fmt::format("{}/{}", op_name_, primitive);
  return elements(push(std::move(i)));
}

LoweredEmitter::V LoweredEmitter::binary(const char* opcode, const V& a, const V& b) {
  return push(make(a.shape, opcode, {a.name, b.name}));
}

namespace {

// The k-element subsets of `from`, each in order.
void subsets(const std::vector<int64_t>& from, size_t k, size_t start, std::vector<int64_t>& cur,
             std::vector<std::vector<int64_t>>& out) {
  if (cur.size() == k) {
    out.push_back(cur);
    return;
  }
  for (size_t i = start; i < from.size(); ++i) {
    cur.push_back(from[i]);
    subsets(from, k, i + 1, cur, out);
    cur.pop_back();
  }
}

// dot_general's contracting dimensions for operands `a` and `b` (batch dimensions `batch`, the same on both)
// and result `out` (batch, a's free, b's free): the writers give only the result's shape, so the dimension
// numbers JAX would print are found from the sizes - each operand's free dimensions in order are the
// result's, contracted sizes pair up - and where sizes alone allow several (a square weight, a sequence as
// long as the model is wide), the ones JAX writes: a's last dimensions with b's first (x @ W) or, in the
// backward pass (`transposed`), b's last (dy @ W.T); else the same positions on both sides (a weight's
// gradient, contracting batch and sequence).
bool number_dot(HloInstruction& i, const Shape& a, const Shape& b, const std::vector<int64_t>& batch,
                const std::vector<int64_t>& rhs_batch, bool transposed) {
  auto rest = [&](size_t rank, const std::vector<int64_t>& of) {
    std::vector<int64_t> r;
    for (size_t d = 0; d < rank; ++d)
      if (std::find(of.begin(), of.end(), static_cast<int64_t>(d)) == of.end())
        r.push_back(static_cast<int64_t>(d));
    return r;
  };
  const std::vector<int64_t> la = rest(a.dims.size(), batch), lb = rest(b.dims.size(), rhs_batch);
  const size_t k = batch.size();
  if (rhs_batch.size() != k || i.shape.dims.size() < k || la.size() + lb.size() < i.shape.dims.size() - k)
    return false;
  const size_t twice = la.size() + lb.size() - (i.shape.dims.size() - k);
  if (twice % 2 != 0 || twice / 2 > la.size() || twice / 2 > lb.size()) return false;
  const size_t nc = twice / 2;
  std::vector<std::vector<int64_t>> ca, cb;
  std::vector<int64_t> cur;
  subsets(la, nc, 0, cur, ca);
  subsets(lb, nc, 0, cur, cb);
  auto free_match = [&](const Shape& s, const std::vector<int64_t>& all, const std::vector<int64_t>& c,
                        size_t at) {
    size_t o = at;
    for (int64_t d : all) {
      if (std::find(c.begin(), c.end(), d) != c.end()) continue;
      if (o >= i.shape.dims.size() || s.dims[static_cast<size_t>(d)] != i.shape.dims[o]) return false;
      ++o;
    }
    return true;
  };
  const std::vector<int64_t>* best_a = nullptr;
  const std::vector<int64_t>* best_b = nullptr;
  const std::vector<int64_t> a_last(la.end() - static_cast<std::ptrdiff_t>(nc), la.end());
  const std::vector<int64_t> b_end =
      transposed ? std::vector<int64_t>(lb.end() - static_cast<std::ptrdiff_t>(nc), lb.end())
                 : std::vector<int64_t>(lb.begin(), lb.begin() + static_cast<std::ptrdiff_t>(nc));
  auto rank_of = [&](const std::vector<int64_t>& x, const std::vector<int64_t>& y) {
    if (x == a_last) return y == b_end ? 0 : 1;
    return x == y ? 2 : 3;
  };
  auto better = [&](const std::vector<int64_t>& x, const std::vector<int64_t>& y) {
    if (best_a == nullptr) return true;
    return rank_of(x, y) < rank_of(*best_a, *best_b);
  };
  for (const auto& x : ca) {
    if (!free_match(a, la, x, k)) continue;
    for (const auto& y : cb) {
      if (!free_match(b, lb, y, k + la.size() - nc)) continue;
      bool pairs = true;
      for (size_t j = 0; j < nc; ++j)
        pairs = pairs && a.dims[static_cast<size_t>(x[j])] == b.dims[static_cast<size_t>(y[j])];
      if (pairs && better(x, y)) {
        best_a = &x;
        best_b = &y;
      }
    }
  }
  if (best_a == nullptr) return false;
  i.lhs_batch_dims = batch;
  i.rhs_batch_dims = rhs_batch;
  i.lhs_contracting_dims = *best_a;
  i.rhs_contracting_dims = *best_b;
  return true;
}

}  // namespace

LoweredEmitter::V LoweredEmitter::dot(const V& a, const V& b, const std::vector<uint64_t>& dims,
                                      PrimitiveType type, size_t batch_dims) {
  HloInstruction i = make(array(type, dims), "dot", {a.name, b.name});
  for (size_t d = 0; d < batch_dims; ++d) i.lhs_batch_dims.push_back(static_cast<int64_t>(d));
  number_dot(i, a.shape, b.shape, i.lhs_batch_dims, i.lhs_batch_dims,
             op_name_.find("transpose(") != std::string::npos);
  return push(std::move(i));
}

LoweredEmitter::V LoweredEmitter::batched_dot(const V& a, const V& b, const std::vector<uint64_t>& dims,
                                              PrimitiveType type,
                                              const std::vector<int64_t>& lhs_batch_dims) {
  HloInstruction i = make(array(type, dims), "dot", {a.name, b.name});
  i.lhs_batch_dims = lhs_batch_dims;
  // flax's attention einsums ('bqhd,bkhd->bhqk'): the heads and batch at the same places on both sides,
  // else (a transpose's 'bhqk,bkhd->bqhd') the first dimensions of b of their sizes that number it.
  const bool transposed = op_name_.find("transpose(") != std::string::npos;
  if (!number_dot(i, a.shape, b.shape, lhs_batch_dims, lhs_batch_dims, transposed)) {
    std::vector<int64_t> all(b.shape.dims.size()), cur;
    for (size_t d = 0; d < all.size(); ++d) all[d] = static_cast<int64_t>(d);
    std::vector<std::vector<int64_t>> choices;
    subsets(all, lhs_batch_dims.size(), 0, cur, choices);
    for (const auto& rb : choices) {
      bool sizes = true;
      for (size_t k = 0; k < rb.size() && sizes; ++k)
        sizes =
            static_cast<size_t>(lhs_batch_dims[k]) < a.shape.dims.size() &&
            b.shape.dims[static_cast<size_t>(rb[k])] == a.shape.dims[static_cast<size_t>(lhs_batch_dims[k])];
      if (sizes && number_dot(i, a.shape, b.shape, lhs_batch_dims, rb, transposed)) break;
    }
  }
  return push(std::move(i));
}

const std::string& LoweredEmitter::region(const char* opcode, PrimitiveType type) {
  for (const Region& r : regions_)
    if (r.opcode == opcode && r.type == type) return r.computation;
  HloComputation region;
  region.name = fmt::format("region_{}_{}", opcode, primitive_type_name(type));
  for (int64_t k = 0; k < 2; ++k) {
    HloInstruction p;
    p.name = fmt::format("{}.p{}", region.name, k);
    p.set_opcode("parameter");
    p.shape = array(type, {});
    p.parameter_number = k;
    region.instructions.push_back(std::move(p));
  }
  HloInstruction combine;
  combine.name = fmt::format("{}.combine", region.name);
  combine.set_opcode(opcode);
  combine.shape = array(type, {});
  combine.operands = {region.instructions[0].name, region.instructions[1].name};
  combine.is_root = true;
  region.instructions.push_back(std::move(combine));
  regions_.push_back(Region{opcode, type, region.name});
  m_.computations.push_back(std::move(region));
  return regions_.back().computation;
}

LoweredEmitter::V LoweredEmitter::reduce(const char* combiner, const V& x,
                                         const std::vector<int64_t>& reduced) {
  std::vector<uint64_t> dims;
  for (size_t d = 0; d < x.shape.dims.size(); ++d) {
    bool gone = false;
    for (int64_t r : reduced) gone = gone || static_cast<size_t>(r) == d;
    if (!gone) dims.push_back(x.shape.dims[d]);
  }
  const V init = scalar(x.shape.type);
  HloInstruction i = make(array(x.shape.type, dims), "reduce", {x.name, init.name});
  i.dimensions = reduced;
  i.called.push_back(region(combiner, x.shape.type));
  if (std::string_view(combiner) == "maximum") i.op_name = fmt::format("{}/reduce_max", op_name_);
  return push(std::move(i));
}

LoweredEmitter::V LoweredEmitter::convolution(const V& x, const V& kernel,
                                              const std::vector<uint64_t>& dims) {
  return push(make(array(x.shape.type, dims), "convolution", {x.name, kernel.name}));
}

LoweredEmitter::V LoweredEmitter::reduce_window_sum(const V& x, const std::vector<uint64_t>& dims) {
  const V init = scalar(x.shape.type);
  HloInstruction i = make(array(x.shape.type, dims), "reduce-window", {x.name, init.name});
  i.called.push_back(region("add", x.shape.type));
  return push(std::move(i));
}

LoweredEmitter::V LoweredEmitter::pad(const V& x, const std::vector<uint64_t>& dims) {
  const V zero = scalar(x.shape.type);
  return push(make(array(x.shape.type, dims), "pad", {x.name, zero.name}));
}

LoweredEmitter::V LoweredEmitter::reduce_sum(const V& x, const std::vector<int64_t>& reduced) {
  return reduce("add", x, reduced);
}

LoweredEmitter::V LoweredEmitter::reduce_max(const V& x, const std::vector<int64_t>& reduced) {
  return reduce("maximum", x, reduced);
}

LoweredEmitter::V LoweredEmitter::reduce_and(const V& x, const std::vector<int64_t>& reduced) {
  return reduce("and", x, reduced);
}

LoweredEmitter::V LoweredEmitter::compare(const V& a, const V& b) {
  return push(make(array(PrimitiveType::kPred, a.shape.dims), "compare", {a.name, b.name}));
}

LoweredEmitter::V LoweredEmitter::select(const V& predicate, const V& on_true, const V& on_false) {
  return push(make(on_true.shape, "select", {predicate.name, on_true.name, on_false.name}));
}

LoweredEmitter::V LoweredEmitter::constant(const Shape& shape) { return push(make(shape, "constant", {})); }

LoweredEmitter::V LoweredEmitter::slice(const V& x, size_t dim, uint64_t size) {
  Shape shape = x.shape;
  shape.dims[dim] = size;
  return push(make(shape, "slice", {x.name}));
}

namespace {

// jnp.take_along_axis's gather and scatter (indices one rank above the operand, [..., 1, 1]): every
// dimension but the last is a batching dimension of both, the last indexed (dimension numbers as JAX
// writes them); else a table's rows at [..., 1] indices (an embedding lookup and its transpose).
// `rows`: the gather's result, or the scatter's updates.
void number_gather(HloInstruction& i, const Shape& operand, const Shape& indices, const Shape& rows,
                   bool scatter) {
  HloInstruction::GatherDims& g = i.mutable_gather_dims();
  const auto rank = static_cast<int64_t>(operand.dims.size());
  g.index_vector_dim = static_cast<int64_t>(indices.dims.size()) - 1;
  if (indices.dims.size() == operand.dims.size() + 1 && rows.dims.size() == operand.dims.size() &&
      rank >= 1) {
    for (int64_t d = 0; d + 1 < rank; ++d) {
      g.operand_batching.push_back(d);
      g.indices_batching.push_back(d);
    }
    g.collapsed = {rank - 1};
    return;
  }
  g.collapsed = {0};
  // The width of a row: the result's (an update's) last dimension.
  g.window = {static_cast<int64_t>((scatter ? indices.dims.size() : i.shape.dims.size()) - 1)};
}

}  // namespace

LoweredEmitter::V LoweredEmitter::gather(const V& table, const V& indices) {
  std::vector<uint64_t> dims(indices.shape.dims.begin(), indices.shape.dims.end() - 1);
  dims.push_back(table.shape.dims.back());
  HloInstruction i = make(array(table.shape.type, dims), "gather", {table.name, indices.name});
  number_gather(i, table.shape, indices.shape, i.shape, false);
  return push(std::move(i));
}

LoweredEmitter::V LoweredEmitter::gather(const V& x, const V& indices, const std::vector<uint64_t>& dims) {
  HloInstruction i = make(array(x.shape.type, dims), "gather", {x.name, indices.name});
  number_gather(i, x.shape, indices.shape, i.shape, false);
  return push(std::move(i));
}

LoweredEmitter::V LoweredEmitter::all_reduce_sum(const V& x) {
  HloInstruction i = make(x.shape, "all-reduce", {x.name});
  i.called.push_back(region("add", x.shape.type));
  return push(std::move(i));
}

LoweredEmitter::V LoweredEmitter::scatter(const V& operand, const V& indices, const V& updates) {
  HloInstruction i = make(operand.shape, "scatter", {operand.name, indices.name, updates.name});
  number_gather(i, operand.shape, indices.shape, updates.shape, true);
  i.called.push_back(region("add", operand.shape.type));
  return push(std::move(i));
}

LoweredEmitter::V LoweredEmitter::concatenate(const std::vector<V>& values, size_t dim) {
  Shape shape = values.front().shape;
  shape.dims[dim] = 0;
  std::vector<std::string> names;
  for (const V& v : values) {
    shape.dims[dim] += v.shape.dims[dim];
    names.push_back(v.name);
  }
  return push(make(shape, "concatenate", std::move(names)));
}

LoweredEmitter::V LoweredEmitter::tuple(const std::vector<V>& values) {
  Shape shape;
  std::vector<std::string> names;
  for (const V& v : values) {
    shape.elements.push_back(v.shape);
    names.push_back(v.name);
  }
  return push(make(shape, "tuple", std::move(names)));
}

std::vector<LoweredEmitter::V> LoweredEmitter::elements(const V& tuple) {
  std::vector<V> out;
  for (size_t k = 0; k < tuple.shape.elements.size(); ++k) {
    HloInstruction g = make(tuple.shape.elements[k], "get-tuple-element", {tuple.name});
    g.tuple_index = static_cast<int64_t>(k);
    out.push_back(push(std::move(g)));
  }
  return out;
}

std::vector<LoweredEmitter::V> LoweredEmitter::barrier(const std::vector<V>& values) {
  const V t = tuple(values);
  return elements(push(make(t.shape, "opt-barrier", {t.name})));
}

void LoweredEmitter::root(const std::vector<V>& values) { entry_[index_of(tuple(values))].is_root = true; }

void LoweredEmitter::alias(uint64_t output, int64_t parameter) {
  HloAlias a;
  a.output_index = {output};
  a.parameter = parameter;
  m_.aliases.push_back(a);
}

void LoweredEmitter::root_array(const V& value) { entry_[index_of(value)].is_root = true; }

size_t LoweredEmitter::index_of(const V& value) const {
  for (size_t i = entry_.size(); i-- > 0;)
    if (entry_[i].name == value.name) return i;
  return entry_.size() - 1;  // unreachable: every V names an instruction written here
}

LoweredEmitter::V LoweredEmitter::dynamic_slice(const V& x, const std::vector<V>& starts,
                                                const std::vector<uint64_t>& sizes) {
  std::vector<std::string> operands = {x.name};
  for (const V& v : starts) operands.push_back(v.name);
  return push(make(array(x.shape.type, sizes), "dynamic-slice", std::move(operands)));
}

LoweredEmitter::V LoweredEmitter::index_leading(const V& x, const V& index) {
  std::vector<V> starts = {index};
  std::vector<uint64_t> sizes = x.shape.dims;
  sizes[0] = 1;
  for (size_t j = 1; j < sizes.size(); ++j) starts.push_back(scalar(PrimitiveType::kS32));
  return reshape(dynamic_slice(x, starts, sizes), std::vector<uint64_t>(sizes.begin() + 1, sizes.end()));
}

LoweredEmitter::V LoweredEmitter::update_leading(const V& x, const V& update, const V& index) {
  std::vector<uint64_t> dims = update.shape.dims;
  dims.insert(dims.begin(), 1);
  std::vector<std::string> operands = {x.name, reshape(update, dims).name, index.name};
  for (size_t j = 1; j < dims.size(); ++j) operands.push_back(scalar(PrimitiveType::kS32).name);
  return push(make(x.shape, "dynamic-update-slice", std::move(operands)));
}

LoweredEmitter::V LoweredEmitter::dynamic_update_slice(const V& x, const V& update,
                                                       const std::vector<V>& starts) {
  std::vector<std::string> operands = {x.name, update.name};
  for (const V& v : starts) operands.push_back(v.name);
  return push(make(x.shape, "dynamic-update-slice", std::move(operands)));
}

std::vector<LoweredEmitter::V> LoweredEmitter::unpack_parameter(const Shape& tuple_shape) {
  HloInstruction p = make(tuple_shape, "parameter", {});
  p.parameter_number = 0;
  return elements(push(std::move(p)));
}

void LoweredEmitter::write_computation(std::string name, const std::function<void()>& write) {
  std::vector<HloInstruction> outer = std::move(entry_);
  std::vector<std::pair<PrimitiveType, V>> outer_scalars = std::move(scalars_);
  std::vector<V> outer_zeros = std::move(zeros_);
  entry_.clear();
  scalars_.clear();
  zeros_.clear();
  write();
  seal(std::move(name), false);
  entry_ = std::move(outer);
  scalars_ = std::move(outer_scalars);
  zeros_ = std::move(outer_zeros);
}

std::vector<LoweredEmitter::V> LoweredEmitter::loop(
    const std::vector<V>& carried, uint64_t trips,
    const std::function<std::vector<V>(const std::vector<V>&)>& body) {
  Shape shape;
  for (const V& v : carried) shape.elements.push_back(v.shape);
  const uint64_t id = loops_++;
  const std::string body_name = fmt::format("scan_body.{}", id);
  const std::string condition_name = fmt::format("scan_condition.{}", id);
  write_computation(body_name, [&] { root(body(unpack_parameter(shape))); });
  write_computation(condition_name, [&] {  // i < trips
    const std::vector<V> looked = unpack_parameter(shape);
    HloInstruction limit = make(array(PrimitiveType::kS32, {}), "constant", {});
    limit.op_name = fmt::format("{} trips", trips);  // the count itself: an HloInstruction holds no literal
    const V bound = push(std::move(limit));
    HloInstruction less = make(array(PrimitiveType::kPred, {}), "compare", {looked[0].name, bound.name});
    less.is_root = true;
    push(std::move(less));
  });
  const V init = tuple(carried);
  HloInstruction w = make(init.shape, "while", {init.name});
  w.called = {condition_name, body_name};  // as XLA prints them: condition=, body=
  return elements(push(std::move(w)));
}

std::vector<LoweredEmitter::V> LoweredEmitter::call(
    const std::string& name, const std::vector<V>& operands,
    const std::function<std::vector<V>(const std::vector<V>&)>& body) {
  const std::string computation = fmt::format("{}.{}", name, calls_++);
  size_t results = 0;
  Shape shape;  // the call's: its one result's, or the root tuple's
  write_computation(computation, [&] {
    std::vector<V> parameters;
    for (size_t k = 0; k < operands.size(); ++k) {
      HloInstruction p = make(operands[k].shape, "parameter", {});
      p.parameter_number = static_cast<int64_t>(k);
      parameters.push_back(push(std::move(p)));
    }
    const std::vector<V> returned = body(parameters);
    results = returned.size();
    if (results == 1) {
      shape = returned[0].shape;
      root_array(returned[0]);
    } else {
      root(returned);
      shape = entry_.back().shape;  // the tuple root() wrote
    }
  });
  std::vector<std::string> names;
  for (const V& v : operands) names.push_back(v.name);
  HloInstruction c = make(shape, "call", std::move(names));
  c.called = {computation};  // to_apply=
  const V called = push(std::move(c));
  if (results == 1) return {called};
  return elements(called);
}

namespace {

// 1 - b ** t
LoweredEmitter::V bias_correction(LoweredEmitter& e, const LoweredEmitter::V& t) {
  return e.binary("subtract", e.scalar(PrimitiveType::kF32),
                  e.binary("power", e.scalar(PrimitiveType::kF32), t));
}

}  // namespace

LoweredEmitter::V model_parameter(LoweredEmitter& e, const Shape& shape, const std::string& name,
                                  StepArguments& args) {
  uint64_t count = 1;
  for (uint64_t n : shape.dims) count *= n;  // the spec's sizes were checked before anything is written
  args.parameter_count += count;
  args.parameter_bytes += shape.own_bytes();
  return e.parameter(shape, name, "parameters");
}

LoweredEmitter::V optimizer_parameter(LoweredEmitter& e, const Shape& shape, const std::string& name,
                                      StepArguments& args) {
  args.optimizer_state_bytes += shape.own_bytes();
  return e.parameter(shape, name, "optimizer_state");
}

bool keeps_optimizer_state(const ModelSpec& spec) {
  // A training step (per-example gradients by vmap included); inference keeps none.
  return spec.step != StepKind::kInfer && spec.step != StepKind::kDecode &&
         (spec.optimizer == OptimizerKind::kAdam || spec.optimizer == OptimizerKind::kAdamW ||
          spec.optimizer == OptimizerKind::kAdafactor);
}

OptimizerState declare_optimizer_state(LoweredEmitter& e, const ModelSpec& spec,
                                       const std::vector<LoweredEmitter::V>& params,
                                       const std::vector<std::string>& names, StepArguments& args) {
  OptimizerState state;
  constexpr std::string_view kPrefix = "params";
  auto key_of = [&](size_t i) {
    return std::string_view(names[i]).substr(names[i].rfind(kPrefix, 0) == 0 ? kPrefix.size()
                                                                             : names[i].size());
  };
  if (spec.optimizer == OptimizerKind::kAdafactor) {
    // FactoredState(count, v_row, v_col, v), flattened in that order; jax.jit drops the placeholders.
    state.adafactor = true;
    const size_t n = params.size();
    state.v_row.resize(n);
    state.v_col.resize(n);
    state.v.resize(n);
    state.v_row_argument.assign(n, -1);
    state.v_col_argument.assign(n, -1);
    state.v_argument.assign(n, -1);
    state.count_argument = static_cast<int64_t>(e.parameter_count());
    state.count =
        optimizer_parameter(e, LoweredEmitter::array(PrimitiveType::kS32, {}), "opt[0].count", args);
    for (const LoweredEmitter::V& p : params) state.moments.push_back(adafactor_moments(p.shape.dims));
    auto declare = [&](const char* what, bool factored, std::vector<LoweredEmitter::V>& into,
                       std::vector<int64_t>& numbers, auto dims_of) {
      for (size_t i = 0; i < n; ++i) {
        if (state.moments[i].factored != factored) continue;
        numbers[i] = static_cast<int64_t>(e.parameter_count());
        into[i] =
            optimizer_parameter(e, LoweredEmitter::array(PrimitiveType::kF32, dims_of(state.moments[i])),
                                fmt::format("opt[0].{}{}", what, key_of(i)), args);
      }
    };
    declare("v_row", true, state.v_row, state.v_row_argument,
            [](const AdafactorMoments& m) { return m.v_row; });
    declare("v_col", true, state.v_col, state.v_col_argument,
            [](const AdafactorMoments& m) { return m.v_col; });
    declare("v", false, state.v, state.v_argument, [](const AdafactorMoments& m) { return m.v; });
    return state;
  }
  // optax.adamw's (ScaleByAdamState(count, mu, nu), EmptyState(), EmptyState()): the count first;
  // reference_programs.py's own adam keeps (m, v, t).
  const bool optax = spec.optimizer == OptimizerKind::kAdamW;
  auto count = [&](const char* name) {
    state.count_argument = static_cast<int64_t>(e.parameter_count());
    state.count = optimizer_parameter(e, LoweredEmitter::array(PrimitiveType::kS32, {}), name, args);
  };
  if (optax) count("opt[0].count");
  for (int k = 0; k < 2; ++k) {
    std::vector<LoweredEmitter::V>& moment = k == 0 ? state.m : state.v;
    for (size_t i = 0; i < params.size(); ++i) {
      const std::string name = optax ? fmt::format("opt[0].{}{}", k == 0 ? "mu" : "nu", key_of(i))
                                     : fmt::format("opt[{}]{}", k, key_of(i));
      moment.push_back(optimizer_parameter(
          e, LoweredEmitter::array(PrimitiveType::kF32, params[i].shape.dims), name, args));
    }
  }
  if (!optax) count("opt[2]");
  return state;
}

LoweredEmitter::V write_vector_broadcast(LoweredEmitter& e, const LoweredEmitter::V& v,
                                         const std::vector<uint64_t>& dims) {
  const uint64_t n = v.shape.dims[0];
  std::vector<uint64_t> ranked(dims.size() - 1, 1);
  ranked.push_back(n);
  std::vector<int64_t> all;
  for (size_t d = 0; d < ranked.size(); ++d) all.push_back(static_cast<int64_t>(d));
  const LoweredEmitter::V r = e.broadcast(e.reshape(v, ranked), ranked, all);
  std::vector<uint64_t> kept_dims;
  std::vector<int64_t> kept;
  for (size_t d = 0; d < dims.size(); ++d) {
    if (d + 1 < dims.size() && dims[d] != 1) continue;  // broadcast over: not in the reshaped vector
    kept_dims.push_back(dims[d]);
    kept.push_back(static_cast<int64_t>(d));
  }
  return e.broadcast(e.reshape(r, kept_dims), dims, kept);
}

LoweredEmitter::V write_saved_residual(LoweredEmitter& e, const LoweredEmitter::V& value, bool offloaded,
                                       LoweredEmitter::V& saved) {
  if (offloaded) {
    saved = e.place(value, "pinned_host");
    return value;
  }
  saved = e.unary("reduce-precision", value);
  return saved;
}

std::vector<LoweredEmitter::V> write_remat_barrier(LoweredEmitter& e, std::vector<LoweredEmitter::V>& saved,
                                                   const std::vector<LoweredEmitter::V>& rest,
                                                   bool offloaded) {
  std::vector<LoweredEmitter::V> through = saved;
  through.insert(through.end(), rest.begin(), rest.end());
  std::vector<LoweredEmitter::V> kept = e.barrier(through);
  for (size_t k = 0; k < saved.size(); ++k)
    saved[k] = offloaded ? e.place(kept[k], "device") : kept[k];  // back from the host where it is read
  return std::vector<LoweredEmitter::V>(kept.begin() + static_cast<std::ptrdiff_t>(saved.size()), kept.end());
}

Gelu write_gelu(LoweredEmitter& e, const LoweredEmitter::V& z) {
  auto splat = [&] { return e.splat(z.shape.type, z.shape.dims); };
  Gelu g;
  g.z = z;
  const LoweredEmitter::V cube = e.binary("multiply", e.binary("multiply", z, z), z);
  const LoweredEmitter::V inner = e.binary("add", z, e.binary("multiply", cube, splat()));
  g.tanh = e.unary("tanh", e.binary("multiply", inner, splat()));
  g.half = e.binary("multiply", e.binary("add", g.tanh, splat()), splat());
  g.out = e.binary("multiply", z, g.half);
  return g;
}

LoweredEmitter::V write_wrapped_index(LoweredEmitter& e, const LoweredEmitter::V& ids,
                                      const std::vector<uint64_t>& index_dims) {
  const std::vector<uint64_t>& dims = ids.shape.dims;
  const LoweredEmitter::V negative = e.compare(ids, e.splat(PrimitiveType::kS32, dims));
  const LoweredEmitter::V wrapped =
      e.select(negative, e.binary("add", ids, e.splat(PrimitiveType::kS32, dims)), ids);
  return e.reshape(wrapped, index_dims);
}

LoweredEmitter::V write_index_in_range(LoweredEmitter& e, const LoweredEmitter::V& index) {
  const std::vector<uint64_t>& dims = index.shape.dims;
  const LoweredEmitter::V at_least_0 = e.compare(index, e.splat(PrimitiveType::kS32, dims));
  const LoweredEmitter::V at_most_n = e.compare(index, e.splat(PrimitiveType::kS32, dims));
  return e.reduce_and(e.binary("and", at_least_0, at_most_n), {static_cast<int64_t>(dims.size() - 1)});
}

LoweredEmitter::V write_cross_entropy(LoweredEmitter& e, const LoweredEmitter::V& logits,
                                      const LoweredEmitter::V& labels, LoweredEmitter::V& dlogits) {
  using Value = LoweredEmitter::V;  // not V: a writer in the same unity batch has its own V
  using Values = std::vector<Value>;
  auto with = [&](const char* opcode, const Value& x, const Value& v, const std::vector<int64_t>& kept) {
    return e.binary(opcode, x, e.broadcast(v, x.shape.dims, kept));
  };
  const std::vector<uint64_t> dims = logits.shape.dims;
  const size_t last = dims.size() - 1;
  const std::vector<uint64_t> rows(dims.begin(), dims.end() - 1);
  std::vector<uint64_t> kept = rows;
  kept.push_back(1);
  std::vector<uint64_t> index_dims = kept;
  index_dims.push_back(1);
  std::vector<int64_t> row_dims, all;  // the rows' dimensions; every dimension of the picked entries
  for (size_t k = 0; k < dims.size(); ++k) {
    if (k < last) row_dims.push_back(static_cast<int64_t>(k));
    all.push_back(static_cast<int64_t>(k));
  }
  const std::vector<int64_t> last_dim = {static_cast<int64_t>(last)};
  // jax.nn.log_softmax, jnp.take_along_axis and their transposes are nested jits: each a call JAX prints
  // (`jvp(jit(log_softmax))`, `transpose(jvp(jit(take_along_axis)))`, ...). Their reads decide the order
  // of the program JAX prints - the scatter of the loss's cotangent reads the index the forward's call
  // returns, so it comes after the forward pass, not first (it reads nothing else the forward computes).
  // The log-probabilities, and the exp and row sums the transpose reads.
  const Values softmax = e.call("log_softmax", {logits}, [&](const Values& x) -> Values {
    const Value mx = e.binary("maximum", e.reduce_max(x[0], last_dim), e.splat(PrimitiveType::kF32, rows));
    const Value shifted = with("subtract", x[0], e.reshape(e.reshape(mx, kept), rows), row_dims);
    const Value ex = e.unary("exponential", shifted);
    const Value sum = e.reshape(e.reduce_sum(ex, last_dim), kept);
    return {with("subtract", shifted, e.reshape(e.unary("log", sum), rows), row_dims), ex, sum};
  });
  // take_along_axis(logp, labels[..., None]): jnp's index (a negative label wraps), its bounds check
  // (an entry out of range reads NaN: jnp.all of 0 <= index <= n - 1), the gather; and the index, which
  // the transpose reads.
  const Values taken = e.call("take_along_axis", {softmax[0], e.reshape(labels, kept)}, [&](const Values& x) {
    const Value index = write_wrapped_index(e, x[1], index_dims);
    const Value in_range = write_index_in_range(e, index);
    const Value picked = e.gather(x[0], index, kept);
    return Values{e.select(in_range, picked, e.splat(PrimitiveType::kF32, kept)), index};
  });
  e.set_category("outputs");  // the loss: one of the step's results
  const Value loss =
      e.unary("negate", e.binary("divide", e.reduce_sum(taken[0], all), e.scalar(PrimitiveType::kF32)));
  e.set_category("temporaries");
  e.set_op_name("jit(step)/transpose(jvp())");
  // Each picked entry's cotangent (-1/count) scattered into zeros at its index.
  const Value dlogp = e.call("take_along_axis_transpose", {taken[1], e.splat(PrimitiveType::kF32, kept)},
                             [&](const Values& x) -> Values {
                               return {e.scatter(e.splat(PrimitiveType::kF32, dims), x[0], x[1])};
                             })[0];
  dlogits = e.call("log_softmax_transpose", {softmax[1], softmax[2], dlogp}, [&](const Values& x) -> Values {
    const Value r1 = e.reshape(e.reduce_sum(e.unary("negate", x[2]), last_dim), kept);
    const Value r2 = e.reduce_sum(e.binary("divide", r1, x[1]), last_dim);
    return {e.binary("add", x[2], e.binary("multiply", e.broadcast(r2, dims, row_dims), x[0]))};
  })[0];
  return loss;
}

LoweredEmitter::V write_gelu_transpose(LoweredEmitter& e, const Gelu& g, const LoweredEmitter::V& d) {
  using Value = LoweredEmitter::V;  // not V: a writer in the same unity batch has its own V
  auto splat = [&] { return e.splat(d.shape.type, d.shape.dims); };
  const Value through_half = e.binary("multiply", d, g.half);
  const Value dhalf = e.binary("multiply", e.binary("multiply", g.z, d), splat());
  const Value dtanh = !g.dtanh.name.empty() ? g.dtanh
                                            : e.binary("multiply", e.binary("add", g.tanh, splat()),
                                                       e.binary("subtract", splat(), g.tanh));
  const Value dinner = e.binary("multiply", e.binary("multiply", dhalf, dtanh), splat());
  const Value sum = e.binary("add", through_half, dinner);
  const Value slope = !g.cube_slope.name.empty()
                          ? g.cube_slope
                          : e.binary("multiply", e.binary("multiply", g.z, g.z), splat());
  const Value dcube = e.binary("multiply", e.binary("multiply", dinner, splat()), slope);
  return e.binary("add", sum, dcube);
}

LoweredEmitter::V accumulate_gradients(LoweredEmitter& e, uint64_t microbatches,
                                       const std::vector<LoweredEmitter::V>& params,
                                       const std::vector<LoweredEmitter::V>& batch,
                                       const MicrobatchStep& step, std::vector<LoweredEmitter::V>& grads) {
  using Value = LoweredEmitter::V;  // not V: a writer in the same unity batch has its own V
  const size_t n = params.size();
  e.set_category("gradients");
  e.set_op_name("jit(step)/scan");
  std::vector<Value> carried = {e.scalar(PrimitiveType::kS32)};
  for (const Value& p : params) carried.push_back(e.zeros(PrimitiveType::kF32, p.shape.dims));
  carried.push_back(e.scalar(PrimitiveType::kF32));
  for (const Value& whole : batch) {  // [B, ...] -> [microbatches, B / microbatches, ...]
    std::vector<uint64_t> dims = whole.shape.dims;
    dims[0] /= microbatches;
    dims.insert(dims.begin(), microbatches);
    carried.push_back(e.reshape(whole, dims));
  }
  carried.insert(carried.end(), params.begin(), params.end());
  const size_t loss_at = 1 + n, batch_at = loss_at + 1, params_at = batch_at + batch.size();
  const std::vector<Value> done = e.loop(carried, microbatches, [&](const std::vector<Value>& c) {
    // b = mb[i]: each array's rows of this microbatch.
    std::vector<Value> rows;
    for (size_t a = batch_at; a < params_at; ++a) rows.push_back(e.index_leading(c[a], c[0]));
    std::vector<Value> g(n);
    const Value loss =
        step(rows, std::vector<Value>(c.begin() + static_cast<std::ptrdiff_t>(params_at), c.end()), g);
    e.set_category("gradients");
    e.set_op_name("jit(step)/while/body/add_any");
    std::vector<Value> next = {e.binary("add", c[0], e.scalar(PrimitiveType::kS32))};
    for (size_t j = 0; j < n; ++j) {
      next.push_back(e.binary("add", c[1 + j], e.astype(g[j], PrimitiveType::kF32)));
    }
    next.push_back(e.binary("add", c[loss_at], loss));
    for (size_t j = batch_at; j < c.size(); ++j) next.push_back(c[j]);  // the batches and parameters, as read
    return next;
  });
  e.set_op_name("jit(step)/div");
  grads.clear();
  for (size_t j = 0; j < n; ++j)
    grads.push_back(e.binary("divide", done[1 + j], e.splat(PrimitiveType::kF32, done[1 + j].shape.dims)));
  return e.binary("divide", done[loss_at], e.scalar(PrimitiveType::kF32));
}

namespace {

// optax.adafactor(lr) as optax writes it (optax/_src/factorized.py scale_by_factored_rms, then
// clip_by_block_rms(1.0), scale_by_learning_rate, scale_by_param_block_rms), with the reductions and the
// parameter-sized values the shared flax_encoder_adafactor_b32's lowered program has: per parameter the
// squared gradient's row and column means (or the full moment), the update's RMS and the parameter's RMS
// as reductions, and the elementwise update over the parameter; the placeholders it returns are zeros.
// Its scalar ops are fewer (one compare where optax writes two, no [1]-shaped reshapes): they hold no memory.
void write_adafactor_update(LoweredEmitter& e, const ModelSpec& spec,
                            const std::vector<LoweredEmitter::V>& params,
                            const std::vector<LoweredEmitter::V>& grads, const OptimizerState& state,
                            const std::vector<LoweredEmitter::V>& extra) {
  using Value = LoweredEmitter::V;  // not V: a writer in the same unity batch has its own V
  const PrimitiveType f32 = PrimitiveType::kF32;
  auto splat = [&](const Value& like) { return e.splat(like.shape.type, like.shape.dims); };
  auto widen = [&](const Value& x) { return e.astype(x, f32); };
  auto every_dim = [](const Value& x) {
    std::vector<int64_t> all(x.shape.dims.size());
    for (size_t d = 0; d < all.size(); ++d) all[d] = static_cast<int64_t>(d);
    return all;
  };
  auto but = [](size_t rank,
                size_t gone) {  // the dimensions a statistic keeps, as broadcast_in_dim names them
    std::vector<int64_t> kept;
    for (size_t d = 0; d < rank; ++d)
      if (d != gone) kept.push_back(static_cast<int64_t>(d));
    return kept;
  };
  // The mean of x over `dims`, and its block RMS (a scalar).
  auto mean = [&](const Value& x, const std::vector<int64_t>& dims) {
    const Value sum = e.reduce_sum(x, dims);
    return e.binary("divide", sum, splat(sum));
  };
  auto rms = [&](const Value& x) { return e.unary("sqrt", mean(e.binary("multiply", x, x), every_dim(x))); };
  e.set_op_name("jit(step)/update");
  e.set_category("optimizer_state");
  const Value count = e.binary("add", state.count, e.scalar(PrimitiveType::kS32));
  // decay_rate_t = 1 - (count + 1)^-0.8
  const Value decay =
      e.binary("subtract", e.scalar(f32), e.binary("power", e.convert(count, f32), e.scalar(f32)));
  const Value keep = e.binary("subtract", e.scalar(f32), decay);
  const size_t n = params.size();
  std::vector<Value> new_p(n), new_row(n), new_col(n), new_v(n);
  for (size_t k = 0; k < n; ++k) {
    const AdafactorMoments& a = state.moments[k];
    const Value g = widen(grads[k]);
    const Value p = widen(params[k]);
    const size_t rank = g.shape.dims.size();
    e.set_category("optimizer_state");
    const Value squared = e.binary("add", e.binary("multiply", g, g), splat(g));  // + epsilon 1e-30
    Value u;
    auto moving = [&](const Value& old, const Value& now) {
      return e.binary("add", e.binary("multiply", e.broadcast(decay, old.shape.dims, {}), old),
                      e.binary("multiply", e.broadcast(keep, old.shape.dims, {}), now));
    };
    if (a.factored) {
      new_row[k] = moving(state.v_row[k], mean(squared, {static_cast<int64_t>(a.largest_dim)}));
      new_col[k] = moving(state.v_col[k], mean(squared, {static_cast<int64_t>(a.second_dim)}));
      // row_factor = (v_row / mean(v_row))^-0.5, col_factor = v_col^-0.5, broadcast back over the gradient.
      const Value row_mean = e.broadcast(mean(new_row[k], every_dim(new_row[k])), new_row[k].shape.dims, {});
      const Value row_factor = e.binary("power", e.binary("divide", new_row[k], row_mean), splat(new_row[k]));
      const Value col_factor = e.binary("power", new_col[k], splat(new_col[k]));
      e.set_category("temporaries");
      u = e.binary("multiply",
                   e.binary("multiply", g, e.broadcast(row_factor, g.shape.dims, but(rank, a.largest_dim))),
                   e.broadcast(col_factor, g.shape.dims, but(rank, a.second_dim)));
    } else {
      new_v[k] = moving(state.v[k], squared);
      e.set_category("temporaries");
      u = e.binary("multiply", g, e.binary("power", new_v[k], splat(new_v[k])));
    }
    // clip_by_block_rms(1.0): u / max(rms(u), 1); scale_by_learning_rate; scale_by_param_block_rms:
    // * max(rms(p), eps), the parameter's RMS taken of where(rms(p) <= eps, 1, p) as optax writes it.
    const Value clip = e.binary("maximum", rms(u), e.scalar(f32));
    const Value clipped = e.binary("divide", u, e.broadcast(clip, u.shape.dims, {}));
    const Value scaled = e.binary("multiply", clipped, splat(clipped));
    const Value small = e.compare(rms(p), e.scalar(f32));
    const Value guarded = e.select(e.broadcast(small, p.shape.dims, {}), splat(p), p);
    const Value scale = e.select(small, e.scalar(f32), rms(guarded));
    e.set_category("parameters");
    const Value step =
        e.binary("multiply", e.binary("multiply", scaled, e.broadcast(scale, p.shape.dims, {})),
                 splat(p));  // flip_sign: * -1
    Value out = e.binary("add", p, step);
    if (params[k].shape.type != f32) out = e.convert(out, params[k].shape.type);
    new_p[k] = out;
  }
  // The results: parameters, then FactoredState(count, v_row, v_col, v) with zeros where a placeholder is.
  e.set_category("optimizer_state");
  std::vector<Value> results = new_p;
  std::vector<std::pair<size_t, int64_t>> replaced;  // (result, the argument it is written over)
  for (size_t k = 0; k < n; ++k) replaced.emplace_back(k, static_cast<int64_t>(k));
  replaced.emplace_back(results.size(), state.count_argument);
  results.push_back(count);
  auto add_tree = [&](const std::vector<Value>& news, const std::vector<int64_t>& arguments) {
    for (size_t k = 0; k < n; ++k) {
      if (arguments[k] >= 0) {
        replaced.emplace_back(results.size(), arguments[k]);
        results.push_back(news[k]);
      } else {
        results.push_back(e.splat(f32, {1}));
      }
    }
  };
  add_tree(new_row, state.v_row_argument);
  add_tree(new_col, state.v_col_argument);
  add_tree(new_v, state.v_argument);
  results.insert(results.end(), extra.begin(), extra.end());
  e.root(results);
  if (!spec.donate) return;
  for (const auto& [result, argument] : replaced) e.alias(result, argument);
}

}  // namespace

void write_update(LoweredEmitter& e, const ModelSpec& spec, const std::vector<LoweredEmitter::V>& params,
                  const std::vector<LoweredEmitter::V>& grads, const OptimizerState* state,
                  const std::vector<LoweredEmitter::V>& extra) {
  if (state && state->adafactor) return write_adafactor_update(e, spec, params, grads, *state, extra);
  using Value = LoweredEmitter::V;  // not V: a writer in the same unity batch has its own V
  auto splat = [&](const Value& like) { return e.splat(like.shape.type, like.shape.dims); };
  auto f32 = [&](const Value& x) { return e.astype(x, PrimitiveType::kF32); };
  e.set_op_name("jit(step)/update");
  // optax.adamw (the flax programs'): its state's count first, the update added (p + -lr * ...);
  // reference_programs.py's own adam subtracts and keeps (m, v, t).
  const bool optax = state != nullptr && spec.optimizer == OptimizerKind::kAdamW;
  std::vector<Value> new_p, new_m, new_v;
  Value new_count, step_f32;
  if (state) {
    e.set_category("optimizer_state");
    new_count = e.binary("add", state->count, e.scalar(PrimitiveType::kS32));
    step_f32 = e.convert(new_count, PrimitiveType::kF32);
  }
  for (size_t k = 0; k < params.size(); ++k) {
    const Value g = f32(grads[k]);
    const Value p = f32(params[k]);
    Value step;
    if (state) {
      e.set_category("optimizer_state");
      const Value m =
          e.binary("add", e.binary("multiply", state->m[k], splat(g)), e.binary("multiply", g, splat(g)));
      const Value v = e.binary("add", e.binary("multiply", state->v[k], splat(g)),
                               e.binary("multiply", e.binary("multiply", g, g), splat(g)));
      new_m.push_back(m);
      new_v.push_back(v);
      e.set_category("parameters");
      const Value c1 = e.broadcast(bias_correction(e, step_f32), g.shape.dims, {});
      const Value c2 = e.broadcast(bias_correction(e, step_f32), g.shape.dims, {});
      const Value lr_m = e.binary("multiply", e.binary("divide", m, c1), splat(g));
      const Value denom = e.binary("add", e.unary("sqrt", e.binary("divide", v, c2)), splat(g));
      step = e.binary("divide", lr_m, denom);
      if (optax) {  // add_decayed_weights, then scale_by_learning_rate (-lr); apply_updates adds it
        step = e.binary("add", step, e.binary("multiply", e.binary("multiply", p, splat(p)), splat(p)));
        step = e.binary("multiply", step, splat(step));
      }
    } else {
      e.set_category("parameters");
      step = e.binary("multiply", g, splat(g));
    }
    Value out = e.binary(optax ? "add" : "subtract", p, step);
    if (params[k].shape.type != PrimitiveType::kF32) out = e.convert(out, params[k].shape.type);
    new_p.push_back(out);
  }
  std::vector<Value> outs = new_p;
  if (state) {  // the state in the order its arguments are declared (declare_optimizer_state)
    if (optax) outs.push_back(new_count);
    outs.insert(outs.end(), new_m.begin(), new_m.end());
    outs.insert(outs.end(), new_v.begin(), new_v.end());
    if (!optax) outs.push_back(new_count);
  }
  std::vector<Value> results = outs;
  results.insert(results.end(), extra.begin(), extra.end());
  e.root(results);
  if (!spec.donate) return;
  // donate_argnums=(0, 1): each new parameter, moment and the count over the argument it replaces - output
  // k is argument k, as both follow jax's flattening of (params, opt).
  for (size_t k = 0; k < outs.size(); ++k) e.alias(k, static_cast<int64_t>(k));
}

void LoweredEmitter::seal(std::string name, bool is_entry) {
  HloComputation c;
  c.name = std::move(name);
  c.is_entry = is_entry;
  c.instructions = std::move(entry_);
  entry_.clear();
  scalars_.clear();
  zeros_.clear();
  // Only what the root reads stays, as JAX lowers a function (its jaxpr's dead code eliminated: the
  // recomputation jax.checkpoint writes before a block's transpose has no block output, which nothing
  // reads). Kept, a value nothing reads would begin a walk of XLA's post order of its own - a rematted
  // block's output pulled the recomputation before the cotangent's first GEMM, unlike JAX's program.
  reorder_instructions(c.instructions, instruction_post_order(c, PostOrderOf::kWhatTheRootReads));
  m_.computations.push_back(std::move(c));
}

void LoweredEmitter::finish() {
  seal("main", true);
  m_.is_scheduled = false;
}

}  // namespace memfit::zoo
