#include "memfit/program/buffer_assignment.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>

#include "memfit/core/checked.h"
#include "memfit/core/text.h"

namespace memfit {
namespace {

std::optional<uint64_t> number_after(std::string_view line, std::string_view key) {
  const size_t at = line.find(key);
  if (at == std::string_view::npos) return std::nullopt;
  const char* first = line.data() + at + key.size();
  const char* last = line.data() + line.size();
  uint64_t value = 0;
  auto [end, ec] = std::from_chars(first, last, value);
  if (ec != std::errc() || end == first) return std::nullopt;
  return value;
}

// XLA's host memory space (Layout::kHostMemorySpace), an allocation's color when it is in host memory.
constexpr uint64_t kHostColor = 5;

}  // namespace

std::vector<XlaAssignedValue> XlaBufferAssignment::temp_values() const {
  std::vector<XlaAssignedValue> out;
  for (const XlaAllocation& a : allocations) {
    if (a.parameter || a.maybe_live_out || a.output_table || a.constant || a.thread_local_ ||
        a.color == kHostColor)
      continue;
    out.insert(out.end(), a.values.begin(), a.values.end());
  }
  std::stable_sort(out.begin(), out.end(), [](const XlaAssignedValue& a, const XlaAssignedValue& b) {
    return a.size_bytes > b.size_bytes;
  });
  return out;
}

Expected<XlaBufferAssignment> parse_buffer_assignment(std::string_view text) {
  XlaBufferAssignment r;
  size_t line_number = 0;
  bool started = false;
  auto bad = [&](std::string_view line, std::string_view why) {
    return invalid_argument(
        fmt::format("buffer assignment line {}: {}: {}", line_number, why, excerpt(line)));
  };
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.starts_with("BufferAssignment:")) {
      started = true;
    } else if (line.starts_with("allocation ")) {
      started = true;
      XlaAllocation a;
      const auto index = number_after(line, "allocation ");
      const auto size = number_after(line, ": size ");
      if (!index || !size) return bad(line, "an allocation without its number and size");
      a.index = *index;
      a.size_bytes = *size;
      // The kind list ends where the output shape starts: a shape may hold any word.
      const size_t shape_at = line.find("output shape is |");
      const std::string_view kinds = line.substr(0, shape_at);
      a.parameter = number_after(kinds, ", parameter ");
      a.output_table = shape_at != std::string_view::npos;
      a.maybe_live_out = line.ends_with("maybe-live-out:");
      a.constant = kinds.find(", constant") != std::string_view::npos;
      a.thread_local_ = kinds.find(", thread-local") != std::string_view::npos;
      a.preallocated_temp = kinds.find(", preallocated-temp") != std::string_view::npos;
      if (kinds.find(", color ") != std::string_view::npos) {
        const auto color = number_after(kinds, ", color ");
        if (!color) return bad(line, "an allocation's color is not a number");
        a.color = *color;
      }
      r.allocations.push_back(std::move(a));
    } else if (line.starts_with(" value: <")) {
      if (r.allocations.empty()) return bad(line, "a value before any allocation");
      XlaAssignedValue v;
      const size_t name_at = line.find(' ', 9);
      const size_t name_end = name_at == std::string_view::npos ? name_at : line.find(' ', name_at + 1);
      const auto size = number_after(line, "(size=");
      const auto offset = number_after(line, ",offset=");
      if (name_end == std::string_view::npos || !size || !offset)
        return bad(line, "a value without name, size and offset");
      v.name = std::string(line.substr(name_at + 1, name_end - name_at - 1));
      v.size_bytes = *size;
      v.offset_bytes = *offset;
      const size_t shape_at = line.find("): ");
      if (shape_at != std::string_view::npos) v.shape = std::string(line.substr(shape_at + 3));
      XlaAllocation& a = r.allocations.back();
      const auto end = checked_add(v.offset_bytes, v.size_bytes);
      if (!end || *end > a.size_bytes) return bad(line, "a value outside its allocation");
      a.values.push_back(std::move(v));
    } else if (!started && !line.empty()) {
      return bad(line, "not an XLA buffer-assignment dump (it starts with \"BufferAssignment:\")");
    } else if (line.starts_with("Total bytes used") || line.starts_with("Used values:")) {
      break;  // the summaries that follow repeat what was read
    }
  }
  if (!started) return invalid_argument("buffer assignment: the text is empty");
  auto add = [](uint64_t& sum, uint64_t v) -> bool {
    auto s = checked_add(sum, v);
    if (!s) return false;
    sum = *s;
    return true;
  };
  for (const XlaAllocation& a : r.allocations) {
    bool ok = true;
    const bool host = a.color == kHostColor;
    if (a.parameter) ok = ok && add(host ? r.host_argument_bytes : r.argument_bytes, a.size_bytes);
    if (a.parameter && a.maybe_live_out)
      ok = ok && add(host ? r.host_alias_bytes : r.alias_bytes, a.size_bytes);
    if (a.maybe_live_out || a.output_table)
      ok = ok && add(host ? r.host_output_bytes : r.output_bytes, a.size_bytes);
    if (a.constant) ok = ok && add(r.constant_bytes, a.size_bytes);
    if (!a.parameter && !a.maybe_live_out && !a.output_table && !a.constant && !a.thread_local_)
      ok = ok && add(host ? r.host_temp_bytes : r.temp_bytes, a.size_bytes);
    if (!ok) return invalid_argument("buffer assignment: the allocations' sizes overflow 64 bits");
  }
  if (!checked_add(r.argument_bytes, r.output_bytes) ||
      !checked_add(r.argument_bytes + r.output_bytes - r.alias_bytes, r.temp_bytes))
    return invalid_argument("buffer assignment: the allocations' sizes overflow 64 bits");
  return r;
}

}  // namespace memfit
