#include "inference/text_generation.h"

#include <algorithm>
#include <numeric>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/files.h"
#include "data/token_lines.h"
#include "test_util.h"

namespace zoo {
namespace {

using testing::error_of;

const Tokenizer& tokenizer() { return testing::shared_tokenizer(); }

Model tiny(const std::string& family_lines, int64_t vocab_size = 512) {
  torch::manual_seed(3);
  auto m = build_model(parse_config(family_lines + "vocab_size: " + std::to_string(vocab_size) +
                                    "\nd_model: 16\nn_layers: 1\nn_heads: 2\nd_ff: 32\n"
                                    "max_positions: 16\ndropout: 0.0\nattention_dropout: 0.0\n"));
  m.module()->eval();
  return m;
}

// Streamed pieces add up to the whole decoding, and a character split over byte pieces is never
// printed half (no U+FFFD on the way).
TEST(StreamDecoder, PiecesAddUpToTheWholeText) {
  const auto& t = tokenizer();
  const std::string text = "Streams of text: naïve café, 日本語 and 🙂 emoji.";
  const auto ids = t.encode(text);
  StreamDecoder stream(t, {});
  std::string printed;
  for (int64_t id : ids) {
    const auto piece = stream.add(id);
    EXPECT_EQ(piece.find("\xEF\xBF\xBD"), std::string::npos) << piece;
    printed += piece;
  }
  EXPECT_EQ(printed, t.decode(ids));
  EXPECT_EQ(printed, text);
  // With a context, only what follows it is printed.
  StreamDecoder after(t, t.encode("The list"));
  std::string rest;
  for (int64_t id : t.encode(" of items")) rest += after.add(id);
  EXPECT_EQ(rest, t.decode(t.encode("The list of items")).substr(t.decode(t.encode("The list")).size()));
}

TEST(TextGeneration, PromptsAndStopTextsAreChecked) {
  auto model = tiny("family: gpt\n");
  GenerationOptions o;
  o.max_new_tokens = 3;
  EXPECT_EQ(error_of([&] { generate_text(model, tokenizer(), "ab\xff" "c", o, {}, nullptr); }),
            "prompt: invalid UTF-8 at byte offset 2");
  EXPECT_EQ(error_of([&] { generate_text(model, tokenizer(), "The", o, {""}, nullptr); }),
            "stop text '' is empty: it would end generation at once");
  EXPECT_EQ(error_of([] { check_utf8("ok \xc3", "--prompt"); }), "--prompt: invalid UTF-8 at byte offset 3");
}

// A checkpoint whose tokenizer outgrew its model: the prompt's first id without an embedding row
// is named, for every family, instead of LibTorch's "index out of range in self".
TEST(TextGeneration, IdsPastTheModelsVocabularyAreNamed) {
  const auto& t = tokenizer();
  const std::string prompt = "The list of items";
  const auto ids = t.encode(prompt);
  const auto past = std::find_if(ids.begin(), ids.end(), [](int64_t id) { return id >= 200; });
  ASSERT_NE(past, ids.end());
  const std::string expected = "prompt: token id " + std::to_string(*past) + " ('" + t.piece(*past) +
                               "') is past the model's vocabulary (vocab_size 200; the tokenizer has " +
                               std::to_string(t.vocab_size()) + " pieces)";
  GenerationOptions o;
  o.max_new_tokens = 2;
  auto gpt = tiny("family: gpt\n", 200);
  EXPECT_EQ(error_of([&] { generate_text(gpt, t, prompt, o, {}, nullptr); }), expected);
  auto mlm = tiny("family: bert\nhead: mlm\n", 200);
  EXPECT_EQ(error_of([&] { fill_masks(mlm.bert, t, prompt + " [MASK]", 3); }), expected);
  auto classifier = tiny("family: bert\nhead: sequence_classification\n", 200);
  EXPECT_EQ(error_of([&] { classify(classifier.bert, t, prompt); }), expected);
}

// A request longer than max_positions is cut to fit and says so; what streams out is the text.
TEST(TextGeneration, GptContinuesWithinMaxPositionsAndStreamsTheText) {
  auto model = tiny("family: gpt\n");
  const auto& t = tokenizer();
  GenerationOptions o;
  o.max_new_tokens = 100;
  std::string streamed;
  const auto prompt_ids = t.encode("The list");
  const auto out = generate_text(model, t, "The list", o, {}, [&](const std::string& s) { streamed += s; });
  const int64_t room = 16 - static_cast<int64_t>(prompt_ids.size());
  EXPECT_EQ(out.note, "max_new_tokens lowered to " + std::to_string(room) + " (max_positions 16)");
  EXPECT_EQ(static_cast<int64_t>(out.tokens.size()), room);  // greedy, no EOS id here: the length ends it
  auto all = prompt_ids;
  all.insert(all.end(), out.tokens.begin(), out.tokens.end());
  const auto whole = t.decode(all), context = t.decode(prompt_ids);
  EXPECT_EQ(whole.compare(0, context.size(), context), 0);
  EXPECT_EQ(whole.substr(0, context.size() + streamed.size()), context + streamed);
  // Beam search chooses its text at the end, and streams it then (`zoo generate --num-beams 3`
  // printed a decoder's prompt alone).
  o.num_beams = 3;
  streamed.clear();
  const auto beams = generate_text(model, t, "The list", o, {}, [&](const std::string& s) { streamed += s; });
  all = prompt_ids;
  all.insert(all.end(), beams.tokens.begin(), beams.tokens.end());
  EXPECT_FALSE(streamed.empty());
  EXPECT_EQ(t.decode(all).substr(0, context.size() + streamed.size()), context + streamed);
}

TEST(TextGeneration, BertFillsMasksAndClassifies) {
  const auto& t = tokenizer();
  auto mlm = tiny("family: bert\nhead: mlm\n");
  EXPECT_EQ(error_of([&] { fill_masks(mlm.bert, t, "no mask here", 3); }),
            "the prompt has no [MASK] for a masked-LM model to fill");
  const auto predictions = fill_masks(mlm.bert, t, "A [MASK] is a [MASK].", 4);
  ASSERT_EQ(predictions.size(), 2u);
  for (const auto& p : predictions) {
    ASSERT_EQ(p.top.size(), 4u);
    for (size_t k = 1; k < p.top.size(); ++k) EXPECT_GE(p.top[k - 1].second, p.top[k].second);
  }
  EXPECT_LT(predictions[0].position, predictions[1].position);
  auto classifier = tiny("family: bert\nhead: sequence_classification\nnum_labels: 3\n");
  const auto probabilities = classify(classifier.bert, t, "a sentence");
  ASSERT_EQ(probabilities.size(), 3u);
  EXPECT_NEAR(std::accumulate(probabilities.begin(), probabilities.end(), 0.0), 1.0, 1e-6);
  EXPECT_EQ(error_of([&] { classify(mlm.bert, t, "a sentence"); }),
            "classify needs a bert model with a sequence_classification head");
}

TEST(TokenLines, EncodeAndDecodeLinesNameWhatIsWrong) {
  const auto& t = tokenizer();
  const auto ids = encode_line(t, "hello world", false, "in.txt:1");
  EXPECT_EQ(t.decode(parse_token_ids(ids, t.vocab_size(), "ids.txt:1")), "hello world");
  EXPECT_EQ(error_of([&] { encode_line(t, "bad \xff", false, "in.txt:3"); }),
            "in.txt:3: invalid UTF-8 at byte offset 4 of the line");
  EXPECT_EQ(error_of([&] { parse_token_ids("12 x 7", 512, "ids.txt:2"); }), "ids.txt:2: 'x' is not a token id");
  EXPECT_EQ(error_of([&] { parse_token_ids("12 512", 512, "ids.txt:2"); }),
            "ids.txt:2: token id 512 is outside the vocabulary (0..511)");
  EXPECT_EQ(error_of([&] { parse_token_ids("-1", 512, "ids.txt:2"); }),
            "ids.txt:2: token id -1 is outside the vocabulary (0..511)");
}

}  // namespace
}  // namespace zoo
