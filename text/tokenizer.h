#pragma once
// SentencePiece tokenization with the special tokens every family needs, at fixed ids:
//   0 <pad>, 1 <unk>, 2 <s>, 3 </s>, 4 [CLS], 5 [SEP], 6 [MASK], 7.. <extra_id_0>..<extra_id_99>
// (T5's span-corruption sentinels). Byte fallback is on, so no input is unrepresentable.

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/enum_names.h"

namespace zoo {

struct SpecialTokens {
  static constexpr int64_t kPad = 0, kUnk = 1, kBos = 2, kEos = 3, kCls = 4, kSep = 5, kMask = 6;
  static constexpr int64_t kFirstSentinel = 7;
  static constexpr int64_t kSentinels = 100;
  static constexpr int64_t kCount = kFirstSentinel + kSentinels;  // ids below this are special
};

enum class TokenizerKind { kUnigram, kBpe };

template <>
struct EnumNames<TokenizerKind> {
  static constexpr const char* kWhat = "tokenizer type";
  static constexpr std::pair<const char*, TokenizerKind> kNames[] = {{"unigram", TokenizerKind::kUnigram},
                                                                     {"bpe", TokenizerKind::kBpe}};
};

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
  // Loads PREFIX.model (or a path to the .model file). Throws std::runtime_error naming the file.
  static Tokenizer load(const std::string& path);
  static Tokenizer from_serialized(const std::string& model_bytes, const std::string& source);
  // Trains on the options' inputs and writes PREFIX.model and PREFIX.vocab atomically.
  static Tokenizer train(const TokenizerTrainOptions& options, const std::string& out_prefix);

  std::vector<int64_t> encode(const std::string& text) const;
  std::vector<std::string> encode_pieces(const std::string& text) const;
  std::string decode(const std::vector<int64_t>& ids) const;

  int64_t vocab_size() const;
  std::string piece(int64_t id) const;
  int64_t sentinel(int64_t i) const { return SpecialTokens::kFirstSentinel + i; }
  bool is_special(int64_t id) const { return id < SpecialTokens::kCount; }
  // True when the piece starts a word (SentencePiece marks that with U+2581).
  bool starts_word(int64_t id) const;

  // The serialized model and a 64-bit FNV-1a hash of it, recorded in token files.
  const std::string& model_bytes() const { return model_bytes_; }
  uint64_t hash() const { return hash_; }
  std::string hash_hex() const;

 private:
  Tokenizer() = default;
  std::shared_ptr<void> processor_;  // owned by the SentencePiece module (see tokenizer.cpp)
  std::string model_bytes_;
  uint64_t hash_ = 0;
  std::vector<bool> starts_word_;
};

uint64_t fnv1a64(const std::string& bytes);

// Where the SentencePiece module (libzoo_sentencepiece.so) was loaded from; loads it first.
// Throws std::runtime_error saying where it looked when it cannot be loaded.
std::string sentencepiece_module_path();

// Byte offset of the first invalid UTF-8 sequence in `text`, or -1 when it is valid.
int64_t invalid_utf8_offset(const std::string& text);

// Text files under each input (a file itself, or every regular file below a directory, sorted).
// Throws std::runtime_error naming an input that is missing, or a directory with no files.
std::vector<std::string> list_text_files(const std::vector<std::string>& inputs);

// "the inputs contain no text: a.txt and b.txt are empty", naming the files (the first few).
std::string no_text_message(const std::vector<std::string>& empty_files);

}  // namespace zoo
