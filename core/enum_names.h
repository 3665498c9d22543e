#pragma once
// The one mechanism that names enums: configs, run configs, messages and `zoo schema` all read
// each enum's spellings from its EnumNames specialisation, declared beside the enum:
//
//   ZOO_ENUM_NAMES(NormKind, "norm", {"layernorm", NormKind::kLayerNorm}, {"rmsnorm", NormKind::kRMSNorm});
//
// which defines EnumNames<NormKind>::kWhat (what the enum is called in messages) and kNames.
// from_string lists the accepted spellings when it fails; to_string of an unnamed value is a
// logic error. Code that acts on an enum dispatches with `switch` and no `default`, so a new
// enumerator is a compiler warning wherever it must be handled.

#include <stdexcept>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace zoo {

template <typename E>
struct EnumNames;

#define ZOO_ENUM_NAMES(Enum, what, ...)                                  \
  template <>                                                            \
  struct EnumNames<Enum> {                                               \
    static constexpr const char* kWhat = what;                           \
    static constexpr std::pair<const char*, Enum> kNames[] = {__VA_ARGS__}; \
  }

// The accepted spellings, in declaration order.
template <typename E>
std::vector<std::string> enum_names() {
  std::vector<std::string> names;
  for (const auto& entry : EnumNames<E>::kNames) names.emplace_back(entry.first);
  return names;
}

// "a, b, c".
template <typename E>
std::string enum_names_joined() {
  std::string s;
  for (const auto& entry : EnumNames<E>::kNames) s += (s.empty() ? "" : ", ") + std::string(entry.first);
  return s;
}

// The value named `name`, or nullopt.
template <typename E>
std::optional<E> find_enum(const std::string& name) {
  for (const auto& [key, value] : EnumNames<E>::kNames) {
    if (name == key) return value;
  }
  return std::nullopt;
}

// Throws std::invalid_argument naming the kind, the bad value and the accepted values.
template <typename E>
E from_string(const std::string& name) {
  if (const auto value = find_enum<E>(name)) return *value;
  throw std::invalid_argument(std::string("unknown ") + EnumNames<E>::kWhat + " '" + name +
                              "' (expected one of: " + enum_names_joined<E>() + ")");
}

template <typename E>
std::string to_string(E value) {
  for (const auto& [key, v] : EnumNames<E>::kNames) {
    if (v == value) return key;
  }
  throw std::logic_error(std::string("unnamed ") + EnumNames<E>::kWhat + " value");
}

}  // namespace zoo
