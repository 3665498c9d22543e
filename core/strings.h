#pragma once
// Small string helpers the whole project shares.

#include <cstddef>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

namespace zoo {

inline bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// "a, b, c"; past `limit` parts, "a, b, ... (12 in all)".
inline std::string join(const std::vector<std::string>& parts, const std::string& separator = ", ",
                        size_t limit = std::numeric_limits<size_t>::max()) {
  std::string s;
  for (size_t i = 0; i < parts.size() && i < limit; ++i) s += (i ? separator : "") + parts[i];
  if (parts.size() > limit) s += separator + "... (" + std::to_string(parts.size()) + " in all)";
  return s;
}

}  // namespace zoo
