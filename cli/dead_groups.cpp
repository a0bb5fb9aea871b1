#include "cli/dead_groups.hpp"

#include <cctype>

#include <fmt/format.h>

#include "libq/error.hpp"

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

bool is_space(char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; }

std::string lower(std::string_view word) {
  std::string out(word);
  for (auto& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// 1 to 3 digits at s[i], their count; 0 when none or more.
std::size_t short_digits(std::string_view s, std::size_t i) {
  std::size_t n = 0;
  while (i + n < s.size() && is_digit(s[i + n])) ++n;
  return n <= 3 ? n : 0;
}

// An enhanced status code (RFC 3463: class.subject.detail, class 2, 4 or 5) at
// s[i], its length; 0 when none. Four dotted parts are an address, not a code.
std::size_t enhanced_code(std::string_view s, std::size_t i) {
  if (i > 0 && (is_word(s[i - 1]) || s[i - 1] == '.')) return 0;
  if (i >= s.size() || (s[i] != '2' && s[i] != '4' && s[i] != '5')) return 0;
  std::size_t j = i + 1;
  for (int part = 0; part < 2; ++part) {
    if (j >= s.size() || s[j] != '.') return 0;
    std::size_t n = short_digits(s, j + 1);
    if (n == 0) return 0;
    j += 1 + n;
  }
  if (j < s.size() && (is_word(s[j]) || (s[j] == '.' && j + 1 < s.size() && is_digit(s[j + 1]))))
    return 0;
  return j - i;
}

// The words after which a number is a status, kept: "smtp 451", "HTTP 503",
// "exit status 65", "code 550".
bool names_a_status(const std::string& word) {
  static const char* const words[] = {"smtp", "lmtp",  "http",  "https",    "ftp", "status",
                                      "code", "error", "reply", "response", "exit"};
  for (const char* w : words)
    if (word == w) return true;
  return false;
}

// A path: "/var/spool/x.eml", "./run.sh", "~/q/jobs.q", up to a space, a quote
// or the punctuation that ends one in a message ("open /x: No such file").
std::size_t path_end(std::string_view s, std::size_t i) {
  bool starts =
      s[i] == '/' || s.substr(i, 2) == "./" || s.substr(i, 3) == "../" || s.substr(i, 2) == "~/";
  if (!starts || (i > 0 && !is_space(s[i - 1]) &&
                  std::string_view("\"'(=[<").find(s[i - 1]) == std::string_view::npos))
    return i;
  std::size_t j = i;
  while (j < s.size() && !is_space(s[j]) &&
         std::string_view("\"'`,;:)]>").find(s[j]) == std::string_view::npos)
    ++j;
  while (j > i + 1 && s[j - 1] == '.') --j;  // a sentence's full stop
  return j - i > 1 ? j : i;
}

}  // namespace

std::string mask_variable(std::string_view s) {
  std::string out;
  std::string previous;  // the last word, lowercased, to tell a status from a count
  bool first_word = true;
  std::size_t i = 0;
  while (i < s.size()) {
    if (std::size_t end = path_end(s, i); end > i) {
      out.push_back('#');
      i = end;
      first_word = false;
      previous.clear();
      continue;
    }
    if (std::size_t n = enhanced_code(s, i)) {
      out.append(s.substr(i, n));
      i += n;
      first_word = false;
      continue;
    }
    if (!is_word(s[i])) {
      out.push_back(s[i++]);
      continue;
    }
    std::size_t end = word_end(s, i);
    std::string_view word = s.substr(i, end - i);
    bool any_digit = false, all_hex = true, all_digits = true;
    for (char c : word) {
      any_digit |= is_digit(c);
      all_digits &= is_digit(c);
      if (!is_hex(c) && c != '-') all_hex = false;
    }
    // A status code: three digits 100-599 first on the line (an SMTP reply)
    // or after a word that names one, and an exit status after "exit".
    bool status =
        all_digits && ((word.size() == 3 && word[0] >= '1' && word[0] <= '5' &&
                        (first_word || names_a_status(previous))) ||
                       (word.size() <= 3 && (previous == "status" || previous == "exit")));
    bool hex_prefixed = word.size() > 2 && word[0] == '0' && (word[1] == 'x' || word[1] == 'X');
    bool id = word.size() > 1 && word[0] == 'm' && any_digit &&
              word.substr(1).find_first_not_of("0123456789abcdef") == std::string_view::npos;
    if (status) {
      out.append(word);
    } else if (hex_prefixed || id || (all_hex && any_digit) || (all_hex && word.size() >= 8)) {
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
    previous = status ? std::string() : lower(word);
    first_word = false;
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

std::string last_line(std::string_view text) {
  auto nl = text.rfind('\n');
  return std::string(nl == std::string_view::npos ? text : text.substr(nl + 1));
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
    // The first stderr line and the last: a log line often comes first and the
    // error last (or the error first and a stack after), so both decide.
    std::string first = mask_variable(run->run.first_line);
    std::string last = mask_variable(last_line(run->run.stderr_tail));
    if (!first.empty()) key += ": " + first;
    if (!last.empty() && last != first) key += (first.empty() ? ": " : " ... ") + last;
    return key;
  }
  return mask_variable(first_line(m.reason));
}

}  // namespace cli
