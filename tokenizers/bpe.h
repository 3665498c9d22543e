#pragma once
// Byte-pair encoding (tokenizers/src/models/bpe/): a word starts as its characters, then the
// adjacent pair with the lowest merge rank is merged, again and again, until no listed merge
// applies. Ranks come from the order of the merges list. Merging works off a heap of
// (rank, position), like tokenizers' Word::merge_all, so equal ranks merge left to right.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/json_view.h"
#include "tokenizers/vocabulary.h"
#include "tokenizers/word_cache.h"

namespace zoo {

struct BpeOptions {
  std::optional<std::string> unk_token;   // for characters with no vocabulary entry
  std::string continuing_subword_prefix;  // written before every symbol but a word's first
  std::string end_of_word_suffix;         // written after a word's last symbol
  bool fuse_unk = false;                  // consecutive unknown characters -> one unk
  bool byte_fallback = false;             // unknown characters -> their <0xHH> byte tokens
  bool ignore_merges = false;             // a word found whole in the vocabulary is one token
};

class BpeModel {
 public:
  using Merges = std::vector<std::pair<std::string, std::string>>;
  // Names the place of merge i in errors, e.g. "tokenizer.json: model.merges[3]".
  using MergeLocator = std::function<std::string(size_t)>;

  // Every merge's two tokens and their concatenation (without the continuing prefix of the
  // second) must be in `vocab`, and the unk token when there is one; errors say which, where.
  BpeModel(Vocabulary vocab, const Merges& merges, BpeOptions options, const std::string& vocab_name,
           const MergeLocator& merge_at);

  // tokenizer.json's "model" of type BPE: vocab {token: id}, merges as "a b" strings or
  // ["a", "b"] pairs, and the options. dropout must be null or 0 (zoo does not sample).
  static BpeModel from_json(const JsonView& model);

  // GPT-2's files: vocab.json ({token: id}) and merges.txt ("#version" line, then "a b" lines).
  static BpeModel from_gpt2_files(const std::string& vocab_json, const std::string& vocab_file,
                                  const std::string& merges_txt, const std::string& merges_file);

  // Appends the ids of `word` (one pre-tokenized piece) to `out`.
  void tokenize(const std::string& word, std::vector<int64_t>& out) const;

  const Vocabulary& vocabulary() const { return vocab_; }
  const BpeOptions& options() const { return options_; }

 private:
  struct Merge {
    int32_t rank;
    int32_t new_id;
  };
  static uint64_t pair_key(int64_t a, int64_t b) { return (static_cast<uint64_t>(a) << 32) | static_cast<uint32_t>(b); }
  void merge_word(const std::string& word, std::vector<int64_t>& out) const;

  Vocabulary vocab_;
  std::unordered_map<uint64_t, Merge> merges_;
  BpeOptions options_;
  std::optional<int64_t> unk_id_;
  WordCache cache_;
};

}  // namespace zoo
