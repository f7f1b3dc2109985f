// src/alloc/ptr_map.h - open-addressing hash map from a device address to a 32-bit handle.
//
// Why not std::unordered_map: one malloc per insert on the allocator's hot path. Linear probing with
// backward-shift deletion (no tombstones); the table doubles at 50% load. Key and value share a slot, so a
// probe touches one cache line. Address 0 marks an empty slot
// (allocators never hand out address 0). Not thread-safe: used under the owning allocator's lock.
#pragma once

#include <cstdint>
#include <vector>

namespace memfit::detail {

class PtrMap {
 public:
  static constexpr uint32_t kNotFound = ~uint32_t{0};

  PtrMap() { rehash(64); }

  uint32_t find(uintptr_t key) const {
    for (size_t i = slot_for(key);; i = (i + 1) & mask_) {
      if (slots_[i].key == key) return slots_[i].value;
      if (slots_[i].key == 0) return kNotFound;
    }
  }

  // Inserts or overwrites.
  void insert(uintptr_t key, uint32_t value) {
    if ((size_ + 1) * 2 > mask_ + 1) rehash((mask_ + 1) * 2);
    size_t i = slot_for(key);
    while (slots_[i].key != 0 && slots_[i].key != key) i = (i + 1) & mask_;
    if (slots_[i].key == 0) ++size_;
    slots_[i] = Slot{key, value};
  }

  // Returns the value erased, or kNotFound.
  uint32_t erase(uintptr_t key) {
    size_t i = slot_for(key);
    while (slots_[i].key != key) {
      if (slots_[i].key == 0) return kNotFound;
      i = (i + 1) & mask_;
    }
    const uint32_t value = slots_[i].value;
    // Backward shift: pull later entries of the probe run into the hole.
    size_t hole = i;
    for (size_t j = (i + 1) & mask_; slots_[j].key != 0; j = (j + 1) & mask_) {
      const size_t home = slot_for(slots_[j].key);
      // Move j into the hole unless its home lies cyclically in (hole, j].
      const bool home_after_hole = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
      if (!home_after_hole) {
        slots_[hole] = slots_[j];
        hole = j;
      }
    }
    slots_[hole].key = 0;
    --size_;
    return value;
  }

  size_t size() const { return size_; }

 private:
  size_t slot_for(uintptr_t key) const {
    // Allocations are >= 256-byte aligned: drop those bits, then mix (Fibonacci hashing).
    return static_cast<size_t>(((key >> 8) * 0x9E3779B97F4A7C15ull) >> shift_);
  }

  void rehash(size_t capacity) {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(capacity, Slot{});
    mask_ = capacity - 1;
    shift_ = 64 - static_cast<unsigned>(__builtin_ctzll(capacity));
    size_ = 0;
    for (const Slot& slot : old) {
      if (slot.key != 0) insert(slot.key, slot.value);
    }
  }

  struct Slot {
    uintptr_t key = 0;
    uint32_t value = 0;
  };
  std::vector<Slot> slots_;
  size_t mask_ = 0;
  unsigned shift_ = 64;
  size_t size_ = 0;
};

}  // namespace memfit::detail
