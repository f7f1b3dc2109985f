#include "memfit/program/adafactor.h"

#include <algorithm>
#include <numeric>

namespace memfit {

AdafactorMoments adafactor_moments(const std::vector<uint64_t>& dims, uint64_t min_dim_size_to_factor) {
  AdafactorMoments m;
  const std::vector<uint64_t> placeholder{1};
  if (dims.size() >= 2) {
    // np.argsort(shape): ascending, equal sizes in index order.
    std::vector<size_t> order(dims.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return dims[a] < dims[b]; });
    const size_t d1 = order[order.size() - 2], d0 = order.back();
    if (dims[d1] >= min_dim_size_to_factor) {
      m.factored = true;
      m.largest_dim = d0;
      m.second_dim = d1;
      m.v_row = dims;
      m.v_row.erase(m.v_row.begin() + static_cast<std::ptrdiff_t>(d0));
      m.v_col = dims;
      m.v_col.erase(m.v_col.begin() + static_cast<std::ptrdiff_t>(d1));
      m.v = placeholder;
      return m;
    }
  }
  m.v_row = placeholder;
  m.v_col = placeholder;
  m.v = dims;
  return m;
}

}  // namespace memfit
