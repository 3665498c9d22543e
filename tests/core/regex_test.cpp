#include "core/regex.h"

#include <gtest/gtest.h>

#include "base_test_util.h"
#include "tokenizers/byte_level.h"

namespace zoo {
namespace {

using testing::error_of;

std::vector<std::string> matches(const Regex& r, const std::string& text) {
  std::vector<std::string> out;
  for (const auto& [b, e] : r.find_all(text)) out.push_back(text.substr(b, e - b));
  return out;
}

// openai/gpt-2's pattern on a worked example: contractions, a leading-space word, digits, and
// whitespace runs, where \s+(?!\S) leaves the last space to the word after it.
TEST(Regex, Gpt2PatternSplitsAsEncoderPyDoes) {
  const Regex gpt2(kGpt2SplitPattern, "test");
  EXPECT_EQ(matches(gpt2, "Hello world's 123  test\n\n"),
            (std::vector<std::string>{"Hello", " world", "'s", " 123", " ", " test", "\n\n"}));
  EXPECT_EQ(matches(gpt2, "I'm   fine!?"), (std::vector<std::string>{"I", "'m", "  ", " fine", "!?"}));
  // U+3000 IDEOGRAPHIC SPACE is White_Space; U+00A0 NO-BREAK SPACE too.
  EXPECT_EQ(matches(gpt2, "a\xE3\x80\x80" "b"), (std::vector<std::string>{"a", "\xE3\x80\x80", "b"}));
}

TEST(Regex, TranslatesOnigurumaEscapes) {
  EXPECT_EQ(oniguruma_to_pcre2(R"(\s+)", "t"), R"(\p{White_Space}+)");
  EXPECT_EQ(oniguruma_to_pcre2(R"([^\s\p{L}])", "t"), R"([^\p{White_Space}\p{L}])");
  EXPECT_EQ(oniguruma_to_pcre2(R"(\w)", "t"), R"([\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\p{Join_Control}])");
  EXPECT_EQ(oniguruma_to_pcre2(R"(\h+)", "t"), "[0-9a-fA-F]+");
  EXPECT_EQ(oniguruma_to_pcre2(R"((?im:a.)b)", "t"), R"((?is:a.)b)");
  EXPECT_EQ(oniguruma_to_pcre2(R"([]a])", "t"), R"([]a])");
  EXPECT_EQ(oniguruma_to_pcre2(R"([[:alpha:]\d])", "t"), R"([[:alpha:]\d])");
}

TEST(Regex, RefusesWhatHasNoExactTranslation) {
  EXPECT_EQ(error_of([] { Regex(R"([\W])", "f.json: p"); }),
            "f.json: p: pattern '[\\W]': \\W inside a character class has no exact PCRE2 equivalent and is not supported");
  EXPECT_NE(error_of([] { Regex(R"(\bword)", "p"); }).find("the word boundary \\b"), std::string::npos);
  EXPECT_NE(error_of([] { Regex(R"([a-z&&[^aeiou]])", "p"); }).find("class intersection"), std::string::npos);
  EXPECT_NE(error_of([] { Regex("(unclosed", "p"); }).find("does not compile"), std::string::npos);
}

// Rust's find_iter: an empty match right after a match is skipped, and the search moves on.
TEST(Regex, EmptyMatchesFollowRustsIterator) {
  const Regex r("a*", "t");
  const auto s = r.spans("baa");
  ASSERT_EQ(s.size(), 3u);
  EXPECT_TRUE(s[0].is_match && s[0].begin == 0 && s[0].end == 0);
  EXPECT_TRUE(!s[1].is_match && s[1].begin == 0 && s[1].end == 1);
  EXPECT_TRUE(s[2].is_match && s[2].begin == 1 && s[2].end == 3);
  const auto empty = r.spans("");
  ASSERT_EQ(empty.size(), 1u);
  EXPECT_FALSE(empty[0].is_match);
}

TEST(Regex, LiteralsMatchOnlyThemselves) {
  const Regex dot = Regex::literal("a.b", "t");
  EXPECT_EQ(matches(dot, "axb a.b"), (std::vector<std::string>{"a.b"}));
  const Regex quote_end = Regex::literal("x\\Ey", "t");
  EXPECT_EQ(matches(quote_end, "x\\Ey x\\E"), (std::vector<std::string>{"x\\Ey"}));
}

TEST(Regex, RubySemantics) {
  // ^ is a line anchor in Ruby's syntax; (?i) folds case.
  EXPECT_EQ(matches(Regex("^x", "t"), "x\nx"), (std::vector<std::string>{"x", "x"}));
  EXPECT_EQ(matches(Regex("(?i:'s)", "t"), "it'S"), (std::vector<std::string>{"'S"}));
}

TEST(Regex, LongWhitespaceRunsDoNotExhaustTheStack) {
  const Regex r(R"(\s+(?!\S)|\s+)", "t");
  const std::string text = std::string(200000, ' ') + "a";
  const auto m = r.find_all(text);
  ASSERT_EQ(m.size(), 2u);  // all spaces but the last, then the last one alone
  EXPECT_EQ(m[0].second, 200000u - 1);
}

}  // namespace
}  // namespace zoo
