#include "templates/python_str.h"

#include <algorithm>
#include <cstdio>

#include "core/unicode.h"

namespace zoo::jinja {
namespace {

// Python's lowercase of cps[i]: its full mapping, with the final-sigma rule (a capital sigma
// after a cased letter and not before one, case-ignorable characters skipped, becomes U+03C2).
void append_lower_at(std::string& out, const std::vector<char32_t>& cps, size_t i) {
  if (cps[i] != 0x3A3) {
    unicode::append_lowercase(out, cps[i]);
    return;
  }
  size_t j = i;
  while (j > 0 && unicode::is_case_ignorable(cps[j - 1])) --j;
  bool final_sigma = j > 0 && unicode::is_cased(cps[j - 1]);
  if (final_sigma) {
    size_t k = i + 1;
    while (k < cps.size() && unicode::is_case_ignorable(cps[k])) ++k;
    final_sigma = k == cps.size() || !unicode::is_cased(cps[k]);
  }
  unicode::append_utf8(out, final_sigma ? 0x3C2 : 0x3C3);
}

void append_title(std::string& out, char32_t c) {
  if (!unicode::append_titlecase(out, c)) {
    char code[16];
    std::snprintf(code, sizeof code, "U+%04X", static_cast<unsigned>(c));
    throw ValueError(std::string("the titlecase of ") + code + " is not supported (Unicode gives it a multi-character mapping this does not know)");
  }
}

bool has_cased(const std::string& s) {
  for (char32_t c : code_points(s)) {
    if (unicode::is_cased(c)) return true;
  }
  return false;
}

void check_replaced_size(const std::string& out) {
  if (out.size() > kMaxText) throw ValueError("replace makes a string larger than 64 MiB");
}

}  // namespace

std::vector<std::string> characters(const std::string& s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    const size_t n = unicode::decode_at(s, i).length;
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

std::vector<char32_t> code_points(const std::string& s) {
  std::vector<char32_t> out;
  for (size_t i = 0; i < s.size();) {
    const auto d = unicode::decode_at(s, i);
    out.push_back(d.code_point);
    i += d.length;
  }
  return out;
}

std::string strip(const std::string& s, const std::optional<std::string>& chars, bool left, bool right) {
  const auto cps = code_points(s);
  const auto set = chars ? code_points(*chars) : std::vector<char32_t>{};
  auto strippable = [&](char32_t c) {
    return chars ? std::find(set.begin(), set.end(), c) != set.end() : is_python_space(c);
  };
  size_t begin = 0, end = cps.size();
  if (left) {
    while (begin < end && strippable(cps[begin])) ++begin;
  }
  if (right) {
    while (end > begin && strippable(cps[end - 1])) --end;
  }
  std::string out;
  for (size_t i = begin; i < end; ++i) unicode::append_utf8(out, cps[i]);
  return out;
}

std::string lower(const std::string& s) {
  std::string out;
  const auto cps = code_points(s);
  for (size_t i = 0; i < cps.size(); ++i) append_lower_at(out, cps, i);
  return out;
}

std::string upper(const std::string& s) {
  std::string out;
  for (char32_t c : code_points(s)) unicode::append_uppercase(out, c);
  return out;
}

// A cased character after an uncased one starts a word.
std::string title(const std::string& s) {
  std::string out;
  bool previous_cased = false;
  const auto cps = code_points(s);
  for (size_t i = 0; i < cps.size(); ++i) {
    if (previous_cased) append_lower_at(out, cps, i);
    else append_title(out, cps[i]);
    previous_cased = unicode::is_cased(cps[i]);
  }
  return out;
}

// The first character in titlecase, the rest in lowercase.
std::string capitalize(const std::string& s) {
  std::string out;
  const auto cps = code_points(s);
  for (size_t i = 0; i < cps.size(); ++i) {
    if (i == 0) append_title(out, cps[i]);
    else append_lower_at(out, cps, i);
  }
  return out;
}

bool is_lower(const std::string& s) { return has_cased(s) && lower(s) == s; }
bool is_upper(const std::string& s) { return has_cased(s) && upper(s) == s; }

std::string replace(const std::string& s, const std::string& old, const std::string& with, int64_t count) {
  if (old.empty()) {  // Python inserts `with` around every character
    std::string out;
    int64_t done = 0;
    for (const auto& c : characters(s)) {
      if (count < 0 || done < count) out += with, ++done;
      out += c;
      check_replaced_size(out);
    }
    if (count < 0 || done < count) out += with;
    return out;
  }
  std::string out;
  size_t at = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t found = s.find(old, at);
    if (found == std::string::npos) break;
    out.append(s, at, found - at);
    out += with;
    at = found + old.size();
    ++done;
    check_replaced_size(out);
  }
  out += s.substr(at);
  check_replaced_size(out);
  return out;
}

List split(const std::string& s, const std::optional<std::string>& sep, int64_t maxsplit) {
  List out;
  if (sep) {
    if (sep->empty()) throw ValueError("empty separator");
    size_t at = 0;
    while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
      const size_t found = s.find(*sep, at);
      if (found == std::string::npos) break;
      out.emplace_back(s.substr(at, found - at));
      at = found + sep->size();
    }
    out.emplace_back(s.substr(at));
    return out;
  }
  const auto cps = code_points(s);
  size_t i = 0;
  while (true) {
    while (i < cps.size() && is_python_space(cps[i])) ++i;
    if (i == cps.size()) break;
    std::string word;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
      for (; i < cps.size(); ++i) unicode::append_utf8(word, cps[i]);
      out.emplace_back(word);  // the rest as it is: CPython keeps its trailing whitespace
      break;
    }
    for (; i < cps.size() && !is_python_space(cps[i]); ++i) unicode::append_utf8(word, cps[i]);
    out.emplace_back(word);
  }
  return out;
}

std::vector<std::string> splitlines(const std::string& s) {
  std::vector<std::string> out;
  std::string line;
  const auto cps = code_points(s);
  for (size_t i = 0; i < cps.size(); ++i) {
    const char32_t c = cps[i];
    const bool boundary = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || (c >= 0x1C && c <= 0x1E) || c == 0x85 ||
                          c == 0x2028 || c == 0x2029;
    if (!boundary) {
      unicode::append_utf8(line, c);
      continue;
    }
    if (c == '\r' && i + 1 < cps.size() && cps[i + 1] == '\n') ++i;
    out.push_back(line);
    line.clear();
  }
  if (!line.empty()) out.push_back(line);
  return out;
}

int64_t find(const std::string& s, const std::string& sub) {
  const size_t at = s.find(sub);
  return at == std::string::npos ? int64_t{-1} : static_cast<int64_t>(unicode::count_code_points(s.substr(0, at)));
}

int64_t count(const std::string& s, const std::string& sub) {
  if (sub.empty()) return static_cast<int64_t>(unicode::count_code_points(s)) + 1;
  int64_t n = 0;
  for (size_t at = s.find(sub); at != std::string::npos; at = s.find(sub, at + sub.size())) ++n;
  return n;
}

std::string html_escape(const std::string& s) {
  static constexpr Escape kHtmlEscapes[] = {{'&', "&amp;"}, {'<', "&lt;"}, {'>', "&gt;"}, {'"', "&#34;"}, {'\'', "&#39;"}};
  std::string out;
  for (char c : s) {
    if (const char* escape = find_escape(kHtmlEscapes, static_cast<unsigned char>(c))) out += escape;
    else out += c;
  }
  return out;
}

}  // namespace zoo::jinja
