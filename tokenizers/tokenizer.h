#pragma once
// Tokenizers behind one facade:
//   - zoo's own SentencePiece models (unigram or BPE, byte fallback on), with the special tokens
//     every family needs at fixed ids:
//       0 <pad>, 1 <unk>, 2 <s>, 3 </s>, 4 [CLS], 5 [SEP], 6 [MASK], 7.. <extra_id_0>..<extra_id_99>
//     (T5's span-corruption sentinels);
//   - Hugging Face tokenizers, encoding and decoding as the reference implementations do: a
//     tokenizer.json (the tokenizers library's pipeline), or the older files (GPT-2's vocab.json
//     + merges.txt, BERT's vocab.txt, a SentencePiece spiece.model / tokenizer.model), with
//     tokenizer_config.json and special_tokens_map.json naming their special tokens.
// Special tokens are properties (special()), each possibly absent for Hugging Face tokenizers.

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/enum_names.h"
#include "core/unicode.h"
#include "tokenizers/encoding.h"
#include "tokenizers/sentencepiece_module.h"
#include "tokenizers/tokenizer_files.h"

namespace zoo {

class TokenizerEngine;

// The fixed ids of zoo's own SentencePiece tokenizers.
struct SpecialTokens {
  static constexpr int64_t kPad = 0, kUnk = 1, kBos = 2, kEos = 3, kCls = 4, kSep = 5, kMask = 6;
  static constexpr int64_t kFirstSentinel = 7;
  static constexpr int64_t kSentinels = 100;
  static constexpr int64_t kCount = kFirstSentinel + kSentinels;  // ids below this are special
};

// The special tokens of a tokenizer, by role; absent where the tokenizer has none.
struct SpecialTokenIds {
  std::optional<int64_t> pad, unk, bos, eos, cls, sep, mask;
  std::vector<int64_t> sentinels;  // <extra_id_0>, <extra_id_1>, ... in order
};

// The algorithm `zoo tokenizer train` trains.
enum class TokenizerKind { kUnigram, kBpe };

ZOO_ENUM_NAMES(TokenizerKind, "tokenizer type", {"unigram", TokenizerKind::kUnigram}, {"bpe", TokenizerKind::kBpe});
// Which backend a tokenizer was read as, by its files.
enum class TokenizerBackend {
  kZooSentencePiece,  // zoo's .model (special tokens at fixed ids)
  kTokenizerJson,     // Hugging Face tokenizer.json
  kGpt2Files,         // GPT-2's vocab.json + merges.txt (byte-level BPE)
  kBertVocab,         // BERT's vocab.txt (WordPiece)
  kHfSentencePiece,   // a Hugging Face directory's spiece.model / tokenizer.model (T5, LLaMA)
};
ZOO_ENUM_NAMES(TokenizerBackend, "tokenizer backend",
               {"zoo-sentencepiece", TokenizerBackend::kZooSentencePiece},
               {"tokenizer.json", TokenizerBackend::kTokenizerJson},
               {"vocab.json+merges.txt", TokenizerBackend::kGpt2Files}, {"vocab.txt", TokenizerBackend::kBertVocab},
               {"hf-sentencepiece", TokenizerBackend::kHfSentencePiece});

struct TokenizerTrainOptions {
  std::vector<std::string> inputs;  // files or directories (read recursively)
  int64_t vocab_size = 8000;
  TokenizerKind kind = TokenizerKind::kUnigram;
  // Sentences sampled for training; SentencePiece needs memory per sentence, so a cap keeps
  // large corpora trainable. 0 = all.
  int64_t max_sentences = 2000000;
  uint64_t seed = 0;
  // Invalid UTF-8 lines: skipped with a warning when true, an error naming file and offset otherwise.
  bool skip_invalid_utf8 = false;
  bool verbose = false;  // SentencePiece's own progress log
};

class Tokenizer {
 public:
  // Loads a zoo tokenizer (PREFIX.model, or a path to the .model file), a tokenizer.json, a
  // file written from model_bytes(), or a directory: a Hugging Face one, from which it takes, in
  // order: tokenizer.json; vocab.json + merges.txt; vocab.txt; spiece.model or tokenizer.model
  // (a tokenizer.model with zoo's layout and no transformers config is zoo's own), or a zoo
  // checkpoint or run directory (tokenizer_directory). Throws std::runtime_error naming the
  // file, and the JSON path or key at fault.
  static Tokenizer load(const std::string& path);
  // Reads model_bytes() back: zoo's SentencePiece model bytes, or the file container of a
  // Hugging Face tokenizer. `source` names it in errors.
  static Tokenizer from_serialized(const std::string& model_bytes, const std::string& source);
  // Trains a zoo tokenizer on the options' inputs and writes PREFIX.model and PREFIX.vocab atomically.
  static Tokenizer train(const TokenizerTrainOptions& options, const std::string& out_prefix);

  // The ids of `text` with no special tokens added (zoo's callers add their own).
  std::vector<int64_t> encode(const std::string& text) const;
  // With add_special_tokens, what the tokenizer's post-processing adds (BERT's [CLS] ... [SEP],
  // LLaMA's <s>, T5's </s>); zoo's own tokenizers add nothing.
  std::vector<int64_t> encode(const std::string& text, bool add_special_tokens) const;
  // The same with token type ids and the mask of added special tokens.
  Encoding encode_with_types(const std::string& text, bool add_special_tokens = true) const;
  // A pair of sequences: [CLS] A [SEP] B [SEP] with type ids 0 for A's part and 1 for B's,
  // or as the tokenizer's post-processor defines (without one, the two concatenated).
  Encoding encode_pair(const std::string& first, const std::string& second, bool add_special_tokens = true) const;
  // The token strings of encode(text).
  std::vector<std::string> encode_pieces(const std::string& text) const;
  std::string decode(const std::vector<int64_t>& ids) const;
  std::string decode(const std::vector<int64_t>& ids, bool skip_special_tokens) const;

  // One past the largest id (the embedding rows a model needs).
  int64_t vocab_size() const;
  // The token of `id`; throws for an id no token has.
  std::string piece(int64_t id) const;
  std::optional<int64_t> token_to_id(const std::string& token) const;
  // The id of T5's sentinel <extra_id_i>; throws when the tokenizer has fewer sentinels.
  int64_t sentinel(int64_t i) const;
  bool is_special(int64_t id) const;
  // True when the token starts a word (a leading U+2581 or 'Ġ', or no "##" continuation).
  bool starts_word(int64_t id) const;
  const SpecialTokenIds& special() const { return special_; }
  TokenizerBackend kind() const { return kind_; }

  // tokenizer_config.json's chat template (kept as written; data/chat_format.h renders it).
  const std::optional<std::string>& chat_template() const { return chat_template_; }
  // The special tokens by role ("bos" -> "<s>", "eos", "unk", "sep", "pad", "cls", "mask"): those
  // a Hugging Face tokenizer's config names (transformers' special_tokens_map), all seven of zoo's own.
  const std::map<std::string, std::string>& special_token_texts() const { return special_token_texts_; }
  // tokenizer_config.json's model_max_length, when it states a finite one.
  std::optional<int64_t> model_max_length() const { return model_max_length_; }

  // Writes the tokenizer into `dir` as the files it came from: tokenizer.model for zoo's own,
  // the Hugging Face files (tokenizer.json, configs, ...) otherwise.
  void save(const std::string& dir) const;
  // Those files by name.
  const TokenizerFiles& files() const { return files_; }

  // The serialized tokenizer (zoo's: the SentencePiece model; Hugging Face's: the container of
  // its files, tokenizers/tokenizer_files.h) and a 64-bit FNV-1a hash of it, recorded in token files.
  const std::string& model_bytes() const { return model_bytes_; }
  uint64_t hash() const { return hash_; }
  std::string hash_hex() const;

 private:
  Tokenizer() = default;
  static Tokenizer from_zoo_model(const std::string& bytes, const std::string& source);
  // `json_name` names a tokenizer.json read on its own in errors.
  static Tokenizer from_files(TokenizerFiles files, const std::string& dir, const std::string& json_name = "");

  TokenizerBackend kind_ = TokenizerBackend::kZooSentencePiece;
  std::shared_ptr<const TokenizerEngine> engine_;
  TokenizerFiles files_;
  std::string model_bytes_;
  uint64_t hash_ = 0;
  SpecialTokenIds special_;
  std::optional<std::string> chat_template_;
  std::map<std::string, std::string> special_token_texts_;
  std::optional<int64_t> model_max_length_;
};

uint64_t fnv1a64(const std::string& bytes);

// Whether `dir` holds a Hugging Face tokenizer's files (tokenizer.json, vocab.json + merges.txt,
// vocab.txt, spiece.model or tokenizer.model).
bool has_hf_tokenizer(const std::string& dir);

// The directory a tokenizer is read from for a directory `path`: `path` itself when it holds a
// tokenizer's files (has_hf_tokenizer: a Hugging Face directory, or a zoo checkpoint or run
// directory with zoo's own tokenizer.model), else PATH/tokenizer/ when it is a folder (where a
// zoo checkpoint or run directory keeps a Hugging Face tokenizer, store_tokenizer), else `path`.
// Every command that takes a tokenizer finds it here (Tokenizer::load), so each takes a
// checkpoint or run directory as well.
std::string tokenizer_directory(const std::string& path);

// Where a checkpoint or run directory keeps its tokenizer: zoo's own as DIR/tokenizer.model (as
// always), a Hugging Face tokenizer as its original files in DIR/tokenizer/. Written atomically
// file by file; an unchanged tokenizer is not rewritten.
void store_tokenizer(const Tokenizer& tokenizer, const std::string& dir);
// The tokenizer stored in `dir` that way, or nullptr when there is none. Errors name the file.
std::unique_ptr<Tokenizer> stored_tokenizer(const std::string& dir);

// "the tokenizer has N pieces but the model's vocab_size is M" when `tokenizer` can give ids a
// model of `vocab_size` has no embedding row for; empty when every id fits.
std::string vocabulary_mismatch(const Tokenizer& tokenizer, int64_t vocab_size);

// Text files under each input (a file itself, or every regular file below a directory, sorted).
// Throws std::runtime_error naming an input that is missing, or a directory with no files.
std::vector<std::string> list_text_files(const std::vector<std::string>& inputs);

// "the inputs contain no text: a.txt and b.txt are empty", naming the files (the first few).
std::string no_text_message(const std::vector<std::string>& empty_files);

}  // namespace zoo
