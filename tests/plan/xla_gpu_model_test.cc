// The model of XLA:GPU's memory-relevant passes (plan/xla_gpu_model.h) on small lowered programs written
// the way JAX lowers them: which values it materializes, and the rewrites it applies.
#include "memfit/plan/xla_gpu_model.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <set>

#include "memfit/core/file_io.h"
#include "memfit/plan/buffer_model.h"
#include "memfit/plan/hlo_plan.h"
#include "memfit/program/stablehlo_module.h"

namespace memfit {
namespace {

HloModule lowered(const char* text);
HloModule lowered(const std::string& text) { return lowered(text.c_str()); }
HloModule lowered(const char* text) {
  auto m = parse_hlo_module(text);
  EXPECT_TRUE(m.ok()) << m.error().message();
  EXPECT_TRUE(is_lowered_module(*m));
  return std::move(*m);
}

// The program as the model of XLA:GPU rewrites it; an empty module, and a failure, when it does not model.
HloModule model_of(const std::string& text) {
  auto m = model_xla_gpu(lowered(text.c_str()));
  EXPECT_TRUE(m.ok()) << m.error().message();
  return m.ok() ? std::move(*m) : HloModule{};
}

// A program's text with its line OTHER replaced: one program, the readers it ends with varied.
std::string with_other(std::string text, const std::string& other) {
  text.replace(text.find("OTHER"), 5, other);
  return text;
}

// `text` with every `key` replaced by `value`: one program at several sizes.
std::string with_all(std::string text, std::string_view key, std::string_view value) {
  for (size_t at = text.find(key); at != std::string::npos; at = text.find(key, at + value.size()))
    text.replace(at, key.size(), value);
  return text;
}

// Where `name` stands in the entry's order (the count of instructions when it is not there).
size_t position_of(const HloModule& m, std::string_view name) {
  const auto& insts = m.entry()->instructions;
  for (size_t i = 0; i < insts.size(); ++i)
    if (insts[i].name == name) return i;
  return insts.size();
}

// A lowered module's head with the summing region its reductions call (to_apply=region_0.1); the entry
// follows.
constexpr std::string_view kSumRegion = R"(HloModule jit_step

region_0.1 {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

)";

// Whether `x` reads the instruction `name`.
bool reads(const HloInstruction* x, std::string_view name) {
  return x != nullptr && std::find(x->operands.begin(), x->operands.end(), name) != x->operands.end();
}

// A loss as JAX lowers it: the sum and max regions, a log-softmax over [ROWS, VOCAB] logits and the
// log-likelihood gathered at idx (picked). The entry's tail follows.
constexpr std::string_view kLogSoftmaxLoss = R"(HloModule jit_step

region_add.1 {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

region_max.2 {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT m = f32[] maximum(a, b)
}

ENTRY main.3 {
  logits = f32[ROWS,VOCAB]{1,0} parameter(0)
  idx = s32[ROWS,2]{1,0} parameter(1)
  zero = f32[] constant(0)
  m = f32[ROWS]{0} reduce(logits, zero), dimensions={1}, to_apply=region_max.2
  mb = f32[ROWS,VOCAB]{1,0} broadcast(m), dimensions={0}
  c = f32[ROWS,VOCAB]{1,0} subtract(logits, mb)
  e = f32[ROWS,VOCAB]{1,0} exponential(c)
  s = f32[ROWS]{0} reduce(e, zero), dimensions={1}, to_apply=region_add.1
  ls = f32[ROWS]{0} log(s)
  lsb = f32[ROWS,VOCAB]{1,0} broadcast(ls), dimensions={0}
  lp = f32[ROWS,VOCAB]{1,0} subtract(c, lsb)
  picked = f32[ROWS,1]{1,0} gather(lp, idx), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0,1}, index_vector_dim=1, slice_sizes={1,1}
)";

// Whether the plan holds a buffer `name` of `bytes`.
bool holds(const HloPlan& plan, std::string_view name, uint64_t bytes) {
  return std::any_of(plan.buffers.begin(), plan.buffers.end(),
                     [&](const PlannedBuffer& b) { return b.name == name && b.bytes == bytes; });
}

const HloInstruction* find(const HloModule& m, std::string_view name) {
  if (m.entry() == nullptr) return nullptr;
  for (const HloInstruction& i : m.entry()->instructions)
    if (i.name == name) return &i;
  return nullptr;
}

// The multi-output fusion that computes `name` as one of its outputs (XLA's sibling multi-output fusion made
// it a get-tuple-element of that fusion), or nullptr.
const HloInstruction* fusion_of(const HloModule& m, std::string_view name) {
  const HloInstruction* x = find(m, name);
  if (x == nullptr || x->opcode != HloOpcode::kGetTupleElement || x->operands.size() != 1) return nullptr;
  const HloInstruction* f = find(m, x->operands[0]);
  return f != nullptr && f->opcode == HloOpcode::kFusion && f->called.size() == 1 ? f : nullptr;
}

// What the model writes for `name`: its instruction, or - as one output of a multi-output fusion - that
// output, named `name` and reading the fusion's operands in its parameters' place.
std::optional<HloInstruction> written(const HloModule& m, std::string_view name) {
  const HloInstruction* x = find(m, name);
  if (x == nullptr) return std::nullopt;
  const HloInstruction* f = fusion_of(m, name);
  const HloComputation* body = f != nullptr ? m.find(f->called[0]) : nullptr;
  if (body == nullptr || body->root() == nullptr) return *x;
  const HloInstruction* root = body->root();
  if (x->tuple_index < 0 || static_cast<size_t>(x->tuple_index) >= root->operands.size()) return *x;
  HloInstruction out;
  for (const HloInstruction& i : body->instructions)
    if (i.name == root->operands[static_cast<size_t>(x->tuple_index)]) out = i;
  out.name = x->name;
  for (std::string& operand : out.operands)
    for (const HloInstruction& i : body->instructions)
      if (i.name == operand && i.opcode == HloOpcode::kParameter &&
          static_cast<size_t>(i.parameter_number) < f->operands.size())
        operand = f->operands[static_cast<size_t>(i.parameter_number)];
  return out;
}
bool reads(const std::optional<HloInstruction>& x, std::string_view name) {
  return x.has_value() && reads(&*x, name);
}

// XLA's CallInliner runs first: each call's instructions take its place in the program's order - a call
// at the start, between two GEMMs, nested in another, returning its argument, and as the root - the
// callee's root taking the call's name. (Inlined in place: the instructions before the first call stay
// where they are, the rest move back to make room.)
TEST(XlaGpuModel, CallsAreInlinedWhereTheyStand) {
  const HloModule m = model_of(R"(HloModule jit_step

gemm {
  a = f32[256,256]{1,0} parameter(0)
  ROOT d = f32[256,256]{1,0} dot(a, a), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}

twice {
  p = f32[256,256]{1,0} parameter(0)
  once = f32[256,256]{1,0} call(p), to_apply=gemm
  ROOT again = f32[256,256]{1,0} call(once), to_apply=gemm
}

same {
  ROOT q = f32[256,256]{1,0} parameter(0)
}

ENTRY main.1 {
  x = f32[256,256]{1,0} parameter(0)
  c1 = f32[256,256]{1,0} call(x), to_apply=gemm
  d1 = f32[256,256]{1,0} dot(c1, x), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  c2 = f32[256,256]{1,0} call(d1), to_apply=twice
  c3 = f32[256,256]{1,0} call(c2), to_apply=same
  ROOT c4 = f32[256,256]{1,0} call(c3), to_apply=gemm
}
)");
  ASSERT_NE(m.entry(), nullptr);
  std::vector<std::string> gemms;
  for (const HloInstruction& i : m.entry()->instructions)
    if (i.shape.dims == std::vector<uint64_t>{256, 256} && i.opcode != HloOpcode::kParameter &&
        i.opcode != HloOpcode::kBitcast)
      gemms.push_back(i.name);
  EXPECT_EQ(gemms, (std::vector<std::string>{"c1", "d1", "c2/once", "c2", "c4"}));
  ASSERT_NE(m.entry()->root(), nullptr);
  EXPECT_EQ(m.entry()->root()->name, "c4");
}

// Mixed precision: the weight is cast to bf16 once and read by the forward GEMM and the backward one.
// XLA's GemmFusion never takes a narrowing cast in, so the cast is a buffer (XLA's wrapped_convert); the
// widening cast of the activations' gradient back to f32 is taken into its GEMM.
TEST(XlaGpuModel, ANarrowingCastIntoAGemmIsItsOwnBuffer) {
  const HloModule m = lowered(R"(HloModule jit_step

ENTRY main.1 {
  w = f32[2048,2048]{1,0} parameter(0)
  x = bf16[2048,2048]{1,0} parameter(1)
  w16 = bf16[2048,2048]{1,0} convert(w)
  h = bf16[2048,2048]{1,0} dot(x, w16), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  dx = bf16[2048,2048]{1,0} dot(h, w16), lhs_contracting_dims={1}, rhs_contracting_dims={1}
  wide = f32[2048,2048]{1,0} convert(dx)
  g = f32[2048,2048]{1,0} dot(wide, wide), lhs_contracting_dims={0}, rhs_contracting_dims={0}
  ROOT t = (bf16[2048,2048]{1,0}, f32[2048,2048]{1,0}) tuple(h, g)
})");
  auto modeled = model_xla_gpu(m);
  ASSERT_TRUE(modeled.ok()) << modeled.error().message();
  ASSERT_NE(find(*modeled, "w16"), nullptr) << "the bf16 copy of the weight is a buffer";
  EXPECT_EQ(find(*modeled, "wide"), nullptr) << "a widening cast is computed inside its GEMM";
  const HloInstruction* h = find(*modeled, "h");
  ASSERT_NE(h, nullptr);
  EXPECT_EQ(h->operands, (std::vector<std::string>{"x", "w16"}));
  // The bf16 copy lives from the forward GEMM to the backward one: 8 MiB in the plan's temp.
  auto plan = plan_hlo(m);
  ASSERT_TRUE(plan.ok());
  EXPECT_TRUE(holds(*plan, "w16", 8u << 20));
}

// Convolutions are cuDNN calls: they read their operands from buffers (no producer fuses into them, unlike a
// Triton GEMM), and write the bias and - when nothing else reads the biased result - the relu themselves
// (cudnn_fused_conv_rewriter.cc). In inference the first block's relu is the call's output; in training
// relu's derivative (a compare feeding the backward pass) reads the pre-activation too, so the call writes
// it and the relu the next convolution reads is a buffer of its own.
TEST(XlaGpuModel, AConvolutionWritesItsBiasAndReluAndReadsBuffers) {
  auto block = [](bool training) {
    return fmt::format(R"(HloModule jit_step

ENTRY main.1 {{
  x = f32[8,32,32,3]{{3,2,1,0}} parameter(0)
  w1 = f32[3,3,3,16]{{3,2,1,0}} parameter(1)
  b1 = f32[16]{{0}} parameter(2)
  w2 = f32[3,3,16,16]{{3,2,1,0}} parameter(3)
  nx = f32[8,32,32,3]{{3,2,1,0}} negate(x)
  conv1 = f32[8,32,32,16]{{3,2,1,0}} convolution(nx, w1), window={{size=3x3 pad=1_1x1_1}}, dim_labels=b01f_01io->b01f
  bias1 = f32[8,32,32,16]{{3,2,1,0}} broadcast(b1), dimensions={{3}}
  z1 = f32[8,32,32,16]{{3,2,1,0}} add(conv1, bias1)
  zero = f32[] constant(0)
  zeros = f32[8,32,32,16]{{3,2,1,0}} broadcast(zero), dimensions={{}}
  relu1 = f32[8,32,32,16]{{3,2,1,0}} maximum(z1, zeros)
  conv2 = f32[8,32,32,16]{{3,2,1,0}} convolution(relu1, w2), window={{size=3x3 pad=1_1x1_1}}, dim_labels=b01f_01io->b01f
  {}
}})",
                       training ? R"(mask = pred[8,32,32,16]{3,2,1,0} compare(z1, zeros), direction=GT
  ROOT grad = f32[8,32,32,16]{3,2,1,0} select(mask, conv2, zeros))"
                                : R"(ROOT out = f32[8,32,32,16]{3,2,1,0} add(conv2, conv2))");
  };
  const std::string infer_text = block(false), train_text = block(true);
  const HloModule infer = lowered(infer_text.c_str());
  auto modeled = model_xla_gpu(infer);
  ASSERT_TRUE(modeled.ok()) << modeled.error().message();
  ASSERT_NE(find(*modeled, "nx"), nullptr) << "a cheap producer a Triton GEMM would take in is a buffer";
  EXPECT_EQ(find(*modeled, "z1"), nullptr) << "bias and relu are the call's epilogue";
  ASSERT_NE(find(*modeled, "relu1"), nullptr) << "the second convolution reads the relu from a buffer";
  EXPECT_EQ(find(*modeled, "relu1")->operands, (std::vector<std::string>{"nx", "w1", "b1"}));
  const HloModule train = lowered(train_text.c_str());
  modeled = model_xla_gpu(train);
  ASSERT_TRUE(modeled.ok()) << modeled.error().message();
  ASSERT_NE(find(*modeled, "z1"), nullptr) << "the pre-activation has two readers: the call writes it";
  ASSERT_NE(find(*modeled, "relu1"), nullptr) << "a cuDNN call takes no producer in";
  EXPECT_EQ(find(*modeled, "relu1")->operands, (std::vector<std::string>{"z1"}));
  // A maximum with another tensor is no relu: cuDNN does not take it, the biased result is the call's.
  std::string two_tensors = infer_text;
  const std::string relu = "relu1 = f32[8,32,32,16]{3,2,1,0} maximum(z1, zeros)";
  ASSERT_NE(two_tensors.find(relu), std::string::npos);
  two_tensors.replace(two_tensors.find(relu), relu.size(),
                      "relu1 = f32[8,32,32,16]{3,2,1,0} maximum(z1, x2)");
  two_tensors.replace(two_tensors.find("  nx ="), 0, "  x2 = f32[8,32,32,16]{3,2,1,0} parameter(4)\n");
  const HloModule max_of_two = lowered(two_tensors.c_str());
  modeled = model_xla_gpu(max_of_two);
  ASSERT_TRUE(modeled.ok()) << modeled.error().message();
  ASSERT_NE(find(*modeled, "z1"), nullptr);
  EXPECT_EQ(find(*modeled, "relu1")->operands, (std::vector<std::string>{"z1", "x2"}));
}

// A convolution's backward pass: the average pool's gradient (a reduce-window over the padded upstream
// gradient) masked by relu's derivative is read by two cuDNN calls (the input's and the filter's gradient)
// and the bias gradient's reduction. A reduce-window is loop-fusible (IsUniversallyLoopFusible,
// xla/service/gpu/gpu_fusible.cc), so it is computed inside the masking fusion, not written; and priority
// fusion fuses a producer into all of its readers or none (CanFuseWithAllNonBitcastUsers): a cuDNN call
// fuses nothing, so the masked gradient is written once and all three read it - the compiled
// flax_cnn_adamw_b32's input_reduce_select_fusion. (Its lowered temp was +4.6% of XLA's with the window sum
// written and the mask written for each call apart; -1.6% with both rules.)
TEST(XlaGpuModel, AConvolutionsOperandIsWrittenOnceForAllItsReaders) {
  const HloModule modeled = model_of(R"(HloModule jit_step

region_sum {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY main.1 {
  up = f32[8,8,8,16]{3,2,1,0} parameter(0)
  pre = f32[8,16,16,16]{3,2,1,0} parameter(1)
  x = f32[8,16,16,16]{3,2,1,0} parameter(2)
  w = f32[3,3,16,16]{3,2,1,0} parameter(3)
  zero = f32[] constant(0)
  padded = f32[8,17,17,16]{3,2,1,0} pad(up, zero), padding=0_0x1_1_1x1_1_1x0_0
  pooled = f32[8,16,16,16]{3,2,1,0} reduce-window(padded, zero), window={size=1x2x2x1}, to_apply=region_sum
  zeros = f32[8,16,16,16]{3,2,1,0} broadcast(zero), dimensions={}
  mask = pred[8,16,16,16]{3,2,1,0} compare(pre, zeros), direction=GT
  dy = f32[8,16,16,16]{3,2,1,0} select(mask, pooled, zeros)
  dx = f32[8,16,16,16]{3,2,1,0} convolution(dy, w), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01oi->b01f
  dw = f32[3,3,16,16]{3,2,1,0} convolution(x, dy), window={size=16x16 pad=1_1x1_1}, dim_labels=f01b_i01o->01bf
  db = f32[16]{0} reduce(dy, zero), dimensions={0,1,2}, to_apply=region_sum
  ROOT t = (f32[8,16,16,16]{3,2,1,0}, f32[3,3,16,16]{3,2,1,0}, f32[16]{0}) tuple(dx, dw, db)
})");
  EXPECT_EQ(find(modeled, "pooled"), nullptr) << "the window sum is computed where it is read";
  const HloInstruction* dy = find(modeled, "dy");
  ASSERT_NE(dy, nullptr) << "what the cuDNN calls read is written";
  EXPECT_EQ(dy->operands, (std::vector<std::string>{"pre", "up"}));
  size_t written_for_a_call = 0;
  for (const HloInstruction& i : modeled.entry()->instructions)
    written_for_a_call += i.name.starts_with("dy.");
  EXPECT_EQ(written_for_a_call, 0u) << "one buffer for all three readers, not one per call";
  for (const char* reader : {"dx", "dw", "db"}) {
    const HloInstruction* r = find(modeled, reader);
    ASSERT_NE(r, nullptr) << reader;
    EXPECT_TRUE(reads(r, "dy")) << reader;
  }
}

// A donated weight's new value is written over it (input_output_alias), so every reader of the old value
// must run first: XLA's copy insertion gives the readers a copy, which stays only where one of them runs
// after the update (copy_insertion.cc). `dx` reads the old weight and nothing orders it against the update:
// written after it, it needs the copy; the list schedule runs it first and needs none. `both` reads the old
// and the new value: it can only run after the update, so every schedule keeps the 1 MiB copy.
TEST(XlaGpuModel, ADonatedWeightIsReadBeforeItsUpdateOrCopied) {
  auto text = [](bool read_both) {
    return fmt::format(R"(HloModule jit_step, input_output_alias={{ {{0}}: (0, {{}}, may-alias) }}

ENTRY main.1 {{
  w = f32[512,512]{{1,0}} parameter(0)
  x = f32[512,512]{{1,0}} parameter(1)
  h = f32[512,512]{{1,0}} dot(x, w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  g = f32[512,512]{{1,0}} dot(h, h), lhs_contracting_dims={{0}}, rhs_contracting_dims={{0}}
  neww = f32[512,512]{{1,0}} subtract(w, g)
  dx = f32[512,512]{{1,0}} dot(h, w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{1}}
  {}
}})",
                       read_both ? R"(both = f32[512,512]{1,0} add(w, neww)
  ROOT t = (f32[512,512]{1,0}, f32[512,512]{1,0}, f32[512,512]{1,0}) tuple(neww, dx, both))"
                                 : R"(ROOT t = (f32[512,512]{1,0}, f32[512,512]{1,0}) tuple(neww, dx))");
  };
  const auto position = position_of;
  for (bool read_both : {false, true}) {
    SCOPED_TRACE(read_both ? "a reader of both values" : "a reader of the old value");
    const std::string t = text(read_both);
    auto modeled = model_xla_gpu(lowered(t.c_str()));
    ASSERT_TRUE(modeled.ok()) << modeled.error().message();
    copy_donated_parameters(*modeled);
    const size_t copy = position(*modeled, "w.donated-copy");
    ASSERT_LT(copy, modeled->entry()->instructions.size()) << "every reader of w reads its copy";
    const auto& insts = modeled->entry()->instructions;
    EXPECT_TRUE(reads(&insts[copy + 1], "w.donated-copy")) << "the copy is made just before the first reader";
    for (size_t i = 0; i < insts.size(); ++i)
      EXPECT_TRUE(i == copy || !reads(&insts[i], "w")) << insts[i].name << " reads the weight, not its copy";
    HloModule in_order = *modeled, listed = list_scheduled(*modeled);
    remove_unneeded_donation_copies(in_order);
    remove_unneeded_donation_copies(listed);
    // The list schedule runs every operand before its reader (an order asked for against the data - `both`
    // after the update it reads - is dropped, not followed).
    std::set<std::string> ran;
    for (const HloInstruction& x : listed.entry()->instructions) {
      for (const std::string& o : x.operands) EXPECT_TRUE(ran.contains(o)) << x.name << " before " << o;
      ran.insert(x.name);
    }
    // As written, dx runs after the update: the copy stays.
    EXPECT_NE(find(in_order, "w.donated-copy"), nullptr);
    EXPECT_EQ(find(listed, "w.donated-copy") != nullptr, read_both);
    if (!read_both) {
      const auto& order = listed.entry()->instructions;
      size_t last_reader = 0;
      for (size_t i = 0; i < order.size(); ++i)
        if (order[i].name != "neww" && reads(&order[i], "w")) last_reader = i;
      EXPECT_LT(last_reader, position(listed, "neww")) << "every other reader runs before the update";
    }
  }
  const std::string t = text(true);
  auto plan = plan_hlo(lowered(t.c_str()));
  ASSERT_TRUE(plan.ok()) << plan.error().message();
  EXPECT_TRUE(holds(*plan, "w.donated-copy", 1u << 20)) << "the plan holds the copy";
}

// XLA's ListScheduler counts no memory for parameters and constants (IgnoreInstruction): the last reader of
// a parameter frees nothing. The weight's bf16 copy (8 MiB, its f32 weight 16 MiB) is made when the GEMM
// reading it is next, not first because it would "free" the weight; the GEMM that frees `a` runs before it.
TEST(XlaGpuModel, TheListSchedulerFreesNoParameter) {
  const HloModule m = lowered(R"(HloModule jit_step

ENTRY main.1 {
  w = f32[2048,2048]{1,0} parameter(0)
  x = bf16[1024,2048]{1,0} parameter(1)
  s = bf16[2048,2048]{1,0} parameter(2)
  a = bf16[1024,2048]{1,0} dot(x, s), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  b = bf16[1024,2048]{1,0} dot(a, s), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  w16 = bf16[2048,2048]{1,0} convert(w)
  ROOT h = bf16[1024,2048]{1,0} dot(b, w16), lhs_contracting_dims={1}, rhs_contracting_dims={0}
})");
  auto modeled = model_xla_gpu(m);
  ASSERT_TRUE(modeled.ok()) << modeled.error().message();
  const HloModule listed = list_scheduled(*modeled);
  std::vector<std::string> order;
  for (const HloInstruction& x : listed.entry()->instructions)
    if (x.opcode != HloOpcode::kParameter) order.push_back(x.name);
  EXPECT_EQ(order, (std::vector<std::string>{"a", "b", "w16", "h"}));
}

// XLA's algebraic simplifier composes a transpose of a transpose into one, and drops one that permutes
// nothing (HandleTranspose): JAX's StableHLO writes the tied embedding's gradient as a GEMM transposed and
// transposed back. Rank 2 back to the start is the GEMM's own result; rank 3 turned twice is one turn.
TEST(XlaGpuModel, ATransposeOfATransposeIsOneTranspose) {
  const HloModule m = lowered(R"(HloModule jit_step

ENTRY main.1 {
  a = f32[64,128]{1,0} parameter(0)
  b = f32[64,256]{1,0} parameter(1)
  d = f32[128,256]{1,0} dot(a, b), lhs_contracting_dims={0}, rhs_contracting_dims={0}
  t1 = f32[256,128]{1,0} transpose(d), dimensions={1,0}
  t2 = f32[128,256]{1,0} transpose(t1), dimensions={1,0}
  x = f32[4,8,16]{2,1,0} parameter(2)
  u1 = f32[8,16,4]{2,1,0} transpose(x), dimensions={1,2,0}
  u2 = f32[16,4,8]{2,1,0} transpose(u1), dimensions={1,2,0}
  ROOT r = (f32[128,256]{1,0}, f32[16,4,8]{2,1,0}) tuple(t2, u2)
})");
  auto modeled = model_xla_gpu(m);
  ASSERT_TRUE(modeled.ok()) << modeled.error().message();
  EXPECT_EQ(find(*modeled, "t1"), nullptr) << "the first transpose is read by nothing left";
  EXPECT_EQ(find(*modeled, "u1"), nullptr);
  const HloInstruction* t2 = find(*modeled, "t2");
  ASSERT_NE(t2, nullptr);
  EXPECT_EQ(t2->opcode, HloOpcode::kBitcast) << "back where it started: no buffer of its own";
  EXPECT_EQ(t2->operands, (std::vector<std::string>{"d"}));
  const HloInstruction* u2 = find(*modeled, "u2");
  ASSERT_NE(u2, nullptr);
  EXPECT_EQ(u2->opcode, HloOpcode::kTranspose);
  EXPECT_EQ(u2->operands, (std::vector<std::string>{"x"}));
  EXPECT_EQ(u2->dimensions, (std::vector<int64_t>{2, 0, 1}));  // [4,8,16] -> [16,4,8]
  auto plan = plan_hlo(m);
  ASSERT_TRUE(plan.ok()) << plan.error().message();
  for (const PlannedBuffer& b : plan->buffers) EXPECT_NE(b.name, "t1");
}

// The gradient of an embedding lookup is a scatter-add into zeros; added to the tied weight's GEMM
// gradient, XLA's algebraic simplifier makes it a scatter-add into the GEMM's result.
TEST(XlaGpuModel, AnAddOfAScatterIntoZerosScattersIntoTheOtherOperand) {
  const HloModule m = lowered(R"(HloModule jit_step

region_add.1 {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY main.2 {
  dlogits = f32[64,32000]{1,0} parameter(0)
  h = f32[64,1024]{1,0} parameter(1)
  ids = s32[64,1]{1,0} parameter(2)
  dx = f32[64,1024]{1,0} parameter(3)
  dw = f32[32000,1024]{1,0} dot(dlogits, h), lhs_contracting_dims={0}, rhs_contracting_dims={0}
  zero = f32[] constant(0)
  zeros = f32[32000,1024]{1,0} broadcast(zero), dimensions={}
  lookup_grad = f32[32000,1024]{1,0} scatter(zeros, ids, dx), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=region_add.1
  ROOT grad = f32[32000,1024]{1,0} add(dw, lookup_grad)
})");
  auto modeled = model_xla_gpu(m);
  ASSERT_TRUE(modeled.ok()) << modeled.error().message();
  const HloInstruction* grad = find(*modeled, "grad");
  ASSERT_NE(grad, nullptr);
  EXPECT_EQ(grad->opcode, HloOpcode::kScatter);
  ASSERT_EQ(grad->operands.size(), 3u);
  EXPECT_EQ(grad->operands[0], "dw");
  EXPECT_EQ(find(*modeled, "lookup_grad"), nullptr);
  EXPECT_EQ(find(*modeled, "zeros"), nullptr);
}

// A language model's loss as JAX lowers it, forward and backward: the log-softmax of the logits, the
// log-likelihood of each row's label picked by a gather, and the gradient's division of each row's
// cotangent - summed over a dimension of size 1 first - by the softmax's sum, read through a broadcast by
// the backward pass's [rows, vocabulary] fusion. Three rules of XLA:GPU meet here, each in the compiled GPT
// steps (loop_divide_select_fusion): the sum over one element is a reshape (algebraic_simplifier.cc,
// HandleReduce), not a kernel; the division is written once (19 flops an element, recomputed for each of
// 50257 columns, 5% of which shows over the fusion's traffic, outweighs a launch - priority fusion's run
// times); and the gathered log-likelihood is a loop fusion, not a softmax's Triton fusion (the diamond's root
// writes whole rows). With 8 columns the division is recomputed where it is read.
TEST(XlaGpuModel, ALossGradientsPerRowDivisionIsWrittenOnce) {
  const std::string program = std::string(kLogSoftmaxLoss) + R"(  dy = f32[ROWS,1]{1,0} parameter(2)
  gs = f32[ROWS]{0} reduce(dy, zero), dimensions={1}, to_apply=region_add.1
  d = f32[ROWS]{0} divide(gs, s)
  db = f32[ROWS,VOCAB]{1,0} broadcast(d), dimensions={0}
  g = f32[ROWS,VOCAB]{1,0} multiply(e, db)
  out = bf16[ROWS,VOCAB]{1,0} convert(g)
  ROOT r = (f32[ROWS,1]{1,0}, bf16[ROWS,VOCAB]{1,0}) tuple(picked, out)
})";
  auto with_vocab = [&](const char* vocab) {
    return model_of(with_all(with_all(program, "ROWS", "16384"), "VOCAB", vocab));
  };
  const HloModule gpt = with_vocab("50257");
  EXPECT_EQ(find(gpt, "gs"), nullptr) << "a sum over one element is a reshape, fused into its reader";
  const auto d = written(gpt, "d");
  ASSERT_TRUE(d.has_value()) << "the division is written once for the [rows, vocabulary] fusion";
  EXPECT_EQ(d->opcode, HloOpcode::kDivide);
  // The sum it reads directly, then what the fused reshape reads (XLA's fusion appends a producer's
  // operands).
  EXPECT_EQ(d->operands, (std::vector<std::string>{"s", "dy"}));
  const auto picked = written(gpt, "picked");
  ASSERT_TRUE(picked.has_value());
  EXPECT_EQ(picked->opcode, HloOpcode::kGather);
  EXPECT_EQ(picked->custom_call_target, "") << "a loop fusion, not a normalization";
  // Both read the softmax's sum over the same rows: one kernel writes them (the compiled GPT steps'
  // loop_divide_select_fusion), so the log-likelihood is computed where the gradient is.
  ASSERT_NE(fusion_of(gpt, "d"), nullptr);
  EXPECT_EQ(fusion_of(gpt, "d"), fusion_of(gpt, "picked"));
  const HloModule narrow = with_vocab("8");
  EXPECT_EQ(find(narrow, "d"), nullptr) << "8 columns: recomputed by the fusion that reads it";
  EXPECT_EQ(find(narrow, "gs"), nullptr);
}

// Host offload as jax.checkpoint's offload_dot_with_no_batch_dims lowers it: the forward's GEMM result is
// annotated to the pinned host, forwarded through the remat barrier, and annotated back to the device for
// the backward. The host copy is host memory (host_temp, not temp); XLA's latency-hiding scheduler takes it
// just before the barrier, so the GEMM's result stays on the device until then, and the way back is a device
// buffer of its own. A to-device annotation of a device value moves nothing.
TEST(XlaGpuModel, AValueAnnotatedToThePinnedHostIsHostMemory) {
  const HloModule m = lowered(R"(HloModule jit_step

ENTRY main.3 {
  x = f32[256,1024]{1,0} parameter(0)
  w = f32[1024,1024]{1,0} parameter(1)
  h = f32[256,1024]{1,0} dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  to_host = f32[256,1024]{1,0} custom-call(h), custom_call_target="annotate_device_placement", custom_call_has_side_effect=true, frontend_attributes={_xla_buffer_placement="pinned_host"}
  y = f32[256,1024]{1,0} tanh(h)
  t = (f32[256,1024]{1,0}, f32[256,1024]{1,0}) tuple(to_host, y)
  barrier = (f32[256,1024]{1,0}, f32[256,1024]{1,0}) opt-barrier(t)
  saved = f32[256,1024]{1,0} get-tuple-element(barrier), index=0
  back = f32[256,1024]{1,0} custom-call(saved), custom_call_target="annotate_device_placement", custom_call_has_side_effect=true, frontend_attributes={_xla_buffer_placement="device"}
  still = f32[1024,1024]{1,0} custom-call(w), custom_call_target="annotate_device_placement", custom_call_has_side_effect=true, frontend_attributes={_xla_buffer_placement="device"}
  dw = f32[1024,1024]{1,0} dot(back, x), lhs_contracting_dims={0}, rhs_contracting_dims={0}
  ROOT r = f32[1024,1024]{1,0} add(dw, still)
})");
  EXPECT_EQ(find(m, "to_host")->buffer_placement(), "pinned_host");
  auto modeled = model_xla_gpu(m);
  ASSERT_TRUE(modeled.ok()) << modeled.error().message();
  const HloInstruction* to_host = find(*modeled, "to_host");
  ASSERT_NE(to_host, nullptr);
  EXPECT_EQ(to_host->shape.memory_space, kHostMemorySpace);
  EXPECT_EQ(find(*modeled, "saved")->shape.memory_space, kHostMemorySpace);
  EXPECT_EQ(find(*modeled, "back")->shape.memory_space, 0u);
  EXPECT_EQ(find(*modeled, "still")->opcode, HloOpcode::kBitcast);
  // The copy to the host runs just before the barrier that reads it.
  const HloModule hidden = latency_hiding_scheduled(*modeled, 80ull << 30);
  const auto& order = hidden.entry()->instructions;
  size_t at = 0;
  while (at < order.size() && order[at].name != "to_host") ++at;
  ASSERT_LT(at + 1, order.size());
  EXPECT_TRUE(order[at + 1].name == "t" || order[at + 1].name == "barrier") << order[at + 1].name;
  auto plan = plan_hlo(m);
  ASSERT_TRUE(plan.ok()) << plan.error().message();
  EXPECT_EQ(plan->host_temp_bytes, 1u << 20);  // the one offloaded f32[256,1024]
  for (const PlannedBuffer& b : plan->buffers) EXPECT_EQ(b.host_memory, b.name == "to_host") << b.name;
}

// Allocations are per memory space, as XLA's buffer colors are: the result's device allocation is free while
// the offloaded value lives (it is written last, and is the same size), yet the host value does not move into
// it - it stays host memory, in host_temp.
TEST(XlaGpuModel, AHostValueIsNeverPlacedInADeviceAllocation) {
  const HloModule m = lowered(R"(HloModule jit_step

ENTRY main.3 {
  x = f32[256,1024]{1,0} parameter(0)
  w = f32[1024,1024]{1,0} parameter(1)
  to_host = f32[256,1024]{1,0} custom-call(x), custom_call_target="annotate_device_placement", custom_call_has_side_effect=true, frontend_attributes={_xla_buffer_placement="pinned_host"}
  t = (f32[256,1024]{1,0}) tuple(to_host)
  barrier = (f32[256,1024]{1,0}) opt-barrier(t)
  saved = f32[256,1024]{1,0} get-tuple-element(barrier), index=0
  back = f32[256,1024]{1,0} custom-call(saved), custom_call_target="annotate_device_placement", custom_call_has_side_effect=true, frontend_attributes={_xla_buffer_placement="device"}
  ROOT r = f32[256,1024]{1,0} dot(back, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
})");
  auto plan = plan_hlo(m);
  ASSERT_TRUE(plan.ok()) << plan.error().message();
  EXPECT_EQ(plan->host_temp_bytes, 1u << 20);
  EXPECT_EQ(plan->host_value_bytes, 1u << 20);
  bool seen = false;
  for (const PlannedBuffer& b : plan->buffers) {
    if (b.name != "to_host") continue;
    seen = true;
    EXPECT_TRUE(b.host_memory);
    EXPECT_EQ(b.kind, BufferKind::kTemp);
  }
  EXPECT_TRUE(seen);
}

// StableHLO lists ops in JAX's tracing order; XLA converts it to HLO and orders each computation by
// MakeInstructionPostOrder - depth first from the result, first operands first. Here the text computes the
// second result's GEMM first; XLA's order (and so the modeled program's) computes the first result's first.
TEST(XlaGpuModel, AStableHloProgramIsPlannedInXlasPostOrder) {
  auto m = parse_program_text(R"(module @jit_step {
  func.func public @main(%arg0: tensor<2048x2048xf32>, %arg1: tensor<2048x2048xf32>) -> (tensor<2048x2048xf32>, tensor<2048x2048xf32>) {
    %0 = stablehlo.dot_general %arg1, %arg1, contracting_dims = [1] x [0] : (tensor<2048x2048xf32>, tensor<2048x2048xf32>) -> tensor<2048x2048xf32>
    %1 = stablehlo.dot_general %arg0, %arg0, contracting_dims = [1] x [0] : (tensor<2048x2048xf32>, tensor<2048x2048xf32>) -> tensor<2048x2048xf32>
    return %1, %0 : tensor<2048x2048xf32>, tensor<2048x2048xf32>
  }
}
)");
  ASSERT_TRUE(m.ok()) << m.error().message();
  auto modeled = model_xla_gpu(*m);
  ASSERT_TRUE(modeled.ok()) << modeled.error().message();
  std::vector<std::string> gemm_inputs;  // each GEMM's first operand, in the modeled order
  for (const HloInstruction& i : modeled->entry()->instructions)
    if (i.opcode != HloOpcode::kParameter && i.opcode != HloOpcode::kTuple && !i.operands.empty())
      gemm_inputs.push_back(i.operands.front());
  ASSERT_EQ(gemm_inputs.size(), 2u);
  const HloInstruction* first = find(*modeled, gemm_inputs[0]);
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(first->parameter_number, 0) << "the first result's GEMM (of %arg0) comes first";
}

// Split-K: a small-batch GEMM (128 rows: 8 output tiles for 132 SMs) writes f32 partials, one per split of
// its contraction, and each consumer sums them again - so the backward pass, which reads the pre-activation
// again for gelu's derivative, keeps the partials (as XLA's compiled mlp_mean_grads_b128 does), not the
// summed value. A GEMM with tiles enough for the GPU is not split.
TEST(XlaGpuModel, ASmallBatchGemmIsSplitAlongItsContraction) {
  const HloModule m = lowered(R"(HloModule jit_step

ENTRY main.1 {
  x = f32[128,1024]{1,0} parameter(0)
  w = f32[1024,1024]{1,0} parameter(1)
  big = f32[4096,1024]{1,0} parameter(2)
  z = f32[128,1024]{1,0} dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  h = f32[128,1024]{1,0} tanh(z)
  y = f32[128,1024]{1,0} dot(h, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  dz = f32[128,1024]{1,0} multiply(y, z)
  g = f32[1024,1024]{1,0} dot(big, big), lhs_contracting_dims={0}, rhs_contracting_dims={0}
  ROOT t = (f32[128,1024]{1,0}, f32[1024,1024]{1,0}) tuple(dz, g)
})");
  auto modeled = model_xla_gpu(m);
  ASSERT_TRUE(modeled.ok()) << modeled.error().message();
  // 1024 of contraction, at least 128 per split: 8 splits (16 would fill the GPU better).
  const HloInstruction* partials = find(*modeled, "z.split_k");
  ASSERT_NE(partials, nullptr);
  EXPECT_EQ(partials->shape.to_string(), "f32[8,128,1024]");
  EXPECT_EQ(find(*modeled, "z"), nullptr) << "the sum over the splits is fused into each consumer";
  const HloInstruction* h = find(*modeled, "h");
  ASSERT_NE(h, nullptr);
  EXPECT_EQ(h->operands, (std::vector<std::string>{"z.split_k"}));
  const HloInstruction* dz = find(*modeled, "dz");
  ASSERT_NE(dz, nullptr);
  EXPECT_TRUE(reads(dz, "z.split_k"));
  // 1024x1024 is 64 tiles: split 2 with 4096 of contraction (as XLA split GPT's 1024x1024 weight gradient).
  const HloInstruction* g = find(*modeled, "g.split_k");
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(g->shape.to_string(), "f32[2,1024,1024]");
  ASSERT_NE(find(*modeled, "g"), nullptr) << "a result of the program is summed into its own buffer";
  // The partials of z live until dz: 4 MiB of them in the plan's temp.
  auto plan = plan_hlo(m);
  ASSERT_TRUE(plan.ok()) << plan.error().message();
  EXPECT_TRUE(holds(*plan, "z.split_k", 4u << 20));
}

// A product of a few rows is one tile of rows by 128 columns (XLA's Triton configurations for a small M):
// a decode step's 8 rows by a 32000-word vocabulary is 250 tiles and fills the GPU unsplit, as the compiled
// gpt_fp32_decode_b8 writes its logits; its 8 x 3072 projection, 24 tiles, is split 4, as XLA split it.
TEST(XlaGpuModel, AFewRowsByManyColumnsFillTheGpuUnsplit) {
  const HloModule m = model_of(R"(HloModule jit_step

ENTRY main.1 {
  x = f32[8,1024]{1,0} parameter(0)
  head = f32[1024,32000]{1,0} parameter(1)
  wqkv = f32[1024,3072]{1,0} parameter(2)
  logits = f32[8,32000]{1,0} dot(x, head), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  qkv = f32[8,3072]{1,0} dot(x, wqkv), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT t = (f32[8,32000]{1,0}, f32[8,3072]{1,0}) tuple(logits, qkv)
})");
  EXPECT_EQ(find(m, "logits.split_k"), nullptr);
  const HloInstruction* qkv = find(m, "qkv.split_k");
  ASSERT_NE(qkv, nullptr);
  EXPECT_EQ(qkv->shape.to_string(), "f32[4,8,3072]");
}

// Donated arguments with no output named (buffer_donor=, JAX's jax.buffer_donor) are paired as XLA's
// OptimizeInputOutputBufferAlias pairs them: largest first, equal sizes, one memory space at a time, never an
// argument or output already aliased. Parameter 0's update aliases it; parameter 1 finds no output of its
// size; parameter 2 (host memory) matches only the host output; parameter 3 is aliased already.
TEST(XlaGpuModel, BufferDonorsAliasOutputsOfTheirSize) {
  HloModule m = lowered(
      R"(HloModule jit_step, input_output_alias={ {4}: (3, {}, may-alias) }, buffer_donor={ (0, {}), (1, {}), (2, {}), (3, {}) }

ENTRY main.1 {
  p0 = f32[1024,1024]{1,0} parameter(0)
  p1 = f32[512]{0} parameter(1)
  p2 = f32[256]{0:S(5)} parameter(2)
  p3 = f32[256]{0} parameter(3)
  n0 = f32[1024,1024]{1,0} negate(p0)
  d = f32[256]{0} add(p3, p3)
  h = f32[256]{0:S(5)} negate(p2)
  s = f32[64]{0} slice(p1), slice={[0:64]}
  ROOT t = (f32[64]{0}, f32[1024,1024]{1,0}, f32[256]{0}, f32[256]{0:S(5)}, f32[256]{0}) tuple(s, n0, d, h, d)
}
)");
  ASSERT_EQ(m.buffer_donors.size(), 4u);
  alias_buffer_donors(m);
  EXPECT_TRUE(m.buffer_donors.empty());
  std::set<std::pair<std::vector<uint64_t>, int64_t>> aliases;
  for (const HloAlias& a : m.aliases) aliases.emplace(a.output_index, a.parameter);
  const std::set<std::pair<std::vector<uint64_t>, int64_t>> expected = {{{4}, 3}, {{1}, 0}, {{3}, 2}};
  EXPECT_EQ(aliases, expected);
  auto plan = plan_hlo(std::move(m));
  ASSERT_TRUE(plan.ok()) << plan.error().message();
  EXPECT_EQ(plan->alias_bytes, 1024u * 1024 * 4 + 256 * 4);
  EXPECT_EQ(plan->host_alias_bytes, 256u * 4);
}

// Each device's share of a parameter: Shardy's sdy.sharding splits a dimension by the product of the mesh
// axes it names (a sub-axis "x":(1)2 by its size), GSPMD's mhlo.sharding by its tiles less a replicated
// last one; shares round up, as XLA pads the last shard.
TEST(XlaGpuModel, AShardedArgumentsShareOfEachDevice) {
  auto m = parse_program_text(R"(module @jit_f attributes {mhlo.num_partitions = 8 : i32} {
  sdy.mesh @mesh = <["x"=4, "y"=2]>
  func.func public @main(%arg0: tensor<1000x64xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x", "y"}, {}]>}, %arg1: tensor<64x64xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"x":(1)2}]>}, %arg2: tensor<64x30xf32> {mhlo.sharding = "{devices=[1,4,2]<=[8] last_tile_dim_replicate}"}, %arg3: tensor<64xf32> {jax.buffer_donor = true, sdy.sharding = #sdy.sharding<@mesh, [{"y"}]>}) -> (tensor<64xf32>, tensor<1000x64xf32> {jax.result_info = "[1]", sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>}) {
    %0 = stablehlo.negate %arg3 : tensor<64xf32>
    %1 = stablehlo.negate %arg0 : tensor<1000x64xf32>
    return %0, %1 : tensor<64xf32>, tensor<1000x64xf32>
  }
}
)");
  ASSERT_TRUE(m.ok()) << m.error().message();
  auto plan = plan_hlo(std::move(*m));
  ASSERT_TRUE(plan.ok()) << plan.error().message();
  EXPECT_EQ(plan->partitions, 8u);
  // 1000 rows over 8 devices: 125 each; 64 columns over 2: 32; 30 columns over 4: 8 (rounded up); 64 over 2.
  EXPECT_EQ(plan->argument_bytes, (125u * 64 + 64 * 32 + 64 * 8 + 32) * 4);
  EXPECT_EQ(plan->alias_bytes, 32u * 4);  // the donated argument's share, written over
  // That share, the second result as its own sharding splits it (250 rows), the results' tuple table.
  EXPECT_EQ(plan->output_bytes, 32u * 4 + 250 * 64 * 4 + 2 * 8);
  // Partitioned: the plan is one device's.
  EXPECT_TRUE(plan->partitioned);

  // The same in HLO text: the ENTRY root's tuple sharding splits its results.
  auto hlo = parse_program_text(R"(HloModule jit_f, buffer_donor={ (1, {}) }

ENTRY main.5 {
  Arg_0.1 = f32[1000,64]{1,0} parameter(0), sharding={devices=[8,1]<=[8]}
  Arg_1.2 = f32[64]{0} parameter(1), sharding={devices=[2,4]<=[8] last_tile_dim_replicate}
  negate.3 = f32[64]{0} negate(Arg_1.2)
  negate.4 = f32[1000,64]{1,0} negate(Arg_0.1)
  ROOT tuple.5 = (f32[64]{0}, f32[1000,64]{1,0}) tuple(negate.3, negate.4), sharding={{devices=[2,4]<=[8] last_tile_dim_replicate}, {devices=[4,1,2]<=[8] last_tile_dim_replicate}}
}
)");
  ASSERT_TRUE(hlo.ok()) << hlo.error().message();
  auto hlo_plan = plan_hlo(std::move(*hlo));
  ASSERT_TRUE(hlo_plan.ok()) << hlo_plan.error().message();
  EXPECT_EQ(hlo_plan->argument_bytes, (125u * 64 + 32) * 4);
  EXPECT_EQ(hlo_plan->output_bytes, 32u * 4 + 250 * 64 * 4 + 2 * 8);
  EXPECT_EQ(hlo_plan->alias_bytes, 32u * 4);
}

// with_sharding_constraint's Sharding custom call and shard_map's shape changes take no memory: the
// partitioner leaves nothing of the first (its operand already holds that share) and XLA's ShardingRemover
// makes the others bitcasts (xla/service/sharding_remover.cc) - where a custom call would be a copy of its
// own. shard_map's body is written in each device's shapes already.
TEST(XlaGpuModel, ShardingAnnotationsAreNoBuffers) {
  HloModule m = lowered(R"(HloModule jit_f

ENTRY main.1 {
  p = f32[1024,1024]{1,0} parameter(0), sharding={devices=[8,1]<=[8]}
  n = f32[1024,1024]{1,0} negate(p)
  c = f32[1024,1024]{1,0} custom-call(n), custom_call_target="Sharding", sharding={devices=[8,1]<=[8]}
  f = f32[128,1024]{1,0} custom-call(c), custom_call_target="SPMDFullToShardShape", sharding={manual}
  e = f32[128,1024]{1,0} exponential(f)
  s = f32[128,1024]{1,0} custom-call(e), custom_call_target="Sharding", sharding={manual}
  g = f32[1024,1024]{1,0} custom-call(s), custom_call_target="SPMDShardToFullShape", sharding={devices=[8,1]<=[8]}
  ROOT t = f32[1024,1024]{1,0} negate(g)
}
)");
  auto modeled = model_xla_gpu(HloModule(m));
  ASSERT_TRUE(modeled.ok()) << modeled.error().message();
  for (const HloInstruction& x : modeled->entry()->instructions)
    EXPECT_NE(x.opcode, HloOpcode::kCustomCall) << x.name;
  auto plan = plan_hlo(std::move(m));
  ASSERT_TRUE(plan.ok()) << plan.error().message();
  // Each device's share in and out (128 rows), nothing gathered; as copies, the four custom calls held 2 MiB.
  EXPECT_EQ(plan->argument_bytes, 128u * 1024 * 4);
  EXPECT_EQ(plan->output_bytes, 128u * 1024 * 4);
  EXPECT_EQ(plan->temp_bytes, 0u);
}

// Int4 weights (weight-only quantized serving) are packed two to a byte on the GPU (SubByteNormalization):
// a lowered program's s4 parameter is half its element count in bytes, as the compiled module's E(4) layout
// says; the bf16 it is widened into is not.
TEST(XlaGpuModel, FourBitArraysArePackedTwoToAByte) {
  HloModule m = lowered(R"(HloModule jit_f

ENTRY main.1 {
  w = s4[4096,4096]{1,0} parameter(0)
  x = bf16[16,4096]{1,0} parameter(1)
  c = bf16[4096,4096]{1,0} convert(w)
  ROOT d = bf16[16,4096]{1,0} dot(x, c), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
)");
  auto plan = plan_hlo(std::move(m));
  ASSERT_TRUE(plan.ok()) << plan.error().message();
  EXPECT_EQ(plan->argument_bytes, 4096u * 4096 / 2 + 16 * 4096 * 2);
  EXPECT_EQ(plan->output_bytes, 16u * 4096 * 2);
}

// ViT's class token joined to the patch embeddings, the position embedding added, then a layer norm: the
// norm is a Triton fusion that cannot take a concatenate in, and priority fusion fuses a producer into all
// of its readers or none, so the concatenate is written once (XLA's input_concatenate_fusion) and read by
// the norm and the residual add; its patch GEMM's result dies at it. Without the rule the norm and the
// residual add each recompute the concatenate from the GEMM's result, which then lives as long.
// p0 + p1 + ... + p199 (XLA's own AvoidsLargeFusion test): a fusion takes at most 64 operands and outputs,
// so the running sum is written out where one more argument would pass that, and each fusion reads at most
// 63 buffers.
TEST(XlaGpuModel, AFusionReadsAtMost63Buffers) {
  std::string text = "HloModule jit_sum\n\nENTRY main.1 {\n  p0 = f32[1024]{0} parameter(0)\n";
  for (int k = 1; k < 200; ++k) text += fmt::format("  p{} = f32[1024]{{0}} parameter({})\n", k, k);
  std::string sum = "p0";
  for (int k = 1; k < 200; ++k) {
    text += fmt::format("  {}s{} = f32[1024]{{0}} add({}, p{})\n", k == 199 ? "ROOT " : "", k, sum, k);
    sum = fmt::format("s{}", k);
  }
  text += "}\n";
  auto modeled = model_xla_gpu(lowered(text.c_str()));
  ASSERT_TRUE(modeled.ok()) << modeled.error().message();
  size_t sums = 0;
  for (const HloInstruction& i : modeled->entry()->instructions) {
    if (i.opcode == HloOpcode::kParameter) continue;
    EXPECT_LE(i.operands.size(), 63u) << i.name;
    ++sums;
  }
  // s62 (p0..p62), s124 (s62, p63..p124), s186 (s124, p125..p186) and the result (s186, p187..p199).
  EXPECT_EQ(sums, 4u);
}

TEST(XlaGpuModel, ANormsInputBuiltByAConcatenateIsWrittenOnce) {
  const HloModule m = lowered(std::string(kSumRegion) + R"(ENTRY main.1 {
  cls = f32[64]{0} parameter(0)
  patches = f32[8,16,64]{2,1,0} parameter(1)
  w = f32[64,64]{1,0} parameter(2)
  pos = f32[17,64]{1,0} parameter(3)
  w2 = f32[64,64]{1,0} parameter(4)
  tok = f32[8,1,64]{2,1,0} broadcast(cls), dimensions={2}
  emb = f32[8,16,64]{2,1,0} dot(patches, w), lhs_contracting_dims={2}, rhs_contracting_dims={0}
  cat = f32[8,17,64]{2,1,0} concatenate(tok, emb), dimensions={1}
  posb = f32[8,17,64]{2,1,0} broadcast(pos), dimensions={1,2}
  x = f32[8,17,64]{2,1,0} add(cat, posb)
  zero = f32[] constant(0)
  sum = f32[8,17]{1,0} reduce(x, zero), dimensions={2}, to_apply=region_0.1
  mean = f32[8,17,64]{2,1,0} broadcast(sum), dimensions={0,1}
  centered = f32[8,17,64]{2,1,0} subtract(x, mean)
  h = f32[8,17,64]{2,1,0} dot(centered, w2), lhs_contracting_dims={2}, rhs_contracting_dims={0}
  ROOT y = f32[8,17,64]{2,1,0} add(x, h)
})");
  auto modeled = model_xla_gpu(m);
  ASSERT_TRUE(modeled.ok()) << modeled.error().message();
  ASSERT_NE(find(*modeled, "cat"), nullptr) << "the concatenate is a buffer";
  EXPECT_EQ(find(*modeled, "x"), nullptr) << "the position embedding's add is recomputed from it";
  // The norm is one fusion, its mean inside it (SoftmaxRewriterTriton's diamond), written for the GEMM.
  EXPECT_EQ(find(*modeled, "sum"), nullptr) << "the mean is computed inside the norm's fusion";
  const HloInstruction* norm = find(*modeled, "centered");
  ASSERT_NE(norm, nullptr);
  EXPECT_TRUE(reads(norm, "cat"));
  EXPECT_FALSE(reads(norm, "emb")) << "the norm reads the concatenate, not the patch GEMM's result";
  // A plain reduction of a concatenate (no diamond) takes it in, as XLA's input fusions do.
  const HloModule plain = lowered(std::string(kSumRegion) + R"(ENTRY main.1 {
  p = f32[8,16,64]{2,1,0} parameter(0)
  q = f32[8,1,64]{2,1,0} parameter(1)
  cat = f32[8,17,64]{2,1,0} concatenate(q, p), dimensions={1}
  zero = f32[] constant(0)
  ROOT sum = f32[8,17]{1,0} reduce(cat, zero), dimensions={2}, to_apply=region_0.1
})");
  auto plain_modeled = model_xla_gpu(plain);
  ASSERT_TRUE(plain_modeled.ok()) << plain_modeled.error().message();
  EXPECT_EQ(find(*plain_modeled, "cat"), nullptr);
}

// A GEMM's epilogue may read only parameters, their bitcasts and broadcasts (the output side of
// triton_tiling_propagation.cc): a bias add is written by the GEMM, a residual add of a computed value is
// not - the GEMM writes its product and the sum is recomputed by the sum's readers.
TEST(XlaGpuModel, ABiasIsAGemmEpilogueAResidualSumIsNot) {
  const HloModule m = lowered(R"(HloModule jit_step

ENTRY main.1 {
  x = f32[4096,2048]{1,0} parameter(0)
  w = f32[2048,2048]{1,0} parameter(1)
  b = f32[2048]{0} parameter(2)
  h = f32[4096,2048]{1,0} negate(x)
  d1 = f32[4096,2048]{1,0} dot(h, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  bias.1 = f32[1,2048]{1,0} reshape(b)
  bias.2 = f32[4096,2048]{1,0} broadcast(bias.1), dimensions={0,1}
  e1 = f32[4096,2048]{1,0} add(d1, bias.2)
  d2 = f32[4096,2048]{1,0} dot(e1, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  r = f32[4096,2048]{1,0} add(h, d2)
  a = f32[4096,2048]{1,0} exponential(r)
  c = f32[4096,2048]{1,0} tanh(r)
  ROOT t = (f32[4096,2048]{1,0}, f32[4096,2048]{1,0}) tuple(a, c)
})");
  auto modeled = model_xla_gpu(m);
  ASSERT_TRUE(modeled.ok()) << modeled.error().message();
  EXPECT_EQ(find(*modeled, "d1"), nullptr) << "the bias add is the GEMM's epilogue";
  const HloInstruction* e1 = find(*modeled, "e1");
  ASSERT_NE(e1, nullptr);
  EXPECT_EQ(e1->custom_call_target, "__memfit$gemm_with_epilogue");
  ASSERT_NE(find(*modeled, "d2"), nullptr) << "the GEMM under a residual sum writes its own product";
  EXPECT_EQ(find(*modeled, "r"), nullptr) << "the residual sum is recomputed by its two readers";
  const auto a = written(*modeled, "a");
  ASSERT_TRUE(a.has_value());
  EXPECT_TRUE(reads(a, "d2"));
}

// Priority fusion over ViT inference's residual stream, on the program JAX lowered (bundled): x + attention
// is recomputed by the norm and the next sum that read it, x + attention + MLP is written once a layer - it
// would be read by three fusions - and, its fusion's operands ordered as XLA's fusion appends them, it
// takes the MLP product's memory. The attention's [b, h, s, d] product is written by its GEMM and
// transposed to [b, s, h, d] by a fusion of its own before the projection reads it. As in the compiled
// program (gemm_fusion_dot.50, loop_transpose_fusion.11, gemm_fusion_dot.2, loop_add_fusion.10).
TEST(XlaGpuModel, ViTsResidualStreamIsWrittenOnceALayer) {
  auto text = read_file(std::string(MEMFIT_TEST_DATA_DIR) + "/xla/vit_b16_infer_b256.lowered.hlo.txt.gz");
  ASSERT_TRUE(text.ok()) << text.error().message();
  auto m = parse_hlo_module(*text);
  ASSERT_TRUE(m.ok()) << m.error().message();
  auto modeled = model_xla_gpu(*m);
  ASSERT_TRUE(modeled.ok()) << modeled.error().message();
  EXPECT_EQ(find(*modeled, "add.282"), nullptr) << "x + attention, read by the norm and the next sum";
  ASSERT_NE(find(*modeled, "add.298"), nullptr) << "x + attention + MLP + bias";
  ASSERT_NE(find(*modeled, "dot_general.77"), nullptr) << "the attention's product, batched";
  const HloInstruction* transposed = find(*modeled, "reshape.51");
  ASSERT_NE(transposed, nullptr) << "its transpose, written before the projection";
  EXPECT_EQ(transposed->operands, (std::vector<std::string>{"dot_general.77"}));
  const HloInstruction* projection = find(*modeled, "dot_general.78");
  ASSERT_NE(projection, nullptr);
  EXPECT_EQ(projection->operands.front(), "reshape.51");
  auto plan = plan_hlo(std::move(*m));
  ASSERT_TRUE(plan.ok()) << plan.error().message();
  const PlannedBuffer* sum = nullptr;
  const PlannedBuffer* mlp = nullptr;
  for (const PlannedBuffer& b : plan->buffers) {
    if (b.name == "add.298") sum = &b;
    if (b.name == "dot_general.80") mlp = &b;
  }
  ASSERT_NE(sum, nullptr);
  ASSERT_NE(mlp, nullptr);
  EXPECT_EQ(sum->offset, mlp->offset) << "the sum takes its MLP operand's memory";
  EXPECT_EQ(mlp->end, sum->start);
}

// A norm's normalized rows, which a GEMM cannot take in (they read a broadcast of computed statistics), are
// written for the GEMM just before it - while the norm's other readers recompute them from the input and
// the statistics, so no normalized copy is held from the forward pass to the backward one (the compiled
// ViT keeps the residuals, not the norms). A value only GEMMs read is one buffer they share.
TEST(XlaGpuModel, ANormWrittenForAGemmIsRecomputedByItsOtherReaders) {
  const std::string text = std::string(kSumRegion) + R"(ENTRY main.1 {
  x = f32[4096,2048]{1,0} parameter(0)
  w = f32[2048,2048]{1,0} parameter(1)
  zero = f32[] constant(0)
  sq = f32[4096,2048]{1,0} multiply(x, x)
  ss = f32[4096]{0} reduce(sq, zero), dimensions={1}, to_apply=region_0.1
  r = f32[4096]{0} rsqrt(ss)
  rb = f32[4096,2048]{1,0} broadcast(r), dimensions={0}
  n = f32[4096,2048]{1,0} multiply(x, rb)
  d = f32[4096,2048]{1,0} dot(n, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  OTHER
})";
  auto with = [&](const std::string& other) { return model_of(with_other(text, other)); };
  const HloModule reduced = with(
      "g = f32[2048]{0} reduce(n, zero), dimensions={0}, to_apply=region_0.1\n"
      "  ROOT t = (f32[4096,2048]{1,0}, f32[2048]{0}) tuple(d, g)");
  EXPECT_EQ(find(reduced, "n"), nullptr) << "no normalized buffer shared by all readers";
  const HloInstruction* copy = find(reduced, "n.for.d");
  ASSERT_NE(copy, nullptr) << "the rows written for the GEMM";
  EXPECT_EQ(copy->custom_call_target, "__memfit$gemm_input");
  const std::vector<std::string>& d_reads = find(reduced, "d")->operands;
  EXPECT_EQ(d_reads, (std::vector<std::string>{"w", "n.for.d"})) << "the GEMM reads the copy, not x";
  const HloInstruction* g = find(reduced, "g");
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(reads(g, "x")) << "the other reader recomputes the rows from the input";
  const HloModule two_gemms = with(
      "d2 = f32[4096,2048]{1,0} dot(n, w), lhs_contracting_dims={1}, rhs_contracting_dims={1}\n"
      "  ROOT t = (f32[4096,2048]{1,0}, f32[4096,2048]{1,0}) tuple(d, d2)");
  ASSERT_NE(find(two_gemms, "n"), nullptr) << "read by GEMMs alone: one buffer";
  EXPECT_EQ(find(two_gemms, "n.for.d"), nullptr);
  // A program's own instruction of the copy's name keeps it; the copy takes another.
  const HloModule named = with(
      "g = f32[2048]{0} reduce(n, zero), dimensions={0}, to_apply=region_0.1\n"
      "  n.for.d = f32[2048]{0} reduce(x, zero), dimensions={0}, to_apply=region_0.1\n"
      "  ROOT t = (f32[4096,2048]{1,0}, f32[2048]{0}, f32[2048]{0}) tuple(d, g, n.for.d)");
  ASSERT_NE(find(named, "n.for.d"), nullptr);
  EXPECT_EQ(find(named, "n.for.d")->shape.to_string(), "f32[2048]");
  EXPECT_EQ(find(named, "d")->operands, (std::vector<std::string>{"w", "n.for.d$"}));
}

// A two-pass norm in bf16 whose scale is cast from f32 (mixed precision): the normalized rows end the norm's
// Triton fusion, and the scaled rows - which no GEMM can take in, the cast being a narrowing one - are a
// loop fusion of their own read by the forward and the backward GEMM. Rows the backward pass reads too
// (the scale's gradient) are written once and read by both fusions, as the compiled gpt_mixed_donate keeps
// each norm's rows beside its output; rows only the scale reads are fused into it.
TEST(XlaGpuModel, ANormsRowsSeveralFusionsReadAreWrittenOnce) {
  const std::string text = std::string(kSumRegion) + R"(ENTRY main.1 {
  x = bf16[4096,2048]{1,0} parameter(0)
  w = f32[2048,2048]{1,0} parameter(1)
  g = f32[2048]{0} parameter(2)
  dy = bf16[4096,2048]{1,0} parameter(3)
  zero = f32[] constant(0)
  width = f32[] constant(2048)
  xf = f32[4096,2048]{1,0} convert(x)
  s = f32[4096]{0} reduce(xf, zero), dimensions={1}, to_apply=region_0.1
  wb = f32[4096]{0} broadcast(width), dimensions={}
  mean = f32[4096]{0} divide(s, wb)
  mean16 = bf16[4096]{0} convert(mean)
  mb = bf16[4096,2048]{1,0} broadcast(mean16), dimensions={0}
  c = bf16[4096,2048]{1,0} subtract(x, mb)
  c2 = bf16[4096,2048]{1,0} multiply(c, c)
  c2f = f32[4096,2048]{1,0} convert(c2)
  v = f32[4096]{0} reduce(c2f, zero), dimensions={1}, to_apply=region_0.1
  var = f32[4096]{0} divide(v, wb)
  r = f32[4096]{0} rsqrt(var)
  r16 = bf16[4096]{0} convert(r)
  rb = bf16[4096,2048]{1,0} broadcast(r16), dimensions={0}
  n = bf16[4096,2048]{1,0} multiply(c, rb)
  g16 = bf16[2048]{0} convert(g)
  gb = bf16[4096,2048]{1,0} broadcast(g16), dimensions={1}
  a = bf16[4096,2048]{1,0} multiply(n, gb)
  w16 = bf16[2048,2048]{1,0} convert(w)
  d = bf16[4096,2048]{1,0} dot(a, w16), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  dw = bf16[2048,2048]{1,0} dot(a, dy), lhs_contracting_dims={0}, rhs_contracting_dims={0}
  OTHER
})";
  auto with = [&](const std::string& other) { return model_of(with_other(text, other)); };
  const HloModule backward = with(
      "ndy = bf16[4096,2048]{1,0} multiply(n, dy)\n"
      "  ndyf = f32[4096,2048]{1,0} convert(ndy)\n"
      "  dg = f32[2048]{0} reduce(ndyf, zero), dimensions={0}, to_apply=region_0.1\n"
      "  ROOT t = (bf16[4096,2048]{1,0}, bf16[2048,2048]{1,0}, f32[2048]{0}) tuple(d, dw, dg)");
  ASSERT_NE(find(backward, "n"), nullptr) << "the rows: one buffer";
  ASSERT_NE(find(backward, "a"), nullptr) << "the scaled rows: a buffer both GEMMs read";
  EXPECT_EQ(find(backward, "a")->operands, (std::vector<std::string>{"n", "g"})) << "scaled from the rows";
  EXPECT_TRUE(reads(find(backward, "dg"), "n")) << "the gradient reads the rows";
  EXPECT_FALSE(reads(find(backward, "dg"), "x")) << "not recomputed from x";
  const HloModule forward = with("ROOT t = (bf16[4096,2048]{1,0}, bf16[2048,2048]{1,0}) tuple(d, dw)");
  EXPECT_EQ(find(forward, "n"), nullptr) << "rows only the scale reads are fused into it";
  ASSERT_NE(find(forward, "a"), nullptr);
}

// A two-pass norm in fp32 whose scaled and shifted rows a GEMM takes in: the normalized rows still end a
// Triton fusion, and what the backward pass reads beside the GEMM (the scale's gradient) reads them - one
// buffer, as the compiled gpt_fp32 keeps fusion.920, two a layer. A pool over the sequence of the norm's
// output (ViT's jnp.mean(x, axis=1)) makes XLA's layout assignment lay the stream out transposed - the
// compiled fp32 ViT holds f32[197,768,64] and makes no Triton norm at all - so there the rows are written
// for the GEMM and its other readers recompute them.
TEST(XlaGpuModel, ANormsRowsAGemmTakesInAreSharedUnlessAPoolTransposesTheStream) {
  const std::string text = std::string(kSumRegion) + R"(ENTRY main.1 {
  x = f32[8,512,1024]{2,1,0} parameter(0)
  w = f32[1024,1024]{1,0} parameter(1)
  g = f32[1024]{0} parameter(2)
  bias = f32[1024]{0} parameter(3)
  dy = f32[8,512,1024]{2,1,0} parameter(4)
  zero = f32[] constant(0)
  width = f32[] constant(0.0009765625)
  wb = f32[8,512]{1,0} broadcast(width), dimensions={}
  s = f32[8,512]{1,0} reduce(x, zero), dimensions={2}, to_apply=region_0.1
  mean = f32[8,512]{1,0} multiply(s, wb)
  mb = f32[8,512,1024]{2,1,0} broadcast(mean), dimensions={0,1}
  c = f32[8,512,1024]{2,1,0} subtract(x, mb)
  c2 = f32[8,512,1024]{2,1,0} multiply(c, c)
  v = f32[8,512]{1,0} reduce(c2, zero), dimensions={2}, to_apply=region_0.1
  var = f32[8,512]{1,0} multiply(v, wb)
  r = f32[8,512]{1,0} rsqrt(var)
  rb = f32[8,512,1024]{2,1,0} broadcast(r), dimensions={0,1}
  n = f32[8,512,1024]{2,1,0} multiply(c, rb)
  gb = f32[8,512,1024]{2,1,0} broadcast(g), dimensions={2}
  bb = f32[8,512,1024]{2,1,0} broadcast(bias), dimensions={2}
  ng = f32[8,512,1024]{2,1,0} multiply(n, gb)
  a = f32[8,512,1024]{2,1,0} add(ng, bb)
  d = f32[8,512,1024]{2,1,0} dot(a, w), lhs_contracting_dims={2}, rhs_contracting_dims={0}
  ndy = f32[8,512,1024]{2,1,0} multiply(n, dy)
  dg = f32[1024]{0} reduce(ndy, zero), dimensions={0,1}, to_apply=region_0.1
  OTHER
})";
  auto with = [&](const std::string& other) { return model_of(with_other(text, other)); };
  const HloModule gpt = with("ROOT t = (f32[8,512,1024]{2,1,0}, f32[1024]{0}) tuple(d, dg)");
  ASSERT_NE(find(gpt, "n"), nullptr) << "the rows: one buffer, read by the GEMM and the gradient";
  EXPECT_EQ(find(gpt, "n.for.d"), nullptr);
  EXPECT_TRUE(reads(find(gpt, "dg"), "n"));
  EXPECT_FALSE(reads(find(gpt, "dg"), "x")) << "not recomputed from x";
  const HloModule vit = with(
      "pool = f32[8,1024]{1,0} reduce(a, zero), dimensions={1}, to_apply=region_0.1\n"
      "  ROOT t = (f32[8,512,1024]{2,1,0}, f32[1024]{0}, f32[8,1024]{1,0}) tuple(d, dg, pool)");
  EXPECT_EQ(find(vit, "n"), nullptr) << "a pool over the sequence: no Triton norm rows";
  ASSERT_NE(find(vit, "n.for.d"), nullptr) << "the rows written for the GEMM, which scales and shifts them";
  EXPECT_EQ(find(vit, "d")->operands, (std::vector<std::string>{"w", "n.for.d", "g", "bias"}));
  EXPECT_TRUE(reads(find(vit, "dg"), "x")) << "the gradient recomputes the rows from the input";
}

// A sum to a scalar short enough for one thread block (at most 16,384 elements: reduction_utils.cc) runs
// its fused producer on one SM. XLA's priority fusion weighs that: a loss's per-token log-likelihood over
// 16,384 tokens - a log and a gather per token from the [tokens, vocabulary] logits - costs more there than
// the launch it saves, so a loop fusion writes it and the sum reads that (the compiled GPT steps' [b, s, 1]
// select); over 64 rows it is summed in the same kernel. What it reads - the logits - is then not read by
// the sum at the end of the step.
TEST(XlaGpuModel, AOneBlockSumsCostlyProducerIsWrittenByAKernelOfItsOwn) {
  const std::string program = std::string(kLogSoftmaxLoss) +
                              R"(  loss = f32[] reduce(picked, zero), dimensions={0,1}, to_apply=region_add.1
  ROOT r = (f32[], f32[ROWS]{0}) tuple(loss, s)
})";
  auto with_rows = [&](const char* rows) {
    return model_of(with_all(with_all(program, "ROWS", rows), "VOCAB", "32000"));
  };
  const HloModule tokens = with_rows("16384");
  const HloInstruction* picked = find(tokens, "picked");
  ASSERT_NE(picked, nullptr) << "16,384 tokens: the log-likelihood is written by a loop fusion";
  EXPECT_EQ(find(tokens, "loss")->operands, (std::vector<std::string>{"picked"})) << "the sum reads it alone";
  const HloModule images = with_rows("64");
  EXPECT_EQ(find(images, "picked"), nullptr) << "64 rows: summed in the same kernel";
  EXPECT_TRUE(reads(find(images, "loss"), "logits"));
}

// A reshape of a buffer that a loop's state needs is a bitcast after layout assignment (XLA's
// ReshapeIsBitcast): gradient accumulation's microbatches, stacked [4, 512, 1024] from the [2048, 1024]
// argument and carried through the loop, are the argument's memory - no copy in temp. Returned by the
// program, the same reshape is an output of its own (an output cannot be a parameter's memory).
TEST(XlaGpuModel, AReshapedBufferALoopCarriesIsABitcast) {
  const char* text = R"(HloModule jit_step

body.1 {
  p = (s32[], f32[4,512,1024]{2,1,0}, f32[512,1024]{1,0}) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  xs = f32[4,512,1024]{2,1,0} get-tuple-element(p), index=1
  acc = f32[512,1024]{1,0} get-tuple-element(p), index=2
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  zero = s32[] constant(0)
  x = f32[1,512,1024]{2,1,0} dynamic-slice(xs, i, zero, zero), dynamic_slice_sizes={1,512,1024}
  xr = f32[512,1024]{1,0} reshape(x)
  a = f32[512,1024]{1,0} add(acc, xr)
  ROOT t = (s32[], f32[4,512,1024]{2,1,0}, f32[512,1024]{1,0}) tuple(i1, xs, a)
}

cond.1 {
  p = (s32[], f32[4,512,1024]{2,1,0}, f32[512,1024]{1,0}) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  four = s32[] constant(4)
  ROOT lt = pred[] compare(i, four), direction=LT
}

ENTRY main.1 {
  flat = f32[2048,1024]{1,0} parameter(0)
  stacked = f32[4,512,1024]{2,1,0} reshape(flat)
  zero = f32[] constant(0)
  acc0 = f32[512,1024]{1,0} broadcast(zero), dimensions={}
  i0 = s32[] constant(0)
  init = (s32[], f32[4,512,1024]{2,1,0}, f32[512,1024]{1,0}) tuple(i0, stacked, acc0)
  w = (s32[], f32[4,512,1024]{2,1,0}, f32[512,1024]{1,0}) while(init), condition=cond.1, body=body.1
  sum = f32[512,1024]{1,0} get-tuple-element(w), index=2
  OTHER
})";
  auto with = [&](const std::string& other) { return model_of(with_other(text, other)); };
  const HloModule carried = with("ROOT r = f32[512,1024]{1,0} copy(sum)");
  const HloInstruction* stacked = find(carried, "stacked");
  ASSERT_NE(stacked, nullptr);
  EXPECT_EQ(stacked->opcode, HloOpcode::kBitcast) << "the argument's memory, no copy";
  EXPECT_EQ(stacked->operands, (std::vector<std::string>{"flat"}));
  const HloModule returned =
      with("ROOT r = (f32[512,1024]{1,0}, f32[4,512,1024]{2,1,0}) tuple(sum, stacked)");
  ASSERT_NE(find(returned, "stacked"), nullptr);
  EXPECT_EQ(find(returned, "stacked")->opcode, HloOpcode::kReshape) << "an output of its own";
}

// What a fusion saves weighed as XLA's performance model weighs it: the traffic, and one kernel launch
// (1 us: 3.35 MB at an H100's bandwidth). A sum read by three fusions, each of which would read its three
// inputs again, is written once when it is large and recomputed when it is small.
TEST(XlaGpuModel, ASmallSharedValueIsFusedForTheLaunchItSaves) {
  auto modeled_with = [](uint64_t elements) {
    const std::string t = fmt::format(R"(HloModule jit_step

region_0.1 {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}}

ENTRY main.1 {{
  x = f32[{0}]{{0}} parameter(0)
  y = f32[{0}]{{0}} parameter(1)
  z = f32[{0}]{{0}} parameter(2)
  s1 = f32[{0}]{{0}} add(x, y)
  v = f32[{0}]{{0}} add(s1, z)
  zero = f32[] constant(0)
  r = f32[] reduce(v, zero), dimensions={{0}}, to_apply=region_0.1
  e = f32[{0}]{{0}} exponential(v)
  h = f32[{0}]{{0}} tanh(v)
  ROOT t = (f32[], f32[{0}]{{0}}, f32[{0}]{{0}}) tuple(r, e, h)
}})",
                                      elements);
    return model_of(t);
  };
  // Fused, each of the three reads 3 x 4 MiB; written, 12 MiB are read and 4 written once, and read thrice.
  EXPECT_NE(find(modeled_with(1 << 20), "v"), nullptr);
  // 4 KiB: the launch saved outweighs 8 KiB more traffic.
  EXPECT_EQ(find(modeled_with(1 << 10), "v"), nullptr);
}

// XLA's algebraic simplifier rewrites a floating-point division by a constant as a multiplication by its
// inverse (HandleDivide, "A / Const => A * (1 / Const)"): cheap, so a mean's division by the batch size is
// recomputed by each reader. A division by a computed value stays a division, which priority fusion weighs
// by its cost: 19 cycles an element in f32, memory-bound, so with two readers it too is recomputed.
TEST(XlaGpuModel, ADivisionByAConstantIsAMultiplyFusedIntoEachReader) {
  const HloModule m = lowered(R"(HloModule jit_step

ENTRY main.1 {
  g = f32[1024,1024]{1,0} parameter(0)
  m = f32[1024,1024]{1,0} parameter(1)
  v = f32[1024,1024]{1,0} parameter(2)
  n = f32[] constant(64)
  nb = f32[1024,1024]{1,0} broadcast(n), dimensions={}
  mean = f32[1024,1024]{1,0} divide(g, nb)
  by_v = f32[1024,1024]{1,0} divide(g, v)
  m2 = f32[1024,1024]{1,0} add(m, mean)
  sq = f32[1024,1024]{1,0} multiply(mean, mean)
  v2 = f32[1024,1024]{1,0} add(v, sq)
  a = f32[1024,1024]{1,0} add(by_v, m)
  b = f32[1024,1024]{1,0} multiply(by_v, v)
  ROOT t = (f32[1024,1024]{1,0}, f32[1024,1024]{1,0}, f32[1024,1024]{1,0}, f32[1024,1024]{1,0}) tuple(m2, v2, a, b)
})");
  auto modeled = model_xla_gpu(m);
  ASSERT_TRUE(modeled.ok()) << modeled.error().message();
  EXPECT_EQ(find(*modeled, "mean"), nullptr) << "g * (1/64), recomputed by m2 and v2";
  EXPECT_EQ(written(*modeled, "m2")->operands, (std::vector<std::string>{"m", "g"}));
  EXPECT_EQ(find(*modeled, "by_v"), nullptr) << "a division by a computed value is recomputed by a and b";
}

// Whether an expensive value two fusions read is written is priority fusion's decision, by XLA's
// performance model: recomputed, each reader repeats its compute (a tanh costs 467 cycles an element on
// an H100, hlo_op_profiles_data.h) but one launch (1 us) and a write and two reads are saved. A small
// tanh is recomputed (the GELU of a 128-row MLP layer, as the compiled mlp_mean_grads_b128 recomputes it
// in its forward and backward fusions); a large one is written once; an exp (79 cycles) is memory-bound
// and recomputed at any size.
TEST(XlaGpuModel, AnExpensiveValuesComputeDecidesWhetherTwoReadersRecomputeIt) {
  auto modeled_with = [](const char* op, uint64_t rows) {
    const std::string t = fmt::format(R"(HloModule jit_step

ENTRY main.1 {{
  x = f32[{1},1024]{{1,0}} parameter(0)
  y = f32[{1},1024]{{1,0}} parameter(1)
  z = f32[{1},1024]{{1,0}} parameter(2)
  h = f32[{1},1024]{{1,0}} add(x, y)
  t = f32[{1},1024]{{1,0}} {0}(h)
  a = f32[{1},1024]{{1,0}} multiply(t, z)
  b = f32[{1},1024]{{1,0}} subtract(z, t)
  ROOT r = (f32[{1},1024]{{1,0}}, f32[{1},1024]{{1,0}}) tuple(a, b)
}})",
                                      op, rows);
    return model_of(t);
  };
  EXPECT_EQ(find(modeled_with("tanh", 128), "t"), nullptr) << "128 x 1024: the launch saved outweighs it";
  EXPECT_NE(find(modeled_with("tanh", 4096), "t"), nullptr) << "4096 x 1024: computed once, written";
  EXPECT_EQ(find(modeled_with("exponential", 4096), "t"), nullptr) << "an exp is memory-bound";
  const HloModule small = modeled_with("tanh", 128);
  EXPECT_EQ(written(small, "a")->operands, (std::vector<std::string>{"z", "x", "y"}))
      << "each reader computes the tanh from what it is computed from";
}

// An expensive value several ops read is written once only when those ops end up in several fusions: the
// tanh of a GELU's derivative is read by three elementwise ops that all fuse into the one gradient XLA
// writes (priority fusion merges the readers first, then fuses the tanh into the one fusion left), as the
// compiled mlp_fp32_donate_remat_full's loop_add_fusion does. Read by two results, it is written.
TEST(XlaGpuModel, AnExpensiveValueIsFusedWhenAllItsReadersFuseIntoOne) {
  auto modeled_with = [](const char* root) {
    const std::string t = fmt::format(R"(HloModule jit_step

ENTRY main.1 {{
  x = f32[1024,1024]{{1,0}} parameter(0)
  w = f32[1024,1024]{{1,0}} parameter(1)
  dy = f32[1024,1024]{{1,0}} parameter(2)
  h = f32[1024,1024]{{1,0}} dot(x, w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  t = f32[1024,1024]{{1,0}} tanh(h)
  one = f32[] constant(1)
  ones = f32[1024,1024]{{1,0}} broadcast(one), dimensions={{}}
  a = f32[1024,1024]{{1,0}} add(t, ones)
  s = f32[1024,1024]{{1,0}} subtract(ones, t)
  d = f32[1024,1024]{{1,0}} multiply(a, s)
  g = f32[1024,1024]{{1,0}} multiply(d, dy)
  u = f32[1024,1024]{{1,0}} multiply(t, dy)
  ROOT r = {} 
}})",
                                      root);
    return model_of(t);
  };
  const HloModule one = modeled_with("(f32[1024,1024]{1,0}) tuple(g)");
  EXPECT_EQ(find(one, "t"), nullptr) << "a, s and d fuse into g, and so does the tanh";
  EXPECT_EQ(find(one, "g")->operands.size(), 2u) << "the product (or its split partials' sum) and dy";
  EXPECT_TRUE(reads(find(one, "g"), "dy"));
  const HloModule two = modeled_with("(f32[1024,1024]{1,0}, f32[1024,1024]{1,0}) tuple(g, u)");
  EXPECT_NE(find(two, "t"), nullptr) << "g and u are two fusions: the tanh is computed once, for both";
}

// A GELU output the GEMMs cannot take in (it reads the pre-activation and the tanh's term, twice what it
// writes) and only GEMMs read is written once, for all three; the small tanh under it is recomputed by the
// two fusions that read it, the GELU output's and the backward pass's (128 x 1024: the launch saved
// outweighs the compute; the old IsExpensive rule wrote it). That GEMM operands are decided before priority
// fusion (as XLA runs GemmFusion first) is held on the shared programs: with the readers' rule of
// prioritize_shared_values and the old order, the transformers' GELU tanh is counted as read by one fusion
// and recomputed (gpt_fp32's lowered temp -6.7% of XLA's; HloPlan.LoweredModulesPlannedThroughTheGpuModel).
TEST(XlaGpuModel, AGeluOutputOnlyGemmsReadIsWrittenAndItsSmallTanhRecomputed) {
  const HloModule m = model_of(R"(HloModule jit_step

ENTRY main.1 {
  x = f32[128,1024]{1,0} parameter(0)
  y = f32[128,1024]{1,0} parameter(1)
  w = f32[1024,1024]{1,0} parameter(2)
  dy = f32[128,1024]{1,0} parameter(3)
  v = f32[1024,1024]{1,0} parameter(4)
  h = f32[128,1024]{1,0} add(x, y)
  t = f32[128,1024]{1,0} tanh(h)
  one = f32[] constant(1)
  ones = f32[128,1024]{1,0} broadcast(one), dimensions={}
  a = f32[128,1024]{1,0} add(t, ones)
  g = f32[128,1024]{1,0} multiply(h, a)
  o = f32[128,1024]{1,0} dot(g, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  o2 = f32[128,1024]{1,0} dot(g, v), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  gw = f32[1024,1024]{1,0} dot(g, dy), lhs_contracting_dims={0}, rhs_contracting_dims={0}
  s = f32[128,1024]{1,0} subtract(ones, t)
  d = f32[128,1024]{1,0} multiply(dy, s)
  ROOT r = (f32[128,1024]{1,0}, f32[128,1024]{1,0}, f32[1024,1024]{1,0}, f32[128,1024]{1,0}) tuple(o, o2, gw, d)
})");
  EXPECT_NE(find(m, "g"), nullptr) << "the GELU output, read by three GEMMs, is written once";
  EXPECT_EQ(find(m, "t"), nullptr) << "the tanh is recomputed by g's fusion and d's";
}

// A GEMM fusion takes in a division by a scalar constant (a multiply by its inverse, XLA's simplifier):
// attention's masked score gradient divided by sqrt(d) and read by the two GEMMs of the backward pass is
// written once, as the jnp.where select before the division - the compiled gpt_fp32_donate_scan's
// loop_select_fusion - not once more divided (the lowered mlp_fp32_donate's temp +1.0% -> -0.0% of XLA's).
TEST(XlaGpuModel, AGemmTakesInADivisionByAConstant) {
  const HloModule m = model_of(R"(HloModule jit_step

ENTRY main.1 {
  mask = pred[8,16,256,256]{3,2,1,0} parameter(0)
  a = f32[8,16,256,256]{3,2,1,0} parameter(1)
  b = f32[8,16,256,256]{3,2,1,0} parameter(2)
  k = f32[8,16,256,64]{3,2,1,0} parameter(3)
  q = f32[8,16,256,64]{3,2,1,0} parameter(4)
  g = f32[8,16,256,256]{3,2,1,0} multiply(a, b)
  zero = f32[] constant(0)
  zeros = f32[8,16,256,256]{3,2,1,0} broadcast(zero), dimensions={}
  w = f32[8,16,256,256]{3,2,1,0} select(mask, g, zeros)
  eight = f32[] constant(8)
  eights = f32[8,16,256,256]{3,2,1,0} broadcast(eight), dimensions={}
  scaled = f32[8,16,256,256]{3,2,1,0} divide(w, eights)
  dk = f32[8,16,256,64]{3,2,1,0} dot(scaled, k), lhs_batch_dims={0,1}, lhs_contracting_dims={3}, rhs_batch_dims={0,1}, rhs_contracting_dims={2}
  dq = f32[8,16,256,64]{3,2,1,0} dot(scaled, q), lhs_batch_dims={0,1}, lhs_contracting_dims={2}, rhs_batch_dims={0,1}, rhs_contracting_dims={2}
  ROOT t = (f32[8,16,256,64]{3,2,1,0}, f32[8,16,256,64]{3,2,1,0}) tuple(dk, dq)
})");
  EXPECT_EQ(find(m, "scaled"), nullptr) << "each GEMM divides as it reads";
  EXPECT_NE(find(m, "w"), nullptr) << "the select they read, written once";
}

// XLA folds an op over constants into a constant before fusion (HloConstantFolding): StableHLO writes a
// mean's gradient scale as 1 / N of two constants, where JAX's HLO text holds the quotient - either way the
// scaled cotangent is taken into the two GEMMs that read it, not written for each (the StableHLO of
// mlp_fp32_donate planned two such copies: +1.0% of XLA's temp, now -0.0%, as its HLO text).
TEST(XlaGpuModel, AScalarComputedFromConstantsIsAConstant) {
  const HloModule m = model_of(R"(HloModule jit_step

ENTRY main.1 {
  d = f32[2048,1024]{1,0} parameter(0)
  w = f32[4096,1024]{1,0} parameter(1)
  h = f32[2048,4096]{1,0} parameter(2)
  one = f32[] constant(1)
  n = f32[] constant(2097152)
  inv = f32[] divide(one, n)
  invs = f32[2048,1024]{1,0} broadcast(inv), dimensions={}
  g = f32[2048,1024]{1,0} multiply(invs, d)
  dw = f32[1024,4096]{1,0} dot(g, h), lhs_contracting_dims={0}, rhs_contracting_dims={0}
  dh = f32[2048,4096]{1,0} dot(g, w), lhs_contracting_dims={1}, rhs_contracting_dims={1}
  ROOT t = (f32[1024,4096]{1,0}, f32[2048,4096]{1,0}) tuple(dw, dh)
})");
  for (const HloComputation& c : m.computations)
    for (const HloInstruction& x : c.instructions)
      EXPECT_EQ(x.name.find("g.for."), std::string::npos) << x.name << ": a copy of g written for one GEMM";
  EXPECT_EQ(find(m, "g"), nullptr);
}

// XLA's ListScheduler counts a buffer in use by every instruction whose operand points at it
// (TuplePointsToAnalysis), through tuples, optimization barriers and get-tuple-elements: a value a
// rematerialization's barrier passes on is freed by the last reader behind the barrier, not by the tuple.
// So the GEMM that reads the saved x through the barrier frees it and runs first; counted as freed by the
// tuple, it would free nothing and b, written first, would run before it.
TEST(XlaGpuModel, TheListSchedulerFreesAValueAtItsLastReaderBehindABarrier) {
  const HloModule m = lowered(R"(HloModule jit_step

ENTRY main.1 {
  p = f32[1024,1024]{1,0} parameter(0)
  w = f32[1024,1024]{1,0} parameter(1)
  x = f32[1024,1024]{1,0} dot(p, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  g = f32[1024,1024]{1,0} dot(w, p), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  t = (f32[1024,1024]{1,0}, f32[1024,1024]{1,0}) tuple(x, g)
  ob = (f32[1024,1024]{1,0}, f32[1024,1024]{1,0}) opt-barrier(t)
  gx = f32[1024,1024]{1,0} get-tuple-element(ob), index=0
  gg = f32[1024,1024]{1,0} get-tuple-element(ob), index=1
  b = f32[1024,1024]{1,0} dot(gg, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  a = f32[1024,1024]{1,0} dot(gx, gg), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT r = (f32[1024,1024]{1,0}, f32[1024,1024]{1,0}) tuple(a, b)
})");
  auto modeled = model_xla_gpu(m);
  ASSERT_TRUE(modeled.ok()) << modeled.error().message();
  const HloModule listed = list_scheduled(*modeled);
  std::vector<std::string> gemms;
  for (const HloInstruction& x : listed.entry()->instructions)
    if (x.name == "a" || x.name == "b") gemms.push_back(x.name);
  EXPECT_EQ(gemms, (std::vector<std::string>{"a", "b"}));
}

// A softmax's row maximum and sum are read only by the subtraction and the division of the same fusion,
// which also reads the scores they reduce: XLA's SoftmaxRewriterTriton makes the diamond one Triton fusion
// (the compiled gpt_fp32_infer_b32's triton_softmax reads the scores and nothing else), so neither
// statistic is a buffer, and the probabilities never take the scores' memory (a row is read whole before it
// is written). When the backward pass also reads the maximum (two fusions), it is written.
TEST(XlaGpuModel, ASoftmaxsStatisticsAreInsideItsFusion) {
  auto modeled_with = [](const char* root) {
    const std::string t = fmt::format(R"(HloModule jit_step

max.1 {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT m = f32[] maximum(a, b)
}}

add.1 {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}}

ENTRY main.1 {{
  q = f32[64,256,64]{{2,1,0}} parameter(0)
  k = f32[64,64,256]{{2,1,0}} parameter(1)
  v = f32[64,256,64]{{2,1,0}} parameter(2)
  s = f32[64,256,256]{{2,1,0}} dot(q, k), lhs_batch_dims={{0}}, lhs_contracting_dims={{2}}, rhs_batch_dims={{0}}, rhs_contracting_dims={{1}}
  ninf = f32[] constant(-inf)
  mx = f32[64,256]{{1,0}} reduce(s, ninf), dimensions={{2}}, to_apply=max.1
  mxb = f32[64,256,256]{{2,1,0}} broadcast(mx), dimensions={{0,1}}
  d = f32[64,256,256]{{2,1,0}} subtract(s, mxb)
  e = f32[64,256,256]{{2,1,0}} exponential(d)
  zero = f32[] constant(0)
  sm = f32[64,256]{{1,0}} reduce(e, zero), dimensions={{2}}, to_apply=add.1
  smb = f32[64,256,256]{{2,1,0}} broadcast(sm), dimensions={{0,1}}
  p = f32[64,256,256]{{2,1,0}} divide(e, smb)
  o = f32[64,256,64]{{2,1,0}} dot(p, v), lhs_batch_dims={{0}}, lhs_contracting_dims={{2}}, rhs_batch_dims={{0}}, rhs_contracting_dims={{1}}
  ROOT r = {}
}})",
                                      root);
    return model_of(t);
  };
  const HloModule fused = modeled_with("(f32[64,256,64]{2,1,0}) tuple(o)");
  EXPECT_EQ(find(fused, "mx"), nullptr);
  EXPECT_EQ(find(fused, "sm"), nullptr);
  const HloInstruction* probs = find(fused, "p");
  ASSERT_NE(probs, nullptr);
  EXPECT_EQ(probs->operands, (std::vector<std::string>{"s"}));
  EXPECT_EQ(probs->custom_call_target, "__memfit$normalization") << "not written over the scores";
  const HloModule kept = modeled_with("(f32[64,256,64]{2,1,0}, f32[64,256]{1,0}) tuple(o, mx)");
  EXPECT_NE(find(kept, "mx"), nullptr) << "the program returns the maximum: it is a buffer";
  EXPECT_EQ(find(kept, "sm"), nullptr);
}

// Sibling multi-output fusion's rules (xla_gpu_multi_output_fusion.cc, after XLA's FuseSiblings): two
// outputs that read the same buffer and not each other become one fusion; one that reads the other stays
// apart (merged, the fusion would read its own output); a learning rate every update reads is an effective
// scalar, no profitable shared operand - the updates stay apart; and a fusion holds at most 64 operands and
// outputs, so 40 siblings each reading the parent and a buffer of their own make two fusions, not one.
TEST(XlaGpuModel, SiblingsShareAFusionWithinXlasRules) {
  std::string text = R"(HloModule jit_step

ENTRY main.1 {
  lr = f32[] parameter(0)
  p1 = f32[1024,1024]{1,0} parameter(1)
  p2 = f32[1024,1024]{1,0} parameter(2)
  g1 = f32[1024,1024]{1,0} parameter(3)
  g2 = f32[1024,1024]{1,0} parameter(4)
  x = f32[1024,1024]{1,0} parameter(5)
  lrb = f32[1024,1024]{1,0} broadcast(lr), dimensions={}
  s1 = f32[1024,1024]{1,0} multiply(lrb, g1)
  u1 = f32[1024,1024]{1,0} subtract(p1, s1)
  s2 = f32[1024,1024]{1,0} multiply(lrb, g2)
  u2 = f32[1024,1024]{1,0} subtract(p2, s2)
  e = f32[1024,1024]{1,0} multiply(x, x)
  f = f32[1024,1024]{1,0} negate(x)
  c = f32[1024,1024]{1,0} add(x, f)
)";
  std::string outputs = "u1, u2, e, f, c";
  std::string shapes =
      "f32[1024,1024]{1,0}, f32[1024,1024]{1,0}, f32[1024,1024]{1,0}, f32[1024,1024]{1,0}, "
      "f32[1024,1024]{1,0}";
  // 40 siblings of w, each with a buffer of its own (q0..q39).
  text += "  w = f32[256]{0} parameter(6)\n";
  for (int k = 0; k < 40; ++k) {
    text +=
        fmt::format("  q{0} = f32[256]{{0}} parameter({1})\n  y{0} = f32[256]{{0}} add(w, q{0})\n", k, 7 + k);
    outputs += fmt::format(", y{}", k);
    shapes += ", f32[256]{0}";
  }
  text += fmt::format("  ROOT r = ({}) tuple({})\n}}\n", shapes, outputs);
  const HloModule m = model_of(text);
  ASSERT_NE(fusion_of(m, "e"), nullptr) << "two readers of x, neither reading the other";
  EXPECT_EQ(fusion_of(m, "e"), fusion_of(m, "f"));
  EXPECT_NE(fusion_of(m, "c"), fusion_of(m, "f")) << "c reads f";
  EXPECT_EQ(fusion_of(m, "u1"), nullptr) << "the learning rate is no shared operand";
  EXPECT_EQ(fusion_of(m, "u2"), nullptr);
  std::set<const HloInstruction*> groups;
  for (int k = 0; k < 40; ++k) {
    const HloInstruction* g = fusion_of(m, fmt::format("y{}", k));
    ASSERT_NE(g, nullptr) << k;
    groups.insert(g);
    // Outputs and operands (w and a q each) within FusionFitsInBudget's 64.
    EXPECT_LE(g->shape.elements.size() + g->operands.size(), 64u);
  }
  EXPECT_EQ(groups.size(), 2u);
}

// A reduction and a loop that read the same written buffer share one fusion when the loop runs over what
// the reduction reads (ShapesCompatibleForMultiOutputFusion: the reduction's input against the loop's
// result): a bias's gradient, a column sum of the input gradient, computed in the kernel that writes that
// gradient's elementwise successor. The reduction is compared by its input's shape, [1024, 1024] here,
// which must survive fusion's rewrite of the computation (it once did not where the input was a buffer
// written before the reduction: the reduction then looked like one over a single element).
TEST(XlaGpuModel, AReductionJoinsALoopOverWhatItReduces) {
  const std::string text = R"(HloModule jit_step

region {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

ENTRY main.1 {
  x = f32[1024,1024]{1,0} parameter(0)
  y = f32[1024,1024]{1,0} parameter(1)
  zero = f32[] constant(0)
  bias_grad = f32[1024]{0} reduce(x, zero), dimensions={0}, to_apply=region
  scaled = f32[1024,1024]{1,0} multiply(x, y)
  ROOT r = (f32[1024]{0}, f32[1024,1024]{1,0}) tuple(bias_grad, scaled)
}
)";
  const HloModule m = model_of(text);
  ASSERT_NE(fusion_of(m, "bias_grad"), nullptr) << "a reduction over x and a loop over x, both reading x";
  EXPECT_EQ(fusion_of(m, "bias_grad"), fusion_of(m, "scaled"));
}

// XLA's latency-hiding scheduler (latency_hiding_scheduled): a value saved to the host and brought back is
// two copies, each a start and a done 5000 units apart; scheduling bottom-up, it puts work that does not wait
// on a copy between the copy's start and its done. The memory scheduler runs the reader of the copy first (it
// frees the copy and the saved value) and a weight gradient's cosine after it; the latency-hiding scheduler
// moves the cosine into the copy's window, so the device copy is written before it and lives across it.
TEST(XlaGpuModel, ACopysWindowHoldsWorkThatDoesNotWaitOnIt) {
  const std::string text = R"(HloModule jit_step

ENTRY main.1 {
  x = f32[1048576]{0} parameter(0)
  w = f32[1048576]{0} parameter(1)
  saved = f32[1048576]{0} exponential(x)
  host = f32[1048576]{0} custom-call(saved), custom_call_target="annotate_device_placement", custom_call_has_side_effect=true, frontend_attributes={_xla_buffer_placement="pinned_host"}
  y = f32[1048576]{0} sine(saved)
  back = f32[1048576]{0} custom-call(host), custom_call_target="annotate_device_placement", custom_call_has_side_effect=true, frontend_attributes={_xla_buffer_placement="device"}
  dx = f32[1048576]{0} multiply(back, y)
  dw = f32[1048576]{0} cosine(w)
  ROOT t = (f32[1048576]{0}, f32[1048576]{0}) tuple(dx, dw)
})";
  const HloModule listed = list_scheduled(model_of(text));
  const auto position = position_of;
  EXPECT_LT(position(listed, "dx"), position(listed, "dw"));
  const HloModule hidden = latency_hiding_scheduled(listed, 80ull << 30);
  EXPECT_LT(position(hidden, "back"), position(hidden, "dw"));
  EXPECT_LT(position(hidden, "dw"), position(hidden, "dx"));
  // A program that copies nothing keeps the memory scheduler's order.
  const HloModule plain = list_scheduled(model_of(
      with_all(with_all(text, "\"pinned_host\"", "\"device\""), "custom-call(host)", "custom-call(saved)")));
  const HloModule kept = latency_hiding_scheduled(plain, 80ull << 30);
  for (const char* name : {"saved", "dx", "dw"})
    EXPECT_EQ(position(kept, name), position(plain, name)) << name;
}

// A value written for a GEMM alone - an MLP's activation, which its second weight gradient reads - is
// computed by XLA's sibling multi-output fusion in the kernel of the input gradient, which reads all it reads
// (the same pre-activation and tanh): one fusion writes both. The latency-hiding scheduler then runs that
// fusion before the input gradient's GEMM; were the activation its own kernel it would be computed in the
// copy's window with the deferred weight gradient, and keep the copied pre-activation and the tanh alive
// until then (the compiled offload GPT: its GELU comes out of the fusion that computes the MLP's input
// gradient).
TEST(XlaGpuModel, AValueWrittenForAGemmIsScheduledWithItsSibling) {
  const std::string text = std::string(kSumRegion) + R"(ENTRY main.1 {
  x = f32[1024,1024]{1,0} parameter(0)
  w = f32[1024,1024]{1,0} parameter(1)
  g = f32[1024,1024]{1,0} parameter(2)
  h = f32[1024,1024]{1,0} dot(x, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  host = f32[1024,1024]{1,0} custom-call(h), custom_call_target="annotate_device_placement", custom_call_has_side_effect=true, frontend_attributes={_xla_buffer_placement="pinned_host"}
  back = f32[1024,1024]{1,0} custom-call(host), custom_call_target="annotate_device_placement", custom_call_has_side_effect=true, frontend_attributes={_xla_buffer_placement="device"}
  t = f32[1024,1024]{1,0} tanh(back)
  act = f32[1024,1024]{1,0} multiply(back, t)
  gt = f32[1024,1024]{1,0} multiply(g, t)
  dh = f32[1024,1024]{1,0} add(gt, back)
  zero = f32[] constant(0)
  db = f32[1024]{0} reduce(dh, zero), dimensions={0}, to_apply=region_0.1
  dw = f32[1024,1024]{1,0} dot(act, g), lhs_contracting_dims={0}, rhs_contracting_dims={0}
  dx = f32[1024,1024]{1,0} dot(dh, w), lhs_contracting_dims={1}, rhs_contracting_dims={1}
  e = f32[1024,1024]{1,0} exponential(dh)
  ROOT r = (f32[1024,1024]{1,0}, f32[1024,1024]{1,0}, f32[1024]{0}, f32[1024,1024]{1,0}) tuple(dw, dx, db, e)
})";
  const HloModule hidden = latency_hiding_scheduled(list_scheduled(model_of(text)), 80ull << 30);
  ASSERT_LT(position_of(hidden, "dx.split_k"), hidden.entry()->instructions.size());
  const HloInstruction* both = fusion_of(hidden, "act");
  ASSERT_NE(both, nullptr) << "the activation is an output of a multi-output fusion";
  EXPECT_EQ(fusion_of(hidden, "dh"), both) << "... the one that computes the input gradient";
  EXPECT_EQ(written(hidden, "act")->opcode, HloOpcode::kMultiply);
  EXPECT_TRUE(reads(written(hidden, "act"), "back"));
  // The order is one a GPU can run (the fusion's rewrite and the scheduler keep it before its readers), and
  // the weight gradient's GEMM reads the activation from that fusion, not from a kernel of its own: with no
  // other reader of the pre-activation and its tanh, they die at the fusion wherever the deferred GEMM lands.
  EXPECT_LT(position_of(hidden, both->name), position_of(hidden, "dx.split_k"));
  EXPECT_TRUE(reads(find(hidden, "dw.split_k"), "act"));
}

}  // namespace
}  // namespace memfit
