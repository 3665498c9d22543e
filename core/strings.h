#pragma once
// Small string helpers the whole project shares.

#include <cstddef>
#include <cstdio>
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

// "1.5 GB", "340 MB", "12 kB" (decimal units).
inline std::string describe_bytes(double bytes) {
  const char* units[] = {"bytes", "kB", "MB", "GB", "TB", "PB", "EB"};
  int unit = 0;
  while (bytes >= 1000 && unit < 6) bytes /= 1000, ++unit;
  char text[48];
  std::snprintf(text, sizeof text, unit == 0 ? "%.0f %s" : "%.1f %s", bytes, units[unit]);
  return text;
}

// Two significant digits, for sizes too large to write out: "7.1e+18", "1.2e+05", "42".
inline std::string approximately(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2g", v);
  return text;
}

}  // namespace zoo
