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

}  // namespace memfit::testing
