#pragma once
// Fine-tuning examples from the user's files: classification (CSV, TSV or JSONL with text,
// optional text_pair, label) and sequence-to-sequence pairs (JSONL or TSV with source, target),
// and the label set inferred from training data. No LibTorch here: the fuzz target reads these
// files alone.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace zoo {

enum class DataFormat { kCsv, kTsv, kJsonl };

// By extension: .csv, .tsv, .jsonl (or .json lines); nullopt for anything else (text).
std::optional<DataFormat> data_format(const std::string& path);
// The same, throwing naming the file for another extension.
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

// Instruction tuning of decoder models: the prompt is context, the completion the target.
struct InstructionExample {
  std::string prompt;
  std::string completion;
  int64_t line = 0;
};

// Readers. A malformed line, a missing column or field, a non-string value or invalid UTF-8 is
// an error naming file:line and what was expected; an empty file is an error too.
std::vector<ClassificationExample> read_classification(const std::string& path);
std::vector<Seq2SeqExample> read_seq2seq(const std::string& path);
// prompt, completion (JSONL, or CSV/TSV columns).
std::vector<InstructionExample> read_instructions(const std::string& path);

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

}  // namespace zoo
