#include "templates/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <functional>
#include <unordered_map>

#include "core/unicode.h"

namespace zoo::jinja {
namespace {

std::string hex(uint32_t value, int digits) {
  char buffer[16];
  std::snprintf(buffer, sizeof buffer, "%0*x", digits, value);
  return buffer;
}

// Python's str.isprintable() of one character: not C* and not Z* other than the space.
bool printable(char32_t c) { return c == ' ' || !(unicode::is_other(c) || unicode::is_separator(c)); }

std::string repr_string(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos, has_double = s.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (size_t i = 0; i < s.size();) {
    const auto [c, length] = unicode::decode_at(s, i);
    if (c == '\\') out += "\\\\";
    else if (c == static_cast<char32_t>(quote)) out += std::string("\\") + quote;
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (printable(c)) out.append(s, i, length);
    else if (c < 0x100) out += "\\x" + hex(c, 2);
    else if (c < 0x10000) out += "\\u" + hex(c, 4);
    else out += "\\U" + hex(c, 8);
    i += length;
  }
  return out + quote;
}

// Where each container's text already stands in the output of one print (str, repr, tojson).
// Values share containers, so a list doubled n times would be 2^n visits; with this it is n
// prints and n copies of text already written. The output only grows, so a span stays valid.
class PrintedSpans {
 public:
  // The container's text printed at `depth` (tojson indents by depth): appended again, and true;
  // false if it has not been printed yet.
  bool copy_into(std::string& out, const Value& v, int depth) const {
    const auto it = spans_.find({address(v), depth});
    if (it == spans_.end()) return false;
    const auto [start, length] = it->second;
    if (out.size() + length > kMaxPrintedBytes) return false;  // printed again, refused as it goes
    out.reserve(out.size() + length);  // no reallocation while the copy reads `out`
    out.append(out.data() + start, length);
    return true;
  }
  void record(const std::string& out, const Value& v, int depth, size_t start) {
    spans_.emplace(std::pair{address(v), depth}, std::pair{start, out.size() - start});
  }

 private:
  static const void* address(const Value& v) {
    return v.kind() == Kind::kList ? static_cast<const void*>(&v.as_list()) : static_cast<const void*>(&v.as_dict());
  }
  struct Hash {
    size_t operator()(const std::pair<const void*, int>& key) const {
      return std::hash<const void*>()(key.first) ^ (static_cast<size_t>(key.second) << 1);
    }
  };
  std::unordered_map<std::pair<const void*, int>, std::pair<size_t, size_t>, Hash> spans_;
};

void json_string(std::string& out, const std::string& s, bool ensure_ascii) {
  // json.dumps's two-character escapes; other control characters are written \uXXXX.
  static constexpr Escape kJsonEscapes[] = {{'"', "\\\""}, {'\\', "\\\\"}, {'\n', "\\n"}, {'\r', "\\r"},
                                            {'\t', "\\t"}, {'\b', "\\b"}, {'\f', "\\f"}};
  out += '"';
  for (size_t i = 0; i < s.size();) {
    const auto [c, length] = unicode::decode_at(s, i);
    if (const char* escape = find_escape(kJsonEscapes, c)) {
      out += escape;
    } else if (c < 0x20 || (ensure_ascii && c > 0x7E)) {
      if (c < 0x10000) {
        out += "\\u" + hex(c, 4);
      } else {  // a UTF-16 surrogate pair, as json.dumps writes it
        const char32_t v = c - 0x10000;
        out += "\\u" + hex(0xD800 + (v >> 10), 4) + "\\u" + hex(0xDC00 + (v & 0x3FF), 4);
      }
    } else {
      out.append(s, i, length);
    }
    i += length;
  }
  out += '"';
}

std::string json_float(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
  return python_float_repr(d);
}

void json_value(std::string& out, const Value& v, const JsonOptions& o, int depth, PrintedSpans& spans) {
  // A namespace changed after it was nested can make a value deeper than its recorded depth.
  if (depth > 2 * kMaxValueDepth) throw ValueError("tojson: a value nested more than " + std::to_string(2 * kMaxValueDepth) + " levels deep");
  if (out.size() > kMaxPrintedBytes) throw ValueError("tojson makes a string larger than 64 MiB");
  const std::string item_separator = o.separators ? o.separators->first : o.indent ? "," : ", ";
  const std::string key_separator = o.separators ? o.separators->second : ": ";
  auto newline = [&](int level) {
    if (!o.indent) return;
    out += '\n';
    for (int i = 0; i < level; ++i) out += *o.indent;
  };
  switch (v.kind()) {
    case Kind::kNone: out += "null"; return;
    case Kind::kBool: out += v.as_bool() ? "true" : "false"; return;
    case Kind::kInt: out += std::to_string(v.as_int()); return;
    case Kind::kFloat: out += json_float(v.as_float()); return;
    case Kind::kString: json_string(out, v.as_string(), o.ensure_ascii); return;
    case Kind::kList: {
      const List& items = v.as_list();
      if (items.empty()) {
        out += "[]";
        return;
      }
      if (spans.copy_into(out, v, depth)) return;
      const size_t start = out.size();
      out += '[';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += item_separator;
        newline(depth + 1);
        json_value(out, items[i], o, depth + 1, spans);
      }
      newline(depth);
      out += ']';
      spans.record(out, v, depth, start);
      return;
    }
    case Kind::kDict: {
      if (v.as_dict().empty()) {
        out += "{}";
        return;
      }
      if (spans.copy_into(out, v, depth)) return;
      const size_t start = out.size();
      Dict items = v.as_dict();
      if (o.sort_keys) {
        std::stable_sort(items.begin(), items.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
      }
      out += '{';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i) out += item_separator;
        newline(depth + 1);
        json_string(out, items[i].first, o.ensure_ascii);
        out += key_separator;
        json_value(out, items[i].second, o, depth + 1, spans);
      }
      newline(depth);
      out += '}';
      spans.record(out, v, depth, start);
      return;
    }
    case Kind::kUndefined:
      v.require_defined();
      return;
    case Kind::kNamespace:
    case Kind::kCallable: throw ValueError("Object of type " + v.type_name() + " is not JSON serializable");
  }
}

}  // namespace

bool is_python_space(char32_t c) { return unicode::is_white_space(c) || (c >= 0x1C && c <= 0x1F); }

std::string python_float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  // The shortest round-trip digits as d.ddd e±x, laid out by Python's rule: positional when
  // -4 <= x < 16, else scientific with a signed exponent of at least two digits.
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof buffer, d, std::chars_format::scientific);
  const std::string text(buffer, result.ptr);
  const size_t e = text.find('e');
  std::string mantissa = text.substr(0, e);
  const int exponent = std::stoi(text.substr(e + 1));
  const bool negative = mantissa[0] == '-';
  if (negative) mantissa.erase(0, 1);
  std::string digits;
  for (char c : mantissa) {
    if (c != '.') digits += c;
  }
  std::string out = negative ? "-" : "";
  if (exponent < -4 || exponent >= 16) {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    out += exponent < 0 ? "e-" : "e+";
    const std::string x = std::to_string(std::abs(exponent));
    return out + (x.size() < 2 ? "0" : "") + x;
  }
  if (exponent < 0) return out + "0." + std::string(-exponent - 1, '0') + digits;
  const auto point = static_cast<size_t>(exponent) + 1;
  if (digits.size() <= point) return out + digits + std::string(point - digits.size(), '0') + ".0";
  return out + digits.substr(0, point) + "." + digits.substr(point);
}

Value Value::undefined(std::string why) {
  Value v;
  v.data_ = std::move(why);
  return v;
}

Value Value::none() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}

namespace {

// 1 + the deepest item's depth, refused past kMaxValueDepth.
template <typename Items, typename ValueOf>
int container_depth(const Items& items, ValueOf value_of) {
  int deepest = 0;
  for (const auto& item : items) deepest = std::max(deepest, value_of(item).depth());
  if (deepest + 1 > kMaxValueDepth) {
    throw ValueError("a value nested more than " + std::to_string(kMaxValueDepth) + " levels deep (lists and dicts inside each other)");
  }
  return deepest + 1;
}

}  // namespace

Value Value::list(List items) {
  Value v;
  v.kind_ = Kind::kList;
  v.depth_ = container_depth(items, [](const Value& item) -> const Value& { return item; });
  v.data_ = std::make_shared<List>(std::move(items));
  return v;
}

Value Value::dict(Dict items) {
  Value v;
  v.kind_ = Kind::kDict;
  v.depth_ = container_depth(items, [](const auto& item) -> const Value& { return item.second; });
  v.data_ = std::make_shared<Dict>(std::move(items));
  return v;
}

size_t Value::unshared_bytes() const {
  switch (kind_) {
    case Kind::kString: return as_string().size();
    case Kind::kList: {
      const auto& shared = std::get<std::shared_ptr<List>>(data_);
      if (shared.use_count() > 1) return 0;
      size_t bytes = shared->size() * sizeof(Value);
      for (const auto& item : *shared) bytes += item.is_string() ? item.as_string().size() : 0;
      return bytes;
    }
    case Kind::kDict:
    case Kind::kNamespace: {
      const auto& shared = std::get<std::shared_ptr<Dict>>(data_);
      if (shared.use_count() > 1) return 0;
      size_t bytes = shared->size() * sizeof(Dict::value_type);
      for (const auto& [key, item] : *shared) bytes += key.size() + (item.is_string() ? item.as_string().size() : 0);
      return bytes;
    }
    case Kind::kUndefined:
    case Kind::kNone:
    case Kind::kBool:
    case Kind::kInt:
    case Kind::kFloat:
    case Kind::kCallable:
      return 0;
  }
  return 0;
}

Value Value::make_namespace(Dict items) {
  Value v = dict(std::move(items));
  v.kind_ = Kind::kNamespace;
  return v;
}

Value Value::callable(std::shared_ptr<const Callable> f) {
  Value v;
  v.kind_ = Kind::kCallable;
  v.data_ = std::move(f);
  return v;
}

Value Value::from_json(const nlohmann::ordered_json& json) { return from_json_at(json, 0); }

// Checks the depth on the way down: the JSON itself may nest deeper than the stack allows.
Value Value::from_json_at(const nlohmann::ordered_json& json, int depth) {
  if (depth > kMaxValueDepth) {
    throw ValueError("JSON nested more than " + std::to_string(kMaxValueDepth) + " levels deep");
  }
  switch (json.type()) {
    case nlohmann::ordered_json::value_t::null: return none();
    case nlohmann::ordered_json::value_t::boolean: return Value(json.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value(json.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const auto u = json.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) throw ValueError("integer " + std::to_string(u) + " is too large");
      return Value(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float: return Value(json.get<double>());
    case nlohmann::ordered_json::value_t::string: {
      std::string s = json.get<std::string>();
      if (const int64_t bad = invalid_utf8_offset(s); bad >= 0) {
        throw ValueError("invalid UTF-8 at byte offset " + std::to_string(bad) + " of a string");
      }
      return Value(std::move(s));
    }
    case nlohmann::ordered_json::value_t::array: {
      List items;
      for (const auto& e : json) items.push_back(from_json_at(e, depth + 1));
      return list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Dict items;
      for (const auto& [key, e] : json.items()) items.emplace_back(key, from_json_at(e, depth + 1));
      return dict(std::move(items));
    }
    case nlohmann::ordered_json::value_t::binary:
    case nlohmann::ordered_json::value_t::discarded: break;
  }
  throw ValueError(std::string("cannot use JSON ") + json.type_name() + " in a template");
}

int64_t Value::as_int() const {
  if (kind_ == Kind::kBool) return as_bool() ? 1 : 0;
  return std::get<int64_t>(data_);
}

double Value::as_float() const {
  if (kind_ == Kind::kFloat) return std::get<double>(data_);
  return static_cast<double>(as_int());
}

std::string Value::undefined_reason() const {
  if (const auto* why = std::get_if<std::string>(&data_); why && !why->empty()) return *why;
  return "a value is undefined";
}

Value Value::item(const std::string& key) const {
  for (const auto& [k, v] : as_dict()) {
    if (k == key) return v;
  }
  return undefined("'" + std::string(kind_ == Kind::kNamespace ? "Namespace" : "dict object") +
                   "' has no attribute '" + key + "'");
}

void Value::require_defined() const {
  if (is_undefined()) throw ValueError(undefined_reason());
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone: return false;
    case Kind::kBool: return as_bool();
    case Kind::kInt: return as_int() != 0;
    case Kind::kFloat: return as_float() != 0.0;
    case Kind::kString: return !as_string().empty();
    case Kind::kList: return !as_list().empty();
    case Kind::kDict: return !as_dict().empty();
    case Kind::kNamespace:
    case Kind::kCallable: return true;
  }
  return false;
}

std::string Value::str() const {
  switch (kind_) {
    case Kind::kUndefined: return "";
    case Kind::kString: return as_string();
    case Kind::kNone:
    case Kind::kBool:
    case Kind::kInt:
    case Kind::kFloat:
    case Kind::kList:
    case Kind::kDict:
    case Kind::kNamespace:
    case Kind::kCallable: return repr();
  }
  return "";
}

namespace {

// Appends repr() to `out`, refusing past kMaxPrintedBytes as it goes (a shared list can print
// to more than memory holds).
void repr_into(std::string& out, const Value& v, PrintedSpans& spans) {
  if (out.size() > kMaxPrintedBytes) throw ValueError("printing a value makes a string larger than 64 MiB");
  switch (v.kind()) {
    case Kind::kUndefined: out += "Undefined"; return;
    case Kind::kNone: out += "None"; return;
    case Kind::kBool: out += v.as_bool() ? "True" : "False"; return;
    case Kind::kInt: out += std::to_string(v.as_int()); return;
    case Kind::kFloat: out += python_float_repr(v.as_float()); return;
    case Kind::kString: out += repr_string(v.as_string()); return;
    case Kind::kList: {
      if (spans.copy_into(out, v, 0)) return;
      const size_t start = out.size();
      out += '[';
      for (size_t i = 0; i < v.as_list().size(); ++i) {
        if (i) out += ", ";
        repr_into(out, v.as_list()[i], spans);
      }
      out += ']';
      spans.record(out, v, 0, start);
      return;
    }
    case Kind::kDict:
    case Kind::kNamespace: {
      if (spans.copy_into(out, v, 0)) return;
      const size_t start = out.size();
      const bool is_namespace = v.kind() == Kind::kNamespace;
      if (is_namespace) out += "<Namespace ";
      out += '{';
      for (size_t i = 0; i < v.as_dict().size(); ++i) {
        if (i) out += ", ";
        out += repr_string(v.as_dict()[i].first) + ": ";
        repr_into(out, v.as_dict()[i].second, spans);
      }
      out += '}';
      if (is_namespace) out += '>';
      spans.record(out, v, 0, start);
      return;
    }
    case Kind::kCallable: out += "<Macro '" + v.as_callable()->name() + "'>"; return;
  }
}

}  // namespace

std::string Value::repr() const {
  std::string out;
  PrintedSpans spans;
  repr_into(out, *this, spans);
  return out;
}

std::string Value::type_name() const {
  switch (kind_) {
    case Kind::kUndefined: return "Undefined";
    case Kind::kNone: return "NoneType";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "str";
    case Kind::kList: return "list";
    case Kind::kDict: return "dict";
    case Kind::kNamespace: return "Namespace";
    case Kind::kCallable: return "Macro";
  }
  return "";
}

bool operator==(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind() == Kind::kFloat || b.kind() == Kind::kFloat) return a.as_float() == b.as_float();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Kind::kUndefined:
    case Kind::kNone: return true;
    case Kind::kString: return a.as_string() == b.as_string();
    // The same list is equal to itself (Python compares identical items as equal without
    // looking inside: a list doubled 40 times compares at once).
    case Kind::kList: return &a.as_list() == &b.as_list() || a.as_list() == b.as_list();
    case Kind::kDict: {
      const Dict &x = a.as_dict(), &y = b.as_dict();
      if (&x == &y) return true;
      if (x.size() != y.size()) return false;
      for (const auto& [key, value] : x) {
        const Value other = b.item(key);
        if (other.is_undefined() || other != value) return false;
      }
      return true;
    }
    case Kind::kNamespace: return &a.namespace_items() == &b.namespace_items();
    case Kind::kCallable: return a.as_callable() == b.as_callable();
    case Kind::kBool:
    case Kind::kInt:
    case Kind::kFloat: break;  // numbers were compared above
  }
  return false;
}

int compare(const Value& a, const Value& b, const char* op) {
  if (a.is_number() && b.is_number()) {
    if (a.kind() == Kind::kFloat || b.kind() == Kind::kFloat) {
      const double x = a.as_float(), y = b.as_float();
      return x < y ? -1 : x > y ? 1 : 0;
    }
    const int64_t x = a.as_int(), y = b.as_int();
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) {
    const int c = a.as_string().compare(b.as_string());  // UTF-8 bytes order as code points do
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.kind() == Kind::kList && b.kind() == Kind::kList) {
    const List &x = a.as_list(), &y = b.as_list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (x[i] != y[i]) return compare(x[i], y[i], op);
    }
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  a.require_defined();
  b.require_defined();
  throw ValueError(std::string("'") + op + "' not supported between instances of '" + a.type_name() + "' and '" +
                   b.type_name() + "'");
}

std::string to_json(const Value& value, const JsonOptions& options) {
  std::string out;
  PrintedSpans spans;
  json_value(out, value, options, 0, spans);
  return out;
}

}  // namespace zoo::jinja
