#pragma once
// The model half of zoo serve's continuous batching: what the scheduler's turn computes, apart
// from who is in it (the StepPlanner's, serve/step_planner.h) and what each sequence's tokens
// become (the scheduler's, serve/batch_scheduler.h). It owns the model and the batch's KV cache
// and knows each row only by its index and the positions it holds, as vLLM's model runner
// executes the scheduler's output.
//
// The KV cache has `max_batch` fixed rows over one shared axis of positions (layers/kv_cache.h,
// "continuous batching"): a sequence occupies a row, right-aligned and left-padded, so that one
// attention mask says which positions each row sees. Rows in use are kept packed at the top (a
// row that leaves takes the last one's, as the planner moves them), each step runs only them,
// and the shared axis is trimmed to the longest row. An encoder-decoder's rows also hold their
// memory's projections, right-padded to the longest, under a memory mask.
//
// Each row may take a served LoRA adapter (serve/adapter_bank.h) by its slot, -1 for the base
// alone: every forward's rows decode together, each with its own adapter.

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include <torch/types.h>

#include "layers/kv_cache.h"
#include "models/decoding.h"
#include "models/model.h"

namespace zoo {

// Prompts read together, not yet in the batch: row i of `cache` is prompt i's.
struct PrefilledPrompts {
  torch::Tensor logits;                 // (n, V) float32: each prompt's first new token
  KVCache cache{0};
  std::vector<int64_t> positions;       // decoder positions each row holds
  std::vector<int64_t> memory_lengths;  // an encoder-decoder's source tokens (0 for a decoder)
};

class ModelRunner {
 public:
  // `model` (a decoder, or an encoder-decoder: T5, Transformer) is in eval mode on its device
  // and dtype. Throws std::invalid_argument for a family that makes no text (BERT).
  // `reserved_positions`: what each row holds before the shared axis first grows (by doubling).
  ModelRunner(Model model, int64_t max_batch, int64_t reserved_positions);

  bool encoder_decoder() const { return !model_.gpt; }
  const ModelConfig& config() const { return model_.config; }
  // The token an encoder-decoder's decoder starts from; none for a decoder.
  std::optional<int64_t> decoder_start() const;

  // One forward over `prompts` (a decoder's, left-padded) or sources (an encoder-decoder's,
  // right-padded, then its decoder's first step): the weights read once for all of them.
  // `adapters`: each prompt's adapter slot (empty: the base for all).
  PrefilledPrompts prefill(const std::vector<const std::vector<int64_t>*>& prompts,
                           const std::vector<int64_t>& adapters = {});
  // A decoder's prompt read in chunks keeps its keys in a cache of its own, each chunk's positions
  // continuing from it: the logits (1, V) float32 after `tokens`.
  KVCache chunk_cache() const;
  torch::Tensor read_chunk(const std::vector<int64_t>& tokens, KVCache& cache, int64_t adapter = -1);

  // A decoder's prompt read alone, each token scored by the positions before it (token_logprobs,
  // `top` alternatives; the first token's logprob is none): what `echo` returns. The head runs
  // over 256 positions at a time, never the whole prompt's logits at once.
  std::vector<TokenLogprob> prompt_logprobs(const std::vector<int64_t>& prompt, int64_t top, int64_t adapter = -1);

  // Row `index` of `cache` (prefill's, or a chunked prompt's with index 0), holding `positions`
  // decoder positions and an encoder-decoder's `memory_length` source tokens, takes the batch's
  // next row, rows(), decoding with adapter slot `adapter`.
  void place(KVCache& cache, int64_t index, int64_t positions, int64_t memory_length, int64_t adapter = -1);
  int64_t rows() const { return static_cast<int64_t>(positions_.size()); }
  // One decoding step: row i reads `tokens[i]` at its next position. The logits (rows, V) float32.
  torch::Tensor step(const std::vector<int64_t>& tokens);
  // Whether row `row`'s last step took it past longrope's trained context (layers/variants.h:
  // rereads_at): its cached keys were rotated by the short factors, and it is read again whole.
  bool rereads(int64_t row) const;
  // Row `row` holds `context` (its prompt and every token since) read afresh, as `zoo generate`
  // reads a sequence at that step: the logits (1, V) float32 after it.
  torch::Tensor reread(int64_t row, const std::vector<int64_t>& context);
  // Row `row` leaves the batch; the last row moves into it (the planner's move).
  void remove_row(int64_t row);
  // Every row leaves and the cache starts afresh (after a step failed: no row can be trusted).
  void reset();

 private:
  torch::Device device() const;
  // The next forward's rows take these adapter slots.
  void use_adapters(const std::vector<int64_t>& slots);

  Model model_;
  int64_t max_batch_;
  int64_t reserved_positions_;
  KVCache cache_;
  std::vector<int64_t> positions_, memory_lengths_, adapters_;  // per row of the batch
  std::shared_ptr<AdapterRows> adapter_rows_;  // what every projection reads
};

}  // namespace zoo
