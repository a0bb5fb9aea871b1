#include "dead_groups.hpp"

#include <cctype>

#include <fmt/format.h>

#include "error.hpp"

namespace cli {
namespace {

bool is_hex(char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; }
bool is_digit(char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; }
bool is_word(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_'; }

// The run of a "word" starting at i: letters, digits, '_' and, inside a
// UUID-like run, '-'.
std::size_t word_end(std::string_view s, std::size_t i) {
  while (i < s.size() && (is_word(s[i]) || (s[i] == '-' && i + 1 < s.size() && is_hex(s[i + 1]))))
    ++i;
  return i;
}

}  // namespace

std::string mask_variable(std::string_view s) {
  std::string out;
  std::size_t i = 0;
  while (i < s.size()) {
    if (!is_word(s[i])) {
      out.push_back(s[i++]);
      continue;
    }
    std::size_t end = word_end(s, i);
    std::string_view word = s.substr(i, end - i);
    bool any_digit = false, all_hex = true;
    for (char c : word) {
      any_digit |= is_digit(c);
      if (!is_hex(c) && c != '-') all_hex = false;
    }
    bool hex_prefixed = word.size() > 2 && word[0] == '0' && (word[1] == 'x' || word[1] == 'X');
    bool id = word.size() > 1 && word[0] == 'm' && any_digit &&
              word.substr(1).find_first_not_of("0123456789abcdef") == std::string_view::npos;
    if (hex_prefixed || id || (all_hex && any_digit) || (all_hex && word.size() >= 8)) {
      out.push_back('#');
    } else if (any_digit) {
      // Numbers inside a word ("worker3", "v2"): each run of digits.
      for (std::size_t k = 0; k < word.size();) {
        if (is_digit(word[k])) {
          out.push_back('#');
          while (k < word.size() && is_digit(word[k])) ++k;
        } else {
          out.push_back(word[k++]);
        }
      }
    } else {
      out.append(word);
    }
    i = end;
  }
  return out;
}

GroupBy parse_group_by(const std::string& text) {
  GroupBy by;
  if (text == "reason") return by;
  if (text == "exit") {
    by.kind = GroupBy::Exit;
    return by;
  }
  if (text.rfind("attr:", 0) == 0 && text.size() > 5) {
    by.kind = GroupBy::Attribute;
    by.attribute = text.substr(5);
    return by;
  }
  throw q::Error(q::ErrorKind::Usage,
                 fmt::format("--by '{}': expected reason, exit or attr:KEY", text));
}

namespace {

// The last attempt a command's run reported on (q work), if any.
const q::Attempt* last_run(const q::Message& m) {
  for (auto it = m.attempts.rbegin(); it != m.attempts.rend(); ++it)
    if (it->run.exit_status || !it->run.first_line.empty()) return &*it;
  return nullptr;
}

std::string first_line(std::string_view text) {
  return std::string(text.substr(0, text.find('\n')));
}

}  // namespace

std::string group_key(const q::Message& m, const GroupBy& by) {
  const q::Attempt* run = last_run(m);
  switch (by.kind) {
    case GroupBy::Exit:
      return run && run->run.exit_status ? fmt::format("exit status {}", *run->run.exit_status)
                                         : "-";
    case GroupBy::Attribute:
      for (auto it = m.attributes.rbegin(); it != m.attributes.rend(); ++it)
        if (it->first == by.attribute) return it->second;
      return "-";
    case GroupBy::Reason: break;
  }
  if (run) {
    std::string key = run->run.exit_status ? fmt::format("exit status {}", *run->run.exit_status)
                                           : first_line(run->reason);
    if (!run->run.first_line.empty()) key += ": " + mask_variable(run->run.first_line);
    return key;
  }
  return mask_variable(first_line(m.reason));
}

}  // namespace cli
