#pragma once
// The values a chat template computes with (templates/chat_template.h): Python's None, booleans,
// integers, floats, strings, lists and dicts as jinja2 sees them, plus Jinja's undefined,
// namespace() objects and macros. Python's rules for truth, equality, ordering and printing
// (str and repr) are here, and transformers' tojson (json.dumps with ensure_ascii=False), so
// that a template prints what jinja2 prints.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

namespace zoo::jinja {

class Value;
using List = std::vector<Value>;  // Python's lists and tuples alike
using Dict = std::vector<std::pair<std::string, Value>>;  // string keys in insertion order, as Python's dicts

// What a template can call besides the built-in functions: its macros (the renderer defines them).
struct Callable {
  virtual ~Callable() = default;
  virtual const std::string& name() const = 0;
};

// An operation Python would refuse (a TypeError, ValueError or jinja2's UndefinedError), with
// Python's message; the renderer adds the template and line.
class ValueError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kNamespace, kCallable };

// Lists and dicts nest at most this deep (a template's or the variables'): printing, comparing
// and freeing a value recurse through it. Deeper is a ValueError naming the limit.
constexpr int kMaxValueDepth = 256;
// What printing one value (str, repr, tojson) may produce: values share their containers, so a
// list doubled 40 times holds 2^40 leaves in a few bytes of memory.
constexpr size_t kMaxPrintedBytes = size_t{1} << 26;  // 64 MiB
// What one string a rendering builds (by +, ~, *, replace, join, ...) may hold, and its output.
constexpr size_t kMaxText = size_t{1} << 26;  // 64 MiB

class Value {
 public:
  // Undefined; `why` is jinja2's message for using it ("'x' is undefined").
  Value() = default;
  static Value undefined(std::string why);
  static Value none();
  Value(bool b) : kind_(Kind::kBool), data_(b) {}
  Value(int64_t i) : kind_(Kind::kInt), data_(i) {}
  Value(int i) : Value(static_cast<int64_t>(i)) {}
  Value(double d) : kind_(Kind::kFloat), data_(d) {}
  Value(std::string s) : kind_(Kind::kString), data_(std::move(s)) {}
  Value(const char* s) : Value(std::string(s)) {}
  static Value list(List items);
  static Value dict(Dict items);
  // namespace(): a dict whose attributes `set ns.x = ...` changes, seen through every copy.
  static Value make_namespace(Dict items);
  static Value callable(std::shared_ptr<const Callable> f);
  // JSON as Python's json.loads reads it (objects keep their key order).
  static Value from_json(const nlohmann::ordered_json& json);

  Kind kind() const { return kind_; }
  // How deep lists and dicts nest in this value: 0 for the others, 1 for a list of numbers.
  int depth() const { return depth_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_number() const { return kind_ == Kind::kInt || kind_ == Kind::kFloat || kind_ == Kind::kBool; }
  bool is_mapping() const { return kind_ == Kind::kDict; }

  bool as_bool() const { return std::get<bool>(data_); }
  int64_t as_int() const;  // booleans count as 0 and 1, as in Python
  double as_float() const;  // any number
  const std::string& as_string() const { return std::get<std::string>(data_); }
  const List& as_list() const { return *std::get<std::shared_ptr<List>>(data_); }
  // The items of a dict or a namespace.
  const Dict& as_dict() const { return *std::get<std::shared_ptr<Dict>>(data_); }
  // A namespace's items, to change (copies share them).
  Dict& namespace_items() const { return *std::get<std::shared_ptr<Dict>>(data_); }
  const std::shared_ptr<const Callable>& as_callable() const {
    return std::get<std::shared_ptr<const Callable>>(data_);
  }
  // Why an undefined value is undefined (jinja2's UndefinedError message).
  std::string undefined_reason() const;

  // A dict's or namespace's value for `key`, or undefined saying so.
  Value item(const std::string& key) const;
  // Throws ValueError with the reason an undefined value is undefined (no-op otherwise).
  void require_defined() const;

  bool truthy() const;          // Python's bool()
  std::string str() const;      // Python's str(); undefined prints as ""
  std::string repr() const;     // Python's repr()
  std::string type_name() const;  // Python's type name: 'str', 'int', 'dict', 'NoneType', ...

  // The bytes this value holds that no other value shares: a string's characters (strings are
  // copied, not shared); for a list or dict that nothing else holds yet (a result just built),
  // its slots, keys and the strings directly in it. What a renderer charges to its budget.
  size_t unshared_bytes() const;

 private:
  static Value from_json_at(const nlohmann::ordered_json& json, int depth);

  Kind kind_ = Kind::kUndefined;
  int depth_ = 0;
  std::variant<std::monostate, bool, int64_t, double, std::string, std::shared_ptr<List>, std::shared_ptr<Dict>,
               std::shared_ptr<const Callable>>
      data_;
};

// An int or a bool (Python's bools are ints): what indices, counts and widths accept.
inline bool is_integral(const Value& v) { return v.kind() == Kind::kInt || v.kind() == Kind::kBool; }

bool operator==(const Value& a, const Value& b);  // Python's ==; undefined equals only undefined
inline bool operator!=(const Value& a, const Value& b) { return !(a == b); }
// Python's ordering of two numbers, strings or lists: negative, zero or positive. Throws
// ValueError ("'<' not supported between instances of 'str' and 'int'") for others.
int compare(const Value& a, const Value& b, const char* op = "<");

// Python's repr() of a float: the shortest digits that read back the same ("0.1", "1e+16").
std::string python_float_repr(double d);

// json.dumps's options, as transformers' tojson filter passes them (ensure_ascii=False).
struct JsonOptions {
  std::optional<std::string> indent;  // the text of one level (an int n is n spaces); none: one line
  std::optional<std::pair<std::string, std::string>> separators;  // item, key
  bool sort_keys = false;
  bool ensure_ascii = false;
};
// Python's json.dumps of `value`; throws ValueError for what JSON cannot hold (undefined, macros).
std::string to_json(const Value& value, const JsonOptions& options = {});

// Python's whitespace (str.isspace, str.strip, str.split).
bool is_python_space(char32_t c);

// One entry of a table of escapes: a character and the text that stands for it ('\n' and "\\n"
// when writing JSON), or an escape's letter and the text it stands for ('n' and "\n" when reading
// a Python string literal).
struct Escape {
  char32_t c;
  const char* text;
};
// The text `table` gives for `c`, or nullptr where `c` has no entry.
template <size_t N>
const char* find_escape(const Escape (&table)[N], char32_t c) {
  for (const Escape& e : table) {
    if (e.c == c) return e.text;
  }
  return nullptr;
}

}  // namespace zoo::jinja
