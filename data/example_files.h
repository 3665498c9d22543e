#pragma once
// Fine-tuning examples from the user's files: classification (CSV, TSV or JSONL with text,
// optional text_pair, label), sequence-to-sequence pairs (JSONL or TSV with source, target),
// instruction tuning (prompt, completion; or JSONL conversations as TRL's "messages"), and the
// label set inferred from training data. No LibTorch here: the fuzz target reads these files alone.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

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

// One turn of a conversation (transformers' and TRL's {"role": ..., "content": ...}).
struct ChatMessage {
  std::string role;  // "system", "user", "assistant", ... as the chat template knows them
  std::string content;
};

// Instruction tuning of decoder models: the prompt is context, the completion the target; or a
// conversation, whose assistant turns are the targets (rendered with the tokenizer's chat template).
struct InstructionExample {
  std::string prompt;
  std::string completion;
  std::vector<ChatMessage> messages;  // a conversation when not empty (prompt and completion are then empty)
  int64_t line = 0;
};

// Readers. A malformed line, a missing column or field, a non-string value or invalid UTF-8 is
// an error naming file:line and what was expected; an empty file is an error too.
std::vector<ClassificationExample> read_classification(const std::string& path);
std::vector<Seq2SeqExample> read_seq2seq(const std::string& path);
// prompt, completion (JSONL, or CSV/TSV columns); JSONL lines may instead hold a conversation,
// {"messages": [{"role": "user", "content": "..."}, {"role": "assistant", ...}, ...]}, with at
// least one assistant turn.
std::vector<InstructionExample> read_instructions(const std::string& path);

// The messages of a conversation in JSON: a list of {role, content} objects, each a string.
// `where` ("data.jsonl:3") prefixes errors, which name the message and key at fault.
std::vector<ChatMessage> conversation_from_json(const nlohmann::ordered_json& messages, const std::string& where);
// A conversation: a JSON list of messages, or an object with "messages" (what `zoo tokenizer chat`
// reads); `where` (a file name) prefixes errors.
std::vector<ChatMessage> parse_conversation(const std::string& text, const std::string& where);

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
