// "Did you mean ...?" for mistyped commands, options and queue names, as git
// does: the known names closest to what was typed.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace cli {

// Edits (insert, delete, substitute, swap two neighbours) from a to b.
std::size_t edit_distance(std::string_view a, std::string_view b);

// The names close to `typed`, closest first: within 1 edit for a word of up
// to 4 characters, else 2; or with `typed` as their start or, from the same
// first letter, as a subsequence ("ls" for "list"). Empty when none is.
std::vector<std::string> similar_names(std::string_view typed,
                                       const std::vector<std::string>& names);

// "; did you mean 'a'?", "; did you mean 'a' or 'b'?", or "" for none.
std::string did_you_mean(const std::vector<std::string>& names);

}  // namespace cli
