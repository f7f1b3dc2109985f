// The StableHLO reader: JAX's default text form into the HloModule the planner reads, and clear errors with
// the line for text that is not one.
#include "memfit/program/stablehlo_module.h"

#include <gtest/gtest.h>

#include <string>

namespace memfit {
namespace {

constexpr const char* kSmall = R"(module @jit_f attributes {mhlo.num_partitions = 1 : i32} {
  func.func public @main(%arg0: tensor<4x8xf32> {tf.aliasing_output = 1 : i32}, %arg1: tensor<8xf32>) -> (tensor<4xf32> {jax.result_info = "[0]"}, tensor<4x8xf32>) {
    %0 = stablehlo.broadcast_in_dim %arg1, dims = [1] : (tensor<8xf32>) -> tensor<4x8xf32>
    %1 = stablehlo.multiply %arg0, %0 : tensor<4x8xf32>
    %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %2 = stablehlo.reduce(%1 init: %cst) applies stablehlo.add across dimensions = [1] : (tensor<4x8xf32>, tensor<f32>) -> tensor<4xf32>
    %3:2 = call @pair(%2, %1) : (tensor<4xf32>, tensor<4x8xf32>) -> (tensor<4xf32>, tensor<4x8xi1>)
    %4 = stablehlo.select %3#1, %1, %0 : tensor<4x8xi1>, tensor<4x8xf32>
    return %3#0, %4 : tensor<4xf32>, tensor<4x8xf32>
  }
  func.func private @pair(%arg0: tensor<4xf32>, %arg1: tensor<4x8xf32>) -> (tensor<4xf32>, tensor<4x8xi1>) {
    %c = stablehlo.constant dense<0.0> : tensor<f32>
    %0 = stablehlo.broadcast_in_dim %c, dims = [] : (tensor<f32>) -> tensor<4x8xf32>
    %1 = stablehlo.compare  GT, %arg1, %0,  FLOAT : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xi1>
    return %arg0, %1 : tensor<4xf32>, tensor<4x8xi1>
  }
}
)";

TEST(StableHlo, ReadsFunctionsCallsMultiResultsAndDonation) {
  EXPECT_EQ(program_text_kind(kSmall), ProgramTextKind::kStableHlo);
  EXPECT_EQ(program_text_kind("HloModule m\n"), ProgramTextKind::kHlo);
  auto m = parse_program_text(kSmall);
  ASSERT_TRUE(m.ok()) << m.error().message();
  EXPECT_TRUE(m->from_stablehlo);
  EXPECT_FALSE(m->is_scheduled);
  EXPECT_EQ(m->name, "jit_f");
  ASSERT_NE(m->entry(), nullptr);
  ASSERT_EQ(m->aliases.size(), 1u);
  EXPECT_EQ(m->aliases[0].parameter, 0);
  EXPECT_EQ(m->aliases[0].output_index, std::vector<uint64_t>{1});
  auto sizes = entry_sizes(*m);
  ASSERT_TRUE(sizes.ok()) << sizes.error().message();
  EXPECT_EQ(sizes->argument_bytes, 4u * 8 * 4 + 8 * 4);
  EXPECT_EQ(sizes->output_bytes, 4u * 4 + 4 * 8 * 4 + 2 * 8);  // two arrays and the tuple's table
  EXPECT_EQ(sizes->alias_bytes, 4u * 8 * 4);
  const HloInstruction* root = m->entry()->root();
  ASSERT_NE(root, nullptr);
  EXPECT_EQ(root->opcode, HloOpcode::kTuple);
  // The call, its results through get-tuple-element, the select typed by its last type.
  bool call = false, select = false;
  for (const HloInstruction& i : m->entry()->instructions) {
    if (i.opcode == HloOpcode::kCall)
      call = i.called == std::vector<std::string>{"pair"} && i.shape.is_tuple();
    if (i.opcode == HloOpcode::kSelect) select = i.shape.to_string() == "f32[4,8]";
  }
  EXPECT_TRUE(call);
  EXPECT_TRUE(select);
}

// A scatter's combiner is written as a region on the lines after it; its one op is the combiner (as HLO's
// to_apply= names a computation whose root it is). A region of two ops names none.
TEST(StableHlo, ReadsAScattersCombinerFromItsRegion) {
  auto scatter_with = [](const std::string& region) {
    return R"(module @jit_g {
  func.func public @main(%arg0: tensor<4x2xi32>, %arg1: tensor<4x8xf32>) -> (tensor<16x8xf32>) {
    %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32>
    %0 = stablehlo.broadcast_in_dim %cst, dims = [] : (tensor<f32>) -> tensor<16x8xf32>
    %1 = "stablehlo.scatter"(%0, %arg0, %arg1) <{indices_are_sorted = false, scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = [1], inserted_window_dims = [0], scatter_dims_to_operand_dims = [0], index_vector_dim = 1>, unique_indices = false}> ({
    ^bb0(%arg2: tensor<f32>, %arg3: tensor<f32>):
)" + region +
           R"(
    }) : (tensor<16x8xf32>, tensor<4x2xi32>, tensor<4x8xf32>) -> tensor<16x8xf32>
    return %1 : tensor<16x8xf32>
  }
}
)";
  };
  const struct {
    std::string region;
    HloOpcode combiner;
  } cases[] = {
      {"      %2 = stablehlo.add %arg2, %arg3 : tensor<f32>\n      stablehlo.return %2 : tensor<f32>",
       HloOpcode::kAdd},
      {"      %2 = stablehlo.maximum %arg2, %arg3 : tensor<f32>\n      stablehlo.return %2 : tensor<f32>",
       HloOpcode::kMaximum},
      {"      %2 = stablehlo.multiply %arg2, %arg3 : tensor<f32>\n      %3 = stablehlo.add %2, %arg3 : "
       "tensor<f32>\n      stablehlo.return %3 : tensor<f32>",
       HloOpcode::kUnknown},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.region);
    auto m = parse_program_text(scatter_with(c.region));
    ASSERT_TRUE(m.ok()) << m.error().message();
    const HloInstruction* scatter = nullptr;
    for (const HloInstruction& i : m->entry()->instructions)
      if (i.opcode == HloOpcode::kScatter) scatter = &i;
    ASSERT_NE(scatter, nullptr);
    EXPECT_EQ(scatter->reducer, c.combiner);
    EXPECT_EQ(scatter->shape.to_string(), "f32[16,8]");
  }
}

// jax.experimental.shard_map under Shardy (JAX's default) prints sdy.manual_computation: a region over each
// device's share. It becomes a call between SPMDFullToShardShape and SPMDShardToFullShape custom calls, as
// the program's HLO text has it. An op that names its results one by one (rng_bit_generator's
// "%output_state, %output =") binds each name to its element.
TEST(StableHlo, ReadsShardMapsAndResultsNamedOneByOne) {
  constexpr const char* kText = R"(module @jit_f attributes {mhlo.num_partitions = 8 : i32} {
  sdy.mesh @mesh = <["x"=8]>
  func.func public @main(%arg0: tensor<64x16xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {}]>}, %arg1: tensor<2xui32>) -> (tensor<64x16xf32>, tensor<16xf32>, tensor<4x4xui32>) {
    %0:2 = sdy.manual_computation(%arg0) in_shardings=[<@mesh, [{"x"}, {}]>] out_shardings=[<@mesh, [{"x"}, {}]>, <@mesh, [{}]>] manual_axes={"x"} (%arg2: tensor<8x16xf32>) {
      %cst = stablehlo.constant dense<0.000000e+00> : tensor<f32>
      %1 = stablehlo.reduce(%arg2 init: %cst) applies stablehlo.add across dimensions = [0] : (tensor<8x16xf32>, tensor<f32>) -> tensor<16xf32>
      %2 = stablehlo.multiply %arg2, %arg2 : tensor<8x16xf32>
      sdy.return %2, %1 : tensor<8x16xf32>, tensor<16xf32>
    } : (tensor<64x16xf32>) -> (tensor<64x16xf32>, tensor<16xf32>)
    %output_state, %output = stablehlo.rng_bit_generator %arg1, algorithm =  DEFAULT : (tensor<2xui32>) -> (tensor<2xui32>, tensor<4x4xui32>)
    return %0#0, %0#1, %output : tensor<64x16xf32>, tensor<16xf32>, tensor<4x4xui32>
  }
}
)";
  auto m = parse_program_text(kText);
  ASSERT_TRUE(m.ok()) << m.error().message();
  std::string to_local, body_call, to_global, random;
  for (const HloInstruction& i : m->entry()->instructions) {
    if (i.custom_call_target == "SPMDFullToShardShape") to_local += i.shape.to_string() + ";";
    if (i.custom_call_target == "SPMDShardToFullShape") to_global += i.shape.to_string() + ";";
    if (i.opcode == HloOpcode::kCall) body_call = i.shape.to_string();
    if (i.opcode == HloOpcode::kGetTupleElement && i.operands[0] == "output_state.results")
      random += i.shape.to_string() + ";";
  }
  EXPECT_EQ(to_local, "f32[8,16];");  // each device's share goes in
  EXPECT_EQ(body_call, "(f32[8,16], f32[16])");
  EXPECT_EQ(to_global, "f32[64,16];f32[16];");
  EXPECT_EQ(random, "u32[2];u32[4,4];");  // %output_state, %output
  const HloInstruction* root = m->entry()->root();
  ASSERT_NE(root, nullptr);
  EXPECT_EQ(root->shape.to_string(), "(f32[64,16], f32[16], u32[4,4])");

  // A region that does not close as it opened, or returns what it does not declare, is refused.
  std::string unclosed = kText;
  const size_t close = unclosed.find("    } : (tensor<64x16xf32>)");
  unclosed.replace(close, unclosed.find('\n', close) - close, "    }");
  auto open = parse_program_text(unclosed);
  ASSERT_FALSE(open.ok());
  EXPECT_NE(open.error().message().find("line 9: a manual computation's region ends without its types"),
            std::string::npos)
      << open.error().message();
  std::string miscounted = kText;
  miscounted.replace(miscounted.find("%0:2 = sdy"), 4, "%0:3");
  auto bad = parse_program_text(miscounted);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message().find("line 9: a manual computation of 3 results"), std::string::npos)
      << bad.error().message();
}

// With debug_info=True (and in JAX_DUMP_IR_TO's files) every op ends in a location; its name is the JAX op
// that made it, which the plan shows as an HLO module's op_name. Aliases come after the module, names
// through call sites and fused locations; a file position alone names nothing.
TEST(StableHlo, LocationsNameTheOpsThatMadeThem) {
  constexpr const char* kText = R"(#loc1 = loc("x")
module @jit_f attributes {mhlo.num_partitions = 1 : i32} {
  func.func public @main(%arg0: tensor<8x8xf32> loc("x"), %arg1: tensor<8x8xf32> {mhlo.layout_mode = "default"} loc("y")) -> (tensor<8x8xf32> {jax.result_info = "result"}) {
    %0 = stablehlo.sine %arg0 : tensor<8x8xf32> loc(#loc8)
    %1 = stablehlo.dot_general %0, %arg1, contracting_dims = [1] x [0] : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32> loc(#loc9)
    %2 = stablehlo.cosine %1 : tensor<8x8xf32> loc(#loc10)
    %3 = stablehlo.negate %2 : tensor<8x8xf32> loc(#loc2)
    %4 = stablehlo.abs %3 : tensor<8x8xf32> loc("jit(f)/jit(main)/abs"(#loc2))
    return %4 : tensor<8x8xf32> loc(#loc)
  } loc(#loc)
} loc(#loc)
#loc = loc(unknown)
#loc2 = loc("/tmp/x.py":3:11)
#loc3 = loc("jit(f)/jit(main)/dot_general"(#loc2))
#loc8 = loc("jit(f)/jit(main)/sin"(#loc2))
#loc9 = loc(callsite(#loc3 at #loc2))
#loc10 = loc(fused[#loc2, "jit(f)/jit(main)/cos"(#loc2)])
)";
  auto m = parse_program_text(kText);
  ASSERT_TRUE(m.ok()) << m.error().message();
  std::string names;
  for (const HloInstruction& i : m->entry()->instructions)
    if (i.opcode != HloOpcode::kParameter) names += i.op_name + ";";
  EXPECT_EQ(names,
            "jit(f)/jit(main)/sin;jit(f)/jit(main)/dot_general;jit(f)/jit(main)/cos;stablehlo.negate;"
            "jit(f)/jit(main)/abs;");
  // Aliases that refer to each other in a circle name nothing, and end.
  std::string circle = kText;
  circle += "#loc11 = loc(#loc12)\n#loc12 = loc(#loc11)\n";
  circle.replace(circle.find("loc(#loc2)\n    %4"), 10, "loc(#loc11)");
  auto c = parse_program_text(circle);
  ASSERT_TRUE(c.ok()) << c.error().message();
}

// A function's attribute dictionary after its results ("attributes {...}") is not one of them.
TEST(StableHlo, FunctionAttributesAreNotResults) {
  auto m = parse_program_text(R"(module @jit_f {
  func.func public @main(%arg0: tensor<8xf32>) -> (tensor<8xf32> {jax.result_info = "[0]"}, tensor<8xf32>) attributes {mhlo.frontend_attributes = {xla.sdy.meshes = "{mesh = #sdy.mesh<[\"x\"=2]>}"}} {
    %0 = call @inner(%arg0) : (tensor<8xf32>) -> tensor<8xf32>
    return %0, %arg0 : tensor<8xf32>, tensor<8xf32>
  }
  func.func private @inner(%arg0: tensor<8xf32>) -> tensor<8xf32> attributes {no_inline} {
    %0 = stablehlo.sine %arg0 : tensor<8xf32>
    return %0 : tensor<8xf32>
  }
}
)");
  ASSERT_TRUE(m.ok()) << m.error().message();
  const HloInstruction* root = m->entry()->root();
  ASSERT_NE(root, nullptr);
  EXPECT_EQ(root->shape.to_string(), "(f32[8], f32[8])");
}

// The generic op form ("stablehlo.add"(%a, %b) : (...) -> ...), tuples and their elements in both forms,
// and the tokens of ordered effects (io_callback) are read.
TEST(StableHlo, ReadsTheGenericFormTuplesAndTokens) {
  auto m = parse_program_text(R"(module @jit_f {
  func.func public @main(%arg0: !stablehlo.token {jax.token = true}, %arg1: tensor<16xf32>) -> (!stablehlo.token, tensor<16xf32>, tensor<i32>) {
    %0 = "stablehlo.sine"(%arg1) : (tensor<16xf32>) -> tensor<16xf32>
    %c = "stablehlo.constant"() <{value = dense<1> : tensor<i32>}> : () -> tensor<i32>
    %1 = "stablehlo.tuple"(%0, %c) : (tensor<16xf32>, tensor<i32>) -> tuple<tensor<16xf32>, tensor<i32>>
    %2 = "stablehlo.get_tuple_element"(%1) <{index = 0 : i32}> : (tuple<tensor<16xf32>, tensor<i32>>) -> tensor<16xf32>
    %3 = stablehlo.get_tuple_element %1[1] : (tuple<tensor<16xf32>, tensor<i32>>) -> tensor<i32>
    %4:2 = stablehlo.custom_call @xla_python_gpu_callback(%arg0, %2) {api_version = 2 : i32, has_side_effect = true} : (!stablehlo.token, tensor<16xf32>) -> (!stablehlo.token, tensor<16xf32>)
    return %4#0, %4#1, %3 : !stablehlo.token, tensor<16xf32>, tensor<i32>
  }
}
)");
  ASSERT_TRUE(m.ok()) << m.error().message();
  std::string elements;
  for (const HloInstruction& i : m->entry()->instructions)
    if (i.opcode == HloOpcode::kGetTupleElement && i.operands[0] == "1")
      elements += std::to_string(i.tuple_index) + ":" + i.shape.to_string() + ";";
  EXPECT_EQ(elements, "0:f32[16];1:s32[];");
  auto sizes = entry_sizes(*m);
  ASSERT_TRUE(sizes.ok()) << sizes.error().message();
  EXPECT_EQ(sizes->argument_bytes, 16u * 4);  // a token takes no memory
}

// A while's regions may read values from outside the loop (MLIR's while is not isolated from above): XLA's
// importer carries each one, in with the loop's operands and out of its body unchanged - through both
// loops when a nested loop reads it.
TEST(StableHlo, ValuesAWhileReadsFromOutsideAreCarried) {
  auto m = parse_program_text(R"(module @jit_f {
  func.func public @main(%arg0: tensor<64x64xf32>, %arg1: tensor<64xf32>) -> tensor<64xf32> {
    %c = stablehlo.constant dense<0> : tensor<i32>
    %c_1 = stablehlo.constant dense<1> : tensor<i32>
    %c_5 = stablehlo.constant dense<5> : tensor<i32>
    %0:2 = stablehlo.while(%iterArg = %c, %iterArg_0 = %arg1) : tensor<i32>, tensor<64xf32>
     cond {
      %1 = stablehlo.compare  LT, %iterArg, %c_5,  SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
      stablehlo.return %1 : tensor<i1>
    } do {
      %1 = stablehlo.add %iterArg, %c_1 : tensor<i32>
      %2 = stablehlo.dot_general %arg0, %iterArg_0, contracting_dims = [1] x [0] : (tensor<64x64xf32>, tensor<64xf32>) -> tensor<64xf32>
      %3:2 = stablehlo.while(%iterArg_2 = %c, %iterArg_3 = %2) : tensor<i32>, tensor<64xf32>
       cond {
        %4 = stablehlo.compare  LT, %iterArg_2, %c_5,  SIGNED : (tensor<i32>, tensor<i32>) -> tensor<i1>
        stablehlo.return %4 : tensor<i1>
      } do {
        %4 = stablehlo.add %iterArg_2, %c_1 : tensor<i32>
        %5 = stablehlo.dot_general %arg0, %iterArg_3, contracting_dims = [1] x [0] : (tensor<64x64xf32>, tensor<64xf32>) -> tensor<64xf32>
        stablehlo.return %4, %5 : tensor<i32>, tensor<64xf32>
      }
      stablehlo.return %1, %3#1 : tensor<i32>, tensor<64xf32>
    }
    return %0#1 : tensor<64xf32>
  }
}
)");
  ASSERT_TRUE(m.ok()) << m.error().message();
  // Each loop's operand, its regions' parameter, its body's result and the loop itself: one type.
  size_t loops = 0;
  for (const HloComputation& c : m->computations) {
    for (const HloInstruction& i : c.instructions) {
      if (i.opcode != HloOpcode::kWhile) continue;
      ++loops;
      const HloInstruction* init = nullptr;
      for (const HloInstruction& j : c.instructions)
        if (j.name == i.operands[0]) init = &j;
      ASSERT_NE(init, nullptr);
      // The inner loop reads %c_5 (cond), %c_1 and %arg0 (do) from outside; the outer loop carries them in
      // turn, and %c, which its body starts the inner loop with.
      EXPECT_EQ(init->shape.to_string(), i.name == "0" ? "(s32[], f32[64], s32[], s32[], f32[64,64], s32[])"
                                                       : "(s32[], f32[64], s32[], s32[], f32[64,64])")
          << i.name;
      EXPECT_EQ(i.shape.to_string(), init->shape.to_string());
      for (const std::string& region : i.called) {
        const HloComputation* r = nullptr;
        for (const HloComputation& k : m->computations)
          if (k.name == region) r = &k;
        ASSERT_NE(r, nullptr);
        EXPECT_EQ(r->instructions[0].shape.to_string(), init->shape.to_string()) << region;
        if (region.ends_with(".body")) {
          EXPECT_EQ(r->root()->shape.to_string(), init->shape.to_string());
        }
      }
    }
  }
  EXPECT_EQ(loops, 2u);
  auto sizes = entry_sizes(*m);
  ASSERT_TRUE(sizes.ok()) << sizes.error().message();
  EXPECT_EQ(sizes->argument_bytes, 64u * 64 * 4 + 64 * 4);
  // A shard map's region is isolated from above: reading outside it is still an error.
  auto isolated = parse_program_text(R"(module @jit_f attributes {mhlo.num_partitions = 2 : i32} {
  sdy.mesh @mesh = <["x"=2]>
  func.func public @main(%arg0: tensor<8xf32>, %arg1: tensor<8xf32>) -> tensor<8xf32> {
    %0 = sdy.manual_computation(%arg0) in_shardings=[<@mesh, [{"x"}]>] out_shardings=[<@mesh, [{"x"}]>] manual_axes={"x"} (%arg2: tensor<4xf32>) {
      %1 = stablehlo.add %arg2, %arg1 : tensor<4xf32>
      sdy.return %1 : tensor<4xf32>
    } : (tensor<8xf32>) -> tensor<8xf32>
    return %0 : tensor<8xf32>
  }
}
)");
  ASSERT_FALSE(isolated.ok());
  EXPECT_NE(isolated.error().message().find("%arg1 is not defined here"), std::string::npos)
      << isolated.error().message();
}

// CHLO's ops reach XLA as StableHLO elementwise expressions: each is read as an HLO op of its cost, so the
// model fuses them as XLA will (an unknown op would get a buffer of its own).
TEST(StableHlo, ChloOpsAreReadAsTheElementwiseOpsTheyBecome) {
  auto m = parse_program_text(R"(module @jit_f {
  func.func public @main(%arg0: tensor<16xf32>, %arg1: tensor<f32>) -> tensor<16xf32> {
    %0 = chlo.lgamma %arg0 : tensor<16xf32> -> tensor<16xf32>
    %1 = chlo.sinh %0 : tensor<16xf32> -> tensor<16xf32>
    %2 = chlo.broadcast_add %1, %arg1 : (tensor<16xf32>, tensor<f32>) -> tensor<16xf32>
    %3 = chlo.is_inf %2 : tensor<16xf32> -> tensor<16xi1>
    %4 = stablehlo.select %3, %arg0, %2 : tensor<16xi1>, tensor<16xf32>
    return %4 : tensor<16xf32>
  }
}
)");
  ASSERT_TRUE(m.ok()) << m.error().message();
  std::string ops;
  for (const HloInstruction& i : m->entry()->instructions)
    if (i.opcode != HloOpcode::kParameter) ops += std::string(hlo_opcode_name(i.opcode)) + " ";
  EXPECT_EQ(ops, "log exponential add is-finite select ");
}

std::string error_of(const std::string& text) {
  auto m = parse_program_text(text);
  EXPECT_FALSE(m.ok());
  return m.ok() ? "" : m.error().message();
}

TEST(StableHlo, MalformedTextNamesTheLine) {
  const std::string head = "module @m {\n  func.func public @main(%arg0: tensor<4xf32>) -> tensor<4xf32> {\n";
  EXPECT_NE(
      error_of(head +
               "    %0 = stablehlo.add %arg0, %nope : tensor<4xf32>\n    return %0 : tensor<4xf32>\n  }\n}\n")
          .find("line 3: %nope is not defined"),
      std::string::npos);
  EXPECT_NE(error_of(head + "    %0 = stablehlo.add %arg0, %arg0 : tensor<?xf32>\n")
                .find("line 3: a dynamic dimension"),
            std::string::npos);
  EXPECT_NE(error_of(head + "    %0 = stablehlo.add %arg0, %arg0 : tensor<4xq7>\n")
                .find("line 3: unknown element type"),
            std::string::npos);
  EXPECT_NE(error_of(head + "    %0 = stablehlo.add %arg0, %arg0\n").find("line 3:"), std::string::npos);
  EXPECT_NE(error_of(head + "    %0 = stablehlo.add %arg0, %arg0 : tensor<4xf32>\n").find("truncated"),
            std::string::npos);
  EXPECT_NE(error_of(head + "    %0 = stablehlo.add %arg0, %arg0 : tensor<4611686018427387904xf32>\n")
                .find("overflows"),
            std::string::npos);
  EXPECT_NE(error_of(head + "    %0 = func.call @missing(%arg0) : (tensor<4xf32>) -> tensor<4xf32>\n    "
                            "return %0 : tensor<4xf32>\n  }\n}\n")
                .find("@missing"),
            std::string::npos);
  EXPECT_NE(
      error_of(head + "    %0 = stablehlo.add %arg0, %arg0 : tensor<4xf32>\n  }\n}\n").find("no return"),
      std::string::npos);
  EXPECT_NE(error_of(head + "    %0 = stablehlo.while(%i = %arg0) : tensor<4xf32>\n     cond {\n"
                            "      %c = stablehlo.constant dense<true> : tensor<i1>\n"
                            "      stablehlo.return %c : tensor<i1>\n    } do {\n"
                            "      stablehlo.return %i, %i : tensor<4xf32>, tensor<4xf32>\n    }\n"
                            "    return %0 : tensor<4xf32>\n  }\n}\n")
                .find("line 8: the loop's do region returns 2 values for a carry of 1"),
            std::string::npos);
  std::string deep = "tensor<4xf32>";
  for (int k = 0; k < 65; ++k) deep = "tuple<" + deep + ">";
  EXPECT_NE(error_of("module @m {\n  func.func public @main(%arg0: " + deep + ") -> tensor<4xf32> {\n")
                .find("line 2: a type nested more than 64 deep"),
            std::string::npos);
}

}  // namespace
}  // namespace memfit
