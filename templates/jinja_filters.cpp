#include "templates/jinja_filters.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <vector>

#include "core/unicode.h"
#include "templates/jinja_containers.h"
#include "templates/jinja_operators.h"
#include "templates/python_methods.h"
#include "templates/python_str.h"

namespace zoo::jinja {
namespace {

std::string what(const std::string& name) { return "the " + name + " filter"; }

// `n` spaces of indentation (tojson's indent, the indent filter's width), at most 1024.
std::string spaces(int64_t n, const std::string& what) {
  if (n > 1024) throw ValueError(what + " (" + std::to_string(n) + ") must be at most 1024");
  return std::string(static_cast<size_t>(std::max<int64_t>(0, n)), ' ');
}

// The key sort and dictsort order by: lowercased strings unless case-sensitive.
Value sort_key(Value key, bool case_sensitive) {
  return !case_sensitive && key.is_string() ? Value(lower(key.as_string())) : key;
}

// A stable sort by `key`, as Python's sorted(items, key=key, reverse=reverse).
template <typename Key>
List sorted(List items, bool reverse, const Key& key) {
  std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
    return reverse ? compare(key(b), key(a)) < 0 : compare(key(a), key(b)) < 0;
  });
  return items;
}

// The items of `items` whose `attribute` ("a" or "a.b"; empty: the item) passes the test named
// by argument `test_at` (with the arguments after it), or is true when none is named; `keep`
// says whether those are kept (select) or dropped (reject).
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
      pass = apply_test(string_argument(args.positional[test_at], "the test name"), v, test_args);
    } else {
      pass = v.truthy();
    }
    if (pass == keep) out.push_back(item);
  }
  return out;
}

// A number read as the int and float filters read it (a string as Python's float() reads it);
// nullopt where they give their default.
std::optional<double> number_of(const Value& v) {
  if (v.is_number()) return v.as_float();
  if (!v.is_string()) return std::nullopt;
  const std::string s = strip(v.as_string(), std::nullopt, true, true);
  char* end = nullptr;
  const double d = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size()) return std::nullopt;
  return d;
}

// ---- the filters (jinja2/filters.py) ----

Value default_filter(const std::string& name, const Value& v, const Args& args) {
  args.check(what(name), {"default_value", "boolean"});
  const bool use_fallback = v.is_undefined() || (args.get(1, "boolean", Value(false)).truthy() && !v.truthy());
  return use_fallback ? args.get(0, "default_value", Value("")) : v;
}

Value length_filter(const std::string& name, const Value& v, const Args& args) {
  args.check(what(name), {});
  return Value(length(v));
}

Value string_filter(const std::string& name, const Value& v, const Args& args) {
  args.check(what(name), {});
  return Value(v.str());
}

// Output is not escaped here (transformers renders without autoescape): safe changes nothing.
Value safe_filter(const std::string& name, const Value& v, const Args& args) {
  args.check(what(name), {});
  return v;
}

Value trim_filter(const std::string& name, const Value& v, const Args& args) {
  args.check(what(name), {"chars"});
  return Value(strip(v.str(), optional_string(args.get(0, "chars"), "chars"), true, true));
}

Value upper_filter(const std::string& name, const Value& v, const Args& args) {
  args.check(what(name), {});
  return Value(upper(v.str()));
}

Value lower_filter(const std::string& name, const Value& v, const Args& args) {
  args.check(what(name), {});
  return Value(lower(v.str()));
}

Value capitalize_filter(const std::string& name, const Value& v, const Args& args) {
  args.check(what(name), {});
  return Value(capitalize(v.str()));
}

// Not str.title(): words begin after runs of whitespace, '-', '(', '{', '[' or '<', and each
// is word[0].upper() + word[1:].lower().
Value title_filter(const std::string& name, const Value& v, const Args& args) {
  args.check(what(name), {});
  std::string out;
  std::vector<char32_t> word;
  auto flush = [&] {
    if (word.empty()) return;
    std::string rest;
    for (size_t i = 1; i < word.size(); ++i) unicode::append_utf8(rest, word[i]);
    unicode::append_uppercase(out, word[0]);
    out += lower(rest);
    word.clear();
  };
  for (char32_t c : code_points(v.str())) {
    const bool separator = is_python_space(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
    if (separator) {
      flush();
      unicode::append_utf8(out, c);
    } else {
      word.push_back(c);
    }
  }
  flush();
  return Value(out);
}

Value escape_filter(const std::string& name, const Value& v, const Args& args) {
  args.check(what(name), {});
  return Value(html_escape(v.str()));
}

Value replace_filter(const std::string& name, const Value& v, const Args& args) {
  args.check(what(name), {"old", "new", "count"});
  const Value count = args.get(2, "count");
  return Value(replace(v.str(), args.get(0, "old").str(), args.get(1, "new").str(),
                       count.is_none() ? -1 : integer_argument(count, "count")));
}

// transformers' tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False).
Value tojson_filter(const std::string& name, const Value& v, const Args& args) {
  args.check(what(name), {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonOptions o;
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
  return Value(to_json(v, o));
}

Value join_filter(const std::string& name, const Value& v, const Args& args) {
  args.check(what(name), {"d", "attribute"});
  const std::string separator = args.get(0, "d", Value("")).str();
  const Value attribute = args.get(1, "attribute");
  return Value(join_bounded(iterate(v), separator, [&](const Value& item) {
    return (attribute.is_none() ? item : attribute_or_index(item, attribute.str())).str();
  }));
}

Value first_filter(const std::string& name, const Value& v, const Args& args) {
  args.check(what(name), {});
  const List items = iterate(v);
  if (items.empty()) return Value::undefined("the " + name + " filter found no items");
  return items.front();
}

Value last_filter(const std::string& name, const Value& v, const Args& args) {
  args.check(what(name), {});
  const List items = iterate(v);
  if (items.empty()) return Value::undefined("the " + name + " filter found no items");
  return items.back();
}

Value list_filter(const std::string& name, const Value& v, const Args& args) {
  args.check(what(name), {});
  return Value::list(iterate(v));
}

Value items_filter(const std::string& name, const Value& v, const Args& args) {
  args.check(what(name), {});
  if (v.is_undefined()) return Value::list({});
  if (!v.is_mapping()) throw ValueError("can only get item pairs from a mapping, not " + v.type_name());
  return dict_method(v, "items", Args{});
}

// dictsort(value, case_sensitive=False, by='key', reverse=False): the items as (key, value)
// pairs, sorted by one of them.
Value dictsort_filter(const std::string& name, const Value& v, const Args& args) {
  args.check(what(name), {"case_sensitive", "by", "reverse"});
  if (!v.is_mapping()) throw ValueError("the dictsort filter needs a mapping, not " + v.type_name());
  const bool case_sensitive = args.get(0, "case_sensitive", Value(false)).truthy();
  const std::string by = string_argument(args.get(1, "by", Value("key")), "dictsort's by");
  if (by != "key" && by != "value") throw ValueError("You can only sort by either \"key\" or \"value\"");
  const bool reverse = args.get(2, "reverse", Value(false)).truthy();
  const size_t at = by == "key" ? 0 : 1;
  return Value::list(sorted(iterate(dict_method(v, "items", Args{})), reverse, [&](const Value& item) {
    return sort_key(item.as_list()[at], case_sensitive);
  }));
}

Value reverse_filter(const std::string& name, const Value& v, const Args& args) {
  args.check(what(name), {});
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

Value select_filter(const std::string& name, const Value& v, const Args& args) {
  return Value::list(select(iterate(v), "", args, 0, name == "select"));
}

Value selectattr_filter(const std::string& name, const Value& v, const Args& args) {
  return Value::list(select(iterate(v), string_argument(args.get(0, "attribute"), "the attribute"), args, 1, name == "selectattr"));
}

// map(attribute=..., default=...) takes an attribute of each item; map(name, args...) applies
// the filter `name` to each.
Value map_filter(const std::string& name, const Value& v, const Args& args) {
  List out;
  const Value attribute = args.get(99, "attribute");
  if (!attribute.is_none()) {
    args.check(what(name), {"attribute", "default"});
    for (const auto& item : iterate(v)) {
      Value mapped = attribute_or_index(item, attribute.str());
      if (mapped.is_undefined() && args.has(99, "default")) mapped = args.get(99, "default");
      out.push_back(mapped);
    }
    return Value::list(std::move(out));
  }
  if (args.positional.empty()) throw ValueError("the map filter needs a filter name or attribute=");
  const std::string filter_name = string_argument(args.positional[0], "the filter name");
  if (!filters().count(filter_name)) throw ValueError(unknown_filter_message(filter_name));
  Args rest;
  rest.positional.assign(args.positional.begin() + 1, args.positional.end());
  rest.keywords = args.keywords;
  for (const auto& item : iterate(v)) out.push_back(apply_filter(filter_name, item, rest));
  return Value::list(std::move(out));
}

Value sort_filter(const std::string& name, const Value& v, const Args& args) {
  args.check(what(name), {"reverse", "case_sensitive", "attribute"});
  const bool reverse = args.get(0, "reverse", Value(false)).truthy();
  const bool case_sensitive = args.get(1, "case_sensitive", Value(false)).truthy();
  const Value attribute = args.get(2, "attribute");
  return Value::list(sorted(iterate(v), reverse, [&](const Value& item) {
    return sort_key(attribute.is_none() ? item : attribute_or_index(item, attribute.str()), case_sensitive);
  }));
}

Value abs_filter(const std::string& name, const Value& v, const Args& args) {
  args.check(what(name), {});
  return absolute(v);
}

Value int_filter(const std::string& name, const Value& v, const Args& args) {
  args.check(what(name), {"default"});
  const Value fallback = args.get(0, "default", Value(0));
  if (is_integral(v)) return Value(v.as_int());
  const std::optional<double> d = number_of(v);
  if (!d || !std::isfinite(*d) || std::fabs(*d) >= 9.2e18) return fallback;
  return Value(static_cast<int64_t>(*d));
}

Value float_filter(const std::string& name, const Value& v, const Args& args) {
  args.check(what(name), {"default"});
  const Value fallback = args.get(0, "default", Value(0.0));
  const std::optional<double> d = number_of(v);
  return d ? Value(*d) : fallback;
}

// indent(width=4, first=False, blank=False): every line but the first (unless `first`) and
// blank ones (unless `blank`) after a newline starts with the indentation.
Value indent_filter(const std::string& name, const Value& v, const Args& args) {
  args.check(what(name), {"width", "first", "blank"});
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

// ---- the tests (jinja2/tests.py) ----

bool defined_test(const std::string&, const Value& v, const Value&) { return !v.is_undefined(); }
bool undefined_test(const std::string&, const Value& v, const Value&) { return v.is_undefined(); }
bool none_test(const std::string&, const Value& v, const Value&) { return v.is_none(); }
bool boolean_test(const std::string&, const Value& v, const Value&) { return v.kind() == Kind::kBool; }
bool true_test(const std::string&, const Value& v, const Value&) { return v.kind() == Kind::kBool && v.as_bool(); }
bool false_test(const std::string&, const Value& v, const Value&) { return v.kind() == Kind::kBool && !v.as_bool(); }
bool integer_test(const std::string&, const Value& v, const Value&) { return v.kind() == Kind::kInt; }
bool float_test(const std::string&, const Value& v, const Value&) { return v.kind() == Kind::kFloat; }
bool number_test(const std::string&, const Value& v, const Value&) { return v.is_number(); }
bool string_test(const std::string&, const Value& v, const Value&) { return v.is_string(); }
bool mapping_test(const std::string&, const Value& v, const Value&) { return v.is_mapping(); }
bool callable_test(const std::string&, const Value& v, const Value&) { return v.kind() == Kind::kCallable; }

bool iterable_test(const std::string&, const Value& v, const Value&) {
  return v.is_undefined() || v.is_string() || v.kind() == Kind::kList || v.kind() == Kind::kDict;
}

bool even_or_odd_test(const std::string& name, const Value& v, const Value&) {
  if (!is_integral(v)) {
    v.require_defined();
    throw ValueError("the test '" + name + "' needs an integer, got " + v.type_name());
  }
  return (v.as_int() % 2 == 0) == (name == "even");
}

bool divisibleby_test(const std::string&, const Value& v, const Value& argument) {
  const int64_t d = integer_argument(argument, "divisibleby's argument");
  if (d == 0) throw ValueError("integer division or modulo by zero");
  return integer_argument(v, "the value tested with divisibleby") % d == 0;
}

bool eq_test(const std::string&, const Value& v, const Value& argument) { return v == argument; }
bool ne_test(const std::string&, const Value& v, const Value& argument) { return v != argument; }
bool lt_test(const std::string&, const Value& v, const Value& argument) { return compare(v, argument, "<") < 0; }
bool le_test(const std::string&, const Value& v, const Value& argument) { return compare(v, argument, "<=") <= 0; }
bool gt_test(const std::string&, const Value& v, const Value& argument) { return compare(v, argument, ">") > 0; }
bool ge_test(const std::string&, const Value& v, const Value& argument) { return compare(v, argument, ">=") >= 0; }
bool in_test(const std::string&, const Value& v, const Value& argument) { return contains(argument, v); }

bool sameas_test(const std::string&, const Value& v, const Value& other) {
  if (v.is_none() || v.kind() == Kind::kBool || other.is_none() || other.kind() == Kind::kBool) {
    return v.kind() == other.kind() && v == other;
  }
  throw ValueError("the test 'sameas' is supported for none, true and false only");
}

bool lower_test(const std::string&, const Value& v, const Value&) { return v.is_string() && is_lower(v.as_string()); }
bool upper_test(const std::string&, const Value& v, const Value&) { return v.is_string() && is_upper(v.as_string()); }

template <typename Table>
std::string names_of(const Table& table) {
  std::string out;
  for (const auto& entry : table) out += (out.empty() ? "" : ", ") + entry.first;
  return out;
}

}  // namespace

const std::map<std::string, Filter>& filters() {
  static const std::map<std::string, Filter> kFilters = {
      {"abs", abs_filter},         {"capitalize", capitalize_filter}, {"count", length_filter},
      {"d", default_filter},       {"default", default_filter},       {"dictsort", dictsort_filter},
      {"e", escape_filter},        {"escape", escape_filter},         {"first", first_filter},
      {"float", float_filter},     {"indent", indent_filter},         {"int", int_filter},
      {"items", items_filter},     {"join", join_filter},             {"last", last_filter},
      {"length", length_filter},   {"list", list_filter},             {"lower", lower_filter},
      {"map", map_filter},         {"reject", select_filter},         {"rejectattr", selectattr_filter},
      {"replace", replace_filter}, {"reverse", reverse_filter},       {"safe", safe_filter},
      {"select", select_filter},   {"selectattr", selectattr_filter}, {"sort", sort_filter},
      {"string", string_filter},   {"title", title_filter},           {"tojson", tojson_filter},
      {"trim", trim_filter},       {"upper", upper_filter},
  };
  return kFilters;
}

const std::map<std::string, Test>& tests() {
  static const std::map<std::string, Test> kTests = {
      {"boolean", {boolean_test, false}},   {"callable", {callable_test, false}},  {"defined", {defined_test, false}},
      {"divisibleby", {divisibleby_test, true}}, {"eq", {eq_test, true}},          {"equalto", {eq_test, true}},
      {"==", {eq_test, true}},              {"even", {even_or_odd_test, false}},   {"false", {false_test, false}},
      {"float", {float_test, false}},       {"ge", {ge_test, true}},               {">=", {ge_test, true}},
      {"gt", {gt_test, true}},              {">", {gt_test, true}},                {"greaterthan", {gt_test, true}},
      {"in", {in_test, true}},              {"integer", {integer_test, false}},    {"iterable", {iterable_test, false}},
      {"le", {le_test, true}},              {"<=", {le_test, true}},               {"lower", {lower_test, false}},
      {"lt", {lt_test, true}},              {"<", {lt_test, true}},                {"lessthan", {lt_test, true}},
      {"mapping", {mapping_test, false}},   {"ne", {ne_test, true}},               {"!=", {ne_test, true}},
      {"none", {none_test, false}},         {"number", {number_test, false}},      {"odd", {even_or_odd_test, false}},
      {"sameas", {sameas_test, true}},      {"sequence", {iterable_test, false}},  {"string", {string_test, false}},
      {"true", {true_test, false}},         {"undefined", {undefined_test, false}}, {"upper", {upper_test, false}},
  };
  return kTests;
}

std::string unknown_filter_message(const std::string& name) {
  return "unknown filter '" + name + "' (chat templates here support " + names_of(filters()) + ")";
}

std::string unknown_test_message(const std::string& name) {
  return "unknown test '" + name + "' (chat templates here support " + names_of(tests()) + ")";
}

Value apply_filter(const std::string& name, const Value& input, const Args& args) {
  const auto it = filters().find(name);
  if (it == filters().end()) throw ValueError(unknown_filter_message(name));
  return it->second(name, input, args);
}

bool apply_test(const std::string& name, const Value& value, const Args& args) {
  const auto it = tests().find(name);
  if (it == tests().end()) throw ValueError(unknown_test_message(name));
  const Test& test = it->second;
  if (!test.takes_argument) {
    if (!args.positional.empty() || !args.keywords.empty()) throw ValueError("the test '" + name + "' takes no arguments");
    return test.function(name, value, Value());
  }
  if (args.positional.size() != 1 || !args.keywords.empty()) throw ValueError("the test '" + name + "' takes one argument");
  return test.function(name, value, args.positional[0]);
}

}  // namespace zoo::jinja
