#pragma once
// Fine-tuning datasets: classification and sequence-to-sequence examples (read by
// data/example_files.h) tokenized, and batches padded to the longest example or bucketed by
// length. Plain text
// for language modelling goes through tokenize_to_files (data/tokenize.h).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "data/example_files.h"
#include "data/objectives.h"
#include "tokenizers/tokenizer.h"

namespace zoo {

// [CLS] text [SEP] (text_pair [SEP]) token ids, truncated to max_length by trimming the longer
// of the two texts first (as BERT's fine-tuning scripts do).
class ClassificationDataset {
 public:
  ClassificationDataset(const std::vector<ClassificationExample>& examples, const Tokenizer& tokenizer,
                        const LabelSet& labels, int64_t max_length, const std::string& source = "");
  int64_t size() const { return static_cast<int64_t>(ids_.size()); }
  int64_t length(int64_t i) const { return static_cast<int64_t>(ids_[i].size()); }
  // input_ids, attention_mask, token_type_ids (B, longest) and labels (B).
  Batch batch(const std::vector<int64_t>& indices) const;

 private:
  std::vector<std::vector<int64_t>> ids_, types_;
  std::vector<int64_t> labels_;
  int64_t pad_ = 0;
};

// Source ids + </s> for the encoder; target ids + </s> as labels, and the decoder inputs the
// labels shifted right behind <pad> (T5's decoder start).
class Seq2SeqDataset {
 public:
  // `decoder_start`: the model's first decoder input (T5's is <pad>).
  Seq2SeqDataset(const std::vector<Seq2SeqExample>& examples, const Tokenizer& tokenizer,
                 int64_t max_source_length, int64_t max_target_length, int64_t decoder_start);
  int64_t size() const { return static_cast<int64_t>(sources_.size()); }
  int64_t length(int64_t i) const { return static_cast<int64_t>(sources_[i].size()); }
  Batch batch(const std::vector<int64_t>& indices) const;

 private:
  std::vector<std::vector<int64_t>> sources_, targets_;
  BatchTokens tokens_;
};

// Instruction tuning of a decoder: prompt ids (with the tokenizer's own special tokens, e.g.
// LLaMA's <s>), completion ids and the end-of-sequence token as one sequence, truncated to
// `max_length + 1` tokens; the loss is on the completion and the end only (the labels of prompt
// positions are kIgnoreIndex), as PEFT/TRL's completion-only training. Right-padded batches.
// A conversation (`messages`) is rendered with the tokenizer's chat template (data/chat_format.h)
// and its text tokenized with no special tokens added (the template writes them, as
// apply_chat_template's text is encoded), each turn on its own so turns end on token boundaries;
// the loss is on the assistant turns only, as TRL's assistant-only loss.
class InstructionDataset {
 public:
  // `tokenizer_name` (its directory) names the tokenizer in errors about its chat template.
  InstructionDataset(const std::vector<InstructionExample>& examples, const Tokenizer& tokenizer, int64_t max_length,
                     const std::string& source = "", const std::string& tokenizer_name = "the tokenizer");
  int64_t size() const { return static_cast<int64_t>(ids_.size()); }
  int64_t length(int64_t i) const { return static_cast<int64_t>(ids_[i].size()); }
  // input_ids, attention_mask and labels (B, longest): labels[t] is the token after input t.
  Batch batch(const std::vector<int64_t>& indices) const;
  // Examples left out because their prompt alone fills max_length.
  int64_t skipped() const { return skipped_; }
  // Whether token t of example i is a target (the loss is on predicting it).
  bool is_target(int64_t i, int64_t t) const { return targets_.at(i).at(t) != 0; }

 private:
  std::vector<std::vector<int64_t>> ids_;      // the whole sequence
  std::vector<std::vector<uint8_t>> targets_;  // per token: 1 where it is a target
  int64_t pad_ = 0;
  int64_t skipped_ = 0;
};

// Batches of examples of similar length (less padding): indices shuffled by (seed, epoch), then
// sorted by length within windows of 50 batches, cut into batches, and the batches shuffled.
// Every index appears exactly once.
std::vector<std::vector<int64_t>> bucket_by_length(const std::vector<int64_t>& lengths, int64_t batch_size,
                                                   uint64_t seed, int64_t epoch);

}  // namespace zoo
