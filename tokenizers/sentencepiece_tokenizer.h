#pragma once
// SentencePiece models behind zoo::Tokenizer: zoo's own (special tokens at fixed ids inside the
// model, nothing added around sequences) and the spiece.model / tokenizer.model of Hugging Face
// directories, with transformers' slow-tokenizer conventions on top: added tokens (special
// tokens, T5's sentinels) are cut out of the text first, each stretch between them is encoded
// by SentencePiece on its own, and BOS/EOS are added as the model family does:
//   kT5:    A </s>            pair: A </s> B </s>             type ids all 0
//   kLlama: <s> A             pair: <s> A <s> B               type ids 0, then 1 for B's part
//           (add_bos_token / add_eos_token choose which of <s> and </s> go around each part)
//   kZoo:   A                 pair: A B                       type ids 0, then 1

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tokenizers/added_vocabulary.h"
#include "tokenizers/sentencepiece_module.h"
#include "tokenizers/tokenizer_engine.h"

namespace zoo {

enum class SentencePieceConvention { kZoo, kT5, kLlama };

struct SentencePieceSpecials {
  SentencePieceConvention convention = SentencePieceConvention::kZoo;
  std::optional<std::string> bos_token, eos_token;  // resolved to ids once added tokens are in
  bool add_bos = false;
  bool add_eos = false;
  // Ids below this are special (zoo's fixed block); 0 for Hugging Face models, whose special
  // tokens are the added tokens marked special.
  int64_t special_below = 0;
};

class SentencePieceTokenizer : public TokenizerEngine {
 public:
  // Added tokens at stated ids, then by content (a piece's id, else the next free id); all
  // are matched in the raw text, since SentencePiece normalizes on its own.
  SentencePieceTokenizer(SentencePieceProcessor processor, std::vector<std::pair<int64_t, AddedToken>> with_ids,
                         std::vector<AddedToken> by_content, SentencePieceSpecials specials);

  // zoo's own model: no added tokens, ids below SpecialTokens::kCount special.
  static std::shared_ptr<const SentencePieceTokenizer> zoo(SentencePieceProcessor processor);
  // Whether a model has zoo's special tokens at their fixed ids; when not, `why` says which
  // one is missing.
  static bool has_zoo_layout(const SentencePieceProcessor& processor, std::string* why = nullptr);

  Encoding encode(const std::string& text, bool add_special_tokens) const override;
  Encoding encode_pair(const std::string& first, const std::string& second, bool add_special_tokens) const override;
  std::vector<std::string> encode_tokens(const std::string& text) const override;
  std::string decode(const std::vector<int64_t>& ids, bool skip_special_tokens) const override;
  std::optional<int64_t> token_to_id(const std::string& token) const override;
  const std::string* id_to_token(int64_t id) const override;
  int64_t vocab_size() const override;
  bool is_special(int64_t id) const override;
  // Pieces starting with U+2581, SentencePiece's word boundary mark.
  bool starts_word(int64_t id) const override;

  const SentencePieceProcessor& processor() const { return processor_; }
  int64_t model_size() const { return static_cast<int64_t>(pieces_.size()); }

 private:
  std::vector<int64_t> encode_sequence(const std::string& text) const;
  // One sequence's part of the input with the convention's BOS/EOS around it.
  Encoding with_specials(std::vector<int64_t> ids, bool add_special_tokens, int64_t type_id) const;

  SentencePieceProcessor processor_;
  std::vector<std::string> pieces_;  // by id
  std::unordered_map<std::string, int64_t> ids_;
  AddedVocabulary added_;
  SentencePieceSpecials specials_;
  std::optional<int64_t> bos_, eos_;
};

}  // namespace zoo
