#include "tokenizers/normalizers.h"

#include <gtest/gtest.h>

#include "base_test_util.h"
#include "json_test_util.h"

namespace zoo {
namespace {

using testing::error_of;

Normalizer parse(const std::string& json) { return testing::from_json_text<Normalizer>(json, "normalizer"); }

std::string apply(const Normalizer& n, const std::string& text, bool* at_start = nullptr) {
  TextPiece piece{text, true, -1};
  n.apply(piece);
  if (at_start != nullptr) *at_start = piece.at_input_start;
  return piece.text;
}

// Worked by hand from tokenizers' normalizers/bert.rs: controls and U+200B (Cf) dropped, the tab
// a space, CJK ideographs spaced, accents stripped (following lowercase), then lowercased.
TEST(Normalizer, BertCleansSpacesStripsAndLowercases) {
  const auto bert = parse(R"({"type":"BertNormalizer","clean_text":true,"handle_chinese_chars":true,
                              "strip_accents":null,"lowercase":true})");
  EXPECT_EQ(apply(bert, "H\xC3\xA9llo\tWORLD\x01 \xE6\x97\xA5\xE6\x9C\xAC\xE2\x80\x8B"),
            "hello world  \xE6\x97\xA5  \xE6\x9C\xAC ");
  const auto cased = parse(R"({"type":"BertNormalizer","clean_text":true,"handle_chinese_chars":false,
                               "strip_accents":null,"lowercase":false})");
  EXPECT_EQ(apply(cased, "H\xC3\xA9llo \xE6\x97\xA5"), "H\xC3\xA9llo \xE6\x97\xA5");
  const auto strip_only = parse(R"({"type":"BertNormalizer","clean_text":false,"handle_chinese_chars":false,
                                    "strip_accents":true,"lowercase":false})");
  EXPECT_EQ(apply(strip_only, "Caf\xC3\xA9\x01"), "Cafe\x01");
}

TEST(Normalizer, UnicodeFormsLowercaseAndStripAccents) {
  EXPECT_EQ(apply(parse(R"({"type":"NFD"})"), "\xC3\xA9"), "e\xCC\x81");
  EXPECT_EQ(apply(parse(R"({"type":"NFKC"})"), "\xEF\xBC\xA1\xEF\xAC\x81"), "Afi");  // fullwidth A, fi ligature
  EXPECT_EQ(apply(parse(R"({"type":"Lowercase"})"), "\xC4\xB0STANBUL"), "i\xCC\x87stanbul");
  const auto strip = parse(R"({"type":"Sequence","normalizers":[{"type":"NFD"},{"type":"StripAccents"},{"type":"NFC"}]})");
  EXPECT_EQ(apply(strip, "Me llam\xC3\xB3"), "Me llamo");
}

TEST(Normalizer, ReplacePrependAndStrip) {
  EXPECT_EQ(apply(parse(R"({"type":"Replace","pattern":{"String":" "},"content":"\u2581"})"), "a b  c"),
            "a\xE2\x96\x81" "b\xE2\x96\x81\xE2\x96\x81" "c");
  EXPECT_EQ(apply(parse(R"({"type":"Replace","pattern":{"Regex":" {2,}"},"content":" "})"), "a    b c"), "a b c");
  const auto prepend = parse(R"({"type":"Prepend","prepend":"\u2581"})");
  EXPECT_EQ(apply(prepend, "x"), "\xE2\x96\x81x");
  EXPECT_EQ(apply(prepend, ""), "");
  EXPECT_EQ(apply(parse(R"({"type":"Strip","strip_left":true,"strip_right":true})"), " \t x y\n\xE3\x80\x80"), "x y");
  EXPECT_EQ(apply(parse(R"({"type":"Strip","strip_left":false,"strip_right":true})"), "  x  "), "  x");
}

// Whether a piece still begins where the input began (Metaspace's "first" scheme needs it).
TEST(Normalizer, TracksTheInputStart) {
  bool at_start = true;
  apply(parse(R"({"type":"Strip","strip_left":true,"strip_right":false})"), "  x", &at_start);
  EXPECT_FALSE(at_start);
  apply(parse(R"({"type":"Prepend","prepend":"_"})"), "x", &at_start);
  EXPECT_TRUE(at_start);
  apply(parse(R"({"type":"Replace","pattern":{"String":" "},"content":"_"})"), " x", &at_start);
  EXPECT_TRUE(at_start);  // one character replaced in place
  apply(parse(R"({"type":"Replace","pattern":{"Regex":" +"},"content":"_"})"), "  x", &at_start);
  EXPECT_FALSE(at_start);  // aligned with the last of the two spaces
  apply(parse(R"({"type":"BertNormalizer","clean_text":true,"handle_chinese_chars":true,"strip_accents":null,
                  "lowercase":true})"), "\x01x", &at_start);
  EXPECT_FALSE(at_start);
}

TEST(Normalizer, UnsupportedOrIncompleteIsAnError) {
  EXPECT_EQ(error_of([] { parse(R"({"type":"Nmt"})"); }),
            "t.json: normalizer.type: unsupported 'Nmt' (zoo reads NFC, NFD, NFKC, NFKD, Lowercase, "
            "StripAccents, BertNormalizer, Replace, Prepend, Strip, Precompiled, Sequence)");
  EXPECT_EQ(error_of([] { parse(R"({"type":"Precompiled","precompiled_charsmap":"AAAA"})"); }),
            "t.json: normalizer.precompiled_charsmap: precompiled_charsmap is truncated (no trie size)");
  EXPECT_EQ(error_of([] { parse(R"({"type":"Sequence","normalizers":[{"type":"NFC"},{"type":"ByteLevel"}]})"); })
                .rfind("t.json: normalizer.normalizers[1].type: unsupported 'ByteLevel' (", 0),
            0u);
  EXPECT_EQ(error_of([] { parse(R"({"type":"BertNormalizer","clean_text":true})"); }),
            "t.json: normalizer: missing 'handle_chinese_chars'");
  EXPECT_EQ(error_of([] { parse(R"({"type":"Replace","pattern":{"Glob":"*"},"content":""})"); }),
            "t.json: normalizer.pattern.Glob: unsupported pattern form 'Glob' (expected String or Regex)");
}

// Hostile tokenizer.json normalizers (issue 31): a Sequence of Sequences 100,000 deep used 6 GB
// and crashed; a 10 MB Prepend hung tokenizing; 64 chained Replace a->aa exhausted memory.
TEST(Normalizer, HostileComponentsAreNamedErrors) {
  std::string nested;
  for (int i = 0; i < 100000; ++i) nested += R"({"type":"Sequence","normalizers":[)";
  nested += R"({"type":"Lowercase"})";
  for (int i = 0; i < 100000; ++i) nested += "]}";
  const std::string deep = error_of([&] { parse(nested); });
  EXPECT_EQ(deep.substr(0, 33), "t.json: normalizer.normalizers[0]");
  EXPECT_NE(deep.find(": nested more than 64 levels deep"), std::string::npos) << deep.substr(0, 200);
  // 30 Sequences (60 levels of JSON) still read.
  std::string ok;
  for (int i = 0; i < 30; ++i) ok += R"({"type":"Sequence","normalizers":[)";
  ok += R"({"type":"Lowercase"})";
  for (int i = 0; i < 30; ++i) ok += "]}";
  EXPECT_EQ(apply(parse(ok), "AB"), "ab");

  const std::string big(10 << 20, 'a');
  EXPECT_EQ(error_of([&] { parse(R"({"type":"Prepend","prepend":")" + big + R"("})"); }),
            "t.json: normalizer.prepend: 10485760 bytes, longer than the 4096 a normalizer's string may be");
  // The report's 64 chained Replace a -> aa: the text may grow to 16 times the input and 4 KiB
  // (it grew to 64 MiB, 16 s of replacing for 8 bytes of input).
  std::string doubling = R"({"type":"Sequence","normalizers":[)";
  for (int i = 0; i < 64; ++i) {
    doubling += std::string(i ? "," : "") + R"({"type":"Replace","pattern":{"String":"a"},"content":"aa"})";
  }
  doubling += "]}";
  EXPECT_EQ(error_of([&] { apply(parse(doubling), "aaaaaaaa"); }),
            "tokenizer.json: the Replace normalizer makes the text larger than 4224 bytes (16 times the input's, and "
            "4 KiB more)");
  // Growth within the bound is the normalizers' own business: 4 KiB of a's from one.
  std::string twelve = R"({"type":"Sequence","normalizers":[)";
  for (int i = 0; i < 12; ++i) {
    twelve += std::string(i ? "," : "") + R"({"type":"Replace","pattern":{"String":"a"},"content":"aa"})";
  }
  twelve += "]}";
  EXPECT_EQ(apply(parse(twelve), "a"), std::string(4096, 'a'));
  // Past 64 MiB whatever the input (a Replace of each byte by 1000).
  const std::string replace_1000 = R"({"type":"Replace","pattern":{"String":"a"},"content":")" + std::string(1000, 'b') + R"("})";
  EXPECT_EQ(error_of([&] { zoo::apply(parse(replace_1000), std::string(5 << 20, 'a')); }),
            "tokenizer.json: the Replace normalizer makes the text larger than 67108864 bytes (64 MiB, the most a "
            "text may become)");
  // Prepend counts against the same bound.
  EXPECT_EQ(error_of([&] { apply(parse(R"({"type":"Sequence","normalizers":[)" + [] {
                                  std::string p;
                                  for (int i = 0; i < 2; ++i) p += std::string(i ? "," : "") + R"({"type":"Prepend","prepend":")" + std::string(4000, 'x') + R"("})";
                                  return p;
                                }() + "]}"), "a"); }),
            "tokenizer.json: the Prepend normalizer makes the text larger than 4112 bytes (16 times the input's, and "
            "4 KiB more)");
}

}  // namespace
}  // namespace zoo
