#include "memfit/share/leased_device.h"

#include <fmt/format.h>

#include <algorithm>

namespace memfit {

Expected<void*> LeasedDevice::reserve(uint64_t size_bytes) {
  MEMFIT_RETURN_IF_ERROR(member_.grow_pool(size_bytes));
  Expected<void*> ptr = device_.reserve(size_bytes);
  if (!ptr.ok()) member_.shrink_pool(size_bytes);  // the lease stays; only the pool was never made
  return ptr;
}

Status LeasedDevice::release(void* ptr, uint64_t size_bytes) {
  MEMFIT_RETURN_IF_ERROR(device_.release(ptr, size_bytes));
  member_.shrink_pool(size_bytes);
  return ok_status();
}

uint64_t LeasedDevice::total_bytes() const {
  return std::min(device_.total_bytes(), member_.capacity_bytes());
}

uint64_t LeasedDevice::free_bytes() const { return std::min(device_.free_bytes(), member_.headroom_bytes()); }

std::string LeasedDevice::name() const {
  return fmt::format("{} (share group '{}')", device_.name(), member_.options().group);
}

namespace {

class LeasedPageMapper final : public PageMapper {
 public:
  LeasedPageMapper(std::unique_ptr<PageMapper> mapper, ShareMember& member)
      : mapper_(std::move(mapper)), member_(member) {}

  uint64_t granularity_bytes() const override { return mapper_->granularity_bytes(); }
  Expected<uintptr_t> reserve_range(uint64_t size_bytes) override {
    return mapper_->reserve_range(size_bytes);
  }
  Status free_range(uintptr_t base, uint64_t size_bytes) override {
    return mapper_->free_range(base, size_bytes);
  }
  Status map(uintptr_t address, uint64_t size_bytes) override {
    MEMFIT_RETURN_IF_ERROR(member_.grow_pool(size_bytes));
    Status mapped = mapper_->map(address, size_bytes);
    if (!mapped.ok()) member_.shrink_pool(size_bytes);
    return mapped;
  }
  Status unmap(uintptr_t address, uint64_t size_bytes) override {
    MEMFIT_RETURN_IF_ERROR(mapper_->unmap(address, size_bytes));
    member_.shrink_pool(size_bytes);
    return ok_status();
  }
  uint64_t total_bytes() const override { return std::min(mapper_->total_bytes(), member_.capacity_bytes()); }
  uint64_t free_bytes() const override { return std::min(mapper_->free_bytes(), member_.headroom_bytes()); }
  std::string name() const override { return mapper_->name(); }
  Expected<Event> record_event(uintptr_t stream) override { return mapper_->record_event(stream); }
  bool event_done(Event event) override { return mapper_->event_done(event); }
  Status wait_event(Event event) override { return mapper_->wait_event(event); }
  void release_event(Event event) override { mapper_->release_event(event); }

 private:
  std::unique_ptr<PageMapper> mapper_;
  ShareMember& member_;
};

}  // namespace

std::unique_ptr<PageMapper> make_leased_page_mapper(std::unique_ptr<PageMapper> mapper, ShareMember& member) {
  return std::make_unique<LeasedPageMapper>(std::move(mapper), member);
}

}  // namespace memfit
