#pragma once
// Pretraining objectives over token files, and the batches they make: causal LM (packed
// blocks), BERT's masked LM (with optional whole-word masking and next-sentence or
// sentence-order pairs), and T5's span corruption. Randomness is seeded per example, so a
// batch depends only on (seed, epoch, example index): runs resume exactly.

#include <cstdint>
#include <optional>
#include <string>
#include <random>
#include <utility>
#include <vector>

#include <torch/types.h>

#include "data/sentence_pairs.h"
#include "data/token_file.h"
#include "tokenizers/tokenizer.h"

namespace zoo {

constexpr int64_t kIgnoreIndex = -100;  // labels the loss skips (PyTorch's cross_entropy default)

// One batch for any objective; fields an objective does not produce stay undefined.
struct Batch {
  torch::Tensor input_ids;             // (B, T)
  torch::Tensor attention_mask;        // (B, T) 1 at real tokens
  torch::Tensor labels;                // (B, T) or (B, T_dec); kIgnoreIndex where no loss
  torch::Tensor token_type_ids;        // (B, T) masked LM pairs
  torch::Tensor next_sentence_labels;  // (B) masked LM pairs
  torch::Tensor decoder_input_ids;     // (B, T_dec) span corruption
};

// The special tokens batches are made with, read from the tokenizer (zoo's fixed ids, or a
// Hugging Face tokenizer's own): none is a constant. An objective that needs a token the
// tokenizer lacks (masked LM without a mask token, span corruption without sentinels) is
// refused naming it.
struct BatchTokens {
  int64_t pad = SpecialTokens::kPad;   // padding; a tokenizer without one pads with its eos (as GPT-2 does)
  std::optional<int64_t> eos, cls, sep, mask;
  std::vector<int64_t> sentinels;      // T5's <extra_id_0>, <extra_id_1>, ...
  int64_t decoder_start = SpecialTokens::kPad;  // encoder-decoders' first decoder input (the model's)
  std::vector<int64_t> ordinary;       // the ids that are no special token (masked LM's random replacements)

  static BatchTokens of(const Tokenizer& tokenizer);
  // The id of a token `what` needs; throws "WHAT needs a ROLE token, and the tokenizer has none".
  static int64_t require(const std::optional<int64_t>& id, const char* role, const std::string& what);
};

// Visits 0 .. n-1 in a seeded random order, epoch after epoch. The position is two integers
// that can be saved and restored.
class ShuffledSampler {
 public:
  ShuffledSampler(int64_t n, uint64_t seed);
  std::vector<int64_t> next(int64_t count);
  struct State {
    int64_t epoch = 0;
    int64_t index = 0;
  };
  State state() const { return state_; }
  void restore(const State& state);

 private:
  void shuffle();
  int64_t n_;
  uint64_t seed_;
  State state_;
  std::vector<int64_t> order_;
};

// Causal LM: the token stream cut into consecutive blocks; block b's inputs are tokens
// [b*T, b*T + T) and its labels the same shifted by one. The last block is padded (labels
// ignored), so every token but the first is a target exactly once.
class CausalLMDataset {
 public:
  CausalLMDataset(const TokenFile& file, int64_t block_size, int64_t pad = SpecialTokens::kPad);
  int64_t size() const { return num_blocks_; }
  std::pair<std::vector<int64_t>, std::vector<int64_t>> example(int64_t b) const;
  Batch batch(const std::vector<int64_t>& indices) const;

 private:
  const TokenFile& file_;
  int64_t block_size_, num_blocks_, pad_;
};

struct MaskingOptions {
  double probability = 0.15;     // tokens (or words) chosen for prediction
  double mask_fraction = 0.8;    // of those, replaced by [MASK]
  double random_fraction = 0.1;  // replaced by a random token; the rest stay unchanged
  bool whole_word = false;       // choose words, masking all their pieces together
};

// Chooses and corrupts tokens of `ids` for masked LM (Devlin et al., 2019): chosen ones become
// `tokens.mask`, or one of `tokens.ordinary` at random, or stay. Special tokens are never
// chosen. Returns (inputs, labels) with labels kIgnoreIndex where not chosen.
std::pair<std::vector<int64_t>, std::vector<int64_t>> mask_tokens(const std::vector<int64_t>& ids,
                                                                  const Tokenizer& tokenizer,
                                                                  const BatchTokens& tokens,
                                                                  const MaskingOptions& options,
                                                                  std::mt19937_64& rng);


// BERT pretraining examples: [CLS] A [SEP] (B [SEP]) of at most block_size tokens, masked.
// Without pairs, A is a block of the stream. With pairs, A and B are the two halves of a
// document cut at a random point; for next-sentence prediction B is replaced by a span of
// another document half the time (label 1), for sentence order A and B swap (label 1).
class MaskedLMDataset {
 public:
  MaskedLMDataset(const TokenFile& file, const Tokenizer& tokenizer, int64_t block_size,
                  MaskingOptions masking, SentencePairs pairs, uint64_t seed);
  int64_t size() const;
  Batch batch(const std::vector<int64_t>& indices, int64_t epoch = 0) const;

  struct Example {
    std::vector<int64_t> input_ids, labels, token_type_ids;
    int64_t next_sentence_label = kIgnoreIndex;
  };
  Example example(int64_t index, int64_t epoch = 0) const;

 private:
  const TokenFile& file_;
  const Tokenizer& tokenizer_;
  BatchTokens tokens_;
  int64_t block_size_;
  MaskingOptions masking_;
  SentencePairs pairs_;
  uint64_t seed_;
  std::vector<int64_t> documents_;  // documents with at least two tokens (pairs)
};

struct SpanCorruptionOptions {
  double noise_density = 0.15;    // fraction of tokens dropped
  double mean_span_length = 3.0;  // average length of a dropped span
};

// T5's span corruption (Raffel et al., 2020, section 3.1.4): spans of `tokens` are replaced in
// the input by the sentinels <extra_id_0>, <extra_id_1>, ... (`specials.sentinels`, which also
// bound the number of spans); the target lists each sentinel then the tokens it replaced. Both
// end with the eos.
std::pair<std::vector<int64_t>, std::vector<int64_t>> corrupt_spans(const std::vector<int64_t>& tokens,
                                                                    const SpanCorruptionOptions& options,
                                                                    const BatchTokens& specials,
                                                                    std::mt19937_64& rng);

class SpanCorruptionDataset {
 public:
  // Each example corrupts `raw_length` consecutive tokens of the stream.
  SpanCorruptionDataset(const TokenFile& file, int64_t raw_length, SpanCorruptionOptions options,
                        uint64_t seed, BatchTokens specials);
  int64_t size() const { return num_examples_; }
  std::pair<std::vector<int64_t>, std::vector<int64_t>> example(int64_t index, int64_t epoch = 0) const;
  // seq2seq_batch of the examples' inputs and targets.
  Batch batch(const std::vector<int64_t>& indices, int64_t epoch = 0) const;

 private:
  const TokenFile& file_;
  int64_t raw_length_, num_examples_;
  SpanCorruptionOptions options_;
  uint64_t seed_;
  BatchTokens specials_;
};

// An encoder-decoder batch from (source, target) token rows: inputs and attention mask from the
// sources, labels from the targets, and decoder inputs the targets shifted right behind
// `tokens.decoder_start` (T5's is <pad>). Everything is padded to the longest row with `tokens.pad`.
Batch seq2seq_batch(const std::vector<std::vector<int64_t>>& sources,
                    const std::vector<std::vector<int64_t>>& targets, const BatchTokens& tokens);

// Pads rows to the longest with `pad` into a (B, L) long tensor; optionally returns the mask.
torch::Tensor pad_rows(const std::vector<std::vector<int64_t>>& rows, int64_t pad,
                       torch::Tensor* mask = nullptr);

// A generator seeded from (seed, epoch, index) through splitmix64, the same on every platform.
std::mt19937_64 example_rng(uint64_t seed, int64_t epoch, int64_t index);

}  // namespace zoo
