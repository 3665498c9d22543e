#pragma once
// Generation from text: prompts go through the tokenizer into a model and come back as text,
// streamed as tokens arrive. What `zoo generate` does, as library calls: continue a prompt
// (GPT), answer a source (T5, Transformer), fill [MASK] or classify (BERT).

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "models/bert.h"
#include "models/generation.h"
#include "models/model.h"
#include "tokenizers/tokenizer.h"

namespace zoo {

// Decodes a growing token sequence for printing: each add() returns the text that is new since
// the last one. The context is decoded with the tokens (a piece's leading space shows only after
// other text), and a multi-byte character split over byte pieces waits until it is whole.
class StreamDecoder {
 public:
  StreamDecoder(const Tokenizer& tokenizer, std::vector<int64_t> context);
  std::string add(int64_t token);

 private:
  const Tokenizer& tokenizer_;
  std::vector<int64_t> ids_;
  std::string printed_;
};

// Throws std::invalid_argument "WHAT: invalid UTF-8 at byte offset N" for text that is not UTF-8.
void check_utf8(const std::string& text, const std::string& what);

struct TextGeneration {
  std::vector<int64_t> tokens;  // the new tokens
  FinishReason finish_reason = FinishReason::kLength;  // kEos, kStop or kLength
  std::string note;             // e.g. that max_new_tokens was lowered to fit max_positions
};

// Continues `prompt` (decoder models) or answers it (encoder-decoders); `stop_texts` end
// generation like stop sequences, and so does the tokenizer's end-of-sequence token when
// `options.eos_ids` is empty. `on_text` receives the new text as it is produced (not for beam
// search). An empty GPT prompt starts a new document. Without `add_special_tokens` the prompt is
// encoded as it is (a chat prompt, whose template wrote its special tokens).
TextGeneration generate_text(Model& model, const Tokenizer& tokenizer, const std::string& prompt,
                             GenerationOptions options, const std::vector<std::string>& stop_texts,
                             const std::function<void(const std::string&)>& on_text, bool add_special_tokens = true);

// `message` as one user turn through the tokenizer's chat template with the generation prompt
// (transformers' apply_chat_template(..., add_generation_prompt=True)): what `zoo generate --chat`
// continues. `tokenizer_name` names a tokenizer without a template in the error.
// Sentence embeddings of `texts` (BERT): [CLS] text [SEP] through the encoder, the sequence output
// mean-pooled over the tokens and normalised to length 1, as sentence-transformers' Pooling
// (mean) and Normalize modules do. `tokens` receives the number of tokens read. Throws
// std::invalid_argument naming the text that is longer than max_positions or not UTF-8.
std::vector<std::vector<float>> sentence_embeddings(Bert& model, const Tokenizer& tokenizer,
                                                    const std::vector<std::string>& texts, int64_t* tokens = nullptr);

std::string chat_prompt(const Tokenizer& tokenizer, const std::string& message, const std::string& tokenizer_name);

struct MaskPrediction {
  int64_t position = 0;                               // token index of the [MASK]
  std::vector<std::pair<std::string, double>> top;    // pieces and probabilities, best first
};

// BERT with an mlm or pretraining head: the `top_k` likeliest pieces for every [MASK] of
// `prompt` (written literally as [MASK]); throws when the prompt has none.
std::vector<MaskPrediction> fill_masks(Bert& model, const Tokenizer& tokenizer, const std::string& prompt,
                                       int64_t top_k);

// BERT with a sequence classification head: class probabilities of `prompt`.
std::vector<double> classify(Bert& model, const Tokenizer& tokenizer, const std::string& prompt);

}  // namespace zoo
