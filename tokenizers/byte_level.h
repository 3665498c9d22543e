#pragma once
// GPT-2's byte-level alphabet: each of the 256 bytes stands for one printable character, so
// byte-level BPE vocabularies hold any byte string as text. Bytes that are printable Latin-1
// ('!'..'~', U+00A1..U+00AC, U+00AE..U+00FF) stand for themselves; the other 68 map, in byte
// order, to U+0100 onwards (so a space is 'Ġ', U+0120, and a newline 'Ċ', U+010A). This is
// bytes_to_unicode() of openai/gpt-2's encoder.py.

#include <array>
#include <cstdint>
#include <optional>
#include <string>

namespace zoo {

// GPT-2's pre-tokenizer pattern (encoder.py; tokenizers' ByteLevel pre-tokenizer).
inline constexpr const char* kGpt2SplitPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// The character (as UTF-8) standing for each byte.
const std::array<std::string, 256>& byte_level_chars();

// The byte a character stands for, or nothing when it is not in the alphabet.
std::optional<uint8_t> byte_level_byte(char32_t c);

// Every byte of `text` replaced by its character.
std::string to_byte_level(const std::string& text);

}  // namespace zoo
