// The model of XLA:GPU's memory-relevant passes (plan/xla_gpu_model.h) on small lowered programs written
// the way JAX lowers them: which values it materializes, and the rewrites it applies.
#include "memfit/plan/xla_gpu_model.h"

#include <gtest/gtest.h>

#include "memfit/plan/hlo_plan.h"

namespace memfit {
namespace {

HloModule lowered(const char* text) {
  auto m = parse_hlo_module(text);
  EXPECT_TRUE(m.ok()) << m.error().message();
  EXPECT_TRUE(is_lowered_module(*m));
  return std::move(*m);
}

const HloInstruction* find(const HloModule& m, std::string_view name) {
  for (const HloInstruction& i : m.entry()->instructions)
    if (i.name == name) return &i;
  return nullptr;
}

// Mixed precision: the weight is cast to bf16 once and read by the forward GEMM and the backward one.
// XLA's GemmFusion never takes a narrowing cast in, so the cast is a buffer (XLA's wrapped_convert); the
// widening cast of the activations' gradient back to f32 is taken into its GEMM.
TEST(XlaGpuModel, ANarrowingCastIntoAGemmIsItsOwnBuffer) {
  const HloModule m = lowered(R"(HloModule jit_step

ENTRY main.1 {
  w = f32[1024,1024]{1,0} parameter(0)
  x = bf16[64,1024]{1,0} parameter(1)
  w16 = bf16[1024,1024]{1,0} convert(w)
  h = bf16[64,1024]{1,0} dot(x, w16), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  dx = bf16[64,1024]{1,0} dot(h, w16), lhs_contracting_dims={1}, rhs_contracting_dims={1}
  wide = f32[64,1024]{1,0} convert(dx)
  g = f32[1024,1024]{1,0} dot(wide, wide), lhs_contracting_dims={0}, rhs_contracting_dims={0}
  ROOT t = (bf16[64,1024]{1,0}, f32[1024,1024]{1,0}) tuple(h, g)
})");
  auto modeled = model_xla_gpu(m);
  ASSERT_TRUE(modeled.ok()) << modeled.error().message();
  ASSERT_NE(find(*modeled, "w16"), nullptr) << "the bf16 copy of the weight is a buffer";
  EXPECT_EQ(find(*modeled, "wide"), nullptr) << "a widening cast is computed inside its GEMM";
  const HloInstruction* h = find(*modeled, "h");
  ASSERT_NE(h, nullptr);
  EXPECT_EQ(h->operands, (std::vector<std::string>{"x", "w16"}));
  // The bf16 copy lives from the forward GEMM to the backward one: 2 MiB in the plan's temp.
  auto plan = plan_hlo(m);
  ASSERT_TRUE(plan.ok());
  bool planned = false;
  for (const PlannedBuffer& b : plan->buffers) planned = planned || (b.name == "w16" && b.bytes == 2u << 20);
  EXPECT_TRUE(planned);
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

}  // namespace
}  // namespace memfit
