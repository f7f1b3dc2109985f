// memfit/plan/xla_comparison.h - memfit's plan of a module beside XLA's own buffer assignment of it (from a
// dump folder): the four figures of memory_analysis() side by side, and any difference named down to the
// values one side puts in temp and the other does not.
#pragma once

#include <string>
#include <vector>

#include "memfit/plan/hlo_plan.h"
#include "memfit/program/buffer_assignment.h"

namespace memfit {

struct XlaComparison {
  struct Figure {
    std::string name;  // argument, output, alias, temp, peak; host arg/output/alias/temp where any
    uint64_t memfit_bytes = 0;
    uint64_t xla_bytes = 0;
  };
  std::vector<Figure> figures;
  // One sentence per figure that differs, naming the largest values behind the difference.
  std::vector<std::string> differences;
  std::vector<XlaAssignedValue> largest_xla_temp_values;  // at most 10
};

XlaComparison compare_with_xla(const HloPlan& plan, const XlaBufferAssignment& xla);

}  // namespace memfit
