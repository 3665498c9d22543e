#pragma once
// Text generation, apart from the model classes: greedy, temperature, top-k, top-p (nucleus),
// repetition penalty, EOS and stop sequences, batches of prompts of different lengths (left
// padding with positions counted from each prompt's first token), and beam search with length
// penalty. Seeded sampling is reproducible. The options and the logits pipeline are here; the
// loops, written once for every family, are models/decoding.h.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <ATen/core/Generator.h>
#include <torch/types.h>

#include "models/finish_reason.h"
#include "models/gpt.h"
#include "models/t5.h"

namespace zoo {

struct GenerationOptions {
  static constexpr int64_t kMaxBeams = 256;
  int64_t max_new_tokens = 32;
  bool sample = false;       // false: greedy (temperature, top_k and top_p are ignored)
  double temperature = 1.0;  // sampling: logits / temperature
  int64_t top_k = 0;         // sampling: keep the k most likely tokens; 0 = all
  double top_p = 1.0;        // sampling: keep the smallest set with this much probability
  double repetition_penalty = 1.0;  // > 1 discourages tokens already in the context (CTRL)
  std::vector<int64_t> eos_ids;     // generation of a row ends at any of these
  std::vector<std::vector<int64_t>> stop_sequences;  // ... or when its output ends with one
  int64_t num_beams = 1;        // beam search when > 1
  double length_penalty = 1.0;  // beam score = log-probability / length^length_penalty
  uint64_t seed = 0;            // sampling: same seed, same tokens
  bool use_cache = true;        // false recomputes the whole sequence each step (reference)
  bool output_scores = false;   // keep each step's processed logits
  // Called with (row, token) as each token is produced (not for beam search).
  std::function<void(int64_t, int64_t)> on_token;

  // Throws std::invalid_argument naming the option and the value.
  void validate() const;
};

struct GenerationResult {
  // New tokens per prompt, without the EOS or stop sequence that ended them.
  std::vector<std::vector<int64_t>> tokens;
  // kEos, kStop or kLength, per prompt.
  std::vector<FinishReason> finish_reasons;
  // With output_scores: per step, the processed logits (B, V) the token was chosen from.
  std::vector<torch::Tensor> scores;
};

GenerationResult generate(GPT& model, const std::vector<std::vector<int64_t>>& prompts,
                          const GenerationOptions& options);
GenerationResult generate(EncoderDecoder& model, const std::vector<std::vector<int64_t>>& sources,
                          const GenerationOptions& options);

// One token per row of processed logits (B, V): the argmax, or (options.sample) drawn from their
// softmax with `generator`. A generator per sequence keeps seeded sampling independent of the
// batch it runs in (serve/batch_scheduler.h).
torch::Tensor choose_tokens(const torch::Tensor& logits, const GenerationOptions& options, at::Generator& generator);
// The CPU generator that seeded sampling draws from.
at::Generator make_generator(uint64_t seed);
// Throws std::runtime_error when logits hold NaN or +infinity (step counts from 0, for the message).
void check_logits(const torch::Tensor& logits, int64_t step);

// The logits pipeline, exposed for tests: repetition penalty over `context` (B, L) where
// `context_mask` is true, then (when sampling) temperature, top-k and top-p filtering with
// -inf. logits: (B, V) float.
torch::Tensor process_logits(torch::Tensor logits, const torch::Tensor& context,
                             const torch::Tensor& context_mask, const GenerationOptions& options);

}  // namespace zoo
