#pragma once
// Unicode for the tokenizers: UTF-8 decoding and encoding, general categories, normalization
// forms and lowercasing, all from utf8proc (Debian's libutf8proc), so no character tables live
// in zoo. Texts are std::string holding UTF-8; functions that need valid UTF-8 say so.

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace zoo {
// Byte offset of the first invalid UTF-8 sequence in `text` (truncated, overlong, surrogate,
// past U+10FFFF or a stray continuation byte), or -1 when it is valid.
int64_t invalid_utf8_offset(const std::string& text);
}  // namespace zoo

namespace zoo::unicode {

// The code point starting at text[i] and its length in bytes. `text` must be valid UTF-8.
struct Decoded {
  char32_t code_point;
  size_t length;
};
Decoded decode_at(const std::string& text, size_t i);

// Appends the UTF-8 encoding of `c`.
void append_utf8(std::string& out, char32_t c);
std::string to_utf8(char32_t c);

// Number of code points in valid UTF-8.
size_t count_code_points(const std::string& text);

// Throws std::runtime_error "<what>: invalid UTF-8 at byte offset N" unless `text` is valid
// (the Hugging Face pipeline, like Rust's str, is only defined on valid text).
void require_valid_utf8(const std::string& text, const std::string& what);

// General categories (Unicode's two-letter classes) as utf8proc reports them.
bool is_letter(char32_t c);             // L*
bool is_number(char32_t c);             // N* (Rust's char::is_numeric)
bool is_punctuation(char32_t c);        // P*
bool is_nonspacing_mark(char32_t c);    // Mn
bool is_mark(char32_t c);               // M*  (unicode-normalization's is_combining_mark)
bool is_other(char32_t c);              // C*  (Cc, Cf, Cn, Co, Cs)
// The White_Space property (Rust's char::is_whitespace, Oniguruma's \s): by its definition in
// PropList.txt the Z* separators plus U+0009..U+000D and U+0085.
bool is_white_space(char32_t c);
bool is_ascii_punctuation(char32_t c);  // !"#$%&'()*+,-./:;<=>?@[\]^_`{|}~
bool is_separator(char32_t c);          // Z*  (Zs, Zl, Zp)
bool is_cased(char32_t c);              // Lu, Ll, Lt

enum class NormalizationForm { kNfc, kNfd, kNfkc, kNfkd };
// `text` in the given normalization form. `text` must be valid UTF-8.
std::string normalize(const std::string& text, NormalizationForm form);

// The extended grapheme clusters of `text` (valid UTF-8), as [begin, end) byte ranges, by
// Unicode's segmentation rules (UAX #29).
std::vector<std::pair<size_t, size_t>> grapheme_spans(const std::string& text);

// `bytes` as UTF-8 with each maximal invalid subsequence replaced by U+FFFD, as Rust's
// String::from_utf8_lossy does (Unicode's "substitution of maximal subparts").
std::string utf8_lossy(const std::string& bytes);

// Full lowercase mapping of one code point, as Rust's char::to_lowercase (context-free, so no
// final-sigma rule), appended to `out`.
void append_lowercase(std::string& out, char32_t c);
// Full uppercase mapping of one code point, as Python's str.upper (U+00DF -> "SS", U+FB01 -> "FI"),
// appended to `out`.
void append_uppercase(std::string& out, char32_t c);
// Full titlecase mapping, as Python's str.title gives a word's first character (U+FB01 -> "Fi").
// Returns false, appending nothing, for the ten characters whose mapping this does not know
// (U+0149 and Greek letters with ypogegrammeni such as U+1FB2).
bool append_titlecase(std::string& out, char32_t c);
bool is_case_ignorable(char32_t c);     // Mn, Me, Cf, Lm, Sk and the apostrophe, '.', ':', U+00B7 (Python's final sigma rule)

}  // namespace zoo::unicode
