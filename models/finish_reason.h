#pragma once
// Why a sequence stopped: the one vocabulary of the decoding loops (models/generation.h),
// `zoo generate` and `zoo serve`'s scheduler. OpenAI's API reports kEos and kStop as "stop" and
// answers kCancelled and kError as errors (serve/openai_api.h).

#include "core/enum_names.h"

namespace zoo {

enum class FinishReason {
  kEos,        // the model produced an end-of-sequence token (not part of the output)
  kStop,       // the output reached a stop text (or a stop token sequence)
  kLength,     // max_new_tokens, or the context, is reached
  kCancelled,  // the client went away, or the server is stopping
  kError,      // the sequence could not go on; its message travels beside the reason
};
ZOO_ENUM_NAMES(FinishReason, "finish reason", {"eos", FinishReason::kEos}, {"stop", FinishReason::kStop},
               {"length", FinishReason::kLength}, {"cancelled", FinishReason::kCancelled},
               {"error", FinishReason::kError});

}  // namespace zoo
