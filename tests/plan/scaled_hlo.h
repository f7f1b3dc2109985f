// A real module made N times larger for the planner's scaling test and benchmark: every computation is
// repeated with its names suffixed ".rK", and the entry runs the N copies one after another (the copies'
// parameters become copies of the real ones, their roots plain tuples), the original last.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <sstream>
#include <string>
#include <vector>

namespace memfit::testing {

inline std::string rename_all(const std::string& line, const std::string& suffix) {
  std::string out;
  out.reserve(line.size() + 64);
  for (size_t i = 0; i < line.size(); ++i) {
    out += line[i];
    if (line[i] != '%') continue;
    size_t j = i + 1;
    while (j < line.size() && (std::isalnum(static_cast<unsigned char>(line[j])) || line[j] == '_' ||
                               line[j] == '.' || line[j] == '-'))
      ++j;
    out.append(line, i + 1, j - i - 1);
    out += suffix;
    i = j - 1;
  }
  return out;
}

inline std::string scaled_module(const std::string& text, int copies) {
  std::istringstream in(text);
  std::string line, header, out;
  std::vector<std::string> block;
  std::vector<std::vector<std::string>> computations;  // non-entry blocks
  std::vector<std::string> entry;
  bool in_entry = false, in_block = false;
  while (std::getline(in, line)) {
    if (line.starts_with("HloModule ")) {
      header = line;
    } else if (!in_block && (line.starts_with("%") || line.starts_with("ENTRY "))) {
      in_block = true;
      in_entry = line.starts_with("ENTRY ");
      block.assign(1, line);
    } else if (in_block) {
      block.push_back(line);
      if (line == "}") {
        (in_entry ? entry : computations.emplace_back()) = block;
        in_block = false;
      }
    }
  }
  out += header + "\n\n";
  for (const auto& c : computations) {
    for (int k = 0; k < copies; ++k) {
      const std::string suffix = k ? fmt::format(".r{}", k) : "";
      for (const std::string& l : c) out += (k ? rename_all(l, suffix) : l) + "\n";
      out += "\n";
    }
  }
  out += entry.front() + "\n";
  // The real parameters first: the copies read them.
  for (size_t i = 1; i + 1 < entry.size(); ++i)
    if (entry[i].find(" parameter(") != std::string::npos) out += entry[i] + "\n";
  for (int k = 1; k < copies; ++k) {
    const std::string suffix = fmt::format(".r{}", k);
    for (size_t i = 1; i + 1 < entry.size(); ++i) {
      std::string l = entry[i];
      if (const size_t root = l.find("ROOT "); root != std::string::npos && root < 4) l.erase(root, 5);
      if (const size_t p = l.find(" parameter("); p != std::string::npos) {
        // "%name = shape parameter(N)..." -> "%name.rK = shape copy(%name)"
        const size_t eq = l.find(" = ");
        const std::string name = l.substr(l.find('%') + 1, eq - l.find('%') - 1);
        l = fmt::format("  %{}{} = {} copy(%{})", name, suffix, l.substr(eq + 3, p - eq - 3), name);
        out += l + "\n";
        continue;
      }
      out += rename_all(l, suffix) + "\n";
    }
  }
  for (size_t i = 1; i < entry.size(); ++i)
    if (entry[i].find(" parameter(") == std::string::npos) out += entry[i] + "\n";
  return out;
}

// A lowered program (no schedule, no fusions) of `n` instructions: a chain of dot, tanh, multiply and add
// over f32[256,256] - as StableHLO (`stablehlo` true) or as HLO text. What the lowered-program planner's
// scaling is measured on (bench/plan_bench.cc).
inline std::string lowered_chain(int n, bool stablehlo) {
  // Value k in either form, and the four ops the chain repeats (k: the value made; a, b: its operands).
  auto v = [&](int k) { return fmt::format(fmt::runtime(stablehlo ? "%{}" : "v{}"), k); };
  const std::string t = "tensor<256x256xf32>";
  auto op = [&](int k) {
    const std::string a = v(k - 1);
    const std::string b = v(std::max(0, k - 2 - (k % 4 == 3 ? 1 : 0)));
    if (stablehlo) {
      switch (k % 4) {
        case 0:
          return fmt::format("stablehlo.dot_general {}, %arg1, contracting_dims = [1] x [0] : ({}, {}) -> {}",
                             a, t, t, t);
        case 1:
          return fmt::format("stablehlo.tanh {} : {}", a, t);
        case 2:
          return fmt::format("stablehlo.multiply {}, {} : {}", a, b, t);
        default:
          return fmt::format("stablehlo.add {}, {} : {}", a, b, t);
      }
    }
    switch (k % 4) {
      case 0:
        return fmt::format("f32[256,256] dot({}, b), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}",
                           a);
      case 1:
        return fmt::format("f32[256,256] tanh({})", a);
      case 2:
        return fmt::format("f32[256,256] multiply({}, {})", a, b);
      default:
        return fmt::format("f32[256,256] add({}, {})", a, b);
    }
  };
  std::string out = stablehlo
                        ? fmt::format(
                              "module @jit_chain {{\n  func.func public @main(%arg0: {0}, %arg1: {0}) -> "
                              "({0}) {{\n    %0 = stablehlo.add %arg0, %arg1 : {0}\n",
                              t)
                        : std::string(
                              "HloModule chain\n\nENTRY main {\n  a = f32[256,256] parameter(0)\n"
                              "  b = f32[256,256] parameter(1)\n  v0 = f32[256,256] add(a, b)\n");
  for (int k = 1; k < n; ++k) {
    if (stablehlo) {
      out += fmt::format("    {} = {}\n", v(k), op(k));
    } else {
      out += fmt::format("  {}{} = {}\n", k + 1 == n ? "ROOT " : "", v(k), op(k));
    }
  }
  out += stablehlo ? fmt::format("    return {} : {}\n  }}\n}}\n", v(n - 1), t) : std::string("}\n");
  return out;
}

}  // namespace memfit::testing
