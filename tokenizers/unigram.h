#pragma once
// Unigram language-model tokenization (tokenizers/src/models/unigram/, SentencePiece's unigram
// model): every piece has a log-probability, and a word is cut into the pieces whose scores sum
// highest (Viterbi over the lattice of vocabulary matches). A character no piece covers costs
// the lowest score minus 10 and becomes the unk id; consecutive unknowns fuse into one, which
// byte fallback then spells as <0xHH> byte pieces when the vocabulary has them all.

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/json_view.h"
#include "tokenizers/byte_trie.h"
#include "tokenizers/word_cache.h"

namespace zoo {

class UnigramModel {
 public:
  // `pieces` in id order with their scores; `unk_id`, when given, must index into them.
  UnigramModel(std::vector<std::pair<std::string, double>> pieces, std::optional<int64_t> unk_id, bool byte_fallback,
               const std::string& where);

  // tokenizer.json's "model" of type Unigram: vocab [[piece, score], ...], unk_id, byte_fallback.
  static UnigramModel from_json(const JsonView& model);

  // Appends the ids of `word` (one pre-tokenized piece) to `out`. Throws when a character is
  // unknown and there is no unk id.
  void tokenize(const std::string& word, std::vector<int64_t>& out) const;

  std::optional<int64_t> token_to_id(const std::string& token) const;
  const std::string* id_to_token(int64_t id) const;
  int64_t size() const { return static_cast<int64_t>(pieces_.size()); }
  std::optional<int64_t> unk_id() const { return unk_id_; }
  bool byte_fallback() const { return byte_fallback_; }

 private:
  // The best segmentation of `word` as strings, unknown runs fused (tokenizers' encode_optimized).
  std::vector<std::string> segment(const std::string& word) const;

  std::vector<std::pair<std::string, double>> pieces_;
  std::unordered_map<std::string, int64_t> ids_;
  ByteTrie trie_;
  std::optional<int64_t> unk_id_;
  bool byte_fallback_ = false;
  double min_score_ = 0.0;
  std::string where_;  // names the model in errors
  WordCache cache_;
};

}  // namespace zoo
