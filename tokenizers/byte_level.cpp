#include "tokenizers/byte_level.h"

#include <vector>

#include "core/unicode.h"

namespace zoo {
namespace {

bool stands_for_itself(int b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); }

// Code point of each byte's character.
const std::array<char32_t, 256>& code_points() {
  static const std::array<char32_t, 256> table = [] {
    std::array<char32_t, 256> t{};
    char32_t next = 0x100;
    for (int b = 0; b < 256; ++b) t[b] = stands_for_itself(b) ? static_cast<char32_t>(b) : next++;
    return t;
  }();
  return table;
}

}  // namespace

const std::array<std::string, 256>& byte_level_chars() {
  static const std::array<std::string, 256> chars = [] {
    std::array<std::string, 256> c;
    for (int b = 0; b < 256; ++b) c[b] = unicode::to_utf8(code_points()[b]);
    return c;
  }();
  return chars;
}

std::optional<uint8_t> byte_level_byte(char32_t c) {
  // The alphabet lies below U+0144 (256 + 68 characters).
  static const std::vector<int> bytes = [] {
    std::vector<int> v(0x144, -1);
    for (int b = 0; b < 256; ++b) v[code_points()[b]] = b;
    return v;
  }();
  if (c >= bytes.size() || bytes[c] < 0) return std::nullopt;
  return static_cast<uint8_t>(bytes[c]);
}

std::string to_byte_level(const std::string& text) {
  const auto& chars = byte_level_chars();
  std::string out;
  out.reserve(text.size() * 2);
  for (unsigned char b : text) out += chars[b];
  return out;
}

}  // namespace zoo
