// memfit/program/stablehlo_module.h - a JAX program as StableHLO MLIR text (`lowered.as_text()`, JAX's
// default form) read into the same HloModule as HLO text, so that one planner serves both.
//
// What is read: `func.func` bodies (the public @main is the ENTRY; private functions are computations that
// `call`/`func.call` reach), every op's result types and operands, `tensor<AxBxT>` types, multi-result ops
// (`%w:3 = ...`, used as `%w#1`, which become get-tuple-element), `stablehlo.while` with its cond/do regions
// (computations taking the loop's carry as one tuple, as HLO's while does), scalar regions of reduce, sort,
// scatter and friends (skipped: they are code inside the op), and on @main's arguments
// `tf.aliasing_output` (donation: the output each argument may alias) and shardings (ignored: the program is
// planned unpartitioned). Op names map to HLO opcodes (stablehlo.dot_general -> dot, broadcast_in_dim ->
// broadcast, optimization_barrier -> opt-barrier, ...). Dynamic shapes (`?`) are refused.
#pragma once

#include <string_view>

#include "memfit/core/status.h"
#include "memfit/program/hlo_module.h"

namespace memfit {

// Errors name the line and what was expected there; every size is checked as the HLO reader checks it.
Expected<HloModule> parse_stablehlo_module(std::string_view text);

// What a program text is: XLA HLO text, or StableHLO MLIR text. Told by its first meaningful line.
enum class ProgramTextKind { kHlo, kStableHlo, kUnknown };
ProgramTextKind program_text_kind(std::string_view text);

// Reads either form. HLO text without a schedule is the lowered program; StableHLO always is.
Expected<HloModule> parse_program_text(std::string_view text);

}  // namespace memfit
