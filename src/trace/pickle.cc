#include "pickle.h"

#include <fmt/format.h>

#include <cstring>

namespace memfit::pickle {
namespace {

class Decoder {
 public:
  explicit Decoder(std::string_view data) : data_(data), doc_(std::make_unique<Document>()) {}

  Expected<std::unique_ptr<Document>> run() {
    while (true) {
      if (pos_ >= data_.size()) return bad("ends before STOP (truncated)");
      op_at_ = pos_;
      const auto op = static_cast<unsigned char>(data_[pos_++]);
      switch (op) {
        case 0x80: {  // PROTO
          MEMFIT_ASSIGN_OR_RETURN(uint64_t proto, read_uint(1));
          if (proto > 5) return bad(fmt::format("pickle protocol {} is not supported", proto));
          break;
        }
        case 0x95:  // FRAME (8-byte length; framing only)
          MEMFIT_RETURN_IF_ERROR(read_uint(8));
          break;
        case '.':  // STOP
          if (stack_.size() != 1) return bad("STOP with an unbalanced stack");
          doc_->root = std::move(stack_.back());
          return std::move(doc_);
        case '}':  // EMPTY_DICT
          push(Value{new_dict()});
          break;
        case ']':  // EMPTY_LIST
          push(Value{new_list()});
          break;
        case ')':  // EMPTY_TUPLE
          push(Value{new_list()});
          break;
        case '(':  // MARK
          marks_.push_back(stack_.size());
          break;
        case 'N':  // NONE
          push(Value{});
          break;
        case 0x88:  // NEWTRUE
          push(Value{true});
          break;
        case 0x89:  // NEWFALSE
          push(Value{false});
          break;
        case 'J': {  // BININT (signed 4 bytes)
          MEMFIT_ASSIGN_OR_RETURN(uint64_t u, read_uint(4));
          push(Value{static_cast<int64_t>(static_cast<int32_t>(static_cast<uint32_t>(u)))});
          break;
        }
        case 'K': {  // BININT1
          MEMFIT_ASSIGN_OR_RETURN(uint64_t u, read_uint(1));
          push(Value{static_cast<int64_t>(u)});
          break;
        }
        case 'M': {  // BININT2
          MEMFIT_ASSIGN_OR_RETURN(uint64_t u, read_uint(2));
          push(Value{static_cast<int64_t>(u)});
          break;
        }
        case 0x8a: {  // LONG1: n-byte little-endian two's complement
          MEMFIT_ASSIGN_OR_RETURN(uint64_t n, read_uint(1));
          MEMFIT_ASSIGN_OR_RETURN(int64_t value, read_long(n));
          push(Value{value});
          break;
        }
        case 0x8b: {  // LONG4
          MEMFIT_ASSIGN_OR_RETURN(uint64_t n, read_uint(4));
          MEMFIT_ASSIGN_OR_RETURN(int64_t value, read_long(n));
          push(Value{value});
          break;
        }
        case 'G': {  // BINFLOAT (big-endian double)
          MEMFIT_ASSIGN_OR_RETURN(std::string_view raw, read_bytes(8));
          uint64_t bits = 0;
          for (char c : raw) bits = (bits << 8) | static_cast<unsigned char>(c);
          double d;
          std::memcpy(&d, &bits, sizeof d);
          push(Value{d});
          break;
        }
        case 0x8c:   // SHORT_BINUNICODE
        case 'C': {  // SHORT_BINBYTES
          MEMFIT_ASSIGN_OR_RETURN(uint64_t n, read_uint(1));
          MEMFIT_ASSIGN_OR_RETURN(std::string_view s, read_bytes(n));
          push(Value{std::string(s)});
          break;
        }
        case 'X':    // BINUNICODE
        case 'B': {  // BINBYTES
          MEMFIT_ASSIGN_OR_RETURN(uint64_t n, read_uint(4));
          MEMFIT_ASSIGN_OR_RETURN(std::string_view s, read_bytes(n));
          push(Value{std::string(s)});
          break;
        }
        case 0x8d: {  // BINUNICODE8
          MEMFIT_ASSIGN_OR_RETURN(uint64_t n, read_uint(8));
          MEMFIT_ASSIGN_OR_RETURN(std::string_view s, read_bytes(n));
          push(Value{std::string(s)});
          break;
        }
        case 0x94:  // MEMOIZE
          if (stack_.empty()) return bad("MEMOIZE on an empty stack");
          memo_.push_back(stack_.back());
          break;
        case 'q': {  // BINPUT
          MEMFIT_ASSIGN_OR_RETURN(uint64_t i, read_uint(1));
          MEMFIT_RETURN_IF_ERROR(put(i));
          break;
        }
        case 'r': {  // LONG_BINPUT
          MEMFIT_ASSIGN_OR_RETURN(uint64_t i, read_uint(4));
          MEMFIT_RETURN_IF_ERROR(put(i));
          break;
        }
        case 'h': {  // BINGET
          MEMFIT_ASSIGN_OR_RETURN(uint64_t i, read_uint(1));
          MEMFIT_RETURN_IF_ERROR(get(i));
          break;
        }
        case 'j': {  // LONG_BINGET
          MEMFIT_ASSIGN_OR_RETURN(uint64_t i, read_uint(4));
          MEMFIT_RETURN_IF_ERROR(get(i));
          break;
        }
        case 'a': {  // APPEND
          if (stack_.size() < 2) return bad("APPEND needs a list and a value");
          Value item = pop();
          auto* list = std::get_if<List*>(&stack_.back().v);
          if (list == nullptr) return bad("APPEND to something that is not a list");
          (*list)->push_back(std::move(item));
          break;
        }
        case 'e': {  // APPENDS
          MEMFIT_ASSIGN_OR_RETURN(size_t mark, pop_mark());
          if (mark == 0) return bad("APPENDS without a list under the mark");
          auto* list = std::get_if<List*>(&stack_[mark - 1].v);
          if (list == nullptr) return bad("APPENDS to something that is not a list");
          for (size_t i = mark; i < stack_.size(); ++i) (*list)->push_back(std::move(stack_[i]));
          stack_.resize(mark);
          break;
        }
        case 's': {  // SETITEM
          if (stack_.size() < 3) return bad("SETITEM needs a dict, a key and a value");
          Value value = pop();
          Value key = pop();
          auto* dict = std::get_if<Dict*>(&stack_.back().v);
          if (dict == nullptr) return bad("SETITEM on something that is not a dict");
          (*dict)->emplace_back(std::move(key), std::move(value));
          break;
        }
        case 'u': {  // SETITEMS
          MEMFIT_ASSIGN_OR_RETURN(size_t mark, pop_mark());
          if (mark == 0 || (stack_.size() - mark) % 2 != 0)
            return bad("SETITEMS needs a dict and key/value pairs");
          auto* dict = std::get_if<Dict*>(&stack_[mark - 1].v);
          if (dict == nullptr) return bad("SETITEMS on something that is not a dict");
          for (size_t i = mark; i < stack_.size(); i += 2) {
            (*dict)->emplace_back(std::move(stack_[i]), std::move(stack_[i + 1]));
          }
          stack_.resize(mark);
          break;
        }
        case 't': {  // TUPLE
          MEMFIT_ASSIGN_OR_RETURN(size_t mark, pop_mark());
          List* tuple = new_list();
          tuple->assign(std::make_move_iterator(stack_.begin() + static_cast<ptrdiff_t>(mark)),
                        std::make_move_iterator(stack_.end()));
          stack_.resize(mark);
          push(Value{tuple});
          break;
        }
        case 0x85:    // TUPLE1
        case 0x86:    // TUPLE2
        case 0x87: {  // TUPLE3
          const size_t n = op - 0x84u;
          if (stack_.size() < n) return bad("TUPLE without enough items");
          List* tuple = new_list();
          tuple->assign(std::make_move_iterator(stack_.end() - static_cast<ptrdiff_t>(n)),
                        std::make_move_iterator(stack_.end()));
          stack_.resize(stack_.size() - n);
          push(Value{tuple});
          break;
        }
        default:
          return bad(
              fmt::format("opcode {:#04x} is not part of a memory snapshot (only plain data is read)", op));
      }
      if (stack_.size() > kMaxDepth) return bad("stack too deep");
    }
  }

 private:
  static constexpr size_t kMaxDepth = 1 << 24;

  Error bad(const std::string& why) const {
    return invalid_argument(fmt::format("pickle byte {}: {}", op_at_, why));
  }
  void push(Value v) { stack_.push_back(std::move(v)); }
  List* new_list() { return &doc_->lists.emplace_back(); }
  Dict* new_dict() { return &doc_->dicts.emplace_back(); }
  Value pop() {
    Value v = std::move(stack_.back());
    stack_.pop_back();
    return v;
  }
  Expected<size_t> pop_mark() {
    if (marks_.empty()) return bad("no MARK to pop");
    const size_t m = marks_.back();
    marks_.pop_back();
    if (m > stack_.size()) return bad("MARK beyond the stack");
    return m;
  }
  Expected<std::string_view> read_bytes(uint64_t n) {
    if (n > data_.size() - pos_) return bad("ends inside an argument (truncated)");
    std::string_view s = data_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  Expected<uint64_t> read_uint(int n) {
    MEMFIT_ASSIGN_OR_RETURN(std::string_view raw, read_bytes(static_cast<uint64_t>(n)));
    uint64_t u = 0;
    for (int i = n - 1; i >= 0; --i) u = (u << 8) | static_cast<unsigned char>(raw[static_cast<size_t>(i)]);
    return u;
  }
  Expected<int64_t> read_long(uint64_t n) {
    if (n > 8) return bad("integer wider than 64 bits");
    MEMFIT_ASSIGN_OR_RETURN(std::string_view raw, read_bytes(n));
    if (n == 0) return int64_t{0};
    uint64_t u = 0;
    for (size_t i = n; i-- > 0;) u = (u << 8) | static_cast<unsigned char>(raw[i]);
    if (n < 8 && (static_cast<unsigned char>(raw[n - 1]) & 0x80) != 0) u |= ~uint64_t{0} << (8 * n);  // sign
    return static_cast<int64_t>(u);
  }
  Status put(uint64_t i) {
    if (stack_.empty()) return bad("PUT on an empty stack");
    // Every stored object costs at least one opcode byte, so a real index is below the input size.
    if (i > data_.size()) return bad("memo index larger than the input");
    if (memo_.size() <= i) memo_.resize(i + 1);
    memo_[i] = stack_.back();
    return ok_status();
  }
  Status get(uint64_t i) {
    if (i >= memo_.size()) return bad(fmt::format("memo index {} was never stored", i));
    push(memo_[i]);
    return ok_status();
  }

  std::string_view data_;
  size_t pos_ = 0;
  size_t op_at_ = 0;
  std::vector<Value> stack_;
  std::vector<size_t> marks_;
  std::vector<Value> memo_;
  std::unique_ptr<Document> doc_;
};

}  // namespace

const Value* Value::get(std::string_view key) const {
  const Dict* d = as_dict();
  if (d == nullptr) return nullptr;
  for (const auto& [k, val] : *d) {
    if (const std::string* s = k.as_string(); s != nullptr && *s == key) return &val;
  }
  return nullptr;
}

Expected<std::unique_ptr<Document>> decode(std::string_view data) { return Decoder(data).run(); }

}  // namespace memfit::pickle
