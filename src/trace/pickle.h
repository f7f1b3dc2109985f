// src/trace/pickle.h - a decoder for the subset of Python's pickle format that PyTorch memory snapshots use
// (protocol 2-5: dicts, lists, tuples, strings, bytes, ints, floats, bools, None, memo references).
// No Python needed and no code executed: GLOBAL/REDUCE and friends are rejected.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "memfit/core/status.h"

namespace memfit::pickle {

struct Value;
using List = std::vector<Value>;
using Dict = std::vector<std::pair<Value, Value>>;

struct Value {
  // Lists and dicts live in the Document's arena, so memo references (BINGET) alias one object as in Python,
  // and neither a reference cycle nor deep nesting can leak memory or recurse on destruction.
  std::variant<std::monostate, bool, int64_t, double, std::string, List*, Dict*> v;

  bool is_none() const { return v.index() == 0; }
  const int64_t* as_int() const { return std::get_if<int64_t>(&v); }
  const std::string* as_string() const { return std::get_if<std::string>(&v); }
  const List* as_list() const {
    auto p = std::get_if<List*>(&v);
    return p ? *p : nullptr;
  }
  const Dict* as_dict() const {
    auto p = std::get_if<Dict*>(&v);
    return p ? *p : nullptr;
  }
  // The value under a string key of a dict; nullptr when absent or not a dict.
  const Value* get(std::string_view key) const;
};

// A decoded pickle: the root value and the arena that owns every list and dict in it.
struct Document {
  std::deque<List> lists;
  std::deque<Dict> dicts;
  Value root;
};

// Errors name the byte offset of the bad opcode.
Expected<std::unique_ptr<Document>> decode(std::string_view data);

}  // namespace memfit::pickle
