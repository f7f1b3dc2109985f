#include "memfit/plan/plan_timeline.h"

#include <algorithm>
#include <string_view>

namespace memfit {

namespace {

// The index into kPlanCategories a buffer is drawn in.
uint32_t plan_category(const PlannedBuffer& b) {
  auto index = [](std::string_view c) {
    for (uint32_t i = 0; i < std::size(kPlanCategories); ++i)
      if (c == kPlanCategories[i]) return i;
    return UINT32_MAX;
  };
  if (const uint32_t own = index(b.category); own != UINT32_MAX) return own;
  if (b.kind == BufferKind::kParameter) return index("parameters");
  if (b.kind == BufferKind::kOutput) return index("outputs");
  if (b.op_name.find("transpose(") != std::string::npos) return index("gradients");
  if (b.op_name.find("jvp(") != std::string::npos) return index("activations");
  return index("temporaries");
}

}  // namespace

Timeline plan_timeline(const HloPlan& plan) {
  Timeline t;
  t.source = "plan";
  t.tags = {"(untagged)"};
  for (const char* c : kPlanCategories) t.tags.emplace_back(c);
  auto counted = [](const PlannedBuffer& b) {
    return b.bytes > 0 && !b.host_memory && b.kind != BufferKind::kConstant &&
           b.kind != BufferKind::kReusesAllocation;
  };
  auto whole_step = [](const PlannedBuffer& b) {
    return b.kind == BufferKind::kParameter || b.kind == BufferKind::kOutput;
  };
  // Buffer ids are dense over the counted buffers, in the plan's order.
  std::vector<uint32_t> ids;
  for (uint32_t i = 0; i < plan.buffers.size(); ++i)
    if (counted(plan.buffers[i])) ids.push_back(i);
  t.buffer_count = ids.size();
  t.labels.reserve(ids.size());
  for (uint32_t i : ids) {
    const PlannedBuffer& b = plan.buffers[i];
    t.labels.push_back({b.name, b.shape, b.op_name});
  }
  // Temporaries by the step they start and the step they end.
  std::vector<uint32_t> by_start, by_end;
  for (uint32_t id = 0; id < ids.size(); ++id) {
    if (whole_step(plan.buffers[ids[id]])) continue;
    by_start.push_back(id);
    by_end.push_back(id);
  }
  auto buf = [&](uint32_t id) -> const PlannedBuffer& { return plan.buffers[ids[id]]; };
  std::stable_sort(by_start.begin(), by_start.end(),
                   [&](uint32_t a, uint32_t b) { return buf(a).start < buf(b).start; });
  std::stable_sort(by_end.begin(), by_end.end(),
                   [&](uint32_t a, uint32_t b) { return buf(a).end < buf(b).end; });
  auto event = [&](EventKind kind, uint32_t id) {
    TraceEvent e;
    e.kind = kind;
    e.buffer = id;
    e.size_bytes = buf(id).bytes;
    e.tag = kind == EventKind::kAlloc ? plan_category(buf(id)) + 1 : 0;  // tag 0 is "(untagged)"
    t.events.push_back(e);  // time_us stays 0: a plan has an order, not a clock
  };
  t.events.reserve(2 * ids.size());
  for (uint32_t id = 0; id < ids.size(); ++id)
    if (whole_step(buf(id))) event(EventKind::kAlloc, id);
  auto overlaps = [&](uint32_t a, uint32_t b) {
    const PlannedBuffer& x = buf(a);
    const PlannedBuffer& y = buf(b);
    return x.kind == BufferKind::kTemp && y.kind == BufferKind::kTemp && x.offset < y.offset + y.bytes &&
           y.offset < x.offset + x.bytes;
  };
  std::vector<bool> freed(ids.size(), false);
  size_t s = 0, e = 0;
  while (s < by_start.size() || e < by_end.size()) {
    const uint64_t step =
        s < by_start.size() && (e >= by_end.size() || buf(by_start[s]).start <= buf(by_end[e]).end)
            ? buf(by_start[s]).start
            : buf(by_end[e]).end;
    size_t s_end = s;
    while (s_end < by_start.size() && buf(by_start[s_end]).start == step) ++s_end;
    size_t e_end = e;
    while (e_end < by_end.size() && buf(by_end[e_end]).end == step) ++e_end;
    // A buffer ending here whose chunk a buffer starting here takes over is freed before that one is made.
    for (size_t k = e; k < e_end; ++k) {
      const uint32_t dying = by_end[k];
      if (buf(dying).start == step) continue;  // made and dead at one step: it is live during it
      for (size_t j = s; j < s_end; ++j) {
        if (by_start[j] != dying && overlaps(dying, by_start[j])) {
          event(EventKind::kFree, dying);
          freed[dying] = true;
          break;
        }
      }
    }
    for (size_t j = s; j < s_end; ++j) event(EventKind::kAlloc, by_start[j]);
    for (size_t k = e; k < e_end; ++k)
      if (!freed[by_end[k]]) event(EventKind::kFree, by_end[k]);
    s = s_end;
    e = e_end;
  }
  return t;
}

}  // namespace memfit
