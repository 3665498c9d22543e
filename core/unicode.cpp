#include "core/unicode.h"

#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <vector>
#include <stdexcept>

#include <utf8proc.h>

namespace zoo {

int64_t invalid_utf8_offset(const std::string& text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char c = s[i];
    size_t len;
    uint32_t cp;
    if (c < 0x80) {
      ++i;
      continue;
    }
    if ((c & 0xE0) == 0xC0) len = 2, cp = c & 0x1F;
    else if ((c & 0xF0) == 0xE0) len = 3, cp = c & 0x0F;
    else if ((c & 0xF8) == 0xF0) len = 4, cp = c & 0x07;
    else return static_cast<int64_t>(i);
    if (i + len > n) return static_cast<int64_t>(i);
    for (size_t k = 1; k < len; ++k) {
      if ((s[i + k] & 0xC0) != 0x80) return static_cast<int64_t>(i);
      cp = (cp << 6) | (s[i + k] & 0x3F);
    }
    // Overlong forms, surrogates and values past U+10FFFF are invalid too.
    const bool overlong = (len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000);
    if (overlong || (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) return static_cast<int64_t>(i);
    i += len;
  }
  return -1;
}

}  // namespace zoo

namespace zoo::unicode {
namespace {

utf8proc_category_t category(char32_t c) {
  return utf8proc_category(static_cast<utf8proc_int32_t>(c));
}

}  // namespace

Decoded decode_at(const std::string& text, size_t i) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data()) + i;
  const unsigned char c = s[0];
  if (c < 0x80) return {c, 1};
  if ((c & 0xE0) == 0xC0) return {static_cast<char32_t>(((c & 0x1F) << 6) | (s[1] & 0x3F)), 2};
  if ((c & 0xF0) == 0xE0) {
    return {static_cast<char32_t>(((c & 0x0F) << 12) | ((s[1] & 0x3F) << 6) | (s[2] & 0x3F)), 3};
  }
  return {static_cast<char32_t>(((c & 0x07) << 18) | ((s[1] & 0x3F) << 12) | ((s[2] & 0x3F) << 6) |
                                (s[3] & 0x3F)),
          4};
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

std::string to_utf8(char32_t c) {
  std::string s;
  append_utf8(s, c);
  return s;
}

size_t count_code_points(const std::string& text) {
  size_t n = 0;
  for (unsigned char c : text) n += (c & 0xC0) != 0x80;
  return n;
}

void require_valid_utf8(const std::string& text, const std::string& what) {
  if (const int64_t bad = invalid_utf8_offset(text); bad >= 0) {
    throw std::runtime_error(what + ": invalid UTF-8 at byte offset " + std::to_string(bad));
  }
}

bool is_letter(char32_t c) {
  const auto k = category(c);
  return k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO;
}

bool is_number(char32_t c) {
  const auto k = category(c);
  return k == UTF8PROC_CATEGORY_ND || k == UTF8PROC_CATEGORY_NL || k == UTF8PROC_CATEGORY_NO;
}

bool is_punctuation(char32_t c) {
  const auto k = category(c);
  return k >= UTF8PROC_CATEGORY_PC && k <= UTF8PROC_CATEGORY_PO;
}

bool is_nonspacing_mark(char32_t c) { return category(c) == UTF8PROC_CATEGORY_MN; }

bool is_mark(char32_t c) {
  const auto k = category(c);
  return k == UTF8PROC_CATEGORY_MN || k == UTF8PROC_CATEGORY_MC || k == UTF8PROC_CATEGORY_ME;
}

bool is_other(char32_t c) {
  const auto k = category(c);
  return k == UTF8PROC_CATEGORY_CN || k >= UTF8PROC_CATEGORY_CC;
}

bool is_white_space(char32_t c) {
  if ((c >= 0x09 && c <= 0x0D) || c == 0x85) return true;
  const auto k = category(c);
  return k == UTF8PROC_CATEGORY_ZS || k == UTF8PROC_CATEGORY_ZL || k == UTF8PROC_CATEGORY_ZP;
}

bool is_separator(char32_t c) {
  const auto k = category(c);
  return k == UTF8PROC_CATEGORY_ZS || k == UTF8PROC_CATEGORY_ZL || k == UTF8PROC_CATEGORY_ZP;
}

bool is_cased(char32_t c) {
  const auto k = category(c);
  return k == UTF8PROC_CATEGORY_LU || k == UTF8PROC_CATEGORY_LL || k == UTF8PROC_CATEGORY_LT;
}

bool is_ascii_punctuation(char32_t c) {
  return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) ||
         (c >= 0x7B && c <= 0x7E);
}

std::string normalize(const std::string& text, NormalizationForm form) {
  int options = UTF8PROC_STABLE;
  switch (form) {
    case NormalizationForm::kNfc: options |= UTF8PROC_COMPOSE; break;
    case NormalizationForm::kNfd: options |= UTF8PROC_DECOMPOSE; break;
    case NormalizationForm::kNfkc: options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
    case NormalizationForm::kNfkd: options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
  }
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()), static_cast<utf8proc_ssize_t>(text.size()),
                   &out, static_cast<utf8proc_option_t>(options));
  if (n < 0) throw std::runtime_error(std::string("unicode normalization failed: ") + utf8proc_errmsg(n));
  std::string result(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
  std::free(out);
  return result;
}

std::vector<std::pair<size_t, size_t>> grapheme_spans(const std::string& text) {
  std::vector<std::pair<size_t, size_t>> spans;
  utf8proc_int32_t state = 0;
  char32_t previous = 0;
  size_t begin = 0;
  for (size_t i = 0; i < text.size();) {
    const auto [c, n] = decode_at(text, i);
    if (i > 0 && utf8proc_grapheme_break_stateful(static_cast<utf8proc_int32_t>(previous),
                                                  static_cast<utf8proc_int32_t>(c), &state)) {
      spans.emplace_back(begin, i);
      begin = i;
    }
    previous = c;
    i += n;
  }
  if (begin < text.size()) spans.emplace_back(begin, text.size());
  return spans;
}

std::string utf8_lossy(const std::string& bytes) {
  const auto* s = reinterpret_cast<const unsigned char*>(bytes.data());
  const size_t n = bytes.size();
  std::string out;
  out.reserve(n);
  size_t i = 0;
  while (i < n) {
    const unsigned char c = s[i];
    if (c < 0x80) {
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    // Length and the range allowed for the second byte, by the lead byte (Unicode Table 3-7).
    size_t length = 0;
    unsigned char low = 0x80, high = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) length = 2;
    else if (c == 0xE0) length = 3, low = 0xA0;
    else if (c == 0xED) length = 3, high = 0x9F;
    else if (c >= 0xE1 && c <= 0xEF) length = 3;
    else if (c == 0xF0) length = 4, low = 0x90;
    else if (c == 0xF4) length = 4, high = 0x8F;
    else if (c >= 0xF1 && c <= 0xF3) length = 4;
    size_t valid = length == 0 ? 0 : 1;  // bytes of a well-formed prefix so far
    while (valid > 0 && valid < length && i + valid < n) {
      const unsigned char b = s[i + valid];
      const bool ok = valid == 1 ? (b >= low && b <= high) : (b >= 0x80 && b <= 0xBF);
      if (!ok) break;
      ++valid;
    }
    if (length > 0 && valid == length) {
      out.append(bytes, i, length);
      i += length;
    } else {
      out += "\xEF\xBF\xBD";
      i += valid == 0 ? 1 : valid;
    }
  }
  return out;
}

void append_lowercase(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c);
    return;
  }
  // U+0130 is the one unconditional multi-character lowercase mapping in SpecialCasing.txt
  // (to U+0069 U+0307); utf8proc gives only the simple one-character mapping.
  if (c == 0x130) {
    out += "i\xCC\x87";
    return;
  }
  append_utf8(out, static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))));
}

namespace {

// The full case folding of `c` (CaseFolding.txt's C and F mappings, by utf8proc).
std::vector<char32_t> full_casefold(char32_t c) {
  utf8proc_int32_t folded[8];
  utf8proc_int32_t boundclass = 0;
  const utf8proc_ssize_t n = utf8proc_decompose_char(static_cast<utf8proc_int32_t>(c), folded, 8,
                                                     UTF8PROC_CASEFOLD, &boundclass);
  if (n <= 0 || n > 8) return {c};
  return std::vector<char32_t>(folded, folded + n);
}

// SpecialCasing's multi-character uppercase and titlecase mappings (U+00DF -> "SS" / "Ss") follow
// from the full case folding, which utf8proc has: the uppercase is each folded character's simple
// uppercase, the titlecase the first one's simple titlecase and the rest as folded. U+0130 and
// U+1E9E fold to more than one character but map to themselves; the ten characters below are
// where the titlecase rule does not hold.
bool multi_character(char32_t c) { return c != 0x130 && c != 0x1E9E && full_casefold(c).size() > 1; }
constexpr char32_t kUnknownTitlecase[] = {0x149, 0x1FB2, 0x1FB4, 0x1FB7, 0x1FC2, 0x1FC4, 0x1FC7, 0x1FF2, 0x1FF4, 0x1FF7};

void append_simple_upper(std::string& out, char32_t c) {
  append_utf8(out, static_cast<char32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(c))));
}

}  // namespace

void append_uppercase(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c >= 'a' && c <= 'z' ? c - 32 : c);
    return;
  }
  if (multi_character(c)) {
    for (char32_t f : full_casefold(c)) append_simple_upper(out, f);
    return;
  }
  append_simple_upper(out, c);
}

bool append_titlecase(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c >= 'a' && c <= 'z' ? c - 32 : c);
    return true;
  }
  if (std::find(std::begin(kUnknownTitlecase), std::end(kUnknownTitlecase), c) != std::end(kUnknownTitlecase)) return false;
  if (multi_character(c)) {
    const auto folded = full_casefold(c);
    append_utf8(out, static_cast<char32_t>(utf8proc_totitle(static_cast<utf8proc_int32_t>(folded[0]))));
    for (size_t i = 1; i < folded.size(); ++i) append_utf8(out, folded[i]);
    return true;
  }
  append_utf8(out, static_cast<char32_t>(utf8proc_totitle(static_cast<utf8proc_int32_t>(c))));
  return true;
}

bool is_case_ignorable(char32_t c) {
  if (c == '\'' || c == '.' || c == ':' || c == 0xB7 || c == 0x2019) return true;
  const auto k = category(c);
  return k == UTF8PROC_CATEGORY_MN || k == UTF8PROC_CATEGORY_ME || k == UTF8PROC_CATEGORY_CF ||
         k == UTF8PROC_CATEGORY_LM || k == UTF8PROC_CATEGORY_SK;
}

}  // namespace zoo::unicode
