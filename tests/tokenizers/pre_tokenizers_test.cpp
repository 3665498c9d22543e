#include "tokenizers/pre_tokenizers.h"

#include <gtest/gtest.h>

#include "base_test_util.h"
#include "json_test_util.h"

namespace zoo {
namespace {

using testing::error_of;
using Strings = std::vector<std::string>;

PreTokenizer parse(const std::string& json) { return testing::from_json_text<PreTokenizer>(json, "pre_tokenizer"); }

Strings split(const PreTokenizer& p, const std::string& text, bool at_input_start = true) {
  TextPieces pieces{{text, at_input_start, -1}};
  p.apply(pieces);
  Strings out;
  for (const auto& piece : pieces) out.push_back(piece.text);
  return out;
}

// The examples of tokenizers' doc comment on SplitDelimiterBehavior.
TEST(PreTokenizer, SplitBehaviors) {
  const std::string text = "the-final--countdown";
  const auto with = [&](const char* behavior) {
    return split(parse(std::string(R"({"type":"Split","pattern":{"String":"-"},"invert":false,"behavior":")") +
                       behavior + "\"}"),
                 text);
  };
  EXPECT_EQ(with("Removed"), (Strings{"the", "final", "countdown"}));
  EXPECT_EQ(with("Isolated"), (Strings{"the", "-", "final", "-", "-", "countdown"}));
  EXPECT_EQ(with("MergedWithPrevious"), (Strings{"the-", "final-", "-", "countdown"}));
  EXPECT_EQ(with("MergedWithNext"), (Strings{"the", "-final", "-", "-countdown"}));
  EXPECT_EQ(with("Contiguous"), (Strings{"the", "-", "final", "--", "countdown"}));
  // Inverted: the pattern finds the words, and what lies between them is the delimiter.
  const auto inverted = parse(R"({"type":"Split","pattern":{"Regex":"\\w+|[^\\w\\s]+"},"behavior":"Removed","invert":true})");
  EXPECT_EQ(split(inverted, "How are you doing?"), (Strings{"How", "are", "you", "doing", "?"}));
}

// The expectations of tokenizers' pre_tokenizers/byte_level.rs tests.
TEST(PreTokenizer, ByteLevel) {
  const auto no_prefix = parse(R"({"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":true})");
  EXPECT_EQ(split(no_prefix, "Hello my friend, how is your day going?"),
            (Strings{"Hello", "\xC4\xA0my", "\xC4\xA0" "friend", ",", "\xC4\xA0how", "\xC4\xA0is", "\xC4\xA0your",
                     "\xC4\xA0" "day", "\xC4\xA0going", "?"}));
  const auto prefix = parse(R"({"type":"ByteLevel","add_prefix_space":true,"trim_offsets":true})");
  EXPECT_EQ(split(prefix, "Hello"), (Strings{"\xC4\xA0Hello"}));
  EXPECT_EQ(split(prefix, " Hello"), (Strings{"\xC4\xA0Hello"}));
  const auto no_regex = parse(R"({"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":false})");
  EXPECT_EQ(split(no_regex, "a b\n"), (Strings{"a\xC4\xA0" "b\xC4\x8A"}));
}

TEST(PreTokenizer, BertWhitespaceAndPunctuation) {
  // tokenizers' pre_tokenizers/bert.rs and punctuation.rs examples.
  EXPECT_EQ(split(parse(R"({"type":"BertPreTokenizer"})"), "Hey friend!     How are you?!?"),
            (Strings{"Hey", "friend", "!", "How", "are", "you", "?", "!", "?"}));
  EXPECT_EQ(split(parse(R"({"type":"Punctuation"})"), "Hey friend!     How are you?!?"),
            (Strings{"Hey friend", "!", "     How are you", "?", "!", "?"}));
  EXPECT_EQ(split(parse(R"({"type":"Punctuation","behavior":"Contiguous"})"), "Hey!?"), (Strings{"Hey", "!?"}));
  // BERT also splits on ASCII symbols ('$' is Sc, '+' Sm) and on U+3000 (White_Space).
  EXPECT_EQ(split(parse(R"({"type":"BertPreTokenizer"})"), "a$b+c\xE3\x80\x80" "d"),
            (Strings{"a", "$", "b", "+", "c", "d"}));
  // whitespace.rs examples.
  EXPECT_EQ(split(parse(R"({"type":"Whitespace"})"), "Hey man!"), (Strings{"Hey", "man", "!"}));
  EXPECT_EQ(split(parse(R"({"type":"Whitespace"})"), "\n"), Strings{});
  EXPECT_EQ(split(parse(R"({"type":"WhitespaceSplit"})"), "Hey man!"), (Strings{"Hey", "man!"}));
}

TEST(PreTokenizer, DigitsAndSequence) {
  // digits.rs examples.
  EXPECT_EQ(split(parse(R"({"type":"Digits","individual_digits":true})"), "Hey 123 friend!"),
            (Strings{"Hey ", "1", "2", "3", " friend!"}));
  EXPECT_EQ(split(parse(R"({"type":"Digits","individual_digits":false})"), "Hey 123 friend!"),
            (Strings{"Hey ", "123", " friend!"}));
  EXPECT_EQ(split(parse(R"({"type":"Sequence","pretokenizers":[{"type":"WhitespaceSplit"},
                                                              {"type":"Digits","individual_digits":true}]})"),
                  "Hey 12 friend!"),
            (Strings{"Hey", "1", "2", "friend!"}));
}

// metaspace.rs examples, and the three prepend schemes.
TEST(PreTokenizer, Metaspace) {
  const std::string m = "\xE2\x96\x81";
  const auto always = parse(R"({"type":"Metaspace","replacement":"\u2581","prepend_scheme":"always","split":true})");
  EXPECT_EQ(split(always, "Hey friend!"), (Strings{m + "Hey", m + "friend!"}));
  EXPECT_EQ(split(always, "Hey   friend!"), (Strings{m + "Hey", m, m, m + "friend!"}));
  EXPECT_EQ(split(always, "Hey", false), (Strings{m + "Hey"}));
  const auto first = parse(R"({"type":"Metaspace","replacement":"\u2581","prepend_scheme":"first","split":false})");
  EXPECT_EQ(split(first, "Hey friend"), (Strings{m + "Hey" + m + "friend"}));
  EXPECT_EQ(split(first, "Hey friend", false), (Strings{"Hey" + m + "friend"}));
  const auto never = parse(R"({"type":"Metaspace","replacement":"_","prepend_scheme":"never","split":true})");
  EXPECT_EQ(split(never, "Hey friend"), (Strings{"Hey", "_friend"}));
  // Older files: add_prefix_space instead of prepend_scheme.
  EXPECT_EQ(split(parse(R"({"type":"Metaspace","replacement":"_","add_prefix_space":true})"), "a b"), (Strings{"_a", "_b"}));
  EXPECT_EQ(error_of([] { parse(R"({"type":"Metaspace","replacement":"_","add_prefix_space":false,"prepend_scheme":"always"})"); }),
            "t.json: pre_tokenizer.add_prefix_space: false contradicts prepend_scheme (which must then be 'never')");
}

TEST(PreTokenizer, AddedTokensAreLeftAlone) {
  TextPieces pieces{{"a b", true, -1}, {"<s> x", false, 7}, {"c", false, -1}};
  parse(R"({"type":"WhitespaceSplit"})").apply(pieces);
  ASSERT_EQ(pieces.size(), 4u);
  EXPECT_EQ(pieces[2].text, "<s> x");
  EXPECT_EQ(pieces[2].added_token, 7);
  EXPECT_TRUE(pieces[0].at_input_start);
  EXPECT_FALSE(pieces[1].at_input_start);
}

TEST(PreTokenizer, UnsupportedIsAnErrorNamingThePath) {
  EXPECT_EQ(error_of([] { parse(R"({"type":"Sequence","pretokenizers":[{"type":"WhitespaceSplit"},{"type":"UnicodeScripts"}]})"); }),
            "t.json: pre_tokenizer.pretokenizers[1].type: unsupported 'UnicodeScripts' (zoo reads ByteLevel, "
            "BertPreTokenizer, Whitespace, WhitespaceSplit, Metaspace, Digits, Punctuation, Split, Sequence)");
  EXPECT_EQ(error_of([] { parse(R"({"type":"Split","pattern":{"String":"-"},"behavior":"Dropped","invert":false})"); }),
            "t.json: pre_tokenizer.behavior: unsupported 'Dropped' (zoo reads Removed, Isolated, MergedWithPrevious, "
            "MergedWithNext, Contiguous)");
  EXPECT_EQ(error_of([] { parse(R"({"type":"ByteLevel","trim_offsets":true})"); }),
            "t.json: pre_tokenizer: missing 'add_prefix_space'");
}

}  // namespace
}  // namespace zoo
