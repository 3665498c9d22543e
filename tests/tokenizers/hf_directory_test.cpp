#include "tokenizers/hf_directory.h"

#include <filesystem>

#include <gtest/gtest.h>

#include "base_test_util.h"
#include "core/files.h"
#include "reference_texts.h"
#include "tokenizers/hf_vocab_files.h"

namespace zoo {
namespace {

using testing::error_of;
using Ids = std::vector<int64_t>;

HfDirectory read_dir(const std::string& dir) {
  return read_hf_directory(read_tokenizer_files(dir, hf_tokenizer_file_names()), dir);
}

TEST(HfDirectory, PicksTheBackendByItsFiles) {
  EXPECT_EQ(read_dir(testing::reference_file("gpt2-json")).kind, TokenizerBackend::kTokenizerJson);
  EXPECT_EQ(read_dir(testing::reference_file("gpt2-files")).kind, TokenizerBackend::kGpt2Files);
  EXPECT_EQ(read_dir(testing::reference_file("bert-vocab")).kind, TokenizerBackend::kBertVocab);
  EXPECT_EQ(read_dir(testing::spm_references() + "/t5-dir").kind, TokenizerBackend::kHfSentencePiece);
  EXPECT_EQ(read_dir(testing::spm_references() + "/llama-dir").kind, TokenizerBackend::kHfSentencePiece);
  // tokenizer.json comes first when there are several.
  const TokenizerFiles both{{kTokenizerJson, read_file(testing::reference_file("bert-json/tokenizer.json"))},
                            {kBertVocabTxt, "[UNK]\n"}};
  const HfDirectory d = read_hf_directory(both, "both");
  EXPECT_EQ(d.kind, TokenizerBackend::kTokenizerJson);
  EXPECT_EQ(d.files.count(kBertVocabTxt), 0u);  // only what the backend reads is kept
}

// Special tokens: from the configs (or the class defaults of the older formats), and for a bare
// tokenizer.json from the model's unk token and where its post-processor puts special tokens.
TEST(HfDirectory, SpecialTokens) {
  const HfDirectory bert = read_dir(testing::reference_file("bert-vocab"));
  EXPECT_EQ(bert.special.cls, 101);
  EXPECT_EQ(bert.special.sep, 102);
  EXPECT_EQ(bert.special.pad, 0);
  EXPECT_EQ(bert.special.mask, 103);
  EXPECT_EQ(bert.special.unk, 100);
  EXPECT_FALSE(bert.special.bos);
  const HfDirectory bert_json = read_dir(testing::reference_file("bert-json"));
  EXPECT_EQ(bert_json.special.cls, 101);
  EXPECT_EQ(bert_json.special.sep, 102);
  EXPECT_EQ(bert_json.special.unk, 100);
  EXPECT_FALSE(bert_json.special.pad);  // a bare tokenizer.json does not say which token pads
  const HfDirectory gpt2 = read_dir(testing::reference_file("gpt2-files"));
  EXPECT_EQ(gpt2.special.bos, 50256);
  EXPECT_EQ(gpt2.special.eos, 50256);
  EXPECT_FALSE(gpt2.special.pad);
  const HfDirectory llama = read_dir(testing::spm_references() + "/llama");
  EXPECT_EQ(llama.special.unk, 0);
  EXPECT_EQ(llama.special.bos, 1);  // "<s> $A": the token before the sequence
}

// Mistral's own SentencePiece models (tokenizer.model v1, and the v2 and v3 instruct
// tokenizers of 32,768 pieces, from PyPI's mistral-common), each alone in a directory as a
// LLaMA-layout model: the sentencepiece package's ids with <s> in front, on hard cases and
// prose.
TEST(HfDirectory, MistralSentencePieceModelsMatchTheSentencePiecePackage) {
  auto texts = testing::varied_texts();
  for (auto& line : testing::prose_lines(300)) texts.push_back(line);
  for (const std::string version : {"v1", "v2", "v3"}) {
    SCOPED_TRACE(version);
    const auto dir = testing::scratch_path("mistral-" + version);
    std::filesystem::create_directories(dir);
    std::filesystem::copy_file(testing::reference_file("mistral/tokenizer.model." + version), dir / "tokenizer.model",
                               std::filesystem::copy_options::overwrite_existing);
    const HfDirectory d = read_dir(dir.string());
    EXPECT_EQ(d.kind, TokenizerBackend::kHfSentencePiece);
    EXPECT_EQ(d.special.bos, 1);
    EXPECT_EQ(d.special.eos, 2);
    const auto expected = testing::spm_encode((dir / "tokenizer.model").string(), texts);
    for (size_t i = 0; i < texts.size(); ++i) {
      Ids with_bos = {1};
      with_bos.insert(with_bos.end(), expected[i].begin(), expected[i].end());
      const Ids ids = d.engine->encode(texts[i], true).ids;
      ASSERT_EQ(ids, with_bos) << "text " << i << ": '" << texts[i] << "'";
    }
    EXPECT_EQ(d.engine->vocab_size(), version == "v1" ? 32000 : 32768);
  }
}

// T5's conventions over its spiece.model: the sentencepiece package's ids, </s> after each
// sequence, the 100 sentinels after the vocabulary with <extra_id_0> last, cut out of the text
// with the spaces around them.
TEST(HfDirectory, T5SentencePieceDirectory) {
  const std::string dir = testing::spm_references() + "/t5-dir";
  const HfDirectory d = read_dir(dir);
  const auto& t = *d.engine;
  ASSERT_EQ(d.special.sentinels.size(), 100u);
  EXPECT_EQ(d.special.sentinels[0], 2099);
  EXPECT_EQ(d.special.sentinels[99], 2000);
  EXPECT_EQ(d.special.eos, 1);
  EXPECT_EQ(d.special.pad, 0);
  EXPECT_EQ(d.special.unk, 2);
  EXPECT_EQ(t.vocab_size(), 2100);
  EXPECT_EQ(d.model_max_length, 512);
  const auto spm = testing::spm_encode(dir + "/spiece.model", {"Hello world", "Hello", "world", "The end."});
  EXPECT_EQ(t.encode("Hello world", false).ids, spm[0]);
  Ids with_eos = spm[3];
  with_eos.push_back(1);
  EXPECT_EQ(t.encode("The end.", true).ids, with_eos);
  Ids sentinel = spm[1];
  sentinel.push_back(2099);
  sentinel.insert(sentinel.end(), spm[2].begin(), spm[2].end());
  EXPECT_EQ(t.encode("Hello <extra_id_0> world", false).ids, sentinel);
  const Encoding pair = t.encode_pair("Hello", "world", true);
  EXPECT_EQ(pair.type_ids, Ids(pair.ids.size(), 0));  // T5 has no token types
  EXPECT_EQ(t.decode(t.encode("Hello <extra_id_0> world", true).ids, true), "Hello world");
  EXPECT_EQ(t.decode({2099, 1}, false), "<extra_id_0></s>");
  // Added tokens' text spliced into SentencePiece's decoding: "▁world" after one keeps its space.
  EXPECT_EQ(t.decode(t.encode("Hello <extra_id_0> world", true).ids, false), "Hello<extra_id_0> world</s>");
}

// LLaMA's conventions over its tokenizer.model: <s> in front (add_bos_token), the chat template kept.
TEST(HfDirectory, LlamaSentencePieceDirectory) {
  const std::string dir = testing::spm_references() + "/llama-dir";
  const HfDirectory d = read_dir(dir);
  const auto spm = testing::spm_encode(dir + "/tokenizer.model", {"Hello world", "again"});
  Ids expected{1};
  expected.insert(expected.end(), spm[0].begin(), spm[0].end());
  EXPECT_EQ(d.engine->encode("Hello world", true).ids, expected);
  const Encoding pair = d.engine->encode_pair("Hello world", "again", true);
  Ids pair_ids = expected;
  pair_ids.push_back(1);
  pair_ids.insert(pair_ids.end(), spm[1].begin(), spm[1].end());
  EXPECT_EQ(pair.ids, pair_ids);
  EXPECT_EQ(pair.type_ids.back(), 1);
  EXPECT_EQ(d.special.bos, 1);
  EXPECT_EQ(d.special.eos, 2);
  EXPECT_EQ(d.model_max_length, 2048);
  ASSERT_TRUE(d.chat_template.has_value());
  EXPECT_NE(d.chat_template->find("messages"), std::string::npos);
  EXPECT_EQ(d.engine->decode(expected, true), "Hello world");
}

// Qwen3's directory in the Hub's layout (tokenizer.json and a tokenizer_config.json with null
// bos and unk tokens, made by tests/reference/fetch_references.py): its roles, vocabulary size,
// length and chat template as the config gives them, and transformers' AutoTokenizer
// (Qwen2Tokenizer) reading the same directory gives the same ids, no special tokens added.
TEST(HfDirectory, Qwen3Directory) {
  const HfDirectory d = read_dir(testing::reference_file("qwen3-json"));
  EXPECT_EQ(d.kind, TokenizerBackend::kTokenizerJson);
  EXPECT_EQ(d.special.eos, 151645);  // <|im_end|>
  EXPECT_EQ(d.special.pad, 151643);  // <|endoftext|>
  EXPECT_FALSE(d.special.bos);
  EXPECT_FALSE(d.special.unk);
  EXPECT_EQ(d.special_token_texts.at("eos"), "<|im_end|>");
  EXPECT_EQ(d.special_token_texts.count("bos"), 0u);
  EXPECT_EQ(d.engine->vocab_size(), 151669);
  EXPECT_EQ(d.model_max_length, 131072);
  ASSERT_TRUE(d.chat_template.has_value());
  EXPECT_EQ(*d.chat_template, read_file(testing::reference_file("chat-templates/qwen3.jinja")));
  const std::vector<std::string> texts = {
      "Hello, world! 12345",
      "<|im_start|>user\nGr\xC3\xBC\xC3\x9F" "e<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
      "e\xCC\x81 \xE4\xB8\xAD\xE6\x96\x87  \n\n", ""};
  const auto expected = testing::run_reference(testing::hf_tokenize("transformers", "qwen3-json"), texts);
  ASSERT_EQ(expected.size(), texts.size());
  for (size_t i = 0; i < texts.size(); ++i) {
    EXPECT_EQ(d.engine->encode(texts[i], true).ids, expected[i].get<Ids>()) << "text " << i << ": '" << texts[i] << "'";
  }
  // Without special tokens: ChatML's markers go, the think tags (not special) stay.
  EXPECT_EQ(d.engine->decode(d.engine->encode(texts[1], true).ids, true),
            "user\nGr\xC3\xBC\xC3\x9F" "e\nassistant\n<think>\n\n</think>\n\n");
}

TEST(HfDirectory, ZooModelInACheckpointDirectory) {
  // A directory of zoo's (a tokenizer.model with zoo's layout, no transformers config) is zoo's own.
  // An HF model without config keeps LLaMA's conventions.
  const HfDirectory llama = read_hf_directory(
      {{kSentencePieceModelFile, read_file(testing::spm_references() + "/llama-dir/tokenizer.model")}}, "d");
  EXPECT_EQ(llama.kind, TokenizerBackend::kHfSentencePiece);
}

TEST(HfDirectory, MissingOrUnsupported) {
  EXPECT_EQ(error_of([] { read_hf_directory({{kTokenizerConfigJson, "{}"}}, "empty"); }),
            "empty: no tokenizer (looked for tokenizer.json, vocab.json + merges.txt, vocab.txt, spiece.model, "
            "tokenizer.model)");
  EXPECT_EQ(error_of([] { read_hf_directory({{kGpt2VocabJson, "{}"}}, "d"); }),
            "d/vocab.json: found without merges.txt (GPT-2's BPE needs both)");
  const std::string model = read_file(testing::spm_references() + "/t5-dir/spiece.model");
  EXPECT_EQ(error_of([&] {
              read_hf_directory({{kSentencePieceT5File, model},
                                 {kTokenizerConfigJson, R"({"tokenizer_class": "AlbertTokenizer"})"}},
                                "d");
            }),
            "d/tokenizer_config.json: tokenizer_class: unsupported 'AlbertTokenizer' for a SentencePiece model (zoo "
            "reads T5Tokenizer, LlamaTokenizer)");
  EXPECT_NE(error_of([] { read_hf_directory({{kSentencePieceT5File, "not a model"}}, "d"); })
                .find("d/spiece.model: not a SentencePiece model"),
            std::string::npos);
  EXPECT_NE(error_of([] { read_hf_directory({{kTokenizerJson, "{\"model\": "}}, "d"); })
                .find("d/tokenizer.json: not valid JSON"),
            std::string::npos);
}

}  // namespace
}  // namespace zoo
