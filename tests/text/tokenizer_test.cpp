#include "text/tokenizer.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "core/files.h"
#include "test_util.h"

namespace zoo {
namespace {

namespace fs = std::filesystem;
using testing::error_of;

fs::path scratch(const std::string& name) { return testing::scratch_path(name); }

// A slice of the default corpus (real English prose with code words and punctuation).
std::string corpus_slice(size_t bytes) {
  auto text = read_file(testing::shared_corpus());
  return text.substr(0, text.rfind('\n', bytes) + 1);
}

Tokenizer trained(TokenizerKind kind = TokenizerKind::kUnigram) {
  auto input = scratch("slice.txt");
  write_file_atomically(input.string(), corpus_slice(400000));
  TokenizerTrainOptions o;
  o.inputs = {input.string()};
  o.vocab_size = 1500;
  o.kind = kind;
  return Tokenizer::train(o, scratch(kind == TokenizerKind::kBpe ? "bpe" : "unigram").string());
}

TEST(Tokenizer, SpecialTokensSitAtTheirFixedIds) {
  auto t = trained();
  EXPECT_EQ(t.vocab_size(), 1500);
  EXPECT_EQ(t.piece(SpecialTokens::kPad), "<pad>");
  EXPECT_EQ(t.piece(SpecialTokens::kEos), "</s>");
  EXPECT_EQ(t.piece(SpecialTokens::kCls), "[CLS]");
  EXPECT_EQ(t.piece(SpecialTokens::kMask), "[MASK]");
  EXPECT_EQ(t.piece(t.sentinel(0)), "<extra_id_0>");
  EXPECT_EQ(t.piece(t.sentinel(99)), "<extra_id_99>");
  EXPECT_TRUE(t.is_special(106));
  EXPECT_FALSE(t.is_special(107));
  EXPECT_TRUE(fs::exists(scratch("unigram.model")));
  EXPECT_TRUE(fs::exists(scratch("unigram.vocab")));
  // Loading the written model gives the same tokenizer.
  auto again = Tokenizer::load(scratch("unigram").string());
  EXPECT_EQ(again.hash(), t.hash());
}

// Every line of corpus text encodes to the same ids as python3-sentencepiece with the model.
TEST(Tokenizer, MatchesPythonSentencePieceOnTheCorpus) {
  for (auto kind : {TokenizerKind::kUnigram, TokenizerKind::kBpe}) {
    auto t = trained(kind);
    const std::string model = scratch(kind == TokenizerKind::kBpe ? "bpe.model" : "unigram.model").string();
    // Held-out text (past the training slice), plus lines the training never saw.
    auto text = corpus_slice(600000).substr(400000);
    text += "Ünïcödé, 日本語のテキスト, emoji 🙂 and bytes never seen: ₿ ∮ ⟁\n";
    auto input = scratch("parity_in.txt"), output = scratch("parity_out.txt");
    write_file_atomically(input.string(), text);
    const std::string cmd = std::string(ZOO_TEST_PYTHON) + " " + ZOO_SOURCE_DIR +
                            "/tests/reference/spm_encode.py " + model + " " + input.string() + " " +
                            output.string();
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    std::istringstream ours(text), theirs(read_file(output.string()));
    std::string line, expected;
    int64_t lines = 0;
    while (std::getline(ours, line)) {
      ASSERT_TRUE(std::getline(theirs, expected));
      std::string got;
      for (int64_t id : t.encode(line)) got += (got.empty() ? "" : " ") + std::to_string(id);
      ASSERT_EQ(got, expected) << "line " << lines << ": " << line;
      ++lines;
    }
    EXPECT_GT(lines, 100);
  }
}

TEST(Tokenizer, RoundTripsNonAsciiTextThroughByteFallback) {
  auto t = trained();
  for (const std::string text : {"Héllo wörld — naïve café", "日本語のテキスト", "Ελληνικά και кириллица",
                                 "emoji 🙂🚀 and ₿", "tabs\tand \"quotes\" and [brackets]"}) {
    auto ids = t.encode(text);
    EXPECT_FALSE(ids.empty());
    for (int64_t id : ids) EXPECT_NE(id, SpecialTokens::kUnk) << text;
    // SentencePiece's default normalisation maps tabs to spaces; the rest is exact.
    std::string expected = text;
    std::replace(expected.begin(), expected.end(), '\t', ' ');
    EXPECT_EQ(t.decode(ids), expected);
  }
}

TEST(Tokenizer, WordStartsFollowTheBoundaryMark) {
  auto t = trained();
  auto pieces = t.encode_pieces("the tokenizer");
  auto ids = t.encode("the tokenizer");
  ASSERT_EQ(pieces.size(), ids.size());
  EXPECT_TRUE(t.starts_word(ids[0]));
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(t.starts_word(ids[i]), pieces[i].rfind("\xE2\x96\x81", 0) == 0);
}

TEST(Tokenizer, BadInputsAreClearErrors) {
  auto dir = scratch("inputs");
  fs::create_directories(dir);
  auto bad_utf8 = dir / "bad.txt";
  std::ofstream(bad_utf8) << "fine line\nbroken \xC3\x28 here\n";
  TokenizerTrainOptions o;
  o.vocab_size = 500;
  o.inputs = {bad_utf8.string()};
  EXPECT_EQ(error_of([&] { Tokenizer::train(o, scratch("bad").string()); }),
            bad_utf8.string() + ":2: invalid UTF-8 at byte offset 17");
  EXPECT_FALSE(fs::exists(scratch("bad.model")));  // nothing half-written
  o.inputs = {(dir / "missing.txt").string()};
  EXPECT_EQ(error_of([&] { Tokenizer::train(o, scratch("bad").string()); }),
            (dir / "missing.txt").string() + ": no such file or directory");
  auto empty_dir = scratch("empty_dir");
  fs::create_directories(empty_dir);
  o.inputs = {empty_dir.string()};
  EXPECT_EQ(error_of([&] { Tokenizer::train(o, scratch("bad").string()); }),
            empty_dir.string() + ": directory has no files");
  auto empty = dir / "empty.txt";
  std::ofstream(empty) << "\n\n";
  o.inputs = {empty.string()};
  EXPECT_EQ(error_of([&] { Tokenizer::train(o, scratch("bad").string()); }),
            "tokenizer: the inputs contain no text: " + empty.string() + " is empty (or only blank lines)");
  auto also_empty = dir / "also-empty.txt";
  std::ofstream(also_empty) << " \t\n";
  o.inputs = {empty.string(), also_empty.string()};
  EXPECT_EQ(error_of([&] { Tokenizer::train(o, scratch("bad").string()); }),
            "tokenizer: the inputs contain no text: " + empty.string() + " and " + also_empty.string() +
                " are empty (or only blank lines)");
  auto small = dir / "small.txt";
  std::ofstream(small) << "a tiny corpus with few words\nand not many more\n";
  o.inputs = {small.string()};
  o.vocab_size = 5000;
  EXPECT_NE(error_of([&] { Tokenizer::train(o, scratch("bad").string()); }).find("vocab_size 5000 is too large for this corpus"),
            std::string::npos);
  EXPECT_FALSE(fs::exists(scratch("bad.model")));
  o.vocab_size = 300;
  EXPECT_NE(error_of([&] { Tokenizer::train(o, scratch("bad").string()); }).find("must exceed 363"), std::string::npos);
  EXPECT_NE(error_of([&] { Tokenizer::load(small.string()); }).find("not a SentencePiece model"), std::string::npos);
  EXPECT_NE(error_of([&] { Tokenizer::load((dir / "nope.model").string()); }).find("cannot open"), std::string::npos);
}

TEST(Tokenizer, InvalidLinesCanBeSkipped) {
  auto input = scratch("mixed.txt");
  write_file_atomically(input.string(), corpus_slice(200000) + "broken \xFF line\n");
  TokenizerTrainOptions o;
  o.inputs = {input.string()};
  o.vocab_size = 800;
  o.skip_invalid_utf8 = true;
  EXPECT_EQ(Tokenizer::train(o, scratch("skipped").string()).vocab_size(), 800);
}

TEST(Utf8, FindsTheFirstInvalidByte) {
  EXPECT_EQ(invalid_utf8_offset("plain ascii"), -1);
  EXPECT_EQ(invalid_utf8_offset("caf\xC3\xA9 \xF0\x9F\x99\x82"), -1);
  EXPECT_EQ(invalid_utf8_offset("ab\xC3"), 2);            // truncated sequence
  EXPECT_EQ(invalid_utf8_offset("a\xC0\xAF"), 1);         // overlong
  EXPECT_EQ(invalid_utf8_offset("x\xED\xA0\x80"), 1);     // surrogate
  EXPECT_EQ(invalid_utf8_offset("\x80"), 0);              // stray continuation
}

}  // namespace
}  // namespace zoo
