// memfit/program/hlo_source.h - where an HLO module's text comes from: a file (`compiled.as_text()`, gzip
// accepted) or an XLA dump folder (XLA_FLAGS=--xla_dump_to=DIR --xla_dump_hlo_as_text), where the module is
// `module_NNNN.<name>.<target>_after_optimizations.txt`.
#pragma once

#include <string>

#include "memfit/core/status.h"

namespace memfit {

struct HloSource {
  std::string path;  // the file read
  std::string text;
};

// A folder: the `*after_optimizations.txt` whose name contains `module_name`, or the largest one when
// `module_name` is empty (the training step, not the small helper programs JAX also compiles).
Expected<HloSource> read_hlo_source(const std::string& path, const std::string& module_name = "");

}  // namespace memfit
