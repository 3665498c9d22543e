#include "templates/jinja_arguments.h"

#include <algorithm>

namespace zoo::jinja {

Value Args::get(size_t index, const char* name, Value fallback) const {
  for (const auto& [k, v] : keywords) {
    if (k == name) return v;
  }
  return index < positional.size() ? positional[index] : fallback;
}

bool Args::has(size_t index, const char* name) const {
  if (index < positional.size()) return true;
  return std::any_of(keywords.begin(), keywords.end(), [&](const auto& k) { return k.first == name; });
}

void Args::check(const std::string& what, const std::vector<const char*>& names) const {
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

std::optional<std::string> optional_string(const Value& v, const char* what) {
  if (v.is_none() || v.is_undefined()) return std::nullopt;
  if (!v.is_string()) throw ValueError(std::string(what) + " must be a string or none, got " + v.type_name());
  return v.as_string();
}

int64_t integer_argument(const Value& v, const char* what) {
  if (!is_integral(v)) throw ValueError(std::string(what) + " must be an integer, got " + v.type_name());
  return v.as_int();
}

std::string string_argument(const Value& v, const char* what) {
  if (!v.is_string()) throw ValueError(std::string(what) + " must be a string, got " + v.type_name());
  return v.as_string();
}

}  // namespace zoo::jinja
