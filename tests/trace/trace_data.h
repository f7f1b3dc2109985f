// Loads the bundled real traces (tests/data, see its README) and PyTorch's own figures for them.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "memfit/core/file_io.h"
#include "memfit/core/json.h"
#include "memfit/trace/readers.h"

namespace memfit::testing {

inline std::string data_path(const std::string& name) {
  return std::string(MEMFIT_TEST_DATA_DIR) + "/" + name;
}

inline Timeline load_trace(const std::string& name) {
  auto t = read_trace_file(data_path(name));
  EXPECT_TRUE(t.ok()) << name << ": " << (t.ok() ? "" : t.error().message());
  return t.ok() ? std::move(t).value() : Timeline{};
}

// The entry of traces.json for a run ("gpt2_train_fp32", "resnet50_train_bf16amp").
inline Json pytorch_figures(const std::string& run) {
  auto text = read_file(data_path("traces.json"));
  auto j = parse_json(*text, "traces.json");
  for (const Json& t : (*j)["traces"]) {
    if (t["name"] == run) return t;
  }
  ADD_FAILURE() << "no run " << run << " in traces.json";
  return Json{};
}

}  // namespace memfit::testing
