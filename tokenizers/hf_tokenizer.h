#pragma once
// A Hugging Face tokenizer pipeline, as the tokenizers library runs it (tokenizer/mod.rs):
//   added tokens cut out of the raw text -> normalizer -> added tokens with normalized=true cut
//   out -> pre-tokenizer -> model (BPE, WordPiece or Unigram) on each piece -> post-processor
// and back: ids -> tokens (added tokens first) -> decoder. Built from a tokenizer.json, or from
// components by the readers of the older formats (GPT-2's vocab.json + merges.txt, BERT's
// vocab.txt). Torch-free, and independent of the SentencePiece module, so fuzzers and fast
// tests build it alone.
//
// tokenizer.json's "truncation" and "padding" are read past: transformers switches both off on
// every call that does not ask for them, and zoo's callers truncate and pad batches themselves.

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/enum_names.h"
#include "tokenizers/added_vocabulary.h"
#include "tokenizers/bpe.h"
#include "tokenizers/decoders.h"
#include "tokenizers/normalizers.h"
#include "tokenizers/post_processors.h"
#include "tokenizers/pre_tokenizers.h"
#include "tokenizers/tokenizer_engine.h"
#include "tokenizers/unigram.h"
#include "tokenizers/wordpiece.h"

namespace zoo {

enum class HfModelKind { kBpe, kWordPiece, kUnigram };
ZOO_ENUM_NAMES(HfModelKind, "model",
               {"BPE", HfModelKind::kBpe}, {"WordPiece", HfModelKind::kWordPiece}, {"Unigram", HfModelKind::kUnigram});

// The model of a pipeline: exactly one of the three, by `kind`.
struct HfModel {
  HfModelKind kind = HfModelKind::kBpe;
  std::shared_ptr<const BpeModel> bpe;
  std::shared_ptr<const WordPieceModel> wordpiece;
  std::shared_ptr<const UnigramModel> unigram;

  static HfModel from_json(const JsonView& json);
  void tokenize(const std::string& piece, std::vector<int64_t>& out) const;
  std::optional<int64_t> token_to_id(const std::string& token) const;
  const std::string* id_to_token(int64_t id) const;
  int64_t size() const;    // entries (tokenizers' get_vocab_size without added tokens)
  int64_t max_id() const;
  // The unknown token's text, when the model has one.
  std::optional<std::string> unk_token() const;
};

struct HfPipelineParts {
  HfModel model;
  std::optional<Normalizer> normalizer;
  std::optional<PreTokenizer> pre_tokenizer;
  std::optional<PostProcessor> post_processor;
  std::optional<Decoder> decoder;
  // Added tokens whose ids a transformers config states; added first.
  std::vector<std::pair<int64_t, AddedToken>> added_tokens_with_ids;
  std::vector<AddedToken> added_tokens;  // in file order; ids assigned as tokenizers does
};

class HfTokenizer : public TokenizerEngine {
 public:
  explicit HfTokenizer(HfPipelineParts parts);

  // Reads a tokenizer.json document; `file` names it in errors, which give the JSON path of
  // the offending part: "tokenizer.json: pre_tokenizer.pretokenizers[1].type: unsupported ...".
  static HfTokenizer from_json(const std::string& json_text, const std::string& file);

  // One sequence, or a pair, with the post-processor's special tokens when asked. Throws
  // std::runtime_error for text that is not valid UTF-8.
  Encoding encode(const std::string& text, bool add_special_tokens) const override;
  Encoding encode_pair(const std::string& first, const std::string& second, bool add_special_tokens) const override;
  // The tokens of `text` without post-processing (what the model produced, with added tokens).
  std::vector<std::string> encode_tokens(const std::string& text) const override;

  // Throws for an id no token has.
  std::string decode(const std::vector<int64_t>& ids, bool skip_special_tokens) const override;

  std::optional<int64_t> token_to_id(const std::string& token) const override;
  // The token of `id` (an added token's text first, then the model's), or nullptr.
  const std::string* id_to_token(int64_t id) const override;
  // One past the largest id of the model and the added tokens (the embedding rows needed).
  int64_t vocab_size() const override;
  // Added tokens marked special.
  bool is_special(int64_t id) const override;
  // Whether a token begins a word, judged by the pipeline's word marker: a leading "Ġ"
  // (byte-level) or Metaspace's marker, or no continuing prefix ("##") for WordPiece-style
  // models; false for added tokens and when the pipeline has no such marker.
  bool starts_word(int64_t id) const override;

  const HfPipelineParts& parts() const { return parts_; }
  const AddedVocabulary& added_vocabulary() const { return added_; }

 private:
  std::vector<int64_t> encode_sequence(const std::string& text) const;
  TextPieces pre_tokenize(const std::string& text) const;

  HfPipelineParts parts_;
  AddedVocabulary added_;
  std::string word_start_marker_;   // a token starting with this starts a word
  std::string continuation_prefix_; // a token not starting with this starts a word
};

}  // namespace zoo
