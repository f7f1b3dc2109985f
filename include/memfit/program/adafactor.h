// memfit/program/adafactor.h - the second-moment state optax.adafactor keeps for one parameter
// (optax/_src/factorized.py: _factored_dims and scale_by_factored_rms's init).
//
// A parameter with at least two dimensions whose second largest is at least min_dim_size_to_factor (128)
// is factored: its state is one row statistic (the shape without its largest dimension) and one column
// statistic (the shape without its second largest), and a placeholder f32[1] for the full moment. Any other
// parameter keeps the full moment (its shape) and f32[1] placeholders for the two statistics. Ties between
// equal dimensions go as numpy's argsort orders them: the earlier dimension counts as the smaller. jax.jit
// drops the placeholders from the arguments (keep_unused=False: the update never reads them), but the step
// still returns them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace memfit {

struct AdafactorMoments {
  bool factored = false;
  std::vector<uint64_t> v_row, v_col, v;  // the state's three arrays; a placeholder is {1}
  // Factored: the largest dimension (the row statistic averages it away) and the second largest (the
  // column statistic's).
  size_t largest_dim = 0, second_dim = 0;
};

inline constexpr uint64_t kAdafactorMinDimSizeToFactor = 128;

AdafactorMoments adafactor_moments(const std::vector<uint64_t>& dims,
                                   uint64_t min_dim_size_to_factor = kAdafactorMinDimSizeToFactor);

}  // namespace memfit
