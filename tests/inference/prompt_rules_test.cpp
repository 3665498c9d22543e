#include "inference/prompt_rules.h"


#include <gtest/gtest.h>

#include "base_test_util.h"

namespace zoo {
namespace {

SpecialTokenIds specials(std::optional<int64_t> bos, std::optional<int64_t> eos) {
  SpecialTokenIds s;
  s.bos = bos, s.eos = eos;
  return s;
}

// A decoder's prompt is left as it is, but an empty one, which starts a new document: after BOS
// (LLaMA's <s>), else after the EOS that separates documents in training (GPT-2's <|endoftext|>).
TEST(PromptRules, DecoderPromptsStartANewDocumentWhenEmpty) {
  EXPECT_EQ(frame_prompt({5, 6}, false, specials(1, 2), "prompt"), (std::vector<int64_t>{5, 6}));
  EXPECT_EQ(frame_prompt({}, false, specials(1, 2), "prompt"), (std::vector<int64_t>{1}));
  EXPECT_EQ(frame_prompt({}, false, specials(std::nullopt, 2), "prompt"), (std::vector<int64_t>{2}));
  EXPECT_EQ(testing::error_of([] { frame_prompt({}, false, specials(std::nullopt, std::nullopt), "messages"); }),
            "messages: empty, and the tokenizer has no beginning- or end-of-sequence token to start from");
}

// An encoder-decoder's source ends with EOS, as in training (T5's tokenizer appends </s> itself:
// it is not doubled).
TEST(PromptRules, EncoderSourcesEndWithEos) {
  EXPECT_EQ(frame_prompt({5, 6}, true, specials(std::nullopt, 2), "prompt"), (std::vector<int64_t>{5, 6, 2}));
  EXPECT_EQ(frame_prompt({5, 2}, true, specials(std::nullopt, 2), "prompt"), (std::vector<int64_t>{5, 2}));
  EXPECT_EQ(frame_prompt({}, true, specials(std::nullopt, 2), "prompt"), (std::vector<int64_t>{2}));
  EXPECT_NE(testing::error_of([] { frame_prompt({5}, true, specials(1, std::nullopt), "prompt"); }).find("prompt: "),
            std::string::npos);
}

// A decoder's prompt and new tokens share the context, the last new token counted (transformers'
// max_length, vLLM's max_model_len); an encoder-decoder's source has the encoder's positions.
TEST(PromptRules, NewTokensFitTheContext) {
  const ContextLimits decoder{false, 0, 16};
  EXPECT_EQ(new_token_room(1, decoder), 15);
  EXPECT_EQ(new_token_room(15, decoder), 1);
  EXPECT_EQ(new_token_room(16, decoder), 0);
  EXPECT_EQ(new_token_room(40, decoder), 0);
  EXPECT_EQ(no_room_message(16, decoder), "16 tokens leave no room in the context of 16 positions");
  const ContextLimits encoder_decoder{true, 512, 64};
  EXPECT_EQ(new_token_room(512, encoder_decoder), 64);
  EXPECT_EQ(new_token_room(513, encoder_decoder), 0);
  EXPECT_EQ(no_room_message(513, encoder_decoder), "513 tokens, more than the encoder's 512 positions");
}

}  // namespace
}  // namespace zoo
