#include "core/unicode.h"

#include <gtest/gtest.h>

#include "core/regex.h"

namespace zoo::unicode {
namespace {

TEST(Unicode, DecodesWhatItEncodes) {
  for (char32_t c : {0x24u, 0x7Fu, 0x80u, 0x7FFu, 0x800u, 0xFFFFu, 0x10000u, 0x1F642u, 0x10FFFFu}) {
    const std::string s = to_utf8(c);
    EXPECT_EQ(invalid_utf8_offset(s), -1);
    const auto d = decode_at(s, 0);
    EXPECT_EQ(d.code_point, c);
    EXPECT_EQ(d.length, s.size());
  }
  EXPECT_EQ(to_utf8(0xE9), "\xC3\xA9");
  EXPECT_EQ(count_code_points("caf\xC3\xA9 \xF0\x9F\x99\x82"), 6u);
}

// The White_Space property as PCRE2's Unicode tables give it, for every code point.
TEST(Unicode, WhiteSpaceIsThePropertyEverywhere) {
  const Regex white_space(R"(\A\p{White_Space}\z)", "test");
  int count = 0;
  for (char32_t c = 0; c < 0x110000; ++c) {
    if (c >= 0xD800 && c <= 0xDFFF) continue;
    const bool expected = !white_space.find_all(to_utf8(c)).empty();
    ASSERT_EQ(is_white_space(c), expected) << std::hex << static_cast<uint32_t>(c);
    count += expected;
  }
  EXPECT_EQ(count, 25);  // PropList.txt lists 25 White_Space code points
}

TEST(Unicode, GeneralCategories) {
  EXPECT_TRUE(is_letter(U'a'));
  EXPECT_TRUE(is_letter(0x65E5));          // 日
  EXPECT_FALSE(is_letter(U'1'));
  EXPECT_TRUE(is_number(0x663));           // ARABIC-INDIC DIGIT THREE (Nd)
  EXPECT_TRUE(is_number(0xB2));            // SUPERSCRIPT TWO (No)
  EXPECT_TRUE(is_number(0x2163));          // ROMAN NUMERAL FOUR (Nl)
  EXPECT_TRUE(is_punctuation(0xBF));       // ¿ (Po)
  EXPECT_TRUE(is_punctuation(U'_'));       // Pc
  EXPECT_FALSE(is_punctuation(U'$'));      // Sc
  EXPECT_TRUE(is_ascii_punctuation(U'$'));
  EXPECT_FALSE(is_ascii_punctuation(0xBF));
  EXPECT_TRUE(is_nonspacing_mark(0x301));  // COMBINING ACUTE ACCENT
  EXPECT_FALSE(is_nonspacing_mark(0x903)); // DEVANAGARI SIGN VISARGA (Mc)
  EXPECT_TRUE(is_mark(0x903));
  EXPECT_TRUE(is_other(0x200B));           // ZERO WIDTH SPACE (Cf)
  EXPECT_TRUE(is_other(0xE000));           // private use (Co)
  EXPECT_TRUE(is_other(0x7));              // BEL (Cc)
  EXPECT_FALSE(is_other(U' '));
}

TEST(Unicode, NormalizationForms) {
  const std::string composed = "\xC3\xA9";      // é
  const std::string decomposed = "e\xCC\x81";   // e + COMBINING ACUTE ACCENT
  EXPECT_EQ(normalize(composed, NormalizationForm::kNfd), decomposed);
  EXPECT_EQ(normalize(decomposed, NormalizationForm::kNfc), composed);
  EXPECT_EQ(normalize("\xEF\xAC\x81", NormalizationForm::kNfkc), "fi");      // ﬁ ligature
  EXPECT_EQ(normalize("\xEF\xAC\x81", NormalizationForm::kNfc), "\xEF\xAC\x81");
  EXPECT_EQ(normalize("\xE2\x91\xA0", NormalizationForm::kNfkd), "1");       // ①
  EXPECT_EQ(normalize(std::string("a\0b", 3), NormalizationForm::kNfc), std::string("a\0b", 3));
}

TEST(Unicode, LowercaseIsRustsCharToLowercase) {
  const auto lower = [](char32_t c) {
    std::string s;
    append_lowercase(s, c);
    return s;
  };
  EXPECT_EQ(lower(U'Q'), "q");
  EXPECT_EQ(lower(0xC9), "\xC3\xA9");           // É -> é
  EXPECT_EQ(lower(0x130), "i\xCC\x87");         // İ -> i + COMBINING DOT ABOVE
  EXPECT_EQ(lower(0x3A3), "\xCF\x83");          // Σ -> σ (no final-sigma context)
  EXPECT_EQ(lower(0x1C5), "\xC7\x86");          // ǅ -> ǆ
  EXPECT_EQ(lower(0x65E5), "\xE6\x97\xA5");     // 日 unchanged
}

// UAX #29's extended grapheme clusters, worked by hand.
TEST(Unicode, GraphemeClusters) {
  using Spans = std::vector<std::pair<size_t, size_t>>;
  EXPECT_EQ(grapheme_spans("e\xCC\x81x"), (Spans{{0, 3}, {3, 4}}));          // e + combining acute
  EXPECT_EQ(grapheme_spans("\r\na"), (Spans{{0, 2}, {2, 3}}));               // CR LF stay together
  EXPECT_EQ(grapheme_spans("\xF0\x9F\x87\xAB\xF0\x9F\x87\xB7\xF0\x9F\x87\xAB"),
            (Spans{{0, 8}, {8, 12}}));                                       // flags pair regional indicators
  EXPECT_EQ(grapheme_spans("\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9"), (Spans{{0, 11}}));  // ZWJ sequence
  EXPECT_EQ(grapheme_spans(""), Spans{});
}

TEST(Unicode, LossyDecodingReplacesMaximalSubparts) {
  const std::string r = "\xEF\xBF\xBD";  // U+FFFD
  EXPECT_EQ(utf8_lossy("ok \xC3\xA9"), "ok \xC3\xA9");
  EXPECT_EQ(utf8_lossy("\xC3\x28"), r + "(");
  EXPECT_EQ(utf8_lossy("a\xF0\x9F\x98"), "a" + r);   // a truncated 4-byte sequence is one subpart
  EXPECT_EQ(utf8_lossy("\xE0\x80\x80"), r + r + r);   // E0 needs A0..BF next
  EXPECT_EQ(utf8_lossy("\xED\xA0\x80"), r + r + r);   // a surrogate
  EXPECT_EQ(utf8_lossy("\xFF"), r);
}

TEST(Unicode, RequireValidNamesTheOffset) {
  EXPECT_NO_THROW(require_valid_utf8("fine", "input"));
  try {
    require_valid_utf8("ab\xC3", "input");
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "input: invalid UTF-8 at byte offset 2");
  }
}

}  // namespace
}  // namespace zoo::unicode
