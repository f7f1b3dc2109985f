#include "memfit/trace/readers.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <charconv>
#include <vector>

#include "memfit/core/file_io.h"
#include "pickle.h"

namespace memfit {
namespace {

// Splits text into lines without copying; tolerates \r\n.
class Lines {
 public:
  explicit Lines(std::string_view text) : text_(text) {}
  bool next(std::string_view& line) {
    if (pos_ >= text_.size()) return false;
    size_t end = text_.find('\n', pos_);
    if (end == std::string_view::npos) end = text_.size();
    line = text_.substr(pos_, end - pos_);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    pos_ = end + 1;
    ++number_;
    return true;
  }
  uint64_t number() const { return number_; }

 private:
  std::string_view text_;
  size_t pos_ = 0;
  uint64_t number_ = 0;
};

std::vector<std::string_view> split_csv(std::string_view line) {
  std::vector<std::string_view> fields;
  size_t start = 0;
  while (true) {
    const size_t comma = line.find(',', start);
    fields.push_back(
        line.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return fields;
}

Expected<uint64_t> parse_u64(std::string_view field, std::string_view what, uint64_t line) {
  int base = 10;
  if (field.size() > 2 && field[0] == '0' && (field[1] == 'x' || field[1] == 'X')) {
    field.remove_prefix(2);
    base = 16;
  }
  uint64_t value = 0;
  const auto [end, ec] = std::from_chars(field.data(), field.data() + field.size(), value, base);
  if (field.empty() || ec != std::errc() || end != field.data() + field.size()) {
    return invalid_argument(fmt::format("line {}: {} '{}' is not a non-negative integer", line, what, field));
  }
  return value;
}

// Column positions by header name.
struct Columns {
  std::vector<std::string_view> names;
  Expected<size_t> find(std::string_view name) const {
    for (size_t i = 0; i < names.size(); ++i) {
      if (names[i] == name) return i;
    }
    return invalid_argument(fmt::format("line 1: the header has no '{}' column", name));
  }
};

// PyTorch actions, shared by the pickle and CSV readers.
struct PytorchRecord {
  std::string_view action;
  uint64_t addr = 0;
  uint64_t size = 0;
  uint64_t stream = 0;
  uint64_t time_us = 0;
};

Status apply_pytorch(TimelineBuilder& b, const PytorchRecord& r, bool frees_are_completed, uint64_t line) {
  const std::string_view a = r.action;
  if (r.stream > UINT32_MAX)
    return invalid_argument(fmt::format("line {}: stream {} out of range", line, r.stream));
  if (a == "alloc") return b.alloc(r.addr, r.size, static_cast<uint32_t>(r.stream), r.time_us, line);
  if (a == "free_completed")
    return frees_are_completed ? b.free(r.addr, r.time_us, line, r.size) : ok_status();
  if (a == "free_requested")
    return frees_are_completed ? ok_status() : b.free(r.addr, r.time_us, line, r.size);
  using Reservation = TimelineBuilder::Reservation;
  if (a == "segment_alloc") return b.reserve(Reservation::kSegment, r.addr, r.size, line);
  if (a == "segment_map") return b.reserve(Reservation::kMappedRange, r.addr, r.size, line);
  if (a == "segment_free") return b.unreserve(Reservation::kSegment, r.addr, r.size, line);
  if (a == "segment_unmap") return b.unreserve(Reservation::kMappedRange, r.addr, r.size, line);
  if (a == "oom") {
    b.count_oom();
    return ok_status();
  }
  if (a == "snapshot") return ok_status();
  return invalid_argument(fmt::format(
      "line {}: unknown action '{}' (PyTorch's trace actions: alloc, free_requested, free_completed, "
      "segment_alloc, segment_free, segment_map, segment_unmap, oom, snapshot)",
      line, a));
}

}  // namespace

Expected<Timeline> parse_pytorch_csv(std::string_view text) {
  Lines lines(text);
  std::string_view line;
  if (!lines.next(line)) return invalid_argument("empty trace");
  const Columns header{split_csv(line)};
  MEMFIT_ASSIGN_OR_RETURN(size_t c_action, header.find("action"));
  MEMFIT_ASSIGN_OR_RETURN(size_t c_addr, header.find("addr"));
  MEMFIT_ASSIGN_OR_RETURN(size_t c_size, header.find("size"));
  MEMFIT_ASSIGN_OR_RETURN(size_t c_stream, header.find("stream"));
  MEMFIT_ASSIGN_OR_RETURN(size_t c_time, header.find("time_us"));
  const bool frees_are_completed = text.find("\nfree_completed,") != std::string_view::npos ||
                                   text.find(",free_completed,") != std::string_view::npos;
  TimelineBuilder builder("pytorch-csv");
  while (lines.next(line)) {
    if (line.empty()) continue;
    const auto fields = split_csv(line);
    if (fields.size() != header.names.size()) {
      return invalid_argument(fmt::format("line {}: {} fields where the header has {}{}", lines.number(),
                                          fields.size(), header.names.size(),
                                          lines.number() > 1 ? " (truncated?)" : ""));
    }
    PytorchRecord r;
    r.action = fields[c_action];
    MEMFIT_ASSIGN_OR_RETURN(r.addr, parse_u64(fields[c_addr], "addr", lines.number()));
    MEMFIT_ASSIGN_OR_RETURN(r.size, parse_u64(fields[c_size], "size", lines.number()));
    MEMFIT_ASSIGN_OR_RETURN(r.stream, parse_u64(fields[c_stream], "stream", lines.number()));
    MEMFIT_ASSIGN_OR_RETURN(r.time_us, parse_u64(fields[c_time], "time_us", lines.number()));
    MEMFIT_RETURN_IF_ERROR(apply_pytorch(builder, r, frees_are_completed, lines.number()));
  }
  return std::move(builder).finish();
}

Expected<Timeline> parse_pytorch_snapshot(std::string_view pickle_bytes, std::optional<uint32_t> device) {
  MEMFIT_ASSIGN_OR_RETURN(std::unique_ptr<pickle::Document> doc, pickle::decode(pickle_bytes));
  const pickle::Value* traces = doc->root.get("device_traces");
  if (traces == nullptr || traces->as_list() == nullptr) {
    return invalid_argument("not a PyTorch memory snapshot: no 'device_traces' list");
  }
  // device_traces holds one list per visible device; a process on cuda:1 leaves device 0's empty (DDP's
  // rank 1 without CUDA_VISIBLE_DEVICES). Each device has its own allocator: one device is replayed.
  const pickle::List& devices = *traces->as_list();
  std::vector<uint32_t> with_events;
  for (size_t d = 0; d < devices.size(); ++d) {
    const pickle::List* list = devices[d].as_list();
    if (list == nullptr) return invalid_argument(fmt::format("device_traces[{}] is not a list", d));
    if (!list->empty()) with_events.push_back(static_cast<uint32_t>(d));
  }
  if (device && (*device >= devices.size() || devices[*device].as_list()->empty())) {
    return invalid_argument(
        fmt::format("--device {}: the snapshot has no events for it (it traces {} device{}; {})", *device,
                    devices.size(), devices.size() == 1 ? "" : "s",
                    with_events.empty() ? "none has events"
                                        : fmt::format("events on device {}", fmt::join(with_events, ", "))));
  }
  if (!device && with_events.empty()) {
    return invalid_argument(
        "the snapshot's traces have no events (was torch.cuda.memory._record_memory_history enabled before "
        "the allocations?)");
  }
  if (!device && with_events.size() > 1) {
    return invalid_argument(
        fmt::format("the snapshot traces devices {}: each has its own allocator, replay one (--device N)",
                    fmt::join(with_events, ", ")));
  }
  const uint32_t chosen = device ? *device : with_events.front();
  const pickle::List& events = *devices[chosen].as_list();
  bool frees_are_completed = false;
  for (const pickle::Value& e : events) {
    const pickle::Value* action = e.get("action");
    if (action && action->as_string() && *action->as_string() == "free_completed") {
      frees_are_completed = true;
      break;
    }
  }
  TimelineBuilder builder("pytorch-snapshot");
  uint64_t index = 0;
  for (const pickle::Value& e : events) {
    ++index;
    auto field = [&](std::string_view key) -> Expected<uint64_t> {
      const pickle::Value* v = e.get(key);
      if (v == nullptr || v->as_int() == nullptr || *v->as_int() < 0) {
        return invalid_argument(
            fmt::format("trace event {}: '{}' missing or not a non-negative integer", index, key));
      }
      return static_cast<uint64_t>(*v->as_int());
    };
    const pickle::Value* action = e.get("action");
    if (action == nullptr || action->as_string() == nullptr) {
      return invalid_argument(fmt::format("trace event {}: no 'action'", index));
    }
    PytorchRecord r;
    r.action = *action->as_string();
    MEMFIT_ASSIGN_OR_RETURN(r.addr, field("addr"));
    MEMFIT_ASSIGN_OR_RETURN(r.size, field("size"));
    MEMFIT_ASSIGN_OR_RETURN(r.stream, field("stream"));
    MEMFIT_ASSIGN_OR_RETURN(r.time_us, field("time_us"));
    auto applied = apply_pytorch(builder, r, frees_are_completed, index);
    if (!applied.ok()) return applied.error();
  }
  Timeline t = std::move(builder).finish();
  t.source = "pytorch-snapshot";
  t.device = chosen;
  return t;
}

Expected<Timeline> parse_rmm_csv(std::string_view text) {
  Lines lines(text);
  std::string_view line;
  if (!lines.next(line)) return invalid_argument("empty trace");
  const Columns header{split_csv(line)};
  MEMFIT_ASSIGN_OR_RETURN(size_t c_action, header.find("Action"));
  MEMFIT_ASSIGN_OR_RETURN(size_t c_ptr, header.find("Pointer"));
  MEMFIT_ASSIGN_OR_RETURN(size_t c_size, header.find("Size"));
  MEMFIT_ASSIGN_OR_RETURN(size_t c_stream, header.find("Stream"));
  TimelineBuilder builder("rmm-csv");
  while (lines.next(line)) {
    if (line.empty()) continue;
    const auto fields = split_csv(line);
    if (fields.size() != header.names.size()) {
      return invalid_argument(fmt::format("line {}: {} fields where the header has {} (truncated?)",
                                          lines.number(), fields.size(), header.names.size()));
    }
    const std::string_view action = fields[c_action];
    MEMFIT_ASSIGN_OR_RETURN(uint64_t ptr, parse_u64(fields[c_ptr], "Pointer", lines.number()));
    MEMFIT_ASSIGN_OR_RETURN(uint64_t size, parse_u64(fields[c_size], "Size", lines.number()));
    MEMFIT_ASSIGN_OR_RETURN(uint64_t stream, parse_u64(fields[c_stream], "Stream", lines.number()));
    const auto stream32 = static_cast<uint32_t>(stream & 0xffffffffu);  // streams are opaque handles
    if (action == "allocate") {
      MEMFIT_RETURN_IF_ERROR(builder.alloc(ptr, size, stream32, lines.number(), lines.number()));
    } else if (action == "free") {
      MEMFIT_RETURN_IF_ERROR(builder.free(ptr, lines.number(), lines.number(), size));
    } else if (action == "allocate failure") {
      builder.count_oom();
    } else {
      return invalid_argument(fmt::format("line {}: unknown RMM action '{}'", lines.number(), action));
    }
  }
  return std::move(builder).finish();
}

Expected<Timeline> parse_memfit_trace(std::string_view text) {
  Lines lines(text);
  std::string_view line;
  if (!lines.next(line) || line != "# memfit-trace v1") return invalid_argument("line 1: not a memfit trace");
  if (!lines.next(line) || line != "event,buffer,size_bytes,stream,time_us,tag") {
    return invalid_argument("line 2: expected the header event,buffer,size_bytes,stream,time_us,tag");
  }
  TimelineBuilder builder("memfit");
  while (lines.next(line)) {
    if (line.empty()) continue;
    // The tag is last and may contain commas.
    std::vector<std::string_view> fields;
    std::string_view rest = line;
    for (int i = 0; i < 5; ++i) {
      const size_t comma = rest.find(',');
      if (comma == std::string_view::npos) break;
      fields.push_back(rest.substr(0, comma));
      rest.remove_prefix(comma + 1);
    }
    if (fields.size() != 5)
      return invalid_argument(fmt::format("line {}: expected 6 fields (truncated?)", lines.number()));
    MEMFIT_ASSIGN_OR_RETURN(uint64_t buffer, parse_u64(fields[1], "buffer", lines.number()));
    MEMFIT_ASSIGN_OR_RETURN(uint64_t size, parse_u64(fields[2], "size_bytes", lines.number()));
    MEMFIT_ASSIGN_OR_RETURN(uint64_t stream, parse_u64(fields[3], "stream", lines.number()));
    MEMFIT_ASSIGN_OR_RETURN(uint64_t time_us, parse_u64(fields[4], "time_us", lines.number()));
    if (stream > UINT32_MAX)
      return invalid_argument(fmt::format("line {}: stream out of range", lines.number()));
    // Buffer ids play the role of addresses: the builder checks pairing the same way.
    if (fields[0] == "alloc") {
      MEMFIT_RETURN_IF_ERROR(
          builder.alloc(buffer, size, static_cast<uint32_t>(stream), time_us, lines.number(), rest));
    } else if (fields[0] == "free") {
      MEMFIT_RETURN_IF_ERROR(builder.free(buffer, time_us, lines.number(), size));
    } else {
      return invalid_argument(fmt::format("line {}: unknown event '{}'", lines.number(), fields[0]));
    }
  }
  return std::move(builder).finish();
}

Expected<Timeline> parse_trace(std::string_view data, std::optional<uint32_t> device) {
  if (!data.empty() && static_cast<unsigned char>(data[0]) == 0x80)
    return parse_pytorch_snapshot(data, device);
  if (device) {
    return invalid_argument(
        "--device picks a device of a PyTorch snapshot pickle; this trace is already one device's");
  }
  if (data.starts_with("# memfit-trace")) return parse_memfit_trace(data);
  const std::string_view first = data.substr(0, data.find('\n'));
  if (first.find("Action") != std::string_view::npos && first.find("Pointer") != std::string_view::npos) {
    return parse_rmm_csv(data);
  }
  if (first.find("action") != std::string_view::npos && first.find("addr") != std::string_view::npos) {
    return parse_pytorch_csv(data);
  }
  return invalid_argument(
      "not a trace memfit knows (a PyTorch snapshot pickle, a CSV with action,addr,size,stream,time_us, an "
      "RMM "
      "log, or a memfit trace)");
}

Expected<Timeline> read_trace_file(const std::string& path, std::optional<uint32_t> device) {
  MEMFIT_ASSIGN_OR_RETURN(std::string data, read_file(path, 16ull << 30));
  auto timeline = parse_trace(data, device);
  if (!timeline.ok()) return timeline.error().with_context(path);
  return timeline;
}

}  // namespace memfit
