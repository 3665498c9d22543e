#include "tokenizers/precompiled_charsmap.h"

#include <stdexcept>

#include "core/unicode.h"

namespace zoo {
namespace {

// Darts-clone's double-array unit: a label, an offset to the children, a leaf flag; a leaf
// child's unit holds the value.
bool has_leaf(uint32_t unit) { return ((unit >> 8) & 1) == 1; }
uint32_t value(uint32_t unit) { return unit & ((1u << 31) - 1); }
uint32_t label(uint32_t unit) { return unit & ((1u << 31) | 0xFF); }
uint32_t offset(uint32_t unit) { return (unit >> 10) << ((unit & (1u << 9)) >> 6); }

std::string decode_base64(const std::string& text, const std::string& where) {
  const auto sextet = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  if (text.size() % 4 != 0) throw std::runtime_error(where + ": not base64 (length " + std::to_string(text.size()) + ")");
  std::string out;
  out.reserve(text.size() / 4 * 3);
  for (size_t i = 0; i < text.size(); i += 4) {
    int padding = 0;
    uint32_t group = 0;
    for (size_t k = 0; k < 4; ++k) {
      const char c = text[i + k];
      int v = sextet(c);
      if (c == '=' && i + 4 == text.size() && k >= 2) {
        ++padding;
        v = 0;
      } else if (v < 0 || padding > 0) {
        throw std::runtime_error(where + ": not base64 (at character " + std::to_string(i + k) + ")");
      }
      group = (group << 6) | static_cast<uint32_t>(v);
    }
    out += static_cast<char>(group >> 16);
    if (padding < 2) out += static_cast<char>((group >> 8) & 0xFF);
    if (padding < 1) out += static_cast<char>(group & 0xFF);
  }
  return out;
}

}  // namespace

PrecompiledCharsmap::PrecompiledCharsmap(const std::string& bytes, const std::string& where) : where_(where) {
  const auto u32_at = [&](size_t at) {
    return static_cast<uint32_t>(static_cast<unsigned char>(bytes[at])) |
           static_cast<uint32_t>(static_cast<unsigned char>(bytes[at + 1])) << 8 |
           static_cast<uint32_t>(static_cast<unsigned char>(bytes[at + 2])) << 16 |
           static_cast<uint32_t>(static_cast<unsigned char>(bytes[at + 3])) << 24;
  };
  if (bytes.size() < 4) throw std::runtime_error(where + ": precompiled_charsmap is truncated (no trie size)");
  const uint32_t trie_bytes = u32_at(0);
  if (trie_bytes / 4 * 4 > bytes.size() - 4) {
    throw std::runtime_error(where + ": precompiled_charsmap is truncated (its trie needs " + std::to_string(trie_bytes) +
                             " bytes)");
  }
  for (size_t i = 0; i < trie_bytes / 4; ++i) trie_.push_back(u32_at(4 + 4 * i));
  replacements_ = bytes.substr(4 + trie_bytes / 4 * 4);
  if (const int64_t bad = invalid_utf8_offset(replacements_); bad >= 0) {
    throw std::runtime_error(where + ": precompiled_charsmap's replacements are not UTF-8 (byte " + std::to_string(bad) +
                             ")");
  }
  if (trie_.empty()) throw std::runtime_error(where + ": precompiled_charsmap has an empty trie");
}

PrecompiledCharsmap PrecompiledCharsmap::from_base64(const std::string& base64, const std::string& where) {
  return PrecompiledCharsmap(decode_base64(base64, where), where);
}

std::optional<std::string_view> PrecompiledCharsmap::transform(std::string_view chunk) const {
  const auto unit_at = [&](size_t position) {
    if (position >= trie_.size()) throw std::runtime_error(where_ + ": precompiled_charsmap's trie is malformed");
    return trie_[position];
  };
  size_t position = offset(unit_at(0));
  for (unsigned char c : chunk) {
    if (c == 0) break;
    position ^= c;
    const uint32_t unit = unit_at(position);
    if (label(unit) != c) return std::nullopt;
    position ^= offset(unit);
    if (has_leaf(unit)) {
      // The first key found: the shortest prefix.
      const size_t begin = value(unit_at(position));
      if (begin > replacements_.size()) {
        throw std::runtime_error(where_ + ": precompiled_charsmap points past its replacements");
      }
      const size_t end = std::min(replacements_.find('\0', begin), replacements_.size());
      const std::string_view replacement(replacements_.data() + begin, end - begin);
      if (begin < replacements_.size() && (static_cast<unsigned char>(replacements_[begin]) & 0xC0) == 0x80) {
        throw std::runtime_error(where_ + ": precompiled_charsmap points inside a character");
      }
      return replacement;
    }
  }
  return std::nullopt;
}

std::string PrecompiledCharsmap::normalize(const std::string& text) const {
  std::string out;
  out.reserve(text.size());
  for (const auto& [begin, end] : unicode::grapheme_spans(text)) {
    const std::string_view grapheme(text.data() + begin, end - begin);
    if (grapheme.size() < 6) {
      if (const auto replacement = transform(grapheme)) {
        out += *replacement;
        continue;
      }
    }
    for (size_t i = 0; i < grapheme.size();) {
      const size_t n = unicode::decode_at(text, begin + i).length;
      const std::string_view c = grapheme.substr(i, n);
      if (const auto replacement = transform(c)) out += *replacement;
      else out += c;
      i += n;
    }
  }
  return out;
}

}  // namespace zoo
