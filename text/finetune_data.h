#pragma once
// Fine-tuning data: classification (CSV, TSV or JSONL with text, optional text_pair, label) and
// sequence-to-sequence pairs (JSONL or TSV with source, target), the label set inferred from
// training data, and batches padded to the longest example or bucketed by length. Plain text
// for language modelling goes through tokenize_to_files (token_file.h).

#include <cstdint>
#include <string>
#include <vector>

#include "text/objectives.h"
#include "text/tokenizer.h"

namespace zoo {

enum class DataFormat { kCsv, kTsv, kJsonl };

// By extension: .csv, .tsv, .jsonl (or .json lines). Throws naming the file otherwise.
DataFormat format_of(const std::string& path);

struct ClassificationExample {
  std::string text;
  std::string text_pair;  // empty when the data has none
  std::string label;
  int64_t line = 0;       // where it came from, for messages
};

struct Seq2SeqExample {
  std::string source;
  std::string target;
  int64_t line = 0;
};

// Readers. A malformed line, a missing column or field, a non-string value or invalid UTF-8 is
// an error naming file:line and what was expected; an empty file is an error too.
std::vector<ClassificationExample> read_classification(const std::string& path);
std::vector<Seq2SeqExample> read_seq2seq(const std::string& path);

// The classes of a classification task, in sorted order, inferred from training data and saved
// beside a checkpoint (JSON) so evaluation maps labels the same way.
class LabelSet {
 public:
  static LabelSet from_examples(const std::vector<ClassificationExample>& examples);
  static LabelSet load(const std::string& path);
  void save(const std::string& path) const;  // atomically
  // Throws naming the label and the known ones when `label` was never seen in training.
  int64_t id(const std::string& label, const std::string& where = "") const;
  const std::vector<std::string>& labels() const { return labels_; }
  int64_t size() const { return static_cast<int64_t>(labels_.size()); }

 private:
  std::vector<std::string> labels_;
};

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
};

// Source ids + </s> for the encoder; target ids + </s> as labels, and the decoder inputs the
// labels shifted right behind <pad> (T5's decoder start).
class Seq2SeqDataset {
 public:
  Seq2SeqDataset(const std::vector<Seq2SeqExample>& examples, const Tokenizer& tokenizer,
                 int64_t max_source_length, int64_t max_target_length);
  int64_t size() const { return static_cast<int64_t>(sources_.size()); }
  int64_t length(int64_t i) const { return static_cast<int64_t>(sources_[i].size()); }
  Batch batch(const std::vector<int64_t>& indices) const;

 private:
  std::vector<std::vector<int64_t>> sources_, targets_;
};

// Batches of examples of similar length (less padding): indices shuffled by (seed, epoch), then
// sorted by length within windows of 50 batches, cut into batches, and the batches shuffled.
// Every index appears exactly once.
std::vector<std::vector<int64_t>> bucket_by_length(const std::vector<int64_t>& lengths, int64_t batch_size,
                                                   uint64_t seed, int64_t epoch);

}  // namespace zoo
