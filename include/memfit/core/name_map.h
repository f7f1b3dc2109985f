// memfit/core/name_map.h - a flat hash map from names (string_views into text or instructions that outlive
// it) to small values: the name -> instruction index tables every pass over an HLO computation builds.
//
// Why not std::unordered_map: it allocates a node per name, and a 300-layer step's computation has 2 x 10^5
// names, looked up by each of a dozen passes (perf: a quarter of a plan's user time went to building and
// probing those tables and to malloc/free of their nodes). One open-addressed array with linear probing, at
// most half full, keeps them in a few cache lines each.
//
// The part of std::unordered_map's interface the passes use: find/end (a pointer, nullptr when absent),
// emplace (keeps the first value), operator[] (a default value when absent), contains, reserve, size.
// Pointers are invalidated by an insertion that grows the table (as unordered_map's iterators are).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

namespace memfit {

template <typename V>
class NameMap {
 public:
  struct Entry {
    std::string_view first;  // data() == nullptr: an empty slot
    V second{};
    // The name's hash, compared before the bytes: most probes of a deep program's table meet another name
    // of the same length ("multiply.12345"), whose bytes would otherwise be compared in full.
    size_t name_hash = 0;
  };

  NameMap() = default;

  void reserve(size_t names) {
    size_t want = 16;
    while (want < 2 * names) want *= 2;
    if (want > slots_.size()) rehash(want);
  }
  size_t size() const { return size_; }

  const Entry* end() const { return nullptr; }
  const Entry* find(std::string_view name) const {
    if (slots_.empty()) return nullptr;
    const size_t h = hash(name);
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const Entry& e = slots_[i];
      if (e.first.data() == nullptr) return nullptr;
      if (e.name_hash == h && e.first == name) return &e;
    }
  }
  Entry* find(std::string_view name) {
    return const_cast<Entry*>(static_cast<const NameMap*>(this)->find(name));
  }
  bool contains(std::string_view name) const { return find(name) != nullptr; }

  // Inserts name -> value unless the name is there; returns its entry and whether it was inserted.
  std::pair<Entry*, bool> emplace(std::string_view name, V value) {
    if (2 * (size_ + 1) > slots_.size()) rehash(slots_.empty() ? 16 : 2 * slots_.size());
    return insert(name, hash(name), std::move(value));
  }
  V& operator[](std::string_view name) { return emplace(name, V{}).first->second; }

 private:
  // FNV-1a over the bytes, then a multiply-shift mix: instruction names differ in their last digits.
  static size_t hash(std::string_view s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (char c : s) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
    return static_cast<size_t>((h ^ (h >> 29)) * 0xbf58476d1ce4e5b9ull >> 16);
  }
  std::pair<Entry*, bool> insert(std::string_view name, size_t h, V value) {
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      Entry& e = slots_[i];
      if (e.first.data() == nullptr) {
        // A name must point somewhere, even an empty one, to tell it from an empty slot.
        e.first = name.data() == nullptr ? std::string_view("", 0) : name;
        e.second = std::move(value);
        e.name_hash = h;
        ++size_;
        return {&e, true};
      }
      if (e.name_hash == h && e.first == name) return {&e, false};
    }
  }
  void rehash(size_t capacity) {
    std::vector<Entry> old = std::move(slots_);
    slots_.assign(capacity, Entry{});
    mask_ = capacity - 1;
    size_ = 0;
    for (Entry& e : old)
      if (e.first.data() != nullptr) insert(e.first, e.name_hash, std::move(e.second));
  }

  std::vector<Entry> slots_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

// Names to instruction indices.
using NameIndex = NameMap<uint32_t>;

}  // namespace memfit
