// memfit/core/text.h - text from untrusted sources, made safe to show: valid UTF-8, bounded length.
//
// Names, paths, environment values and log lines come from files and shells that owe memfit nothing: they
// may hold bytes that are not UTF-8 (JSON cannot carry them) or be megabytes long (an error line must stay
// one readable line). Every quote of user text in an error message goes through `excerpt`.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace memfit {

// At most this many characters of rejected input are quoted in an error message.
inline constexpr size_t kExcerptChars = 200;

// `text` with every byte sequence that is not valid UTF-8 replaced by U+FFFD, as JSON writers need.
std::string valid_utf8(std::string_view text);

// `text` quoted for an error message: valid UTF-8, control characters shown as '?', and cut to
// `kExcerptChars` characters with "... (N bytes)" when longer. Returns the text inside single quotes.
std::string excerpt(std::string_view text, size_t max_chars = kExcerptChars);

// The same without the quotes: one printable line of at most `max_chars` characters.
std::string one_line(std::string_view text, size_t max_chars);

}  // namespace memfit
