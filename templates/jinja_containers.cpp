#include "templates/jinja_containers.h"

#include <algorithm>
#include <optional>

#include "core/unicode.h"
#include "templates/python_str.h"

namespace zoo::jinja {
namespace {

// A string iterated becomes one value per character (tens of bytes each): a smaller bound than
// kMaxText.
constexpr size_t kMaxIteratedString = size_t{1} << 20;

enum class Container { kNothing, kString, kList, kDict };

// Undefined holds nothing; values that are no container give nullopt.
std::optional<Container> container_of(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined: return Container::kNothing;
    case Kind::kString: return Container::kString;
    case Kind::kList: return Container::kList;
    case Kind::kDict: return Container::kDict;
    case Kind::kNone:
    case Kind::kBool:
    case Kind::kInt:
    case Kind::kFloat:
    case Kind::kNamespace:
    case Kind::kCallable: break;
  }
  return std::nullopt;
}

}  // namespace

List iterate(const Value& v) {
  const auto container = container_of(v);
  if (!container) throw ValueError("'" + v.type_name() + "' object is not iterable");
  switch (*container) {
    case Container::kNothing: return {};
    case Container::kList: return v.as_list();
    case Container::kDict: {
      List keys;
      for (const auto& item : v.as_dict()) keys.emplace_back(item.first);
      return keys;
    }
    case Container::kString: {
      if (v.as_string().size() > kMaxIteratedString) {
        throw ValueError("iterating a string of more than 1 MiB (" + std::to_string(v.as_string().size()) + " bytes)");
      }
      List out;
      for (auto& c : characters(v.as_string())) out.emplace_back(std::move(c));
      return out;
    }
  }
  return {};
}

int64_t length(const Value& v) {
  const auto container = container_of(v);
  if (!container) throw ValueError("object of type '" + v.type_name() + "' has no len()");
  switch (*container) {
    case Container::kNothing: return 0;
    case Container::kString: return static_cast<int64_t>(unicode::count_code_points(v.as_string()));
    case Container::kList: return static_cast<int64_t>(v.as_list().size());
    case Container::kDict: return static_cast<int64_t>(v.as_dict().size());
  }
  return 0;
}

bool contains(const Value& container, const Value& item) {
  const auto kind = container_of(container);
  if (!kind) throw ValueError("argument of type '" + container.type_name() + "' is not iterable");
  switch (*kind) {
    case Container::kNothing: return false;
    case Container::kString:
      if (!item.is_string()) throw ValueError("'in <string>' requires string as left operand, not " + item.type_name());
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Container::kList: return std::find(container.as_list().begin(), container.as_list().end(), item) != container.as_list().end();
    case Container::kDict: return item.is_string() && !container.item(item.as_string()).is_undefined();
  }
  return false;
}

std::vector<int64_t> slice_indices(int64_t n, const Value& start, const Value& stop, const Value& step) {
  auto integer = [](const Value& v, const char* what) {
    if (!is_integral(v)) throw ValueError(std::string("slice ") + what + " must be an integer or none, got " + v.type_name());
    return v.as_int();
  };
  const int64_t s = step.is_none() ? 1 : integer(step, "step");
  if (s == 0) throw ValueError("slice step cannot be zero");
  auto clamp = [&](const Value& v, int64_t fallback, const char* what) {
    if (v.is_none()) return fallback;
    int64_t i = integer(v, what);
    if (i < 0) i += n;
    if (s > 0) return std::clamp<int64_t>(i, 0, n);
    return std::clamp<int64_t>(i, -1, n - 1);
  };
  const int64_t begin = clamp(start, s > 0 ? 0 : n - 1, "start"), end = clamp(stop, s > 0 ? n : -1, "stop");
  std::vector<int64_t> out;
  for (int64_t i = begin; s > 0 ? i < end : i > end; i += s) out.push_back(i);
  return out;
}

Value slice(const Value& target, const Value& start, const Value& stop, const Value& step) {
  target.require_defined();
  if (target.is_string()) {
    const auto chars = characters(target.as_string());
    std::string out;
    for (int64_t i : slice_indices(static_cast<int64_t>(chars.size()), start, stop, step)) out += chars[i];
    return Value(out);
  }
  if (target.kind() != Kind::kList) throw ValueError("cannot slice a " + target.type_name());
  List out;
  const List& items = target.as_list();
  for (int64_t i : slice_indices(static_cast<int64_t>(items.size()), start, stop, step)) out.push_back(items[i]);
  return Value::list(std::move(out));
}

Value attribute(const Value& target, const std::string& name) {
  switch (target.kind()) {
    case Kind::kUndefined: target.require_defined(); break;
    case Kind::kDict:
    case Kind::kNamespace: return target.item(name);
    case Kind::kNone:
    case Kind::kBool:
    case Kind::kInt:
    case Kind::kFloat:
    case Kind::kString:
    case Kind::kList:
    case Kind::kCallable: break;
  }
  return Value::undefined("'" + target.type_name() + " object' has no attribute '" + name + "'");
}

Value subscript(const Value& target, const Value& key) {
  target.require_defined();
  if ((target.kind() == Kind::kDict || target.kind() == Kind::kNamespace) && key.is_string()) return target.item(key.as_string());
  if ((target.kind() == Kind::kList || target.is_string()) && is_integral(key)) {
    const List items = target.is_string() ? iterate(target) : List{};
    const List& sequence = target.is_string() ? items : target.as_list();
    int64_t i = key.as_int();
    const auto n = static_cast<int64_t>(sequence.size());
    if (i < 0) i += n;
    if (i >= 0 && i < n) return sequence[static_cast<size_t>(i)];
  }
  return Value::undefined("'" + target.type_name() + " object' has no element " + key.repr());
}

Value attribute_or_index(const Value& v, const std::string& part) {
  if (!part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; }) &&
      v.kind() == Kind::kList) {
    return subscript(v, Value(static_cast<int64_t>(std::stoll(part))));
  }
  return attribute(v, part);
}

std::string join_bounded(const List& items, const std::string& separator,
                         const std::function<std::string(const Value&)>& text) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += separator;
    out += text(items[i]);
    if (out.size() > kMaxText) throw ValueError("joining makes a string larger than 64 MiB");
  }
  return out;
}

}  // namespace zoo::jinja
