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
  // In a dump folder: XLA's buffer assignment of that module (`<module file>-buffer-assignment.txt`, or
  // the folder's only one), when it was dumped; empty otherwise.
  std::string buffer_assignment_path;
  std::string buffer_assignment_text;
};

// A folder: the `*after_optimizations.txt` whose name contains `module_name`, or the largest one when
// `module_name` is empty (the training step, not the small helper programs JAX also compiles).
Expected<HloSource> read_hlo_source(const std::string& path, const std::string& module_name = "");

}  // namespace memfit
