// A real module made N times larger for the planner's scaling test and benchmark: every computation is
// repeated with its names suffixed ".rK", and the entry runs the N copies one after another (the copies'
// parameters become copies of the real ones, their roots plain tuples), the original last.
#pragma once

#include <fmt/format.h>

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
  std::string out;
  const std::string t = "tensor<256x256xf32>";
  if (stablehlo) {
    out += "module @jit_chain {\n  func.func public @main(%arg0: " + t + ", %arg1: " + t + ") -> (" + t +
           ") {\n";
    out += "    %0 = stablehlo.add %arg0, %arg1 : " + t + "\n";
  } else {
    out +=
        "HloModule chain\n\nENTRY main {\n  a = f32[256,256] parameter(0)\n  b = f32[256,256] parameter(1)\n";
    out += "  v0 = f32[256,256] add(a, b)\n";
  }
  for (int i = 1; i < n; ++i) {
    const std::string v = std::to_string(i), p1 = std::to_string(i - 1),
                      p2 = std::to_string(i >= 2 ? i - 2 : 0), p3 = std::to_string(i >= 3 ? i - 3 : 0);
    if (stablehlo) {
      switch (i % 4) {
        case 0:
          out += "    %" + v + " = stablehlo.dot_general %" + p1 +
                 ", %arg1, contracting_dims = [1] x [0] : (" + t + ", " + t + ") -> " + t + "\n";
          break;
        case 1:
          out += "    %" + v + " = stablehlo.tanh %" + p1 + " : " + t + "\n";
          break;
        case 2:
          out += "    %" + v + " = stablehlo.multiply %" + p1 + ", %" + p2 + " : " + t + "\n";
          break;
        default:
          out += "    %" + v + " = stablehlo.add %" + p1 + ", %" + p3 + " : " + t + "\n";
          break;
      }
    } else {
      const std::string root = i + 1 == n ? "ROOT " : "";
      switch (i % 4) {
        case 0:
          out += "  " + root + "v" + v + " = f32[256,256] dot(v" + p1 +
                 ", b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n";
          break;
        case 1:
          out += "  " + root + "v" + v + " = f32[256,256] tanh(v" + p1 + ")\n";
          break;
        case 2:
          out += "  " + root + "v" + v + " = f32[256,256] multiply(v" + p1 + ", v" + p2 + ")\n";
          break;
        default:
          out += "  " + root + "v" + v + " = f32[256,256] add(v" + p1 + ", v" + p3 + ")\n";
          break;
      }
    }
  }
  if (stablehlo) {
    out += "    return %" + std::to_string(n - 1) + " : " + t + "\n  }\n}\n";
  } else {
    out += "}\n";
  }
  return out;
}

}  // namespace memfit::testing
