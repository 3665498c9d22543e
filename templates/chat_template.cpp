#include "templates/chat_template.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <functional>
#include <map>
#include <optional>
#include <set>

#include "core/unicode.h"
#include "templates/jinja_syntax.h"

namespace zoo {
namespace {

using jinja::Body;
using jinja::Dict;
using jinja::Escape;
using jinja::Expr;
using jinja::ExprKind;
using jinja::find_escape;
using jinja::Kind;
using jinja::List;
using jinja::Node;
using jinja::NodeKind;
using jinja::Value;
using jinja::ValueError;

// Bounds on what one rendering may build, so a hostile template is an error rather than
// exhausting memory or time.
constexpr size_t kMaxText = size_t{1} << 26;  // bytes of output, or of one string (64 MiB)
constexpr int64_t kMaxSteps = 10000000;       // loop iterations and macro calls
// A string iterated becomes one value per character (tens of bytes each): a smaller bound.
constexpr size_t kMaxIteratedString = size_t{1} << 20;
// Items in one list built by + or * (about 16 bytes of memory each at least).
constexpr size_t kMaxListItems = kMaxText / 16;
// Bytes of strings, lists and dicts one rendering may build in all (Value::unshared_bytes of
// every result, copies included): each bound above holds for one value, and a loop can make
// many (a list of 64 MiB strings grown by +, a 64 MiB replacement made again each time).
constexpr size_t kMaxBuiltBytes = size_t{1} << 30;  // 1 GiB

// A string built by concatenation, refused past kMaxText.
Value bounded_string(std::string s, const char* how) {
  if (s.size() > kMaxText) throw ValueError(std::string(how) + " makes a string larger than 64 MiB");
  return Value(std::move(s));
}

// ---- strings as Python sees them: sequences of code points ----

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

// str.strip/lstrip/rstrip with `chars` (none: whitespace).
std::string strip(const std::string& s, const std::optional<std::string>& chars, bool left, bool right) {
  const auto cps = code_points(s);
  const auto set = chars ? code_points(*chars) : std::vector<char32_t>{};
  auto strippable = [&](char32_t c) {
    return chars ? std::find(set.begin(), set.end(), c) != set.end() : jinja::is_python_space(c);
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

// Python's str.title(): a cased character after an uncased one starts a word.
std::string python_title(const std::string& s) {
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

// Python's str.capitalize(): the first character in titlecase, the rest in lowercase.
std::string capitalize(const std::string& s) {
  std::string out;
  const auto cps = code_points(s);
  for (size_t i = 0; i < cps.size(); ++i) {
    if (i == 0) append_title(out, cps[i]);
    else append_lower_at(out, cps, i);
  }
  return out;
}

// jinja2's title filter: words begin after runs of whitespace, '-', '(', '{', '[' or '<';
// each word is word[0].upper() + word[1:].lower().
std::string jinja_title(const std::string& s) {
  std::string out;
  std::vector<char32_t> word;
  auto flush = [&] {
    if (word.empty()) return;
    unicode::append_uppercase(out, word[0]);
    const std::vector<char32_t> rest(word.begin() + 1, word.end());
    for (size_t i = 0; i < rest.size(); ++i) append_lower_at(out, rest, i);
    word.clear();
  };
  for (char32_t c : code_points(s)) {
    const bool separator = jinja::is_python_space(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
    if (separator) {
      flush();
      unicode::append_utf8(out, c);
    } else {
      word.push_back(c);
    }
  }
  flush();
  return out;
}

std::string replace(const std::string& s, const std::string& old, const std::string& with, int64_t count) {
  if (old.empty()) {  // Python inserts `with` around every character
    std::string out;
    int64_t done = 0;
    for (const auto& c : characters(s)) {
      if (count < 0 || done < count) out += with, ++done;
      out += c;
      if (out.size() > kMaxText) throw ValueError("replace makes a string larger than 64 MiB");
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
    if (out.size() > kMaxText) throw ValueError("replace makes a string larger than 64 MiB");
  }
  return bounded_string(out + s.substr(at), "replace").as_string();
}

// Python's str.split(sep, maxsplit).
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
    while (i < cps.size() && jinja::is_python_space(cps[i])) ++i;
    if (i == cps.size()) break;
    std::string word;
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
      for (; i < cps.size(); ++i) unicode::append_utf8(word, cps[i]);
      out.emplace_back(strip(word, std::nullopt, false, true));  // the rest, less trailing whitespace
      break;
    }
    for (; i < cps.size() && !jinja::is_python_space(cps[i]); ++i) unicode::append_utf8(word, cps[i]);
    out.emplace_back(word);
  }
  return out;
}

// str.splitlines(): Python's line boundaries.
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

std::string html_escape(const std::string& s) {
  // markupsafe's escape(), which jinja2's escape filter calls.
  static constexpr Escape kHtmlEscapes[] = {{'&', "&amp;"}, {'<', "&lt;"}, {'>', "&gt;"}, {'"', "&#34;"}, {'\'', "&#39;"}};
  std::string out;
  for (char c : s) {
    if (const char* escape = find_escape(kHtmlEscapes, static_cast<unsigned char>(c))) out += escape;
    else out += c;
  }
  return out;
}

// ---- arithmetic with Python's rules ----

std::string operand_error(const char* op, const Value& a, const Value& b) {
  a.require_defined();
  b.require_defined();
  return std::string("unsupported operand type(s) for ") + op + ": '" + a.type_name() + "' and '" + b.type_name() + "'";
}

[[noreturn]] void overflow() { throw ValueError("integer overflow (zoo's templates compute with 64-bit integers)"); }

int64_t checked_add(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) overflow();
  return r;
}

int64_t checked_sub(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_sub_overflow(a, b, &r)) overflow();
  return r;
}

int64_t checked_mul(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) overflow();
  return r;
}

Value add(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind() == Kind::kFloat || b.kind() == Kind::kFloat) return Value(a.as_float() + b.as_float());
    return Value(checked_add(a.as_int(), b.as_int()));
  }
  if (a.is_string() && b.is_string()) {
    if (a.as_string().size() + b.as_string().size() > kMaxText) throw ValueError("'+' makes a string larger than 64 MiB");
    return Value(a.as_string() + b.as_string());
  }
  if (a.kind() == Kind::kList && b.kind() == Kind::kList) {
    if (a.as_list().size() + b.as_list().size() > kMaxListItems) {
      throw ValueError("'+' makes a list of more than " + std::to_string(kMaxListItems) + " items");
    }
    List items = a.as_list();
    items.insert(items.end(), b.as_list().begin(), b.as_list().end());
    return Value::list(std::move(items));
  }
  throw ValueError(operand_error("+", a, b));
}


// `n` spaces of indentation (tojson's indent, the indent filter's width), at most 1024.
std::string spaces(int64_t n, const std::string& what) {
  if (n > 1024) throw ValueError(what + " (" + std::to_string(n) + ") must be at most 1024");
  return std::string(static_cast<size_t>(std::max<int64_t>(0, n)), ' ');
}

// Items joined by a separator, as str.join and the join filter do, within kMaxText.
std::string join_bounded(const List& items, const std::string& separator,
                         const std::function<std::string(const Value&)>& text) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += separator;
    out += text(items[i]);
    if (out.size() > kMaxText) throw ValueError("joining makes a string larger than 64 MiB");
  }
  return out;
}

Value repeat(const Value& sequence, int64_t times) {
  const size_t unit = sequence.is_string() ? sequence.as_string().size() : sequence.as_list().size() * 16;
  if (times > 0 && unit > 0 && static_cast<size_t>(times) > kMaxText / unit) {
    throw ValueError("repeating a " + sequence.type_name() + " " + std::to_string(times) + " times makes it too large");
  }
  if (sequence.is_string()) {
    std::string out;
    for (int64_t i = 0; i < times; ++i) out += sequence.as_string();
    return Value(out);
  }
  List out;
  for (int64_t i = 0; i < times; ++i) out.insert(out.end(), sequence.as_list().begin(), sequence.as_list().end());
  return Value::list(std::move(out));
}

bool is_integral(const Value& v) { return v.kind() == Kind::kInt || v.kind() == Kind::kBool; }

Value arithmetic(const std::string& op, const Value& a, const Value& b) {
  if (op == "+") return add(a, b);
  if (op == "~") return bounded_string(a.str() + b.str(), "'~'");
  if (op == "*") {
    if (a.is_number() && b.is_number()) {
      if (a.kind() == Kind::kFloat || b.kind() == Kind::kFloat) return Value(a.as_float() * b.as_float());
      return Value(checked_mul(a.as_int(), b.as_int()));
    }
    const bool sequence_a = a.is_string() || a.kind() == Kind::kList, sequence_b = b.is_string() || b.kind() == Kind::kList;
    if (sequence_a && is_integral(b)) return repeat(a, b.as_int());
    if (sequence_b && is_integral(a)) return repeat(b, a.as_int());
    throw ValueError(operand_error("*", a, b));
  }
  if (op == "%" && a.is_string()) throw ValueError("printf-style formatting ('...' % values) is not supported");
  if (!a.is_number() || !b.is_number()) throw ValueError(operand_error(op.c_str(), a, b));
  const bool floats = a.kind() == Kind::kFloat || b.kind() == Kind::kFloat;
  if (op == "-") {
    if (floats) return Value(a.as_float() - b.as_float());
    return Value(checked_sub(a.as_int(), b.as_int()));
  }
  if (op == "/") {
    if (b.as_float() == 0.0) throw ValueError("division by zero");
    return Value(a.as_float() / b.as_float());
  }
  if (op == "//" || op == "%") {
    if (b.as_float() == 0.0) throw ValueError(op == "//" ? "integer division or modulo by zero" : "modulo by zero");
    if (floats) {
      const double x = a.as_float(), y = b.as_float();
      double m = std::fmod(x, y);
      if (m != 0.0 && ((m < 0) != (y < 0))) m += y;
      return op == "%" ? Value(m) : Value(std::floor((x - m) / y + 0.5));
    }
    const int64_t x = a.as_int(), y = b.as_int();
    if (x == INT64_MIN && y == -1) overflow();
    int64_t q = x / y, m = x % y;
    if (m != 0 && ((m < 0) != (y < 0))) --q, m += y;
    return op == "%" ? Value(m) : Value(q);
  }
  if (op == "**") {
    if (!floats && b.as_int() >= 0) {
      const int64_t base = a.as_int(), exponent = b.as_int();
      if (base == 0 || base == 1) return Value(exponent == 0 ? int64_t{1} : base);
      if (base == -1) return Value(exponent % 2 ? int64_t{-1} : int64_t{1});
      int64_t r = 1;  // |base| >= 2 overflows within 63 steps
      for (int64_t i = 0; i < exponent; ++i) r = checked_mul(r, base);
      return Value(r);
    }
    return Value(std::pow(a.as_float(), b.as_float()));
  }
  throw ValueError("unknown operator " + op);
}

// What a for loop, len() and `in` look into: a string's characters, a list's items, a dict's
// keys. Undefined holds nothing (as jinja2's Undefined); other values are no containers (nullopt).
enum class Container { kNothing, kString, kList, kDict };

std::optional<Container> container_of(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined: return Container::kNothing;
    case Kind::kString: return Container::kString;
    case Kind::kList: return Container::kList;
    case Kind::kDict: return Container::kDict;
    case Kind::kNone:
    case Kind::kBool:
    case Kind::kInt:
    case Kind::kFloat:
    case Kind::kNamespace:
    case Kind::kCallable: break;
  }
  return std::nullopt;
}

// The items a for loop or a filter iterates.
List iterate(const Value& v) {
  const auto container = container_of(v);
  if (!container) throw ValueError("'" + v.type_name() + "' object is not iterable");
  switch (*container) {
    case Container::kNothing: return {};
    case Container::kList: return v.as_list();
    case Container::kDict: {
      List keys;
      for (const auto& item : v.as_dict()) keys.emplace_back(item.first);
      return keys;
    }
    case Container::kString: {
      if (v.as_string().size() > kMaxIteratedString) {
        throw ValueError("iterating a string of more than 1 MiB (" + std::to_string(v.as_string().size()) + " bytes)");
      }
      List out;
      for (auto& c : characters(v.as_string())) out.emplace_back(std::move(c));
      return out;
    }
  }
  return {};
}

int64_t length(const Value& v) {
  const auto container = container_of(v);
  if (!container) throw ValueError("object of type '" + v.type_name() + "' has no len()");
  switch (*container) {
    case Container::kNothing: return 0;
    case Container::kString: return static_cast<int64_t>(unicode::count_code_points(v.as_string()));
    case Container::kList: return static_cast<int64_t>(v.as_list().size());
    case Container::kDict: return static_cast<int64_t>(v.as_dict().size());
  }
  return 0;
}

bool contains(const Value& container, const Value& item) {
  const auto kind = container_of(container);
  if (!kind) throw ValueError("argument of type '" + container.type_name() + "' is not iterable");
  switch (*kind) {
    case Container::kNothing: return false;
    case Container::kString:
      if (!item.is_string()) throw ValueError("'in <string>' requires string as left operand, not " + item.type_name());
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Container::kList: return std::find(container.as_list().begin(), container.as_list().end(), item) != container.as_list().end();
    case Container::kDict: return item.is_string() && !container.item(item.as_string()).is_undefined();
  }
  return false;
}

// Python's slice of a sequence of `n` items: the indices it takes.
std::vector<int64_t> slice_indices(int64_t n, const Value& start, const Value& stop, const Value& step) {
  auto integer = [](const Value& v, const char* what) {
    if (!is_integral(v)) throw ValueError(std::string("slice ") + what + " must be an integer or none, got " + v.type_name());
    return v.as_int();
  };
  const int64_t s = step.is_none() ? 1 : integer(step, "step");
  if (s == 0) throw ValueError("slice step cannot be zero");
  auto clamp = [&](const Value& v, int64_t fallback, const char* what) {
    if (v.is_none()) return fallback;
    int64_t i = integer(v, what);
    if (i < 0) i += n;
    if (s > 0) return std::clamp<int64_t>(i, 0, n);
    return std::clamp<int64_t>(i, -1, n - 1);
  };
  const int64_t begin = clamp(start, s > 0 ? 0 : n - 1, "start"), end = clamp(stop, s > 0 ? n : -1, "stop");
  std::vector<int64_t> out;
  for (int64_t i = begin; s > 0 ? i < end : i > end; i += s) out.push_back(i);
  return out;
}

// ---- calls: positional and keyword arguments ----

struct Args {
  List positional;
  std::vector<std::pair<std::string, Value>> keywords;

  // Argument `index` (or the keyword `name`), else `fallback`.
  Value get(size_t index, const char* name, Value fallback = Value::none()) const {
    for (const auto& [k, v] : keywords) {
      if (k == name) return v;
    }
    return index < positional.size() ? positional[index] : fallback;
  }
  bool has(size_t index, const char* name) const {
    if (index < positional.size()) return true;
    return std::any_of(keywords.begin(), keywords.end(), [&](const auto& k) { return k.first == name; });
  }
  // Throws unless there are at most `names.size()` positional arguments and keywords among `names`.
  void check(const std::string& what, const std::vector<const char*>& names) const {
    if (positional.size() > names.size()) {
      throw ValueError(what + " takes at most " + std::to_string(names.size()) + " arguments (" +
                       std::to_string(positional.size()) + " given)");
    }
    for (const auto& keyword : keywords) {
      const std::string& k = keyword.first;
      if (std::none_of(names.begin(), names.end(), [&](const char* n) { return k == n; })) {
        throw ValueError(what + " got an unexpected keyword argument '" + k + "'");
      }
    }
  }
};

std::optional<std::string> optional_string(const Value& v, const char* what) {
  if (v.is_none() || v.is_undefined()) return std::nullopt;
  if (!v.is_string()) throw ValueError(std::string(what) + " must be a string or none, got " + v.type_name());
  return v.as_string();
}

int64_t integer_argument(const Value& v, const char* what) {
  if (!is_integral(v)) throw ValueError(std::string(what) + " must be an integer, got " + v.type_name());
  return v.as_int();
}

// A copy: arguments are often temporaries (args.get returns one), and a reference into one
// outlives it (`find` and `strftime_now` read freed memory that way).
std::string string_argument(const Value& v, const char* what) {
  if (!v.is_string()) throw ValueError(std::string(what) + " must be a string, got " + v.type_name());
  return v.as_string();
}

// Python's str and dict methods that templates call.
Value string_method(const std::string& s, const std::string& name, const Args& args) {
  const std::string what = "str." + name + "()";
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    args.check(what, {"chars"});
    return Value(strip(s, optional_string(args.get(0, "chars"), "chars"), name != "rstrip", name != "lstrip"));
  }
  if (name == "split") {
    args.check(what, {"sep", "maxsplit"});
    return Value::list(split(s, optional_string(args.get(0, "sep"), "sep"), integer_argument(args.get(1, "maxsplit", Value(-1)), "maxsplit")));
  }
  if (name == "startswith" || name == "endswith") {
    args.check(what, {"prefix"});
    const Value affix = args.get(0, "prefix");
    List options = affix.kind() == Kind::kList ? affix.as_list() : List{affix};
    for (const auto& o : options) {
      const std::string& a = string_argument(o, "the prefix or suffix");
      const bool match = name == "startswith" ? s.compare(0, a.size(), a) == 0
                                              : s.size() >= a.size() && s.compare(s.size() - a.size(), a.size(), a) == 0;
      if (match) return Value(true);
    }
    return Value(false);
  }
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
    args.check(what, {});
    return Value(name == "upper" ? upper(s) : name == "lower" ? lower(s) : name == "title" ? python_title(s) : capitalize(s));
  }
  if (name == "replace") {
    args.check(what, {"old", "new", "count"});
    return Value(replace(s, string_argument(args.get(0, "old"), "old"), string_argument(args.get(1, "new"), "new"),
                         integer_argument(args.get(2, "count", Value(-1)), "count")));
  }
  if (name == "find" || name == "count") {
    args.check(what, {"sub"});
    const std::string sub = string_argument(args.get(0, "sub"), "sub");
    if (name == "find") {
      const size_t at = s.find(sub);
      return Value(at == std::string::npos ? int64_t{-1}
                                           : static_cast<int64_t>(unicode::count_code_points(s.substr(0, at))));
    }
    if (sub.empty()) return Value(static_cast<int64_t>(unicode::count_code_points(s)) + 1);
    int64_t n = 0;
    for (size_t at = s.find(sub); at != std::string::npos; at = s.find(sub, at + sub.size())) ++n;
    return Value(n);
  }
  if (name == "join") {
    args.check(what, {"iterable"});
    return Value(join_bounded(iterate(args.get(0, "iterable")), s,
                              [](const Value& item) { return string_argument(item, "str.join()'s items"); }));
  }
  throw ValueError("'str' object has no method '" + name + "' that chat templates here support");
}

Value dict_method(const Value& d, const std::string& name, const Args& args) {
  const std::string what = "dict." + name + "()";
  if (name == "items" || name == "keys" || name == "values") {
    args.check(what, {});
    List out;
    for (const auto& [k, v] : d.as_dict()) {
      out.push_back(name == "items" ? Value::list({Value(k), v}) : name == "keys" ? Value(k) : v);
    }
    return Value::list(std::move(out));
  }
  if (name == "get") {
    args.check(what, {"key", "default"});
    const Value key = args.get(0, "key");
    const Value found = key.is_string() ? d.item(key.as_string()) : Value();
    return found.is_undefined() ? args.get(1, "default") : found;
  }
  throw ValueError("'dict' object has no method '" + name + "' that chat templates here support");
}

// A macro: its definition stays in the parsed template, which outlives every rendering.
struct Macro : jinja::Callable {
  Macro(const Node& n) : node(n) {}
  const std::string& name() const override { return node.targets[0]; }
  const Node& node;
};

// The global functions: transformers' raise_exception and strftime_now, and jinja2's namespace,
// range and dict. They are values, so "strftime_now is defined" holds as in jinja2.
struct Builtin : jinja::Callable {
  explicit Builtin(std::string n) : function(std::move(n)) {}
  const std::string& name() const override { return function; }
  std::string function;
};

const Value* builtin(const std::string& name) {
  static const std::map<std::string, Value> kBuiltins = [] {
    std::map<std::string, Value> out;
    for (const char* n : {"raise_exception", "strftime_now", "namespace", "range", "dict"}) {
      out[n] = Value::callable(std::make_shared<Builtin>(n));
    }
    return out;
  }();
  const auto it = kBuiltins.find(name);
  return it == kBuiltins.end() ? nullptr : &it->second;
}

using Frame = std::map<std::string, Value>;

class Renderer {
 public:
  Renderer(const std::string& name, const nlohmann::ordered_json& variables) : name_(name) {
    if (!variables.is_object()) throw ChatTemplateError(name + ": the variables must be a JSON object");
    Frame globals;
    for (const auto& [key, value] : variables.items()) {
      try {
        globals[key] = Value::from_json(value);
      } catch (const ValueError& e) {
        throw ChatTemplateError(name + ": variable '" + key + "': " + e.what());
      }
    }
    frames_.push_back(std::move(globals));
  }

  void render(const Body& body, std::string& out) {
    stack_base_ = static_cast<const char*>(__builtin_frame_address(0));
    try {
      render_body(body, out);
    } catch (const ValueError& e) {  // one the renderer did not place on a line still names the template
      throw ChatTemplateError(name_ + ": " + e.what());
    }
  }

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  [[noreturn]] void fail(int line, const std::string& message) const {
    throw ChatTemplateError(name_ + ":" + std::to_string(line) + ": " + message);
  }

  // Rendering recurses through nested statements, expressions and macro calls; the parser bounds
  // each body's nesting, macro calls multiply it. The stack this render has used is bounded
  // instead, in bytes: a sanitizer's larger frames reach the bound sooner, never the stack's end.
  static constexpr ptrdiff_t kMaxStackBytes = ptrdiff_t{1} << 20;
  void check_stack(int line) const {
    const auto* here = static_cast<const char*>(__builtin_frame_address(0));
    if (stack_base_ - here > kMaxStackBytes) {
      fail(line, "the template nests statements, expressions and macro calls too deeply (over 1 MiB of stack)");
    }
  }

  // Whether `v` is or contains (through lists, dicts and namespaces) the namespace `items`;
  // `seen` visits each shared container once.
  static bool reaches(const Value& v, const Dict* items, std::set<const void*>& seen) {
    switch (v.kind()) {
      case Kind::kList:
        if (!seen.insert(&v.as_list()).second) return false;
        for (const auto& e : v.as_list())
          if (reaches(e, items, seen)) return true;
        return false;
      case Kind::kNamespace:
        if (&v.namespace_items() == items) return true;
        [[fallthrough]];
      case Kind::kDict:
        if (!seen.insert(&v.as_dict()).second) return false;
        for (const auto& [key, e] : v.as_dict())
          if (reaches(e, items, seen)) return true;
        return false;
      case Kind::kUndefined:
      case Kind::kNone:
      case Kind::kBool:
      case Kind::kInt:
      case Kind::kFloat:
      case Kind::kString:
      case Kind::kCallable:
        return false;
    }
    return false;
  }

  // ---- scopes: the globals, then a frame per loop iteration; a macro sees the globals and its own ----

  Value lookup(const std::string& name) const {
    const size_t floor = barriers_.empty() ? 0 : barriers_.back();
    for (size_t i = frames_.size(); i-- > floor;) {
      if (const auto it = frames_[i].find(name); it != frames_[i].end()) return it->second;
    }
    if (floor > 0) {
      if (const auto it = frames_[0].find(name); it != frames_[0].end()) return it->second;
    }
    if (const Value* function = builtin(name)) return *function;
    return Value::undefined("'" + name + "' is undefined");
  }

  void assign(const std::vector<std::string>& targets, const Value& value, int line) {
    if (targets.size() == 1) {
      frames_.back()[targets[0]] = value;
      return;
    }
    if (value.kind() != Kind::kList) fail(line, "cannot unpack a " + value.type_name() + " into " + std::to_string(targets.size()) + " names");
    const List& items = value.as_list();
    if (items.size() != targets.size()) {
      fail(line, "cannot unpack " + std::to_string(items.size()) + " values into " + std::to_string(targets.size()) + " names");
    }
    for (size_t i = 0; i < targets.size(); ++i) frames_.back()[targets[i]] = items[i];
  }

  // ---- statements ----

  void step(int line) {
    if (++steps_ > kMaxSteps) fail(line, "the template runs more than " + std::to_string(kMaxSteps) + " loop iterations and macro calls");
  }

  Flow render_body(const Body& body, std::string& out) {
    if (out.size() > kMaxText) fail(body.empty() ? 0 : body.front().line, "the output is larger than 64 MiB");
    for (const Node& n : body) {
      const Flow flow = render_node(n, out);
      if (flow != Flow::kNormal) return flow;
    }
    return Flow::kNormal;
  }

  Flow render_node(const Node& n, std::string& out) {
    check_stack(n.line);
    switch (n.kind) {
      case NodeKind::kText: out += n.text; return Flow::kNormal;
      case NodeKind::kOutput: {
        const Value v = eval(*n.expr);
        if (v.kind() == Kind::kCallable) fail(n.line, "cannot print the function '" + v.as_callable()->name() + "' (call it)");
        try {
          out += v.str();  // printing has its own bound (a shared list prints past memory)
        } catch (const ValueError& e) {
          fail(n.line, e.what());
        }
        return Flow::kNormal;
      }
      case NodeKind::kIf:
        for (const auto& [condition, body] : n.branches) {
          if (eval(*condition).truthy()) return render_body(body, out);
        }
        return render_body(n.else_body, out);
      case NodeKind::kFor: return render_for(n, out);
      case NodeKind::kSet: {
        const Value v = eval(*n.expr);
        if (n.attribute.empty()) {
          assign(n.targets, v, n.line);
          return Flow::kNormal;
        }
        const Value target = lookup(n.targets[0]);
        if (target.kind() != Kind::kNamespace) {
          fail(n.line, "cannot set '" + n.targets[0] + "." + n.attribute + "': '" + n.targets[0] + "' is a " +
                           target.type_name() + ", not a namespace()");
        }
        // The namespace's recorded depth was fixed when it was made: what is stored in it stays
        // within the bound on its own.
        if (v.depth() >= jinja::kMaxValueDepth) {
          fail(n.line, "cannot set '" + n.targets[0] + "." + n.attribute + "': the value is nested " +
                           std::to_string(v.depth()) + " levels deep");
        }
        Dict& items = target.namespace_items();
        // Values share their containers, so a namespace stored into itself would be a cycle that
        // reference counts never free and printing never finishes (Python's collector and
        // repr cope; here it is refused).
        std::set<const void*> seen;
        if (reaches(v, &items, seen)) {
          fail(n.line, "cannot set '" + n.targets[0] + "." + n.attribute + "': the value holds '" + n.targets[0] +
                           "' itself");
        }
        const auto it = std::find_if(items.begin(), items.end(), [&](const auto& i) { return i.first == n.attribute; });
        if (it != items.end()) it->second = v;
        else items.emplace_back(n.attribute, v);
        return Flow::kNormal;
      }
      case NodeKind::kSetBlock: {
        std::string text;
        render_body(n.body, text);
        assign(n.targets, Value(text), n.line);
        return Flow::kNormal;
      }
      case NodeKind::kMacro:
        frames_.back()[n.targets[0]] = Value::callable(std::make_shared<Macro>(n));
        return Flow::kNormal;
      case NodeKind::kFilterBlock: {
        std::string text;
        const Flow flow = render_body(n.body, text);
        block_input_ = Value(text);
        out += eval(*n.expr).str();
        return flow;
      }
      case NodeKind::kGeneration: return render_body(n.body, out);
      case NodeKind::kBreak: return Flow::kBreak;
      case NodeKind::kContinue: return Flow::kContinue;
    }
    return Flow::kNormal;
  }

  Flow render_for(const Node& n, std::string& out) {
    List items;
    try {
      items = iterate(eval(*n.expr));
    } catch (const ValueError& e) {
      fail(n.line, e.what());
    }
    if (n.condition) {  // "for x in xs if c": the loop sees only the items that pass
      List kept;
      for (const auto& item : items) {
        frames_.emplace_back();
        assign(n.targets, item, n.line);
        const bool keep = eval(*n.condition).truthy();
        frames_.pop_back();
        if (keep) kept.push_back(item);
      }
      items = std::move(kept);
    }
    const auto count = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < count; ++i) {
      step(n.line);
      Dict loop = {{"index", Value(i + 1)},         {"index0", Value(i)},          {"revindex", Value(count - i)},
                   {"revindex0", Value(count - i - 1)}, {"first", Value(i == 0)},    {"last", Value(i == count - 1)},
                   {"length", Value(count)},       {"depth", Value(1)},           {"depth0", Value(0)}};
      if (i > 0) loop.emplace_back("previtem", items[i - 1]);
      if (i + 1 < count) loop.emplace_back("nextitem", items[i + 1]);
      frames_.emplace_back();
      frames_.back()["loop"] = Value::dict(std::move(loop));
      assign(n.targets, items[i], n.line);
      const Flow flow = render_body(n.body, out);
      frames_.pop_back();
      if (flow == Flow::kBreak) break;
    }
    if (count == 0) return render_body(n.else_body, out);
    return Flow::kNormal;
  }

  // ---- expressions ----

  Value eval(const Expr& e) {
    check_stack(e.line);
    try {
      Value v = eval_unchecked(e);
      built_bytes_ += v.unshared_bytes();
      if (built_bytes_ > kMaxBuiltBytes) fail(e.line, "the template builds more than 1 GiB of strings and lists in one rendering");
      return v;
    } catch (const ValueError& error) {
      fail(e.line, error.what());
    }
  }

  Args arguments(const Expr& e) {
    Args args;
    for (const auto& item : e.items) args.positional.push_back(eval(*item));
    for (const auto& [name, value] : e.keywords) args.keywords.emplace_back(name, eval(*value));
    return args;
  }

  Value eval_unchecked(const Expr& e) {
    switch (e.kind) {
      case ExprKind::kLiteral: return e.value;
      case ExprKind::kName: return lookup(e.name);
      case ExprKind::kList:
      case ExprKind::kTuple: {
        List items;
        for (const auto& item : e.items) items.push_back(eval(*item));
        return Value::list(std::move(items));
      }
      case ExprKind::kDict: {
        Dict items;
        for (size_t i = 0; i + 1 < e.items.size(); i += 2) {
          const Value key = eval(*e.items[i]);
          if (!key.is_string()) throw ValueError("dict keys must be strings here, got " + key.type_name());
          const Value value = eval(*e.items[i + 1]);
          const auto it = std::find_if(items.begin(), items.end(), [&](const auto& p) { return p.first == key.as_string(); });
          if (it != items.end()) it->second = value;
          else items.emplace_back(key.as_string(), value);
        }
        return Value::dict(std::move(items));
      }
      case ExprKind::kAttribute: return attribute(eval(*e.a), e.name);
      case ExprKind::kSubscript: return subscript(eval(*e.a), eval(*e.b));
      case ExprKind::kSlice: {
        const Value target = eval(*e.a);
        target.require_defined();
        Value bounds[3];
        for (int i = 0; i < 3; ++i) bounds[i] = e.items[i] ? eval(*e.items[i]) : Value::none();
        if (target.is_string()) {
          const auto chars = characters(target.as_string());
          std::string out;
          for (int64_t i : slice_indices(static_cast<int64_t>(chars.size()), bounds[0], bounds[1], bounds[2])) out += chars[i];
          return Value(out);
        }
        if (target.kind() != Kind::kList) throw ValueError("cannot slice a " + target.type_name());
        List out;
        const List& items = target.as_list();
        for (int64_t i : slice_indices(static_cast<int64_t>(items.size()), bounds[0], bounds[1], bounds[2])) out.push_back(items[i]);
        return Value::list(std::move(out));
      }
      case ExprKind::kCall: return call(e);
      case ExprKind::kFilter: return filter(e.name, e.a ? eval(*e.a) : block_input_, arguments(e));
      case ExprKind::kTest: {
        const bool result = test(e.name, eval(*e.a), arguments(e));
        return Value(e.negated ? !result : result);
      }
      case ExprKind::kNegate:
      case ExprKind::kPlus: {
        const Value v = eval(*e.a);
        if (!v.is_number()) {
          v.require_defined();
          throw ValueError(std::string("bad operand type for unary ") + (e.kind == ExprKind::kNegate ? "-" : "+") + ": '" +
                           v.type_name() + "'");
        }
        if (e.kind == ExprKind::kPlus) return v.kind() == Kind::kBool ? Value(v.as_int()) : v;
        if (v.kind() == Kind::kFloat) return Value(-v.as_float());
        return Value(checked_sub(0, v.as_int()));
      }
      case ExprKind::kNot: return Value(!eval(*e.a).truthy());
      case ExprKind::kBinary: return arithmetic(e.name, eval(*e.a), eval(*e.b));
      case ExprKind::kCompare: {
        Value left = eval(*e.a);
        for (size_t i = 0; i < e.ops.size(); ++i) {
          Value right = eval(*e.items[i]);
          const std::string& op = e.ops[i];
          bool result = false;
          if (op == "==") result = left == right;
          else if (op == "!=") result = left != right;
          else if (op == "in") result = contains(right, left);
          else if (op == "not in") result = !contains(right, left);
          else {
            const int c = jinja::compare(left, right, op.c_str());
            result = op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0;
          }
          if (!result) return Value(false);
          left = std::move(right);
        }
        return Value(true);
      }
      case ExprKind::kAnd: {
        Value a = eval(*e.a);
        return a.truthy() ? eval(*e.b) : a;
      }
      case ExprKind::kOr: {
        Value a = eval(*e.a);
        return a.truthy() ? a : eval(*e.b);
      }
      case ExprKind::kConditional:
        if (eval(*e.a).truthy()) return eval(*e.b);
        return e.c ? eval(*e.c) : Value::undefined("the conditional expression had no else");
    }
    throw ValueError("unknown expression");
  }

  Value attribute(const Value& target, const std::string& name) {
    switch (target.kind()) {
      case Kind::kUndefined: target.require_defined(); break;
      case Kind::kDict:
      case Kind::kNamespace: return target.item(name);
      case Kind::kNone:
      case Kind::kBool:
      case Kind::kInt:
      case Kind::kFloat:
      case Kind::kString:
      case Kind::kList:
      case Kind::kCallable: break;
    }
    return Value::undefined("'" + target.type_name() + " object' has no attribute '" + name + "'");
  }

  Value subscript(const Value& target, const Value& key) {
    target.require_defined();
    if ((target.kind() == Kind::kDict || target.kind() == Kind::kNamespace) && key.is_string()) return target.item(key.as_string());
    if ((target.kind() == Kind::kList || target.is_string()) && is_integral(key)) {
      const List items = target.is_string() ? iterate(target) : List{};
      const List& sequence = target.is_string() ? items : target.as_list();
      int64_t i = key.as_int();
      const auto n = static_cast<int64_t>(sequence.size());
      if (i < 0) i += n;
      if (i >= 0 && i < n) return sequence[static_cast<size_t>(i)];
    }
    return Value::undefined("'" + target.type_name() + " object' has no element " + key.repr());
  }

  // ---- calls: macros, methods and global functions ----

  Value call(const Expr& e) {
    if (e.a->kind == ExprKind::kAttribute) {
      const Value target = eval(*e.a->a);
      const std::string& name = e.a->name;
      if (target.is_string()) return string_method(target.as_string(), name, arguments(e));
      if (target.kind() == Kind::kDict) {
        const Value member = target.item(name);
        if (member.kind() == Kind::kCallable) return call_function(member, arguments(e), e.line);
        return dict_method(target, name, arguments(e));
      }
      target.require_defined();
      throw ValueError("'" + target.type_name() + "' object has no method '" + name + "' that chat templates here support");
    }
    const Value callee = eval(*e.a);
    if (callee.kind() == Kind::kCallable) return call_function(callee, arguments(e), e.line);
    if (callee.is_undefined() && e.a->kind == ExprKind::kName) {
      throw ValueError("'" + e.a->name + "' is undefined (not a variable, macro or function chat templates here know)");
    }
    callee.require_defined();
    throw ValueError("'" + callee.type_name() + "' object is not callable");
  }

  Value call_function(const Value& callee, const Args& args, int line) {
    if (dynamic_cast<const Macro*>(callee.as_callable().get())) return call_macro(callee, args, line);
    const std::string& name = callee.as_callable()->name();
    if (name == "raise_exception") {
      args.check("raise_exception()", {"message"});
      fail(line, "the template raised: " + args.get(0, "message", Value("")).str());
    }
    if (name == "namespace" || name == "dict") {
      Dict items;
      if (!args.positional.empty()) {
        if (args.positional.size() > 1 || !args.positional[0].is_mapping()) {
          throw ValueError(name + "() takes a dict and keyword arguments");
        }
        items = args.positional[0].as_dict();
      }
      for (const auto& [k, v] : args.keywords) items.emplace_back(k, v);
      return name == "namespace" ? Value::make_namespace(std::move(items)) : Value::dict(std::move(items));
    }
    if (name == "range") {
      if (!args.keywords.empty() || args.positional.empty() || args.positional.size() > 3) {
        throw ValueError("range() takes 1 to 3 integers");
      }
      int64_t start = 0, stop = 0, step = 1;
      if (args.positional.size() == 1) stop = integer_argument(args.positional[0], "range()'s stop");
      else start = integer_argument(args.positional[0], "range()'s start"), stop = integer_argument(args.positional[1], "range()'s stop");
      if (args.positional.size() == 3) step = integer_argument(args.positional[2], "range()'s step");
      if (step == 0) throw ValueError("range() arg 3 must not be zero");
      List out;
      for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
        if (out.size() >= 100000) throw ValueError("range() of more than 100000 items");
        out.emplace_back(i);
      }
      return Value::list(std::move(out));
    }
    if (name == "strftime_now") {
      args.check("strftime_now()", {"format"});
      const std::time_t now = std::time(nullptr);
      std::tm local{};
      localtime_r(&now, &local);
      const std::string format = string_argument(args.get(0, "format"), "the format");
      // strftime writes nothing when the result does not fit: a conversion writes at most ~64
      // bytes, so this buffer holds any result; an empty one from a non-empty format is refused.
      const size_t capacity = std::min<size_t>(kMaxText, 256 + 64 * format.size());
      std::string buffer(capacity, '\0');
      const size_t n = std::strftime(buffer.data(), buffer.size(), format.c_str(), &local);
      if (n == 0 && !format.empty()) {
        throw ValueError("strftime_now: the format gives no text or more than " + std::to_string(capacity) + " bytes");
      }
      buffer.resize(n);
      return Value(std::move(buffer));
    }
    throw ValueError("unknown function '" + name + "'");
  }

  Value call_macro(const Value& callee, const Args& args, int line) {
    const auto* macro = dynamic_cast<const Macro*>(callee.as_callable().get());
    const Node& n = macro->node;
    if (args.positional.size() > n.parameters.size()) {
      throw ValueError("macro '" + macro->name() + "' takes " + std::to_string(n.parameters.size()) + " arguments (" +
                       std::to_string(args.positional.size()) + " given)");
    }
    if (barriers_.size() > 50) throw ValueError("macros call each other more than 50 deep");
    step(line);
    Frame frame;
    for (size_t i = 0; i < args.positional.size(); ++i) frame[n.parameters[i].first] = args.positional[i];
    for (const auto& keyword : args.keywords) {
      const std::string& k = keyword.first;
      const bool known = std::any_of(n.parameters.begin(), n.parameters.end(), [&](const auto& p) { return p.first == k; });
      if (!known) throw ValueError("macro '" + macro->name() + "' has no parameter '" + k + "'");
      frame[k] = keyword.second;
    }
    barriers_.push_back(frames_.size());
    frames_.push_back(std::move(frame));
    std::string out;
    try {
      for (const auto& [parameter, fallback] : n.parameters) {
        if (!frames_.back().count(parameter)) {
          frames_.back()[parameter] = fallback ? eval(*fallback) : Value::undefined("'" + parameter + "' is undefined");
        }
      }
      render_body(n.body, out);
    } catch (...) {
      frames_.resize(barriers_.back());
      barriers_.pop_back();
      throw;
    }
    frames_.resize(barriers_.back());
    barriers_.pop_back();
    return Value(out);
  }

  // ---- filters and tests (jinja2/filters.py, jinja2/tests.py; tojson is transformers') ----

  // The items of `items` whose `attribute` ("a" or "a.b"; empty: the item) passes test `args`.
  List select(const List& items, const std::string& attribute, const Args& args, size_t test_at, bool keep) {
    List out;
    for (const auto& item : items) {
      Value v = item;
      if (!attribute.empty()) {
        for (const auto& part : split(attribute, std::string("."), -1)) v = attribute_or_index(v, part.as_string());
      }
      bool pass = false;
      if (args.positional.size() > test_at) {
        Args test_args;
        test_args.positional.assign(args.positional.begin() + static_cast<std::ptrdiff_t>(test_at) + 1, args.positional.end());
        pass = test(string_argument(args.positional[test_at], "the test name"), v, test_args);
      } else {
        pass = v.truthy();
      }
      if (pass == keep) out.push_back(item);
    }
    return out;
  }

  // jinja2's environment.getattr for the attribute filters: "0" indexes a list.
  Value attribute_or_index(const Value& v, const std::string& part) {
    if (!part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; }) &&
        v.kind() == Kind::kList) {
      return subscript(v, Value(static_cast<int64_t>(std::stoll(part))));
    }
    return attribute(v, part);
  }

  Value filter(const std::string& name, const Value& v, const Args& args) {
    const std::string what = "the " + name + " filter";
    if (name == "default" || name == "d") {
      args.check(what, {"default_value", "boolean"});
      const bool use_fallback = v.is_undefined() || (args.get(1, "boolean", Value(false)).truthy() && !v.truthy());
      return use_fallback ? args.get(0, "default_value", Value("")) : v;
    }
    if (name == "length" || name == "count") {
      args.check(what, {});
      return Value(length(v));
    }
    if (name == "string") {
      args.check(what, {});
      return Value(v.str());
    }
    if (name == "safe") {
      args.check(what, {});
      return v;
    }
    if (name == "trim") {
      args.check(what, {"chars"});
      return Value(strip(v.str(), optional_string(args.get(0, "chars"), "chars"), true, true));
    }
    if (name == "upper" || name == "lower" || name == "capitalize" || name == "title") {
      args.check(what, {});
      const std::string s = v.str();
      return Value(name == "upper" ? upper(s) : name == "lower" ? lower(s) : name == "capitalize" ? capitalize(s) : jinja_title(s));
    }
    if (name == "e" || name == "escape") {
      args.check(what, {});
      return Value(html_escape(v.str()));
    }
    if (name == "replace") {
      args.check(what, {"old", "new", "count"});
      const Value count = args.get(2, "count");
      return Value(replace(v.str(), args.get(0, "old").str(), args.get(1, "new").str(),
                           count.is_none() ? -1 : integer_argument(count, "count")));
    }
    if (name == "tojson") {
      // transformers' tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)
      args.check(what, {"ensure_ascii", "indent", "separators", "sort_keys"});
      jinja::JsonOptions o;
      o.ensure_ascii = args.get(0, "ensure_ascii", Value(false)).truthy();
      const Value indent = args.get(1, "indent");
      if (is_integral(indent)) o.indent = spaces(indent.as_int(), "tojson's indent");
      else if (indent.is_string()) o.indent = indent.as_string();
      else if (!indent.is_none()) throw ValueError("tojson's indent must be an integer, a string or none");
      const Value separators = args.get(2, "separators");
      if (!separators.is_none()) {
        if (separators.kind() != Kind::kList || separators.as_list().size() != 2) {
          throw ValueError("tojson's separators must be two strings");
        }
        o.separators = std::make_pair(string_argument(separators.as_list()[0], "a separator"),
                                      string_argument(separators.as_list()[1], "a separator"));
      }
      o.sort_keys = args.get(3, "sort_keys", Value(false)).truthy();
      return Value(jinja::to_json(v, o));
    }
    if (name == "join") {
      args.check(what, {"d", "attribute"});
      const std::string separator = args.get(0, "d", Value("")).str();
      const Value attribute = args.get(1, "attribute");
      return Value(join_bounded(iterate(v), separator, [&](const Value& item) {
        return (attribute.is_none() ? item : attribute_or_index(item, attribute.str())).str();
      }));
    }
    if (name == "first" || name == "last") {
      args.check(what, {});
      const List items = iterate(v);
      if (items.empty()) return Value::undefined("the " + name + " filter found no items");
      return name == "first" ? items.front() : items.back();
    }
    if (name == "list") {
      args.check(what, {});
      return Value::list(iterate(v));
    }
    if (name == "items") {
      args.check(what, {});
      if (v.is_undefined()) return Value::list({});
      if (!v.is_mapping()) throw ValueError("can only get item pairs from a mapping, not " + v.type_name());
      return dict_method(v, "items", Args{});
    }
    if (name == "dictsort") {
      // jinja2's dictsort(value, case_sensitive=False, by='key', reverse=False): the items as
      // (key, value) pairs, sorted by one of them.
      args.check(what, {"case_sensitive", "by", "reverse"});
      if (!v.is_mapping()) throw ValueError("the dictsort filter needs a mapping, not " + v.type_name());
      const bool case_sensitive = args.get(0, "case_sensitive", Value(false)).truthy();
      const std::string by = string_argument(args.get(1, "by", Value("key")), "dictsort's by");
      if (by != "key" && by != "value") throw ValueError("You can only sort by either \"key\" or \"value\"");
      const bool reverse = args.get(2, "reverse", Value(false)).truthy();
      List items = iterate(dict_method(v, "items", Args{}));
      const size_t at = by == "key" ? 0 : 1;
      auto key = [&](const Value& item) {
        const Value& k = item.as_list()[at];
        return !case_sensitive && k.is_string() ? Value(lower(k.as_string())) : k;
      };
      std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
        return reverse ? jinja::compare(key(b), key(a)) < 0 : jinja::compare(key(a), key(b)) < 0;
      });
      return Value::list(std::move(items));
    }
    if (name == "reverse") {
      args.check(what, {});
      if (v.is_string()) {
        const auto chars = characters(v.as_string());
        std::string out;
        for (auto it = chars.rbegin(); it != chars.rend(); ++it) out += *it;
        return Value(out);
      }
      List items = iterate(v);
      std::reverse(items.begin(), items.end());
      return Value::list(std::move(items));
    }
    if (name == "select" || name == "reject") return Value::list(select(iterate(v), "", args, 0, name == "select"));
    if (name == "selectattr" || name == "rejectattr") {
      return Value::list(select(iterate(v), string_argument(args.get(0, "attribute"), "the attribute"), args, 1, name == "selectattr"));
    }
    if (name == "map") {
      List out;
      const Value attribute = args.get(99, "attribute");
      if (!attribute.is_none()) {
        args.check(what, {"attribute", "default"});
        for (const auto& item : iterate(v)) {
          Value mapped = attribute_or_index(item, attribute.str());
          if (mapped.is_undefined() && args.has(99, "default")) mapped = args.get(99, "default");
          out.push_back(mapped);
        }
        return Value::list(std::move(out));
      }
      if (args.positional.empty()) throw ValueError("the map filter needs a filter name or attribute=");
      const std::string filter_name = string_argument(args.positional[0], "the filter name");
      const auto& known = jinja::known_filters();
      if (std::find(known.begin(), known.end(), filter_name) == known.end()) throw ValueError("unknown filter '" + filter_name + "'");
      Args rest;
      rest.positional.assign(args.positional.begin() + 1, args.positional.end());
      rest.keywords = args.keywords;
      for (const auto& item : iterate(v)) out.push_back(filter(filter_name, item, rest));
      return Value::list(std::move(out));
    }
    if (name == "sort") {
      args.check(what, {"reverse", "case_sensitive", "attribute"});
      const bool reverse = args.get(0, "reverse", Value(false)).truthy();
      const bool case_sensitive = args.get(1, "case_sensitive", Value(false)).truthy();
      const Value attribute = args.get(2, "attribute");
      List items = iterate(v);
      auto key = [&](const Value& item) {
        Value k = attribute.is_none() ? item : attribute_or_index(item, attribute.str());
        return !case_sensitive && k.is_string() ? Value(lower(k.as_string())) : k;
      };
      std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
        return reverse ? jinja::compare(key(b), key(a)) < 0 : jinja::compare(key(a), key(b)) < 0;
      });
      return Value::list(std::move(items));
    }
    if (name == "abs") {
      args.check(what, {});
      if (v.kind() == Kind::kFloat) return Value(std::fabs(v.as_float()));
      if (is_integral(v)) return Value(v.as_int() < 0 ? checked_sub(0, v.as_int()) : v.as_int());
      v.require_defined();
      throw ValueError("bad operand type for abs(): '" + v.type_name() + "'");
    }
    if (name == "int" || name == "float") {
      args.check(what, {"default"});
      const Value fallback = args.get(0, "default", name == "int" ? Value(0) : Value(0.0));
      double d = 0;
      if (v.is_number()) {
        d = v.as_float();
        if (name == "int" && is_integral(v)) return Value(v.as_int());
      } else if (v.is_string()) {
        const std::string s = strip(v.as_string(), std::nullopt, true, true);
        char* end = nullptr;
        d = std::strtod(s.c_str(), &end);
        if (s.empty() || end != s.c_str() + s.size()) return fallback;
      } else {
        return fallback;
      }
      if (name == "float") return Value(d);
      if (!std::isfinite(d) || std::fabs(d) >= 9.2e18) return fallback;
      return Value(static_cast<int64_t>(d));
    }
    if (name == "indent") {
      args.check(what, {"width", "first", "blank"});
      const Value width = args.get(0, "width", Value(4));
      const std::string indentation =
          width.is_string() ? width.as_string() : spaces(integer_argument(width, "width"), "indent's width");
      const bool first = args.get(1, "first", Value(false)).truthy(), blank = args.get(2, "blank", Value(false)).truthy();
      std::vector<std::string> lines = splitlines(v.str() + "\n");
      std::string out;
      for (size_t i = 0; i < lines.size(); ++i) {
        if (i > 0) out += "\n" + ((blank || !lines[i].empty()) ? indentation : "");
        out += lines[i];
        if (out.size() > kMaxText) throw ValueError("indenting makes a string larger than 64 MiB");
      }
      return Value(first ? indentation + out : out);
    }
    throw ValueError("unknown filter '" + name + "'");
  }

  bool test(const std::string& name, const Value& v, const Args& args) {
    auto argument = [&] {
      if (args.positional.size() != 1 || !args.keywords.empty()) throw ValueError("the test '" + name + "' takes one argument");
      return args.positional[0];
    };
    if (name != "divisibleby" && name != "eq" && name != "equalto" && name != "==" && name != "ne" && name != "!=" &&
        name != "lt" && name != "<" && name != "lessthan" && name != "le" && name != "<=" && name != "gt" &&
        name != ">" && name != "greaterthan" && name != "ge" && name != ">=" && name != "in" && name != "sameas" &&
        (!args.positional.empty() || !args.keywords.empty())) {
      throw ValueError("the test '" + name + "' takes no arguments");
    }
    if (name == "defined") return !v.is_undefined();
    if (name == "undefined") return v.is_undefined();
    if (name == "none") return v.is_none();
    if (name == "boolean") return v.kind() == Kind::kBool;
    if (name == "true") return v.kind() == Kind::kBool && v.as_bool();
    if (name == "false") return v.kind() == Kind::kBool && !v.as_bool();
    if (name == "integer") return v.kind() == Kind::kInt;
    if (name == "float") return v.kind() == Kind::kFloat;
    if (name == "number") return v.is_number();
    if (name == "string") return v.is_string();
    if (name == "mapping") return v.is_mapping();
    if (name == "iterable" || name == "sequence") {
      return v.is_undefined() || v.is_string() || v.kind() == Kind::kList || v.kind() == Kind::kDict;
    }
    if (name == "callable") return v.kind() == Kind::kCallable;
    if (name == "even" || name == "odd") {
      if (!is_integral(v)) {
        v.require_defined();
        throw ValueError("the test '" + name + "' needs an integer, got " + v.type_name());
      }
      return (v.as_int() % 2 == 0) == (name == "even");
    }
    if (name == "divisibleby") {
      const int64_t d = integer_argument(argument(), "divisibleby's argument");
      if (d == 0) throw ValueError("integer division or modulo by zero");
      return integer_argument(v, "the value tested with divisibleby") % d == 0;
    }
    if (name == "eq" || name == "equalto" || name == "==") return v == argument();
    if (name == "ne" || name == "!=") return v != argument();
    if (name == "lt" || name == "<" || name == "lessthan") return jinja::compare(v, argument(), "<") < 0;
    if (name == "le" || name == "<=") return jinja::compare(v, argument(), "<=") <= 0;
    if (name == "gt" || name == ">" || name == "greaterthan") return jinja::compare(v, argument(), ">") > 0;
    if (name == "ge" || name == ">=") return jinja::compare(v, argument(), ">=") >= 0;
    if (name == "in") return contains(argument(), v);
    if (name == "sameas") {
      const Value other = argument();
      if (v.is_none() || v.kind() == Kind::kBool || other.is_none() || other.kind() == Kind::kBool) {
        return v.kind() == other.kind() && v == other;
      }
      throw ValueError("the test 'sameas' is supported for none, true and false only");
    }
    if (name == "lower" || name == "upper") {
      if (!v.is_string()) return false;
      const std::string& s = v.as_string();
      bool cased = false;
      for (char32_t c : code_points(s)) cased = cased || unicode::is_cased(c);
      return cased && (name == "lower" ? lower(s) == s : upper(s) == s);
    }
    throw ValueError("unknown test '" + name + "'");
  }

  const std::string& name_;
  std::vector<Frame> frames_;
  std::vector<size_t> barriers_;  // where each macro call's frames begin
  int64_t steps_ = 0;
  size_t built_bytes_ = 0;  // against kMaxBuiltBytes
  const char* stack_base_ = nullptr;  // the frame render() began in
  Value block_input_;             // the rendered body of the {% filter %} block being applied
};

}  // namespace

ChatTemplate::ChatTemplate(const std::string& source, std::string name) : name_(std::move(name)) {
  if (const int64_t bad = invalid_utf8_offset(source); bad >= 0) {
    throw ChatTemplateError(name_ + ": invalid UTF-8 at byte offset " + std::to_string(bad));
  }
  try {
    body_ = std::make_shared<const Body>(jinja::parse_template(source, name_));
  } catch (const jinja::SyntaxError& e) {
    throw ChatTemplateError(e.what());
  }
}

std::string ChatTemplate::render(const nlohmann::ordered_json& variables) const {
  std::string out;
  Renderer(name_, variables).render(*body_, out);
  return out;
}

}  // namespace zoo
