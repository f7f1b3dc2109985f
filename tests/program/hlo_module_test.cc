// The HLO importer on every shared program: argument, output and alias bytes exactly as XLA's
// compiled.memory_analysis() reported them (tests/data/xla/programs.json).
#include "memfit/program/hlo_module.h"
#include "memfit/program/stablehlo_module.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <utility>

#include "memfit/core/file_io.h"
#include "memfit/core/json.h"

namespace memfit {
namespace {

std::string data(const std::string& name) { return std::string(MEMFIT_TEST_DATA_DIR) + "/xla/" + name; }

TEST(HloModule, EntrySizesMatchXlaOnEveryProgram) {
  auto text = read_file(data("programs.json"));
  ASSERT_TRUE(text.ok());
  auto programs = parse_json(*text, "programs.json");
  ASSERT_TRUE(programs.ok());
  int checked = 0;
  for (const Json& p : (*programs)["programs"]) {
    const std::string name = p["name"];
    SCOPED_TRACE(name);
    auto hlo = read_file(data(name + ".hlo.txt.gz"));
    ASSERT_TRUE(hlo.ok()) << hlo.error().message();
    auto module = parse_hlo_module(*hlo);
    ASSERT_TRUE(module.ok()) << module.error().message();
    EXPECT_TRUE(module->is_scheduled);
    auto sizes = entry_sizes(*module);
    ASSERT_TRUE(sizes.ok()) << sizes.error().message();
    const Json& xla = p["xla_memory_analysis"];
    EXPECT_EQ(sizes->argument_bytes, xla["argument_size_in_bytes"].get<uint64_t>());
    EXPECT_EQ(sizes->output_bytes, xla["output_size_in_bytes"].get<uint64_t>());
    EXPECT_EQ(sizes->alias_bytes, xla["alias_size_in_bytes"].get<uint64_t>());
    EXPECT_EQ(sizes->host_argument_bytes, xla["host_argument_size_in_bytes"].get<uint64_t>());
    EXPECT_EQ(sizes->host_output_bytes, xla["host_output_size_in_bytes"].get<uint64_t>());
    EXPECT_EQ(sizes->host_alias_bytes, xla["host_alias_size_in_bytes"].get<uint64_t>());
    ++checked;
  }
  EXPECT_EQ(checked, 11);
}

// Arrays in host memory (S(5): jax.device_put(x, memory_kind="pinned_host")) count in the host_* figures,
// not the device's, as xla/pjrt/compiled_memory_stats.cc sorts allocations; a tuple's pointer table stays
// on the device. StableHLO says the same with mhlo.memory_kind on main's arguments and results.
TEST(HloModule, HostArgumentsAndResultsAreNotTheDevices) {
  constexpr const char* kHlo =
      R"(HloModule m, is_scheduled=true, input_output_alias={ {0}: (0, {}, may-alias) }

ENTRY main {
  p0 = f32[256,256]{1,0:S(5)} parameter(0)
  p1 = f32[256,256]{1,0} parameter(1)
  copy-start = (f32[256,256]{1,0}, f32[256,256]{1,0:S(5)}, u32[]) copy-start(p0)
  copy-done = f32[256,256]{1,0} copy-done(copy-start)
  add = f32[256,256]{1,0} add(copy-done, p1)
  copy-start.1 = (f32[256,256]{1,0:S(5)}, f32[256,256]{1,0}, u32[]) copy-start(add)
  copy-done.1 = f32[256,256]{1,0:S(5)} copy-done(copy-start.1)
  mul = f32[256,256]{1,0} multiply(add, p1)
  ROOT t = (f32[256,256]{1,0:S(5)}, f32[256,256]{1,0}) tuple(copy-done.1, mul)
}
)";
  auto m = parse_hlo_module(kHlo);
  ASSERT_TRUE(m.ok()) << m.error().message();
  auto sizes = entry_sizes(*m);
  ASSERT_TRUE(sizes.ok()) << sizes.error().message();
  constexpr uint64_t kArray = 256 * 256 * 4;
  EXPECT_EQ(sizes->argument_bytes, kArray);
  EXPECT_EQ(sizes->host_argument_bytes, kArray);
  EXPECT_EQ(sizes->output_bytes, kArray + 2 * 8);  // the device result and the tuple's table
  EXPECT_EQ(sizes->host_output_bytes, kArray);
  EXPECT_EQ(sizes->alias_bytes, 0u);
  EXPECT_EQ(sizes->host_alias_bytes, kArray);

  constexpr const char* kStableHlo = R"(module @jit_f {
  func.func public @main(%arg0: tensor<256x256xf32> {mhlo.memory_kind = "pinned_host"}, %arg1: tensor<256x256xf32> {mhlo.memory_kind = "device"}) -> (tensor<256x256xf32> {jax.result_info = "[0]", mhlo.memory_kind = "pinned_host"}, tensor<256x256xf32> {jax.result_info = "[1]"}) {
    %0 = stablehlo.custom_call @annotate_device_placement(%arg0) {has_side_effect = true, mhlo.frontend_attributes = {_xla_buffer_placement = "device"}} : (tensor<256x256xf32>) -> tensor<256x256xf32>
    %1 = stablehlo.add %0, %arg1 : tensor<256x256xf32>
    %2 = stablehlo.custom_call @annotate_device_placement(%1) {has_side_effect = true, mhlo.frontend_attributes = {_xla_buffer_placement = "pinned_host"}} : (tensor<256x256xf32>) -> tensor<256x256xf32>
    %3 = stablehlo.multiply %1, %arg1 : tensor<256x256xf32>
    return %2, %3 : tensor<256x256xf32>, tensor<256x256xf32>
  }
}
)";
  auto lowered = parse_program_text(kStableHlo);
  ASSERT_TRUE(lowered.ok()) << lowered.error().message();
  auto lowered_sizes = entry_sizes(*lowered);
  ASSERT_TRUE(lowered_sizes.ok()) << lowered_sizes.error().message();
  EXPECT_EQ(lowered_sizes->argument_bytes, kArray);
  EXPECT_EQ(lowered_sizes->host_argument_bytes, kArray);
  EXPECT_EQ(lowered_sizes->output_bytes, kArray + 2 * 8);
  EXPECT_EQ(lowered_sizes->host_output_bytes, kArray);
}

TEST(HloModule, InstructionsCarryOperandsCalledComputationsAndOpNames) {
  auto hlo = read_file(data("mlp_fp32_donate.hlo.txt.gz"));
  auto module = parse_hlo_module(*hlo);
  ASSERT_TRUE(module.ok());
  EXPECT_EQ(module->name, "jit_step");
  const HloComputation* entry = module->entry();
  ASSERT_NE(entry, nullptr);
  const HloInstruction* root = entry->root();
  ASSERT_NE(root, nullptr);
  EXPECT_EQ(root->opcode, HloOpcode::kTuple);
  EXPECT_TRUE(root->shape.is_tuple());
  EXPECT_EQ(root->operands.size(), root->shape.elements.size());
  int fusions = 0;
  int parameters = 0;
  for (const HloInstruction& i : entry->instructions) {
    if (i.opcode == HloOpcode::kFusion) {
      ++fusions;
      ASSERT_EQ(i.called.size(), 1u) << i.name;
      EXPECT_NE(module->find(i.called[0]), nullptr) << i.called[0];
    }
    if (i.opcode == HloOpcode::kParameter) ++parameters;
    if (i.opcode == HloOpcode::kGetTupleElement) {
      EXPECT_GE(i.tuple_index, 0) << i.name;
    }
  }
  EXPECT_GT(fusions, 10);
  // Donation: each alias pairs an output with a parameter of the same size.
  ASSERT_FALSE(module->aliases.empty());
  EXPECT_LT(module->aliases.size(), static_cast<size_t>(parameters));  // the batch is not donated
  for (const HloAlias& a : module->aliases) {
    const HloInstruction* param = nullptr;
    for (const HloInstruction& i : entry->instructions) {
      if (i.parameter_number == a.parameter) param = &i;
    }
    ASSERT_NE(param, nullptr) << a.parameter;
    const Shape* out = root->shape.at(a.output_index);
    ASSERT_NE(out, nullptr);
    EXPECT_EQ(out->leaf_bytes(), param->shape.at(a.parameter_index)->leaf_bytes()) << a.parameter;
  }
  bool jax_op = false;
  for (const HloInstruction& i : entry->instructions) jax_op = jax_op || i.op_name.starts_with("jit(step)/");
  EXPECT_TRUE(jax_op);
}

// The attributes few instructions carry (HloInstruction::Rare) are held apart, and behave as members: an
// instruction without them reads them empty and holds no box; one that has them is copied whole (a copy
// changed leaves the original as it was) and moved with its box.
TEST(HloModule, RareAttributesAreHeldApartAndCopiedWithTheirInstruction) {
  auto module = parse_hlo_module(
      R"(HloModule m, entry_computation_layout={(f32[8,4]{1,0}, s32[2,1]{1,0})->f32[2,4]{1,0}}

ENTRY main {
  p = f32[8,4]{1,0} parameter(0), sharding={devices=[2,1]<=[2]}
  i = s32[2,1]{1,0} parameter(1)
  g = f32[2,4]{1,0} gather(p, i), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,4}
  ROOT n = f32[2,4]{1,0} negate(g)
})");
  ASSERT_TRUE(module.ok()) << module.error().message();
  const HloComputation* entry = module->entry();
  ASSERT_NE(entry, nullptr);
  ASSERT_EQ(entry->instructions.size(), 4u);
  const HloInstruction& p = entry->instructions[0];
  const HloInstruction& g = entry->instructions[2];
  const HloInstruction& n = entry->instructions[3];
  EXPECT_EQ(p.sharding_tiles(), (std::vector<std::vector<uint64_t>>{{2, 1}}));
  EXPECT_EQ(g.gather_dims().window, (std::vector<int64_t>{1}));
  EXPECT_EQ(g.gather_dims().collapsed, (std::vector<int64_t>{0}));
  EXPECT_EQ(g.gather_dims().index_vector_dim, 1);
  EXPECT_FALSE(n.rare.has_value());
  EXPECT_FALSE(entry->instructions[1].rare.has_value()) << "a parameter without a sharding";
  EXPECT_TRUE(n.sharding_tiles().empty());
  EXPECT_TRUE(n.gather_dims().window.empty());
  EXPECT_EQ(n.gather_dims().index_vector_dim, -1);
  EXPECT_TRUE(n.fusion_kind().empty());
  EXPECT_EQ(n.opcode_name(), "negate");

  HloInstruction copy = g;
  copy.mutable_gather_dims().window = {7};
  copy.set_opcode("scatter-ish");
  EXPECT_EQ(copy.opcode, HloOpcode::kUnknown);
  EXPECT_EQ(copy.opcode_name(), "scatter-ish");
  EXPECT_EQ(g.gather_dims().window, (std::vector<int64_t>{1})) << "the original keeps its own";
  EXPECT_EQ(g.opcode_name(), "gather");
  copy.set_opcode(HloOpcode::kNegate);
  EXPECT_EQ(copy.opcode_name(), "negate") << "XLA's spelling once the opcode is set";
  HloInstruction moved = std::move(copy);
  EXPECT_EQ(moved.gather_dims().window, (std::vector<int64_t>{7}));
  HloInstruction assigned;
  assigned = moved;
  EXPECT_EQ(assigned.gather_dims().window, (std::vector<int64_t>{7}));
  EXPECT_EQ(moved.gather_dims().window, (std::vector<int64_t>{7}));
}
TEST(HloModule, ShapesTuplesAndPackedTypes) {
  auto module = parse_hlo_module(
      "HloModule m, is_scheduled=true, input_output_alias={ {1}: (0, {}, may-alias) }\n"
      "ENTRY %main (p: s4[1000]) -> (s4[1000], f32[2,3]) {\n"
      "  %p = s4[1000]{0:E(4)} parameter(0)\n"
      "  %c = f32[2,3]{1,0} constant({...})\n"
      "  ROOT %t = (f32[2,3]{1,0}, /*index=1*/s4[1000]{0:E(4)}) tuple(%c, %p)\n"
      "}\n");
  ASSERT_TRUE(module.ok()) << module.error().message();
  auto sizes = entry_sizes(*module);
  ASSERT_TRUE(sizes.ok());
  EXPECT_EQ(sizes->argument_bytes, 500u);            // packed 4-bit
  EXPECT_EQ(sizes->output_bytes, 24u + 500u + 16u);  // arrays + a 2-entry pointer table
  EXPECT_EQ(sizes->alias_bytes, 500u);
  EXPECT_EQ(module->entry()->root()->shape.to_string(), "(f32[2,3], s4[1000])");
  EXPECT_EQ(module->entry()->root()->operands, (std::vector<std::string>{"c", "p"}));
}

std::string error_of(std::string_view text) {
  auto m = parse_hlo_module(text);
  EXPECT_FALSE(m.ok());
  return m.ok() ? "" : m.error().message();
}

TEST(HloModule, MalformedOrTruncatedInputNamesTheLine) {
  EXPECT_NE(error_of("hello").find("not an HLO module"), std::string::npos);
  EXPECT_NE(error_of("\n\nhello").find("line 3"), std::string::npos);
  // The other reports of XLA's dump folder are named for what they are.
  const std::string assignment = error_of(
      "BufferAssignment:\nallocation 0: size 38535168, page 0, parameter 379, shape |f32[64,196,768]| at "
      "ShapeIndex {}:\n");
  EXPECT_NE(assignment.find("XLA's buffer assignment, not an HLO module"), std::string::npos) << assignment;
  EXPECT_NE(assignment.find("after_optimizations"), std::string::npos) << assignment;
  EXPECT_NE(error_of("Total bytes used: 12665737640 (11.79GiB)\n").find("memory usage report"),
            std::string::npos);
  EXPECT_NE(error_of("HloModule m\nENTRY %e () -> f32[] {\n  %x = f32[ parameter(0)\n}\n").find("line 3"),
            std::string::npos);
  EXPECT_NE(error_of("HloModule m\nENTRY %e () -> f32[] {\n  %x = f32[] parameter(0)\n").find("truncated"),
            std::string::npos);
  EXPECT_NE(error_of("HloModule m\nENTRY %e () -> f32[] {\n  %x = blob[] parameter(0)\n}\n").find("line 3"),
            std::string::npos);
  EXPECT_NE(
      error_of("HloModule m\nENTRY %e () -> f32[] {\n  %x = f32[4294967296,4294967296,16] parameter(0)\n}\n")
          .find("overflows"),
      std::string::npos);
  EXPECT_NE(error_of("HloModule m\n%c () -> f32[] {\n  ROOT %x = f32[] parameter(0)\n}\n").find("no ENTRY"),
            std::string::npos);
  // A computation's root is its one ROOT: a second is refused, naming its line.
  EXPECT_NE(error_of("HloModule m\nENTRY %e () -> f32[] {\n  ROOT %x = f32[] parameter(0)\n"
                     "  ROOT %y = f32[] negate(%x)\n}\n")
                .find("line 4: 'y' is a second ROOT"),
            std::string::npos);
  // A program before optimization whose values depend on each other (elementwise ops that the fusion
  // model would fold into one kernel) is refused, not planned; a forward reference alone is not a cycle.
  const std::string cycle =
      "HloModule m\nENTRY %e (p: f32[4]) -> f32[4] {\n  %p = f32[4] parameter(0)\n"
      "  %a = f32[4] add(%p, %b)\n  %b = f32[4] add(%a, %p)\n  ROOT %c = f32[4] add(%b, %a)\n}\n";
  EXPECT_NE(error_of(cycle).find("depends on itself"), std::string::npos) << error_of(cycle);
  EXPECT_NE(error_of("HloModule m\nENTRY %e (p: f32[4]) -> f32[4] {\n  %p = f32[4] parameter(0)\n"
                     "  ROOT %a = f32[4] add(%p, %a)\n}\n")
                .find("line 4: 'a' depends on itself"),
            std::string::npos);
  EXPECT_TRUE(parse_hlo_module("HloModule m\nENTRY %e (p: f32[4]) -> f32[4] {\n  %p = f32[4] parameter(0)\n"
                               "  ROOT %b = f32[4] negate(%a)\n  %a = f32[4] negate(%p)\n}\n")
                  .ok());
  auto hlo = read_file(data("mlp_fp32.hlo.txt.gz"));
  ASSERT_TRUE(hlo.ok());
  for (size_t cut : {hlo->size() / 3, hlo->size() - 3}) {
    EXPECT_FALSE(parse_hlo_module(std::string_view(*hlo).substr(0, cut)).ok()) << cut;
  }
}

// Where JAX asked a value to live, as both front ends write the frontend attribute.
TEST(HloModule, BufferPlacementReadsBothSpellings) {
  EXPECT_EQ(buffer_placement_attribute(R"({_xla_buffer_placement="pinned_host"})"), "pinned_host");
  EXPECT_EQ(buffer_placement_attribute(R"({other = "x", _xla_buffer_placement = "device"})"), "device");
  EXPECT_EQ(buffer_placement_attribute(R"({_xla_buffer_placement})"), "");
  EXPECT_EQ(buffer_placement_attribute(R"({_xla_buffer_placement = "unterminated)"), "");
  EXPECT_EQ(buffer_placement_attribute(R"({mhlo.sharding = "{replicated}"})"), "");
}

// The devices a sharding annotation tiles over, in every spelling XLA prints; and a program before
// partitioning, in both front ends, knows it is sharded (an unsharded one and a compiled one are one device).
TEST(HloModule, KnowsTheDevicesAProgramIsShardedOver) {
  EXPECT_EQ(sharding_devices("{devices=[8,1]<=[8]}"), 8u);
  EXPECT_EQ(sharding_devices("{devices=[2,1,4]<=[8] last_tile_dim_replicate}"), 8u);
  EXPECT_EQ(sharding_devices("{devices=[2,2]0,1,2,3}"), 4u);
  EXPECT_EQ(sharding_devices("{replicated}"), 1u);
  EXPECT_EQ(sharding_devices("{maximal device=0}"), 1u);
  EXPECT_EQ(sharding_devices("{devices=[4294967296,4294967296]<=[x]}"), uint64_t{1} << 32);  // saturates
  EXPECT_EQ(sharding_devices("{devices=[8,"), 1u);
  const std::pair<const char*, uint64_t> programs[] = {{"cpu8_gpt_fsdp8.lowered.hlo.txt.gz", 8},
                                                       {"cpu8_gpt_fsdp8.stablehlo.mlir.gz", 8},
                                                       {"gpt_fp32.lowered.hlo.txt.gz", 1},
                                                       {"cpu8_gpt_fsdp8.hlo.txt.gz", 1}};
  for (const auto& [name, partitions] : programs) {
    SCOPED_TRACE(name);
    auto text = read_file(data(name));
    ASSERT_TRUE(text.ok());
    auto module = parse_program_text(*text);
    ASSERT_TRUE(module.ok()) << module.error().message();
    EXPECT_EQ(module->num_partitions, partitions);
  }
}

// Reordering in place: every permutation of four follows its order, and indices not named (or named twice,
// or out of range) are dropped or ignored.
// XLA's dumps (XLA_FLAGS=--xla_dump_to, JAX 0.11) leave get-tuple-elements out and name a tuple's element in
// its reader: "%fusion#1". Read as the get-tuple-element compiled.as_text() prints, placed before its
// first reader.
TEST(HloModule, ReadsTheTupleElementOperandsOfXlasDumps) {
  const std::string dumped =
      R"(HloModule m, is_scheduled=true, entry_computation_layout={(f32[4]{0})->(f32[4]{0}, f32[2]{0})}

%fused (p: f32[4]) -> (f32[4], f32[2]) {
  %p = f32[4]{0} parameter(0)
  %s = f32[2]{0} slice(%p), slice={[0:2]}
  ROOT %t = (f32[4]{0}, f32[2]{0}) tuple(%p, %s)
}

ENTRY %main (a: f32[4]) -> (f32[4], f32[2]) {
  %a = f32[4]{0} parameter(0)
  %f = (f32[4]{0}, f32[2]{0}) fusion(%a), kind=kLoop, calls=%fused
  %g = f32[4]{0} add(%f#0, %f#0)
  ROOT %r = (f32[4]{0}, f32[2]{0}) tuple(%g, %f#1)
}
)";
  auto module = parse_hlo_module(dumped);
  ASSERT_TRUE(module.ok()) << module.error().message();
  const HloComputation& entry = *module->entry();
  std::vector<std::string> names;
  for (const HloInstruction& i : entry.instructions) names.push_back(i.name);
  EXPECT_EQ(names, (std::vector<std::string>{"a", "f", "f#0", "g", "f#1", "r"}));
  const HloInstruction& first = entry.instructions[2];
  EXPECT_EQ(first.opcode, HloOpcode::kGetTupleElement);
  EXPECT_EQ(first.operands, std::vector<std::string>{"f"});
  EXPECT_EQ(first.tuple_index, 0);
  EXPECT_EQ(first.shape.to_string(), "f32[4]");
  EXPECT_EQ(entry.instructions[3].operands, (std::vector<std::string>{"f#0", "f#0"}));
  EXPECT_EQ(entry.instructions[4].shape.to_string(), "f32[2]");
  auto sizes = entry_sizes(*module);
  ASSERT_TRUE(sizes.ok()) << sizes.error().message();
  EXPECT_EQ(sizes->output_bytes, 16u + 8u + 2 * 8u);

  // An element the value does not have is refused, naming the line.
  std::string bad = dumped;
  bad.replace(bad.find("%f#1)"), 5, "%f#7)");
  auto refused = parse_hlo_module(bad);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message().find(
                "line 13: operand '%f#7' names element 7 of 'f', which has no such element"),
            std::string::npos)
      << refused.error().message();
}

// A real dump: gpt_mixed_donate_remat_full_b16 compiled on the H200 with --xla_dump_to (its
// after_optimizations.txt, 420 get-tuple-elements left out) reads as the module compiled.as_text() printed.
TEST(HloModule, XlasDumpOfARealProgramReadsAsItsPrintedModule) {
  auto dumped = read_file(data("gpt_mixed_donate_remat_full_b16.xla_dump.hlo.txt.gz"));
  ASSERT_TRUE(dumped.ok()) << dumped.error().message();
  auto printed = read_file(data("gpt_mixed_donate_remat_full_b16.hlo.txt.gz"));
  ASSERT_TRUE(printed.ok()) << printed.error().message();
  auto from_dump = parse_hlo_module(*dumped);
  ASSERT_TRUE(from_dump.ok()) << from_dump.error().message();
  auto from_text = parse_hlo_module(*printed);
  ASSERT_TRUE(from_text.ok()) << from_text.error().message();
  EXPECT_EQ(from_dump->entry()->instructions.size(), from_text->entry()->instructions.size());
  auto a = entry_sizes(*from_dump);
  auto b = entry_sizes(*from_text);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->argument_bytes, b->argument_bytes);
  EXPECT_EQ(a->output_bytes, b->output_bytes);
  EXPECT_EQ(a->alias_bytes, b->alias_bytes);
}

// XLA's post order, and the part of it the root reads (how JAX lowers a function: its dead code gone, its
// parameters and every element of a loop's result kept). A value nothing reads begins a walk of its own
// where it is written, pulling what it reads before what the root reads first.
TEST(HloModule, PostOrderOfWhatTheRootReads) {
  auto m = parse_hlo_module(R"(HloModule m

body {
  t = (s32[], f32[8]) parameter(0)
  i = s32[] get-tuple-element(t), index=0
  v = f32[8] get-tuple-element(t), index=1
  ROOT n = (s32[], f32[8]) tuple(i, v)
}

cond {
  t = (s32[], f32[8]) parameter(0)
  ROOT c = pred[] constant(true)
}

ENTRY main {
  a = f32[8] parameter(0)
  unused = f32[8] parameter(1)
  only_dead_reads = f32[8] parameter(2)
  dead = f32[8] negate(only_dead_reads)
  k = s32[] constant(0)
  init = (s32[], f32[8]) tuple(k, a)
  w = (s32[], f32[8]) while(init), condition=cond, body=body
  counter = s32[] get-tuple-element(w), index=0
  out = f32[8] get-tuple-element(w), index=1
  ROOT r = f32[8] exponential(out)
}
)");
  ASSERT_TRUE(m.ok()) << m.error().message();
  const HloComputation& c = *m->entry();
  auto names = [&](const std::vector<uint32_t>& order) {
    std::string out;
    for (uint32_t k : order) out += c.instructions[k].name + " ";
    return out;
  };
  EXPECT_EQ(names(instruction_post_order(c)), "unused only_dead_reads dead k a init w counter out r ");
  EXPECT_EQ(names(instruction_post_order(c, PostOrderOf::kWhatTheRootReads)),
            "unused only_dead_reads k a init w counter out r ");
}

TEST(HloModule, ReorderInstructionsFollowsTheOrderInPlace) {
  auto named = [](std::initializer_list<const char*> names) {
    std::vector<HloInstruction> v;
    for (const char* n : names) {
      HloInstruction i;
      i.name = n;
      i.operands = {std::string(n) + "_operand"};
      v.push_back(std::move(i));
    }
    return v;
  };
  auto names = [](const std::vector<HloInstruction>& v) {
    std::string out;
    for (const HloInstruction& i : v) out += i.name + (i.operands.at(0) == i.name + "_operand" ? "" : "!");
    return out;
  };
  std::vector<uint32_t> order = {0, 1, 2, 3};
  do {
    auto v = named({"a", "b", "c", "d"});
    reorder_instructions(v, order);
    std::string expected;
    for (uint32_t k : order) expected += static_cast<char>('a' + k);
    EXPECT_EQ(names(v), expected);
  } while (std::next_permutation(order.begin(), order.end()));
  auto v = named({"a", "b", "c", "d", "e"});
  reorder_instructions(v, {4, 2, 2, 9, 0});
  EXPECT_EQ(names(v), "eca");
}

}  // namespace
}  // namespace memfit
