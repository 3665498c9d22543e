#include "inference/prompt_rules.h"

#include <algorithm>
#include <stdexcept>

namespace zoo {

std::vector<int64_t> frame_prompt(std::vector<int64_t> ids, bool encoder_decoder, const SpecialTokenIds& specials,
                                  const std::string& what) {
  if (encoder_decoder) {
    if (!specials.eos) {
      throw std::invalid_argument(what + ": an encoder-decoder's source ends with the end-of-sequence token, and the "
                                         "tokenizer has none");
    }
    if (ids.empty() || ids.back() != *specials.eos) ids.push_back(*specials.eos);
    return ids;
  }
  if (!ids.empty()) return ids;
  if (!specials.bos && !specials.eos) {
    throw std::invalid_argument(what + ": empty, and the tokenizer has no beginning- or end-of-sequence token to "
                                       "start from");
  }
  ids.push_back(specials.bos ? *specials.bos : *specials.eos);
  return ids;
}

int64_t new_token_room(int64_t prompt_tokens, const ContextLimits& limits) {
  if (limits.encoder_decoder) return prompt_tokens <= limits.source_positions ? limits.context : 0;
  return std::max<int64_t>(0, limits.context - prompt_tokens);
}

std::string no_room_message(int64_t prompt_tokens, const ContextLimits& limits) {
  const std::string tokens = std::to_string(prompt_tokens) + " tokens";
  if (limits.encoder_decoder) {
    return tokens + ", more than the encoder's " + std::to_string(limits.source_positions) + " positions";
  }
  return tokens + " leave no room in the context of " + std::to_string(limits.context) + " positions";
}

}  // namespace zoo
