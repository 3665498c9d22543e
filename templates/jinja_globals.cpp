#include "templates/jinja_globals.h"

#include <algorithm>
#include <ctime>
#include <map>
#include <memory>

namespace zoo::jinja {
namespace {

struct GlobalFunction : Callable {
  explicit GlobalFunction(std::string n) : function(std::move(n)) {}
  const std::string& name() const override { return function; }
  std::string function;
};

// namespace(mapping, **keywords) and dict(mapping, **keywords).
Value make_mapping(const std::string& name, const Args& args) {
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

Value range(const Args& args) {
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

Value strftime_now(const Args& args) {
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

}  // namespace

const Value* global_function(const std::string& name) {
  static const std::map<std::string, Value> kGlobals = [] {
    std::map<std::string, Value> out;
    for (const char* n : {"raise_exception", "strftime_now", "namespace", "range", "dict"}) {
      out[n] = Value::callable(std::make_shared<GlobalFunction>(n));
    }
    return out;
  }();
  const auto it = kGlobals.find(name);
  return it == kGlobals.end() ? nullptr : &it->second;
}

Value call_global(const std::string& name, const Args& args) {
  if (name == "namespace" || name == "dict") return make_mapping(name, args);
  if (name == "range") return range(args);
  if (name == "strftime_now") return strftime_now(args);
  throw ValueError("unknown function '" + name + "'");
}

}  // namespace zoo::jinja
