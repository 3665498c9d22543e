#include "templates/python_methods.h"

#include "templates/jinja_containers.h"
#include "templates/python_str.h"

namespace zoo::jinja {
namespace {

// str.startswith(prefix) and str.endswith(suffix), where the affix may be a tuple of several.
bool has_affix(const std::string& s, const std::string& name, const Value& affix) {
  const List options = affix.kind() == Kind::kList ? affix.as_list() : List{affix};
  for (const auto& o : options) {
    const std::string& a = string_argument(o, "the prefix or suffix");
    const bool match = name == "startswith" ? s.compare(0, a.size(), a) == 0
                                            : s.size() >= a.size() && s.compare(s.size() - a.size(), a.size(), a) == 0;
    if (match) return true;
  }
  return false;
}

}  // namespace

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
    return Value(has_affix(s, name, args.get(0, "prefix")));
  }
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
    args.check(what, {});
    return Value(name == "upper" ? upper(s) : name == "lower" ? lower(s) : name == "title" ? title(s) : capitalize(s));
  }
  if (name == "replace") {
    args.check(what, {"old", "new", "count"});
    return Value(replace(s, string_argument(args.get(0, "old"), "old"), string_argument(args.get(1, "new"), "new"),
                         integer_argument(args.get(2, "count", Value(-1)), "count")));
  }
  if (name == "find" || name == "count") {
    args.check(what, {"sub"});
    const std::string sub = string_argument(args.get(0, "sub"), "sub");
    return Value(name == "find" ? find(s, sub) : count(s, sub));
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

}  // namespace zoo::jinja
