#pragma once
// SentencePiece's compiled normalization rules (a model's precompiled_charsmap, e.g. nmt_nfkc:
// NFKC plus mapping tabs, newlines and other spaces to ' '), as tokenizers' Precompiled
// normalizer applies them (the spm_precompiled crate). The binary format:
//   u32 little-endian: the size in bytes of a Darts double-array trie
//   that many bytes:   the trie, u32 units; its values are offsets into the blob below
//   the rest:          the replacement strings, each ending with a NUL byte
// tokenizers looks each grapheme cluster up whole when it is under 6 bytes, otherwise each
// character, and uses the first (shortest) key that prefixes what it looks up.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace zoo {

class PrecompiledCharsmap {
 public:
  // Throws std::runtime_error "<where>: ..." for a charsmap that cannot be parsed.
  PrecompiledCharsmap(const std::string& bytes, const std::string& where);
  // From tokenizer.json's base64 string.
  static PrecompiledCharsmap from_base64(const std::string& base64, const std::string& where);

  // The replacement of the first key that prefixes `chunk`, if any. Throws for a malformed trie.
  std::optional<std::string_view> transform(std::string_view chunk) const;
  // `text` (valid UTF-8) normalized grapheme by grapheme.
  std::string normalize(const std::string& text) const;

 private:
  std::vector<uint32_t> trie_;
  std::string replacements_;
  std::string where_;
};

}  // namespace zoo
