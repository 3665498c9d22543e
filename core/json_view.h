#pragma once
// Read access to a parsed JSON document that remembers the file and the path of every value,
// so each error names both: "tokenizer.json: model.merges[3]: 'ab' is not in model.vocab".

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/enum_names.h"

namespace zoo {

class JsonView {
 public:
  // How deep a reader may descend: the readers of nested components (a tokenizer.json Sequence
  // of Sequences) recurse once per level, so a deeper document is refused, naming the path.
  static constexpr int kMaxDepth = 64;

  JsonView(const nlohmann::json& value, std::string file, std::string path = "")
      : value_(&value), file_(std::move(file)), path_(std::move(path)) {}

  // Parses `text`; throws std::runtime_error "<file>: not valid JSON (...)" naming the byte
  // position when it is malformed or truncated.
  static nlohmann::json parse(const std::string& text, const std::string& file);

  const nlohmann::json& value() const { return *value_; }
  const std::string& file() const { return file_; }
  const std::string& path() const { return path_; }
  // "<path>" or "(top level)" for the document itself.
  std::string where() const;
  // Throws std::runtime_error "<file>: <path>: <message>".
  [[noreturn]] void fail(const std::string& message) const;

  bool is_null() const { return value_->is_null(); }
  // A member that is present and not null.
  bool has(const std::string& key) const;
  // The member `key`; an error names it when it is missing (null counts as present).
  JsonView at(const std::string& key) const;
  // The member `key` when present and not null.
  std::optional<JsonView> find(const std::string& key) const;
  // The elements of an array (an error unless this is an array).
  std::vector<JsonView> elements() const;
  // The members of an object in key order (an error unless this is an object).
  std::vector<std::pair<std::string, JsonView>> members() const;

  // This value as a type, or an error naming the expected type.
  std::string as_string() const;
  bool as_bool() const;
  int64_t as_int() const;  // an integer (negative allowed)
  double as_number() const;
  // A string of exactly one code point (Rust's char).
  char32_t as_char() const;

  // Required members of a type.
  std::string string_at(const std::string& key) const { return at(key).as_string(); }
  bool bool_at(const std::string& key) const { return at(key).as_bool(); }
  int64_t int_at(const std::string& key) const { return at(key).as_int(); }
  // Members with a default when missing or null.
  bool bool_or(const std::string& key, bool fallback) const;
  std::optional<std::string> optional_string(const std::string& key) const;

 private:
  JsonView child(const nlohmann::json& value, const std::string& suffix) const;
  [[noreturn]] void wrong_type(const char* expected) const;

  const nlohmann::json* value_;
  std::string file_;
  std::string path_;
  int depth_ = 0;
};

// The enumerator a JSON string names, by the enum's EnumNames table (core/enum_names.h); an
// error lists the accepted names: "<file>: <path>: unsupported 'X' (zoo reads A, B, C)".
template <typename Enum>
Enum enum_from_json(const JsonView& json) {
  const std::string name = json.as_string();
  for (const auto& [n, value] : EnumNames<Enum>::kNames) {
    if (name == n) return value;
  }
  json.fail("unsupported '" + name + "' (zoo reads " + enum_names_joined<Enum>() + ")");
}

}  // namespace zoo
