#pragma once
// WordPiece (tokenizers/src/models/wordpiece/, BERT's wordpiece tokenizer): each word is cut
// greedily into the longest vocabulary entries from the left, pieces after the first written
// with a continuing prefix ("##"); a word with an uncuttable rest, or longer than
// max_input_chars_per_word characters, is the unk token as a whole.

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/json_view.h"
#include "tokenizers/vocabulary.h"

namespace zoo {

struct WordPieceOptions {
  std::string unk_token = "[UNK]";
  std::string continuing_subword_prefix = "##";
  int64_t max_input_chars_per_word = 100;
};

class WordPieceModel {
 public:
  // The unk token must be in `vocab`; `vocab_name` names the vocabulary in that error.
  WordPieceModel(Vocabulary vocab, WordPieceOptions options, const std::string& vocab_name);

  // tokenizer.json's "model" of type WordPiece.
  static WordPieceModel from_json(const JsonView& model);
  // BERT's vocab.txt: one token per line, the line number (from 0) is its id.
  static WordPieceModel from_vocab_txt(const std::string& text, const std::string& file, WordPieceOptions options);

  // Appends the ids of `word` (one pre-tokenized piece) to `out`.
  void tokenize(const std::string& word, std::vector<int64_t>& out) const;

  const Vocabulary& vocabulary() const { return vocab_; }
  const WordPieceOptions& options() const { return options_; }

 private:
  Vocabulary vocab_;
  WordPieceOptions options_;
  int64_t unk_id_ = -1;
};

}  // namespace zoo
