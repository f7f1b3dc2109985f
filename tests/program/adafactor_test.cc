// optax.adafactor's state layout (program/adafactor.h) against a real program: the flax.linen encoder
// trained with optax.adafactor (tests/data/xla/flax_encoder_adafactor_b32.lowered.hlo.txt.gz). Its entry
// parameters name every state array (opt_0__v_row__<param>, ...): for each model parameter the rule must
// give exactly the arrays JAX passed, and their bytes must be what XLA's memory_analysis() counted as
// arguments beside the parameters and the batch.
#include "memfit/program/adafactor.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "memfit/core/file_io.h"
#include "memfit/program/hlo_module.h"

namespace memfit {
namespace {

TEST(Adafactor, FactorsTheTwoLargestDimensionsWhenBothAreLarge) {
  const AdafactorMoments embed = adafactor_moments({32000, 512});
  EXPECT_TRUE(embed.factored);
  EXPECT_EQ(embed.v_row, (std::vector<uint64_t>{512}));    // without the largest dimension
  EXPECT_EQ(embed.v_col, (std::vector<uint64_t>{32000}));  // without the second largest
  EXPECT_EQ(embed.v, (std::vector<uint64_t>{1}));
  const AdafactorMoments square = adafactor_moments({512, 512});  // a tie: the earlier counts as smaller
  EXPECT_EQ(square.v_row, (std::vector<uint64_t>{512}));
  EXPECT_EQ(square.v_col, (std::vector<uint64_t>{512}));
  // flax's attention kernels [D, heads, head_dim]: the second largest (64) is under 128, not factored.
  const AdafactorMoments query = adafactor_moments({512, 8, 64});
  EXPECT_FALSE(query.factored);
  EXPECT_EQ(query.v, (std::vector<uint64_t>{512, 8, 64}));
  EXPECT_EQ(query.v_row, (std::vector<uint64_t>{1}));
  EXPECT_FALSE(adafactor_moments({2048}).factored);
  EXPECT_FALSE(adafactor_moments({}).factored);
  const AdafactorMoments stacked = adafactor_moments({8, 1024, 4096});  // scan's stacked layers
  EXPECT_EQ(stacked.v_row, (std::vector<uint64_t>{8, 1024}));
  EXPECT_EQ(stacked.v_col, (std::vector<uint64_t>{8, 4096}));
}

TEST(Adafactor, GivesTheStateJaxPassedForTheFlaxEncoder) {
  auto text =
      read_file(std::string(MEMFIT_TEST_DATA_DIR) + "/xla/flax_encoder_adafactor_b32.lowered.hlo.txt.gz");
  ASSERT_TRUE(text.ok()) << text.error().message();
  auto module = parse_hlo_module(*text);
  ASSERT_TRUE(module.ok()) << module.error().message();
  std::map<std::string, std::vector<uint64_t>> params, state;  // "Layer_0____Dense_0____kernel__" -> dims
  uint64_t state_bytes = 0, param_bytes = 0, batch_bytes = 0;
  for (const HloInstruction& i : module->entry()->instructions) {
    if (i.opcode != HloOpcode::kParameter) continue;
    const std::string name = i.name.substr(0, i.name.rfind('.'));
    if (name.starts_with("params__")) {
      params[name.substr(8)] = i.shape.dims;
      param_bytes += i.shape.own_bytes();
    } else if (name.starts_with("opt_0__")) {
      state[name.substr(7)] = i.shape.dims;
      state_bytes += i.shape.own_bytes();
    } else {
      batch_bytes += i.shape.own_bytes();
    }
  }
  ASSERT_EQ(params.size(), 101u);  // embedding, 6 layers of 16, the final norm and the head
  uint64_t predicted_bytes = 4;    // the s32 count
  EXPECT_EQ(state.at("count"), (std::vector<uint64_t>{}));
  size_t predicted_arrays = 1;
  int factored = 0;
  for (const auto& [name, dims] : params) {
    SCOPED_TRACE(name);
    const AdafactorMoments m = adafactor_moments(dims);
    auto elements = [](const std::vector<uint64_t>& d) {
      uint64_t n = 1;
      for (uint64_t x : d) n *= x;
      return n;
    };
    if (m.factored) {
      ++factored;
      ASSERT_TRUE(state.contains("v_row__" + name));
      EXPECT_EQ(state.at("v_row__" + name), m.v_row);
      EXPECT_EQ(state.at("v_col__" + name), m.v_col);
      EXPECT_FALSE(state.contains("v__" + name)) << "a placeholder the update never reads is no argument";
      predicted_bytes += 4 * (elements(m.v_row) + elements(m.v_col));
      predicted_arrays += 2;
    } else {
      ASSERT_TRUE(state.contains("v__" + name));
      EXPECT_EQ(state.at("v__" + name), m.v);
      EXPECT_FALSE(state.contains("v_row__" + name));
      predicted_bytes += 4 * elements(m.v);
      predicted_arrays += 1;
    }
  }
  EXPECT_EQ(factored, 14);  // the embedding, the head, and each layer's two MLP matrices
  EXPECT_EQ(predicted_arrays, state.size());
  EXPECT_EQ(predicted_bytes, state_bytes);
  // XLA's argument_size_in_bytes for this program (programs.json): parameters + state + batch.
  EXPECT_EQ(param_bytes + state_bytes + batch_bytes, 232833028u);
}

}  // namespace
}  // namespace memfit
