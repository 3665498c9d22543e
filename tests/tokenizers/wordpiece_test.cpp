#include "tokenizers/wordpiece.h"

#include <gtest/gtest.h>

#include "base_test_util.h"
#include "json_test_util.h"

namespace zoo::testing {
namespace {

WordPieceModel parse(const std::string& json) { return model_from_json<WordPieceModel>(json); }


const char* kVocab = R"({"[UNK]":0,"un":1,"##aff":2,"##able":3,"a":4,"##ff":5,"##a":6,"caf":7,"##\u00e9":8,"\u00e9":9})";

// Google's BERT README example, "unaffable" -> un ##aff ##able: greedy longest match.
TEST(WordPieceModel, GreedyLongestMatch) {
  const auto m = parse(std::string(R"({"type":"WordPiece","unk_token":"[UNK]","continuing_subword_prefix":"##",
                                      "max_input_chars_per_word":100,"vocab":)") + kVocab + "}");
  EXPECT_EQ(tokenize(m, "unaffable"), (Ids{1, 2, 3}));
  EXPECT_EQ(tokenize(m, "aff"), (Ids{4, 5}));
  EXPECT_EQ(tokenize(m, "caf\xC3\xA9"), (Ids{7, 8}));  // the longest match counts characters, not bytes
  EXPECT_EQ(tokenize(m, "unaffablex"), (Ids{0}));      // an uncuttable rest makes the whole word unknown
  EXPECT_EQ(tokenize(m, "xa"), (Ids{0}));
}

TEST(WordPieceModel, LongWordsAreUnknown) {
  const auto m = parse(std::string(R"({"type":"WordPiece","unk_token":"[UNK]","continuing_subword_prefix":"##",
                                      "max_input_chars_per_word":4,"vocab":)") + kVocab + "}");
  EXPECT_EQ(tokenize(m, "aaaa"), (Ids{4, 6, 6, 6}));
  EXPECT_EQ(tokenize(m, "aaaaa"), (Ids{0}));
  EXPECT_EQ(tokenize(m, "\xC3\xA9\xC3\xA9\xC3\xA9\xC3\xA9"), (Ids{9, 8, 8, 8}));  // 4 characters, 8 bytes
}

TEST(WordPieceModel, VocabTxtAndErrors) {
  WordPieceOptions options;
  const auto m = WordPieceModel::from_vocab_txt("[UNK]\r\nhello\n##s\nhello\n", "vocab.txt", options);
  EXPECT_EQ(*m.vocabulary().find("##s"), 2);
  EXPECT_EQ(*m.vocabulary().find("hello"), 3);  // a repeated line takes the later number
  EXPECT_EQ(tokenize(m, "hellos"), (Ids{3, 2}));
  EXPECT_EQ(error_of([&] { WordPieceModel::from_vocab_txt("a\nb\n", "dir/vocab.txt", options); }),
            "dir/vocab.txt: the unk token '[UNK]' is not in it");
  EXPECT_EQ(error_of([] { parse(R"({"type":"WordPiece","unk_token":"[UNK]","vocab":{"[UNK]":0}})"); }),
            "t.json: model: missing 'continuing_subword_prefix'");
}

}  // namespace
}  // namespace zoo::testing
