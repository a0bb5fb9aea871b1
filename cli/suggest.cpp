#include "cli/suggest.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace cli {

std::size_t edit_distance(std::string_view a, std::string_view b) {
  // Optimal string alignment: Levenshtein plus the swap of two neighbours
  // ("recieve"), one row per character of a.
  std::vector<std::size_t> before(b.size() + 1), row(b.size() + 1), next(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    next[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      next[j] = std::min({row[j] + 1, next[j - 1] + 1, row[j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        next[j] = std::min(next[j], before[j - 2] + 1);
    }
    before = row;
    row = next;
  }
  return row[b.size()];
}

namespace {

bool subsequence(std::string_view typed, std::string_view name) {
  std::size_t i = 0;
  for (char c : name)
    if (i < typed.size() && typed[i] == c) ++i;
  return i == typed.size();
}

}  // namespace

std::vector<std::string> similar_names(std::string_view typed,
                                       const std::vector<std::string>& names) {
  std::vector<std::pair<std::size_t, std::string>> found;
  const std::size_t most = typed.size() <= 4 ? 1 : 2;
  for (const auto& name : names) {
    if (name == typed || name.empty()) continue;
    std::size_t d = edit_distance(typed, name);
    bool close = d <= most && d < name.size();
    bool start = typed.size() >= 2 && name.compare(0, typed.size(), typed) == 0;
    bool letters = typed.size() >= 2 && typed[0] == name[0] && subsequence(typed, name) &&
                   name.size() <= typed.size() * 3;
    if (close || start || letters) found.emplace_back(close ? d : most + 1, name);
  }
  std::stable_sort(found.begin(), found.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::string> out;
  for (auto& [d, name] : found)
    if (out.size() < 3) out.push_back(std::move(name));
  return out;
}

std::string did_you_mean(const std::vector<std::string>& names) {
  if (names.empty()) return {};
  std::string list = "'" + names[0] + "'";
  for (std::size_t i = 1; i < names.size(); ++i)
    list += (i + 1 == names.size() ? " or '" : ", '") + names[i] + "'";
  return fmt::format("; did you mean {}?", list);
}

}  // namespace cli
