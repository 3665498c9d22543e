#pragma once
// One decoding loop for every family, as CTranslate2 writes its greedy and beam searches once
// over its Decoder. A family implements DecodingModel: the next-token logits of every row after
// its prompt, after one more token per row, and rows reordered (beam search keeps the beams that
// survive). Greedy and sampled decoding (decode_rows) and beam search (beam_search) are written
// once over it; `generate` (models/generation.h) builds the family's DecodingModel and runs one.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <torch/types.h>

#include "models/generation.h"
#include "models/gpt.h"
#include "models/t5.h"

namespace zoo {

class DecodingModel {
 public:
  virtual ~DecodingModel() = default;
  virtual int64_t rows() const = 0;
  virtual torch::Device device() const = 0;
  // The logits (rows, V) of each row's first new token: after its prompt (a decoder-only model),
  // or after the decoder's start token over the encoded source (an encoder-decoder).
  virtual torch::Tensor start() = 0;
  // The logits (rows, V) after `tokens` (rows, 1), one more token per row.
  virtual torch::Tensor step(const torch::Tensor& tokens) = 0;
  // Row i continues what row sources[i] (rows,) was: its cache, its tokens so far.
  virtual void reorder(const torch::Tensor& sources) = 0;
  // Every token of each row so far (rows, L), what the repetition penalty counts, and its mask
  // (undefined: every token is real; else 0 at padding).
  virtual const torch::Tensor& context() const = 0;
  virtual const torch::Tensor& context_mask() const = 0;
};

// A decoder-only model's rows: each prompt repeated `copies` times (beam search's beams),
// left-padded, positions counted from each prompt's first token; with `use_cache`, a KV cache
// reserved for `positions` tokens, else the whole sequence recomputed at each step (the reference).
std::unique_ptr<DecodingModel> gpt_decoding(GPT& model, const std::vector<std::vector<int64_t>>& prompts,
                                            int64_t copies, bool use_cache, int64_t positions);

// An encoder-decoder's rows: each source encoded once (right-padded), repeated `copies` times,
// and the decoder starting from its start token.
std::unique_ptr<DecodingModel> encoder_decoder_decoding(EncoderDecoder& model,
                                                        const std::vector<std::vector<int64_t>>& sources,
                                                        int64_t copies, bool use_cache, int64_t positions);

// Greedy or sampled decoding of every row until each ends (an EOS id, a stop sequence) or
// options.max_new_tokens; finished rows idle on `pad_id`.
GenerationResult decode_rows(DecodingModel& model, const GenerationOptions& options, int64_t pad_id);

// A token's log-probability under the model, as OpenAI's API reports it and vLLM computes it by
// default: the log-softmax of the raw logits in float32, before temperature, repetition penalty
// and top-k/top-p; with the `top` most likely tokens' (best first).
struct TokenLogprob {
  int64_t token = 0;
  std::optional<double> logprob;  // nullopt: a prompt's first token, which nothing predicts
  std::vector<std::pair<int64_t, double>> top;
};
// Row i of `logits` (n, V) scoring `tokens[i]`, with `top` (0-20) alternatives: one read.
std::vector<TokenLogprob> token_logprobs(const torch::Tensor& logits, const std::vector<int64_t>& tokens, int64_t top);

// One row of a batch whose rows each have their own options, generator and tokens so far: the
// server's rows, which join and leave the batch at any step (serve/batch_scheduler.h).
struct DecodingRow {
  const GenerationOptions* options = nullptr;
  at::Generator* generator = nullptr;
  const std::vector<int64_t>* context = nullptr;  // prompt and tokens so far: what the repetition penalty reads
  int64_t generated = 0;                          // tokens so far
  std::optional<int64_t> logprobs;                // the token's log-probability, with this many alternatives
  // The tokens a grammar allows (structured output, serve/token_grammar.h), a bitmask
  // (core/token_bitmask.h); the others are never chosen. nullptr: every token.
  const std::vector<int32_t>* allowed = nullptr;
};
struct RowToken {
  int64_t token = 0;
  std::string error;  // set when the row cannot go on; the token is then meaningless
  std::optional<TokenLogprob> logprob;  // the row asked for it (token_logprobs)
};
// Each row's next token from the logits (rows, V) float32, chosen as decode_rows chooses it for
// a batch of that row alone, with its log-probability where the row asks (the rows that ask read
// together). A row with `allowed` tokens chooses among them alone; its log-probabilities stay the
// model's own, before the mask (as vLLM reports them). A row whose logits hold NaN or infinity (corrupt weights, an overflow in bf16), or
// whose sampling throws, gets its error, and the other rows their tokens.
std::vector<RowToken> choose_row_tokens(const torch::Tensor& logits, const std::vector<DecodingRow>& rows);

// Beam search over `model`'s rows, options.num_beams per prompt (gpt_decoding's or
// encoder_decoder_decoding's `copies`), in the manner of Hugging Face's BeamSearchScorer with
// early_stopping=False: a prompt is done once it has num_beams finished hypotheses and no
// running beam can beat the worst of them.
GenerationResult beam_search(DecodingModel& model, const GenerationOptions& options, int64_t vocab, int64_t pad_id);

}  // namespace zoo
