// memfit/share/leased_device.h - a device (or page mapper) whose reservations go through a lease.
//
// Every allocator grows its pool through DeviceMemory::reserve (BFC regions, platform ranges) or
// PageMapper::map (the page-mapped pool), so wrapping those is all it takes for any allocator to grow only
// inside its lease: reserve() asks ShareMember::grow_pool first and release() tells shrink_pool after.
// Total and free read as the group's: capacity, and what this member could still get without anyone
// giving back. Events and queued work are the wrapped device's.
#pragma once

#include <memory>

#include "memfit/device/device_memory.h"
#include "memfit/device/page_mapper.h"
#include "memfit/share/share_member.h"

namespace memfit {

class LeasedDevice final : public DeviceMemory {
 public:
  // `device` and `member` must outlive this.
  LeasedDevice(DeviceMemory& device, ShareMember& member) : device_(device), member_(member) {}

  Expected<void*> reserve(uint64_t size_bytes) override;
  Status release(void* ptr, uint64_t size_bytes) override;
  uint64_t total_bytes() const override;
  uint64_t free_bytes() const override;
  std::string name() const override;
  bool is_host_accessible() const override { return device_.is_host_accessible(); }

  Expected<Event> record_event(uintptr_t stream) override { return device_.record_event(stream); }
  bool event_done(Event event) override { return device_.event_done(event); }
  Status wait_event(Event event) override { return device_.wait_event(event); }
  void release_event(Event event) override { device_.release_event(event); }
  bool work_pending_on(uintptr_t address, uint64_t size_bytes) override {
    return device_.work_pending_on(address, size_bytes);
  }

 private:
  DeviceMemory& device_;
  ShareMember& member_;
};

// The same for a page mapper: map() grows the pool, unmap() shrinks it.
std::unique_ptr<PageMapper> make_leased_page_mapper(std::unique_ptr<PageMapper> mapper, ShareMember& member);

}  // namespace memfit
