#pragma once
// The two rules `zoo generate` and `zoo serve` apply to a prompt's ids before decoding, written
// once: how a prompt is framed, and how many new tokens fit the context after it. Torch-free.

#include <cstdint>
#include <string>
#include <vector>

#include "tokenizers/tokenizer.h"

namespace zoo {

// A decoder's empty prompt starts a new document: after the beginning-of-sequence token, or the
// end-of-sequence token that separates documents in training. An encoder-decoder's source ends
// with the end-of-sequence token, as in training. Throws std::invalid_argument, beginning with
// `what`, when the tokenizer has no token to do so with.
std::vector<int64_t> frame_prompt(std::vector<int64_t> ids, bool encoder_decoder, const SpecialTokenIds& specials,
                                  const std::string& what);

struct ContextLimits {
  bool encoder_decoder = false;
  int64_t source_positions = 0;  // an encoder-decoder's source: the encoder's positions
  int64_t context = 0;           // a decoder's prompt and new tokens together; an encoder-decoder's new tokens
};

// The most new tokens that fit after a prompt of `prompt_tokens`: a decoder's prompt and new
// tokens hold `context` positions together (as transformers' max_length and vLLM's
// max_model_len count them), an encoder-decoder's source `source_positions` and its new tokens
// `context`. 0 when the prompt leaves no room; no_room_message then says why.
int64_t new_token_room(int64_t prompt_tokens, const ContextLimits& limits);
// "20 tokens leave no room in the context of 16 positions", "600 tokens, more than the encoder's 512 positions".
std::string no_room_message(int64_t prompt_tokens, const ContextLimits& limits);

}  // namespace zoo
