#include "tokenizers/tokenizer.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <gtest/gtest.h>

#include "base_test_util.h"
#include "core/files.h"
#include "reference_texts.h"

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

// Every line of corpus text encodes to the same ids as the sentencepiece package with the model,
// or to another segmentation of equal total score where the two break an exact tie differently
// (tests/reference/spm_encode.py); such ties are rare.
TEST(Tokenizer, MatchesPythonSentencePieceOnTheCorpus) {
  for (auto kind : {TokenizerKind::kUnigram, TokenizerKind::kBpe}) {
    auto t = trained(kind);
    const std::string model = scratch(kind == TokenizerKind::kBpe ? "bpe.model" : "unigram.model").string();
    // Held-out text (past the training slice), plus lines the training never saw.
    auto text = corpus_slice(600000).substr(400000);
    text += "Ünïcödé, 日本語のテキスト, emoji 🙂 and bytes never seen: ₿ ∮ ⟁\n";
    std::istringstream lines_in(text);
    std::string ours;
    int64_t lines = 0;
    for (std::string line; std::getline(lines_in, line); ++lines) {
      std::string ids;
      for (int64_t id : t.encode(line)) ids += (ids.empty() ? "" : " ") + std::to_string(id);
      ours += ids + "\n";
    }
    auto input = scratch("parity_in.txt"), zoo_ids = scratch("parity_zoo.txt"), output = scratch("parity_out.txt");
    write_file_atomically(input.string(), text);
    write_file_atomically(zoo_ids.string(), ours);
    const std::string cmd = testing::reference_python() + " " + ZOO_SOURCE_DIR + "/tests/reference/spm_encode.py " + model +
                            " " + input.string() + " " + zoo_ids.string() + " " + output.string();
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    std::istringstream verdicts(read_file(output.string())), again(text);
    int64_t same = 0, ties = 0;
    std::string verdict, line;
    for (int64_t i = 0; std::getline(verdicts, verdict) && std::getline(again, line); ++i) {
      ASSERT_TRUE(verdict == "same" || verdict == "tie") << "line " << i << ": " << line << "\n" << verdict;
      (verdict == "same" ? same : ties) += 1;
    }
    EXPECT_EQ(same + ties, lines);
    EXPECT_GT(lines, 100);
    EXPECT_LE(ties * 100, lines) << ties << " ties in " << lines << " lines";
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

// Old checkpoints store zoo's SentencePiece model as tokenizer.model: it loads as a file or as
// the only file of a directory, keeps its raw bytes (and so its hash) and its fixed ids.
TEST(Tokenizer, ZooModelsLoadAsBefore) {
  auto t = trained();
  const auto dir = scratch("checkpoint");
  fs::create_directories(dir);
  write_file_atomically((dir / "tokenizer.model").string(), t.model_bytes());
  for (const auto& path : {(dir / "tokenizer.model").string(), dir.string()}) {
    const auto again = Tokenizer::load(path);
    EXPECT_EQ(again.kind(), TokenizerBackend::kZooSentencePiece) << path;
    EXPECT_EQ(again.model_bytes(), t.model_bytes());
    EXPECT_EQ(again.hash(), t.hash());
  }
  EXPECT_EQ(read_file(scratch("unigram.model").string()), t.model_bytes());
  const auto& s = t.special();
  EXPECT_EQ(s.pad, SpecialTokens::kPad);
  EXPECT_EQ(s.mask, SpecialTokens::kMask);
  EXPECT_EQ(s.sentinels.size(), 100u);
  EXPECT_EQ(t.sentinel(99), 106);
  EXPECT_EQ(t.encode("a sentence", true), t.encode("a sentence"));  // zoo's tokenizers add nothing
  EXPECT_EQ(*t.token_to_id("[CLS]"), SpecialTokens::kCls);
  EXPECT_EQ(t.decode({SpecialTokens::kCls, t.encode("word").front()}, true), t.decode({t.encode("word").front()}));
  const auto saved = scratch("saved_zoo");
  t.save(saved.string());
  EXPECT_EQ(read_file((saved / "tokenizer.model").string()), t.model_bytes());
  EXPECT_NE(error_of([&] { t.sentinel(100); }).find("no sentinel <extra_id_100>"), std::string::npos);
}

// A checkpoint keeps zoo's tokenizer as tokenizer.model (as old checkpoints do) and a Hugging Face
// tokenizer as its own files under tokenizer/; either reads back as the same tokenizer.
TEST(Tokenizer, CheckpointStorageKeepsEitherKind) {
  EXPECT_EQ(stored_tokenizer(scratch("no_tokenizer_here").string()), nullptr);
  const auto zoo_dir = scratch("stored_zoo");
  fs::create_directories(zoo_dir);
  const auto t = trained();
  store_tokenizer(t, zoo_dir.string());
  EXPECT_EQ(read_file((zoo_dir / "tokenizer.model").string()), t.model_bytes());
  EXPECT_FALSE(fs::exists(zoo_dir / "tokenizer"));
  EXPECT_EQ(stored_tokenizer(zoo_dir.string())->hash(), t.hash());

  const auto hf_dir = scratch("stored_hf");
  fs::create_directories(hf_dir);
  const auto gpt2 = Tokenizer::load(testing::reference_file("gpt2-files"));
  store_tokenizer(gpt2, hf_dir.string());
  EXPECT_FALSE(fs::exists(hf_dir / "tokenizer.model"));
  EXPECT_EQ(read_file((hf_dir / "tokenizer" / "merges.txt").string()),
            read_file(testing::reference_file("gpt2-files/merges.txt")));
  EXPECT_TRUE(has_hf_tokenizer((hf_dir / "tokenizer").string()));
  const auto back = stored_tokenizer(hf_dir.string());
  ASSERT_NE(back, nullptr);
  EXPECT_EQ(back->kind(), TokenizerBackend::kGpt2Files);
  EXPECT_EQ(back->hash(), gpt2.hash());
  EXPECT_EQ(back->encode("Hello world"), (std::vector<int64_t>{15496, 995}));  // GPT-2's published ids
  write_file_atomically((hf_dir / "tokenizer" / "vocab.json").string(), "{\"a\": ");
  EXPECT_NE(error_of([&] { stored_tokenizer(hf_dir.string()); }).find("vocab.json"), std::string::npos);
}

// Issue 52: `zoo tokenizer encode --model CHECKPOINT` on a checkpoint of import-hf answered "no
// tokenizer (looked for tokenizer.json, ...)": the checkpoint keeps a Hugging Face tokenizer in
// CHECKPOINT/tokenizer/. Every command that takes a tokenizer loads it through Tokenizer::load.
TEST(Tokenizer, ACheckpointOrRunDirectoryGivesTheTokenizerItKeeps) {
  const auto gpt2 = Tokenizer::load(testing::reference_file("gpt2-files"));
  const auto checkpoint = scratch("checkpoint_with_gpt2");
  fs::create_directories(checkpoint);
  write_file_atomically((checkpoint / "config.yaml").string(), "family: gpt\n");
  store_tokenizer(gpt2, checkpoint.string());
  EXPECT_EQ(tokenizer_directory(checkpoint.string()), (checkpoint / "tokenizer").string());
  const auto loaded = Tokenizer::load(checkpoint.string());
  EXPECT_EQ(loaded.kind(), TokenizerBackend::kGpt2Files);
  EXPECT_EQ(loaded.hash(), gpt2.hash());
  EXPECT_EQ(loaded.encode("Hello world"), (std::vector<int64_t>{15496, 995}));  // GPT-2's published ids
  // zoo's own tokenizer sits in the directory itself, as does a Hugging Face directory's.
  const auto run = scratch("run_with_zoo_tokenizer");
  fs::create_directories(run);
  const auto own = trained();
  store_tokenizer(own, run.string());
  EXPECT_EQ(tokenizer_directory(run.string()), run.string());
  EXPECT_EQ(Tokenizer::load(run.string()).hash(), own.hash());
  EXPECT_EQ(tokenizer_directory(testing::reference_file("gpt2-files")), testing::reference_file("gpt2-files"));
}

// Every Hugging Face backend through the facade: loaded from a directory or a tokenizer.json,
// encoding as the tokenizers library does (GPT-2, BERT), serialized and saved and read back.
TEST(Tokenizer, HuggingFaceTokenizersBehindTheFacade) {
  const std::vector<std::string> texts{"Hello, world! It's 2024.", "caf\xC3\xA9 na\xC3\xAFve"};
  const auto gpt2_ids = testing::run_reference(testing::hf_tokenize("tokenizers", "gpt2-json/tokenizer.json"), texts);
  const auto bert_ids = testing::run_reference(testing::hf_tokenize("tokenizers", "bert-json/tokenizer.json"), texts);
  const std::pair<std::string, TokenizerBackend> cases[] = {
      {testing::reference_file("gpt2-json"), TokenizerBackend::kTokenizerJson},
      {testing::reference_file("gpt2-json/tokenizer.json"), TokenizerBackend::kTokenizerJson},
      {testing::reference_file("gpt2-files"), TokenizerBackend::kGpt2Files},
      {testing::reference_file("bert-json"), TokenizerBackend::kTokenizerJson},
      {testing::reference_file("bert-vocab"), TokenizerBackend::kBertVocab},
      {testing::spm_references() + "/t5-dir", TokenizerBackend::kHfSentencePiece},
      {testing::spm_references() + "/llama-dir", TokenizerBackend::kHfSentencePiece}};
  std::set<uint64_t> hashes;
  int saved = 0;
  for (const auto& [path, kind] : cases) {
    SCOPED_TRACE(path);
    const auto t = Tokenizer::load(path);
    EXPECT_EQ(t.kind(), kind);
    if (path.find("gpt2") != std::string::npos) {
      for (size_t i = 0; i < texts.size(); ++i) EXPECT_EQ(t.encode(texts[i], true), gpt2_ids[i].get<std::vector<int64_t>>());
      EXPECT_EQ(t.decode(t.encode(texts[1])), texts[1]);
    } else if (path.find("bert") != std::string::npos) {
      for (size_t i = 0; i < texts.size(); ++i) EXPECT_EQ(t.encode(texts[i], true), bert_ids[i].get<std::vector<int64_t>>());
      const Encoding pair = t.encode_pair("a b", "c", true);
      EXPECT_EQ(pair.type_ids, (std::vector<int64_t>{0, 0, 0, 0, 1, 1}));
      EXPECT_EQ(t.special().cls, 101);
      EXPECT_TRUE(t.is_special(101));
      EXPECT_EQ(t.piece(101), "[CLS]");
    }
    // Serialized, saved and read back: the same tokenizer.
    const auto again = Tokenizer::from_serialized(t.model_bytes(), "bytes");
    EXPECT_EQ(again.kind(), kind);
    EXPECT_EQ(again.hash(), t.hash());
    const auto dir = scratch("saved_" + std::to_string(saved++));
    t.save(dir.string());
    const auto reloaded = Tokenizer::load(dir.string());
    EXPECT_EQ(reloaded.model_bytes(), t.model_bytes());
    for (const auto& text : texts) {
      EXPECT_EQ(again.encode(text, true), t.encode(text, true));
      EXPECT_EQ(reloaded.encode(text, true), t.encode(text, true));
      const auto pieces = t.encode_pieces(text);
      const auto ids = t.encode(text);
      ASSERT_EQ(pieces.size(), ids.size());
      for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(t.piece(ids[i]), pieces[i]);
    }
    hashes.insert(t.hash());
  }
  EXPECT_EQ(hashes.size(), 6u);  // the two GPT-2 tokenizer.json loads are the same tokenizer
}

TEST(Tokenizer, HuggingFaceSpecialTokensAndConfig) {
  const auto t5 = Tokenizer::load(testing::spm_references() + "/t5-dir");
  EXPECT_EQ(t5.sentinel(0), 2099);
  EXPECT_EQ(t5.sentinel(99), 2000);
  EXPECT_EQ(t5.special().eos, 1);
  EXPECT_FALSE(t5.special().bos);
  EXPECT_EQ(t5.vocab_size(), 2100);
  EXPECT_EQ(t5.model_max_length(), 512);
  EXPECT_FALSE(t5.chat_template());
  const auto llama = Tokenizer::load(testing::spm_references() + "/llama-dir");
  EXPECT_EQ(llama.special().bos, 1);
  ASSERT_TRUE(llama.chat_template());
  EXPECT_EQ(llama.encode("hi", true).front(), 1);
  EXPECT_EQ(llama.encode("hi").front() == 1, false);
  EXPECT_NE(error_of([&] { llama.sentinel(0); }).find("no sentinel <extra_id_0> (it has 0)"), std::string::npos);
  EXPECT_NE(error_of([&] { llama.piece(99999); }).find("id 99999 is not in the vocabulary"), std::string::npos);
}

TEST(Tokenizer, BadHuggingFaceInputsAreClearErrors) {
  const auto empty = scratch("no_tokenizer");
  fs::create_directories(empty);
  EXPECT_EQ(error_of([&] { Tokenizer::load(empty.string()); }),
            empty.string() + ": no tokenizer (looked for tokenizer.json, vocab.json + merges.txt, vocab.txt, "
                             "spiece.model, tokenizer.model, and the tokenizer/ folder of a zoo checkpoint or run "
                             "directory)");
  const auto bad = scratch("bad_tok.json");
  const std::string json = read_file(testing::reference_file("bert-json/tokenizer.json"));
  write_file_atomically(bad.string(), json.substr(0, json.size() / 3));
  EXPECT_NE(error_of([&] { Tokenizer::load(bad.string()); }).find(bad.string() + ": not valid JSON"), std::string::npos);
  std::string unsupported = json;
  unsupported.replace(unsupported.find("\"BertPreTokenizer\""), 18, "\"UnicodeScripts\"");
  write_file_atomically(bad.string(), unsupported);
  EXPECT_EQ(error_of([&] { Tokenizer::load(bad.string()); }),
            bad.string() + ": pre_tokenizer.type: unsupported 'UnicodeScripts' (zoo reads ByteLevel, BertPreTokenizer, "
                           "Whitespace, WhitespaceSplit, Metaspace, Digits, Punctuation, Split, Sequence)");
  const auto gpt2 = Tokenizer::load(testing::reference_file("gpt2-files"));
  const std::string bytes = gpt2.model_bytes();
  EXPECT_NE(error_of([&] { Tokenizer::from_serialized(bytes.substr(0, bytes.size() - 100), "rank 0's tokenizer"); })
                .find("rank 0's tokenizer: truncated tokenizer file container (vocab.json should have"),
            std::string::npos);
  EXPECT_NE(error_of([&] { Tokenizer::load(scratch("absent.model").string()); }).find("cannot open"), std::string::npos);
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
