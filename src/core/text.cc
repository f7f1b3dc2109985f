#include "memfit/core/text.h"

#include <fmt/format.h>

namespace memfit {
namespace {

// Length of the valid UTF-8 sequence starting at text[i], or 0 when the bytes there are not one
// (overlong forms, surrogates and code points above U+10FFFF are invalid, as RFC 3629 says).
size_t utf8_sequence_length(std::string_view text, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char b0 = byte(i);
  if (b0 < 0x80) return 1;
  size_t n = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    n = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (i + n > text.size()) return 0;
  if (byte(i + 1) < lo || byte(i + 1) > hi) return 0;
  for (size_t k = 2; k < n; ++k) {
    if (byte(i + k) < 0x80 || byte(i + k) > 0xBF) return 0;
  }
  return n;
}

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

}  // namespace

std::string valid_utf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const size_t n = utf8_sequence_length(text, i);
    if (n == 0) {
      out += kReplacement;
      ++i;
    } else {
      out.append(text.substr(i, n));
      i += n;
    }
  }
  return out;
}

namespace {

// The printable form of `text` cut to `max_chars` characters; `cut` says whether anything was left off.
std::string printable(std::string_view text, size_t max_chars, bool& cut) {
  std::string out;
  size_t chars = 0;
  size_t i = 0;
  for (; i < text.size() && chars < max_chars; ++chars) {
    const size_t n = utf8_sequence_length(text, i);
    const auto c = static_cast<unsigned char>(text[i]);
    if (n == 0) {
      out += kReplacement;
      ++i;
    } else if (n == 1 && (c < 0x20 || c == 0x7F)) {
      out += '?';  // keeps the message on one line and the terminal sane
      ++i;
    } else {
      out.append(text.substr(i, n));
      i += n;
    }
  }
  cut = i < text.size();
  return out;
}

}  // namespace

std::string one_line(std::string_view text, size_t max_chars) {
  bool cut = false;
  std::string out = printable(text, max_chars, cut);
  if (cut) out += fmt::format("... ({} bytes)", text.size());
  return out;
}

std::string excerpt(std::string_view text, size_t max_chars) {
  bool cut = false;
  std::string out(1, '\'');
  out += printable(text, max_chars, cut);
  out += '\'';
  if (cut) out += fmt::format("... ({} bytes)", text.size());
  return out;
}

}  // namespace memfit
