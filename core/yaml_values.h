#pragma once
// Reading typed values out of YAML with the project's error conventions, shared by the model
// config and the run config: a failed conversion says what was expected, the caller adds where
// (file:line and key), and an unknown key gets a did-you-mean suggestion.

#include <algorithm>
#include <cstdint>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

namespace zoo::yaml {

// A value that failed to convert: the message says what was expected; the caller adds where.
struct BadValue {
  std::string expected;
};

inline std::string scalar_text(const YAML::Node& node) {
  if (node.IsScalar()) return node.Scalar();
  if (node.IsSequence()) return "a list";
  if (node.IsMap()) return "a mapping";
  return "nothing";
}

inline int64_t as_int(const YAML::Node& n) {
  int64_t v;
  if (!n.IsScalar() || !YAML::convert<int64_t>::decode(n, v)) throw BadValue{"an integer"};
  return v;
}
inline double as_double(const YAML::Node& n) {
  double v;
  if (!n.IsScalar() || !YAML::convert<double>::decode(n, v)) throw BadValue{"a number"};
  return v;
}
inline bool as_bool(const YAML::Node& n) {
  bool v;
  if (!n.IsScalar() || !YAML::convert<bool>::decode(n, v)) throw BadValue{"true or false"};
  return v;
}
inline std::string as_string(const YAML::Node& n) {
  if (!n.IsScalar()) throw BadValue{"a string"};
  return n.Scalar();
}

// "source:line" for a node that came from a file, else just the source.
inline std::string where(const std::string& source, const YAML::Node& node) {
  const auto mark = node.Mark();
  return mark.line >= 0 ? source + ":" + std::to_string(mark.line + 1) : source;
}

inline size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] != b[j - 1])});
      diag = up;
    }
  }
  return row[b.size()];
}

// "unknown key 'x' (did you mean 'y'?)", suggesting only near misses among `known`.
inline std::string unknown_key_message(const std::string& key, const std::vector<std::string>& known) {
  std::string best;
  size_t best_d = 3;
  for (const auto& name : known) {
    size_t d = edit_distance(key, name);
    if (d < best_d) best_d = d, best = name;
  }
  return "unknown key '" + key + "'" + (best.empty() ? "" : " (did you mean '" + best + "'?)");
}

// One key of a config struct C: its name, type and meaning (for messages and schema listings),
// how to read it from YAML and how to write it back.
template <typename C>
struct Field {
  std::string name;
  std::string type;
  std::string doc;
  bool required = false;
  std::function<void(C&, const YAML::Node&)> set;
  std::function<std::string(const C&)> get;
};

inline std::string format_double(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

template <typename C>
Field<C> int_field(std::string name, int64_t C::*member, std::string doc, bool required = false) {
  return {std::move(name), "integer", std::move(doc), required,
          [member](C& c, const YAML::Node& n) { c.*member = as_int(n); },
          [member](const C& c) { return std::to_string(c.*member); }};
}
template <typename C>
Field<C> double_field(std::string name, double C::*member, std::string doc) {
  return {std::move(name), "number", std::move(doc), false,
          [member](C& c, const YAML::Node& n) { c.*member = as_double(n); },
          [member](const C& c) { return format_double(c.*member); }};
}
template <typename C>
Field<C> bool_field(std::string name, bool C::*member, std::string doc) {
  return {std::move(name), "boolean", std::move(doc), false,
          [member](C& c, const YAML::Node& n) { c.*member = as_bool(n); },
          [member](const C& c) { return std::string(c.*member ? "true" : "false"); }};
}

template <typename C>
const Field<C>* find_field(const std::vector<Field<C>>& fields, const std::string& key) {
  for (const auto& f : fields)
    if (f.name == key) return &f;
  return nullptr;
}

template <typename C>
std::string unknown_key_message(const std::vector<Field<C>>& fields, const std::string& key) {
  std::vector<std::string> names;
  for (const auto& f : fields) names.push_back(f.name);
  return unknown_key_message(key, names);
}

// Sets `field` of `config` from `value`; a bad value throws Error("LOCATION: KEY: expected ...,
// got 'VALUE'"), an invalid one Error("LOCATION: KEY: why").
template <typename Error, typename C>
void set_field(C& config, const Field<C>& field, const YAML::Node& value, const std::string& location) {
  try {
    field.set(config, value);
  } catch (const BadValue& bad) {
    throw Error(location + ": " + field.name + ": expected " + bad.expected + ", got '" + scalar_text(value) + "'");
  } catch (const std::invalid_argument& e) {
    throw Error(location + ": " + field.name + ": " + e.what());
  }
}

}  // namespace zoo::yaml
