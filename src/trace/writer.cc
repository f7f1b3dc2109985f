#include "memfit/trace/writer.h"

#include <fmt/format.h>

namespace memfit {

std::string to_memfit_trace(const Timeline& timeline) {
  std::string out = "# memfit-trace v1\nevent,buffer,size_bytes,stream,time_us,tag\n";
  for (const TraceEvent& e : timeline.events) {
    const bool alloc = e.kind == EventKind::kAlloc;
    fmt::format_to(std::back_inserter(out), "{},{},{},{},{},{}\n", alloc ? "alloc" : "free", e.buffer,
                   e.size_bytes, e.stream, e.time_us, alloc && e.tag != 0 ? timeline.tags[e.tag] : "");
  }
  return out;
}

TracingAllocator::TracingAllocator(Allocator& inner) : inner_(inner) { timeline_.source = "memfit"; }

Expected<void*> TracingAllocator::allocate(uint64_t size_bytes, std::string_view tag) {
  auto p = inner_.allocate(size_bytes, tag);
  if (!p.ok() || *p == nullptr) return p;
  const auto time_us = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - start_)
          .count());
  std::lock_guard<std::mutex> lock(mu_);
  uint32_t tag_id = 0;
  if (!tag.empty()) {
    std::string clean(tag);
    for (char& c : clean) {
      if (c == '\n' || c == '\r') c = ' ';  // one event per line
    }
    auto [it, inserted] = tag_ids_.emplace(clean, static_cast<uint32_t>(timeline_.tags.size()));
    if (inserted) timeline_.tags.push_back(clean);
    tag_id = it->second;
  }
  const uint64_t buffer = timeline_.buffer_count++;
  live_[reinterpret_cast<uintptr_t>(*p)] = {buffer, size_bytes};
  timeline_.events.push_back({EventKind::kAlloc, tag_id, 0, buffer, size_bytes, time_us});
  return p;
}

Status TracingAllocator::deallocate(void* ptr) {
  Status s = inner_.deallocate(ptr);
  if (!s.ok() || ptr == nullptr) return s;
  const auto time_us = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - start_)
          .count());
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(reinterpret_cast<uintptr_t>(ptr));
  if (it != live_.end()) {
    timeline_.events.push_back({EventKind::kFree, 0, 0, it->second.first, it->second.second, time_us});
    live_.erase(it);
  }
  return s;
}

Timeline TracingAllocator::timeline() const {
  std::lock_guard<std::mutex> lock(mu_);
  return timeline_;
}

}  // namespace memfit
