#pragma once
// Added tokens (tokenizers/src/tokenizer/added_vocabulary.rs, tokenizers 0.23): tokens matched
// in the text before the model sees it, special ones (<s>, [CLS], <|endoftext|>) and user
// additions alike. Matching is leftmost-longest over all tokens. A token with normalized=false
// is matched in the raw text; one with normalized=true in the normalized text, by its own
// normalized form. single_word keeps a match only between non-word characters; lstrip and
// rstrip make the match swallow the whitespace to its left or right.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "tokenizers/byte_trie.h"
#include "tokenizers/text_piece.h"

namespace zoo {

struct AddedToken {
  std::string content;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = true;
  bool special = false;
};

class AddedVocabulary {
 public:
  // The model's id of a token, if it has one.
  using ModelLookup = std::function<std::optional<int64_t>(const std::string&)>;
  // The normalizer's output for a token's content.
  using Normalize = std::function<std::string(const std::string&)>;

  // Adds tokens in order, as tokenizers' add_tokens: a token the model (or an earlier added
  // token) already has keeps that id, a new one takes the next id after both the model's
  // `model_size` ids and the added ids so far. Empty contents are skipped. `normalize` may be
  // empty (no normalizer).
  void add(const std::vector<AddedToken>& tokens, const ModelLookup& model_lookup, int64_t model_size,
           const Normalize& normalize);

  // Adds tokens at the ids given (transformers' added_tokens_decoder and added_tokens.json).
  void add_with_ids(const std::vector<std::pair<int64_t, AddedToken>>& tokens, const Normalize& normalize);

  // Cuts the added tokens out of every piece that is not one already: with normalized=false
  // tokens first (`normalized_text` false), or with normalized=true tokens in text the
  // normalizer has rewritten (`normalized_text` true). Empty pieces are dropped.
  void split(TextPieces& pieces, bool normalized_text) const;

  std::optional<int64_t> token_to_id(const std::string& content) const;
  // The text an added id decodes to (its normalized form when normalization changed it, so a
  // byte-level decoder can invert it), or nullptr when the id is not an added token.
  const std::string* id_to_token(int64_t id) const;
  const AddedToken* token(int64_t id) const;
  bool is_special_content(const std::string& content) const { return special_contents_.count(content) > 0; }
  bool empty() const { return tokens_.empty(); }
  // Added ids in increasing order.
  std::vector<int64_t> ids() const;
  int64_t max_id() const { return max_id_; }

 private:
  void insert(int64_t id, const AddedToken& token, const Normalize& normalize);
  void rebuild_tries();

  std::unordered_map<int64_t, AddedToken> tokens_;        // by id
  std::unordered_map<std::string, int64_t> ids_;          // by content
  std::unordered_map<int64_t, std::string> normalized_;   // normalized form where it differs
  std::unordered_set<std::string> special_contents_;
  ByteTrie raw_trie_;         // normalized=false tokens by content
  ByteTrie normalized_trie_;  // normalized=true tokens by normalized form
  int64_t max_id_ = -1;
};

}  // namespace zoo
