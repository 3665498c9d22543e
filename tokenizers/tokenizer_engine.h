#pragma once
// What every tokenizer backend behind zoo::Tokenizer does: the Hugging Face pipeline
// (tokenizers/hf_tokenizer.h) and SentencePiece (tokenizers/sentencepiece_tokenizer.h).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tokenizers/encoding.h"

namespace zoo {

class TokenizerEngine {
 public:
  virtual ~TokenizerEngine() = default;

  // Ids (and token type ids, and which tokens were added as special) of one sequence or a pair.
  virtual Encoding encode(const std::string& text, bool add_special_tokens) const = 0;
  virtual Encoding encode_pair(const std::string& first, const std::string& second,
                               bool add_special_tokens) const = 0;
  // The token strings of `text`, without special tokens added.
  virtual std::vector<std::string> encode_tokens(const std::string& text) const = 0;
  // Throws std::runtime_error for an id outside the vocabulary.
  virtual std::string decode(const std::vector<int64_t>& ids, bool skip_special_tokens) const = 0;

  virtual std::optional<int64_t> token_to_id(const std::string& token) const = 0;
  // The token of `id`, or nullptr when no token has it.
  virtual const std::string* id_to_token(int64_t id) const = 0;
  virtual int64_t vocab_size() const = 0;
  virtual bool is_special(int64_t id) const = 0;
  virtual bool starts_word(int64_t id) const = 0;
};

}  // namespace zoo
