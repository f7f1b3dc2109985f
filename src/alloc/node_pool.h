// src/alloc/node_pool.h - a free-list allocator for std::set nodes, so bin updates on the allocator's hot
// path never call malloc. Not thread-safe: used under the owning allocator's lock.
#pragma once

#include <cstddef>
#include <memory>
#include <new>
#include <vector>

namespace memfit::detail {

// Hands out fixed-size slots carved from 64 KiB slabs; freed slots go on a free list (O(1) both ways).
class NodeArena {
 public:
  static constexpr size_t kSlotBytes = 64;

  void* get() {
    if (free_ != nullptr) {
      Slot* s = free_;
      free_ = s->next;
      return s;
    }
    if (slab_used_ == kSlotsPerSlab || slabs_.empty()) {
      slabs_.push_back(std::make_unique<Slot[]>(kSlotsPerSlab));
      slab_used_ = 0;
    }
    return &slabs_.back()[slab_used_++];
  }
  void put(void* p) {
    Slot* s = static_cast<Slot*>(p);
    s->next = free_;
    free_ = s;
  }

 private:
  union alignas(std::max_align_t) Slot {
    Slot* next;
    unsigned char bytes[kSlotBytes];
  };
  static constexpr size_t kSlotsPerSlab = 1024;
  std::vector<std::unique_ptr<Slot[]>> slabs_;
  size_t slab_used_ = 0;
  Slot* free_ = nullptr;
};

template <typename T>
class PoolAllocator {
 public:
  using value_type = T;
  explicit PoolAllocator(NodeArena* arena) : arena_(arena) {}
  template <typename U>
  PoolAllocator(const PoolAllocator<U>& other) : arena_(other.arena()) {}  // NOLINT: rebinding

  T* allocate(size_t n) {
    if (n == 1 && sizeof(T) <= NodeArena::kSlotBytes) return static_cast<T*>(arena_->get());
    return std::allocator<T>().allocate(n);
  }
  void deallocate(T* p, size_t n) {
    if (n == 1 && sizeof(T) <= NodeArena::kSlotBytes) {
      arena_->put(p);
    } else {
      std::allocator<T>().deallocate(p, n);
    }
  }
  NodeArena* arena() const { return arena_; }
  template <typename U>
  bool operator==(const PoolAllocator<U>& o) const {
    return arena_ == o.arena();
  }

 private:
  NodeArena* arena_;
};

}  // namespace memfit::detail
