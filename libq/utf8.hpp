// UTF-8 checks shared by the queue rules (attributes must be text) and the
// CLI's output (what is shown as text, what is escaped).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace q {

// Length of the valid UTF-8 sequence at s[i] (1 to 4), or 0 when there is none
// (a stray continuation byte, an overlong form, a surrogate, beyond U+10FFFF,
// or a sequence cut by the end of s).
std::size_t utf8_sequence(std::string_view s, std::size_t i);

bool is_utf8(std::string_view s);

// The longest prefix of s of at most max_bytes that does not end inside a
// UTF-8 sequence: cutting text to a byte budget must not make it invalid.
std::string_view utf8_prefix(std::string_view s, std::size_t max_bytes);
// The longest suffix of at most max_bytes that does not start inside one.
std::string_view utf8_suffix(std::string_view s, std::size_t max_bytes);

}  // namespace q
