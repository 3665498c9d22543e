#include "tokenizers/hf_vocab_files.h"

#include <gtest/gtest.h>

#include "base_test_util.h"
#include "reference_texts.h"

namespace zoo {
namespace {

using testing::error_of;
using Ids = std::vector<int64_t>;

TokenizerFiles files_in(const std::string& relative, const TokenizerFiles& extra = {}) {
  TokenizerFiles files = read_tokenizer_files(testing::reference_file(relative),
                                              {kGpt2VocabJson, kGpt2MergesTxt, kBertVocabTxt});
  for (const auto& [name, bytes] : extra) files[name] = bytes;
  return files;
}

HfTokenizer gpt2(const TokenizerFiles& extra = {}) {
  const auto files = files_in("gpt2-files", extra);
  HfConfig config = read_hf_config(files, "gpt2-files");
  return HfTokenizer(gpt2_pipeline(files, config, "gpt2-files"));
}

HfTokenizer bert(const TokenizerFiles& extra = {}) {
  const auto files = files_in("bert-vocab", extra);
  HfConfig config = read_hf_config(files, "bert-vocab");
  return HfTokenizer(bert_pipeline(files, config, "bert-vocab"));
}

// GPT-2's own vocab.json + merges.txt give the ids transformers' GPT2Tokenizer gives reading
// the same directory.
TEST(HfVocabFiles, Gpt2FilesMatchTransformers) {
  auto texts = testing::varied_texts();
  for (auto& line : testing::prose_lines(300)) texts.push_back(line);
  const auto expected = testing::run_reference(testing::hf_tokenize("transformers", "gpt2-files"), texts);
  const HfTokenizer t = gpt2();
  for (size_t i = 0; i < texts.size(); ++i) {
    ASSERT_EQ(t.encode(texts[i], true).ids, expected[i].get<Ids>()) << "'" << texts[i] << "'";
  }
  // The special tokens GPT2Tokenizer defaults to are added tokens.
  EXPECT_EQ(t.encode("a<|endoftext|>", true).ids, (Ids{64, 50256}));
  EXPECT_TRUE(t.is_special(50256));
}

// tokenizer_config.json's add_prefix_space and add_bos_token, worked by hand: "Hello" becomes
// "ĠHello" (18435 rather than 15496), and <|endoftext|> goes in front.
TEST(HfVocabFiles, Gpt2ConfigOptions) {
  const HfTokenizer t = gpt2({{kTokenizerConfigJson, R"({"add_prefix_space": true, "add_bos_token": true})"}});
  EXPECT_EQ(t.encode("Hello", true).ids, (Ids{50256, 18435}));
  EXPECT_EQ(t.encode("Hello", false).ids, (Ids{18435}));
  const Encoding pair = t.encode_pair("Hello", "Hello", true);
  EXPECT_EQ(pair.ids, (Ids{50256, 18435, 18435}));
  EXPECT_EQ(pair.type_ids, (Ids{0, 0, 1}));
}

// bert-base-uncased's vocab.txt gives the ids of transformers' BertTokenizer reading the same
// directory and of its pure-Python BertTokenizerLegacy, [CLS] and [SEP] included.
TEST(HfVocabFiles, BertVocabTxtMatchesTransformers) {
  auto texts = testing::varied_texts();
  for (auto& line : testing::prose_lines(300)) texts.push_back(line);
  const auto expected = testing::run_reference(testing::hf_tokenize("transformers", "bert-vocab"), texts);
  const auto legacy = testing::run_reference(testing::hf_tokenize("bert-legacy", "bert-vocab"), texts);
  const HfTokenizer t = bert();
  for (size_t i = 0; i < texts.size(); ++i) {
    ASSERT_EQ(t.encode(texts[i], true).ids, expected[i].get<Ids>()) << "'" << texts[i] << "'";
    EXPECT_EQ(legacy[i].get<Ids>(), expected[i].get<Ids>()) << "'" << texts[i] << "'";
  }
}

// do_lower_case=false keeps case and accents (strip_accents follows it); the cased "Hello" is
// not in the uncased vocabulary, so it comes out in pieces or as [UNK].
TEST(HfVocabFiles, BertCasingFromTheConfig) {
  const HfTokenizer uncased = bert();
  const HfTokenizer cased = bert({{kTokenizerConfigJson, R"({"do_lower_case": false})"}});
  const HfTokenizer lower_keep_accents = bert({{kTokenizerConfigJson, R"({"strip_accents": false})"}});
  const auto id = [&](const char* token) { return *uncased.token_to_id(token); };
  EXPECT_EQ(uncased.encode("Hello", false).ids, (Ids{id("hello")}));
  EXPECT_NE(cased.encode("Hello", false).ids, (Ids{id("hello")}));
  EXPECT_EQ(cased.encode("hello", false).ids, (Ids{id("hello")}));
  EXPECT_EQ(uncased.encode("R\xC3\xA9sum\xC3\xA9", false).ids, (Ids{id("resume")}));
  EXPECT_EQ(lower_keep_accents.encode("R\xC3\x89SUM\xC3\x89", false).ids,
            lower_keep_accents.encode("r\xC3\xA9sum\xC3\xA9", false).ids);
  EXPECT_NE(lower_keep_accents.encode("r\xC3\xA9sum\xC3\xA9", false).ids, (Ids{id("resume")}));
}

TEST(HfVocabFiles, MissingOrBrokenFiles) {
  EXPECT_EQ(error_of([&] {
              HfConfig c;
              gpt2_pipeline({{kGpt2VocabJson, "{}"}}, c, "d");
            }),
            "d/merges.txt: missing");
  EXPECT_EQ(error_of([&] {
              HfConfig c;
              bert_pipeline({{kBertVocabTxt, "[UNK]\n[CLS]\n"}}, c, "d");
            }),
            "d: the sep token '[SEP]' is not in the vocabulary");
  EXPECT_EQ(error_of([&] {
              HfConfig c;
              gpt2_pipeline({{kGpt2VocabJson, R"({"a": 0, "b": 1})"}, {kGpt2MergesTxt, "#version: 0.2\na b\n"}}, c, "d");
            }),
            "d/merges.txt:2: 'ab' is not in d/vocab.json");
}

}  // namespace
}  // namespace zoo
