#include "core/json_view.h"

#include <stdexcept>

#include "core/unicode.h"

namespace zoo {

nlohmann::json JsonView::parse(const std::string& text, const std::string& file) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    // A syntax error, or a number too large for any type (out_of_range.406). e.what() reads
    // "[json.exception.parse_error.101] parse error at line 1, column 5: ...".
    std::string detail = e.what();
    if (const size_t p = detail.find("] "); p != std::string::npos) detail = detail.substr(p + 2);
    throw std::runtime_error(file + ": not valid JSON (" + detail + ")");
  }
}

std::string JsonView::where() const { return path_.empty() ? "(top level)" : path_; }

void JsonView::fail(const std::string& message) const {
  throw std::runtime_error(file_ + ": " + where() + ": " + message);
}

void JsonView::wrong_type(const char* expected) const {
  fail(std::string("expected ") + expected + ", found " + (value_->is_null() ? "null" : value_->type_name()));
}

JsonView JsonView::child(const nlohmann::json& value, const std::string& suffix) const {
  if (depth_ >= kMaxDepth) fail("nested more than " + std::to_string(kMaxDepth) + " levels deep");
  JsonView view(value, file_, path_ + suffix);
  view.depth_ = depth_ + 1;
  return view;
}

bool JsonView::has(const std::string& key) const {
  if (!value_->is_object()) return false;
  const auto it = value_->find(key);
  return it != value_->end() && !it->is_null();
}

JsonView JsonView::at(const std::string& key) const {
  if (!value_->is_object()) wrong_type("an object");
  const auto it = value_->find(key);
  const std::string suffix = path_.empty() ? key : "." + key;
  if (it == value_->end()) fail("missing '" + key + "'");
  return child(*it, suffix);
}

std::optional<JsonView> JsonView::find(const std::string& key) const {
  if (!has(key)) return std::nullopt;
  return at(key);
}

std::vector<JsonView> JsonView::elements() const {
  if (!value_->is_array()) wrong_type("an array");
  std::vector<JsonView> out;
  out.reserve(value_->size());
  for (size_t i = 0; i < value_->size(); ++i) out.push_back(child((*value_)[i], "[" + std::to_string(i) + "]"));
  return out;
}

std::vector<std::pair<std::string, JsonView>> JsonView::members() const {
  if (!value_->is_object()) wrong_type("an object");
  std::vector<std::pair<std::string, JsonView>> out;
  out.reserve(value_->size());
  for (auto it = value_->begin(); it != value_->end(); ++it) {
    out.emplace_back(it.key(), child(it.value(), (path_.empty() ? "" : ".") + it.key()));
  }
  return out;
}

std::string JsonView::as_string() const {
  if (!value_->is_string()) wrong_type("a string");
  return value_->get<std::string>();
}

bool JsonView::as_bool() const {
  if (!value_->is_boolean()) wrong_type("true or false");
  return value_->get<bool>();
}

int64_t JsonView::as_int() const {
  if (value_->is_number_unsigned()) {
    const auto v = value_->get<uint64_t>();
    if (v > static_cast<uint64_t>(INT64_MAX)) fail("integer " + std::to_string(v) + " is too large");
    return static_cast<int64_t>(v);
  }
  if (!value_->is_number_integer()) wrong_type("an integer");
  return value_->get<int64_t>();
}

double JsonView::as_number() const {
  if (!value_->is_number()) wrong_type("a number");
  return value_->get<double>();
}

char32_t JsonView::as_char() const {
  const std::string s = as_string();
  unicode::require_valid_utf8(s, file_ + ": " + where());
  if (s.empty() || unicode::count_code_points(s) != 1) fail("expected one character, found '" + s + "'");
  return unicode::decode_at(s, 0).code_point;
}

bool JsonView::bool_or(const std::string& key, bool fallback) const {
  const auto v = find(key);
  return v ? v->as_bool() : fallback;
}

std::optional<std::string> JsonView::optional_string(const std::string& key) const {
  const auto v = find(key);
  if (!v) return std::nullopt;
  return v->as_string();
}

}  // namespace zoo
