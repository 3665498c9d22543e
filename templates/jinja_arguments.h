#pragma once
// A call's arguments (a filter's, a test's, a method's, a global function's), bound as Python
// binds them: by position or by keyword, with Python's messages for too many or unknown ones.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "templates/jinja_value.h"

namespace zoo::jinja {

struct Args {
  List positional;
  std::vector<std::pair<std::string, Value>> keywords;

  // Argument `index` (or the keyword `name`), else `fallback`.
  Value get(size_t index, const char* name, Value fallback = Value::none()) const;
  bool has(size_t index, const char* name) const;
  // Throws unless there are at most `names.size()` positional arguments and keywords among `names`.
  void check(const std::string& what, const std::vector<const char*>& names) const;
};

// The argument's string, or nullopt for none (or undefined); `what` names it in the error.
std::optional<std::string> optional_string(const Value& v, const char* what);
int64_t integer_argument(const Value& v, const char* what);
// A copy: arguments are often temporaries (args.get returns one), and a reference into one
// outlives it (`find` and `strftime_now` read freed memory that way).
std::string string_argument(const Value& v, const char* what);

}  // namespace zoo::jinja
