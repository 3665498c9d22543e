#include "tokenizers/bpe.h"

#include <gtest/gtest.h>

#include "base_test_util.h"
#include "json_test_util.h"

namespace zoo::testing {
namespace {

BpeModel parse(const std::string& json) { return model_from_json<BpeModel>(json); }


// Worked by hand: merges apply by rank, the lowest first, whatever their position.
TEST(BpeModel, MergesByRank) {
  const std::string vocab = R"("a":0,"b":1,"c":2,"ab":3,"bc":4,"abc":5,"aa":6)";
  // (b, c) ranks before (a, b): "abc" -> a bc -> no (a, bc) merge -> [a, bc].
  auto m = parse(R"({"type":"BPE","vocab":{)" + vocab + R"(},"merges":["b c","a b"]})");
  EXPECT_EQ(tokenize(m, "abc"), (Ids{0, 4}));
  // (a, b) first, then (ab, c): [abc]. Pairs written as arrays mean the same.
  m = parse(R"({"type":"BPE","vocab":{)" + vocab + R"(},"merges":[["a","b"],["ab","c"],["b","c"]]})");
  EXPECT_EQ(tokenize(m, "abc"), (Ids{5}));
  EXPECT_EQ(tokenize(m, "cab"), (Ids{2, 3}));
  // Equal ranks merge from the left: "aaa" -> [aa, a].
  m = parse(R"({"type":"BPE","vocab":{)" + vocab + R"(},"merges":["a a"]})");
  EXPECT_EQ(tokenize(m, "aaa"), (Ids{6, 0}));
  EXPECT_EQ(tokenize(m, "aaaa"), (Ids{6, 6}));
  EXPECT_EQ(tokenize(m, ""), Ids{});
}

TEST(BpeModel, UnknownCharacters) {
  const std::string vocab = R"({"<unk>":0,"a":1,"b":2,"<0x78>":3,"<0xC3>":4,"<0xA9>":5})";
  auto m = parse(R"({"type":"BPE","unk_token":"<unk>","fuse_unk":false,"vocab":)" + vocab + R"(,"merges":[]})");
  EXPECT_EQ(tokenize(m, "axyb"), (Ids{1, 0, 0, 2}));
  m = parse(R"({"type":"BPE","unk_token":"<unk>","fuse_unk":true,"vocab":)" + vocab + R"(,"merges":[]})");
  EXPECT_EQ(tokenize(m, "axyb"), (Ids{1, 0, 2}));
  // Byte fallback spells what it can; 'y' (0x79) has no byte token, so it stays unknown.
  m = parse(R"({"type":"BPE","unk_token":"<unk>","byte_fallback":true,"vocab":)" + vocab + R"(,"merges":[]})");
  EXPECT_EQ(tokenize(m, "x\xC3\xA9y"), (Ids{3, 4, 5, 0}));
  // Without an unk token, unknown characters vanish (tokenizers drops them).
  m = parse(R"({"type":"BPE","vocab":)" + vocab + R"(,"merges":[]})");
  EXPECT_EQ(tokenize(m, "axb"), (Ids{1, 2}));
}

TEST(BpeModel, AffixesAndIgnoreMerges) {
  // Subword prefix before every symbol but the first, suffix after the last; the merged token
  // drops the second part's prefix.
  auto m = parse(R"({"type":"BPE","continuing_subword_prefix":"##","end_of_word_suffix":"</w>",
                     "vocab":{"a":0,"##b":1,"##c</w>":2,"ab":3,"abc</w>":5},
                     "merges":[["a","##b"],["ab","##c</w>"]]})");
  EXPECT_EQ(tokenize(m, "abc"), (Ids{5}));
  m = parse(R"({"type":"BPE","ignore_merges":true,"vocab":{"a":0,"b":1,"ab":2,"abab":3},"merges":["a b"]})");
  EXPECT_EQ(tokenize(m, "abab"), (Ids{3}));  // found whole, though no merge makes it
  EXPECT_EQ(tokenize(m, "aba"), (Ids{2, 0}));
}

TEST(BpeModel, BadModelsAreErrorsNamingThePath) {
  EXPECT_EQ(error_of([] { parse(R"({"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":["a b","b zz"]})"); }),
            "t.json: model.merges[1]: 'zz' is not in t.json: model.vocab");
  EXPECT_EQ(error_of([] { parse(R"({"type":"BPE","vocab":{"a":0,"b":1},"merges":["a b"]})"); }),
            "t.json: model.merges[0]: 'ab' is not in t.json: model.vocab");
  EXPECT_EQ(error_of([] { parse(R"({"type":"BPE","vocab":{"a":0},"merges":["a b c"]})"); }),
            "t.json: model.merges[0]: expected two tokens separated by one space, found 'a b c'");
  EXPECT_EQ(error_of([] { parse(R"({"type":"BPE","vocab":{"a":0},"merges":[["a"]]})"); }),
            "t.json: model.merges[0]: expected a pair of tokens, found 1 elements");
  EXPECT_EQ(error_of([] { parse(R"({"type":"BPE","vocab":{"a":-1},"merges":[]})"); }),
            "t.json: model.vocab.a: id -1 is outside [0, 2^31)");
  EXPECT_EQ(error_of([] { parse(R"({"type":"BPE","unk_token":"<unk>","vocab":{"a":0},"merges":[]})"); }),
            "t.json: model.vocab: the unk token '<unk>' is not in it");
  EXPECT_NE(error_of([] { parse(R"({"type":"BPE","dropout":0.1,"vocab":{"a":0},"merges":[]})"); })
                .find("t.json: model.dropout: BPE dropout (0.100000) samples different merges"),
            std::string::npos);
  EXPECT_EQ(error_of([] { parse(R"({"type":"BPE","dropout":0.0,"vocab":{"a":0},"merges":[]})"); }), "no error");
  EXPECT_EQ(error_of([] { parse(R"({"type":"BPE","vocab":{"a":0}})"); }), "t.json: model: missing 'merges'");
}

TEST(BpeModel, Gpt2MergesFile) {
  const std::string vocab = R"({"a":0,"b":1,"ab":2})";
  const auto m = BpeModel::from_gpt2_files(vocab, "vocab.json", "#version: 0.2\na b\n", "merges.txt");
  EXPECT_EQ(tokenize(m, "ab"), (Ids{2}));
  EXPECT_EQ(*m.vocabulary().token(2), "ab");
  EXPECT_EQ(error_of([&] { BpeModel::from_gpt2_files(vocab, "vocab.json", "#version: 0.2\na b\nab\n", "merges.txt"); }),
            "merges.txt:3: expected two tokens separated by one space, found 'ab'");
  EXPECT_EQ(error_of([&] { BpeModel::from_gpt2_files(vocab, "vocab.json", "a x\n", "merges.txt"); }),
            "merges.txt:1: 'x' is not in vocab.json");
  EXPECT_NE(error_of([&] { BpeModel::from_gpt2_files("{\"a\": 0,", "vocab.json", "", "merges.txt"); })
                .find("vocab.json: not valid JSON"),
            std::string::npos);
}

}  // namespace
}  // namespace zoo::testing
