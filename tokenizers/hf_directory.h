#pragma once
// A Hugging Face tokenizer directory (as its files, so a serialized copy loads the same way):
// which backend reads it, and its special tokens and config values.
//   tokenizer.json               -> the tokenizers pipeline, as written
//   vocab.json + merges.txt      -> GPT-2's byte-level BPE      (tokenizers/hf_vocab_files.h)
//   vocab.txt                    -> BERT's WordPiece             (tokenizers/hf_vocab_files.h)
//   spiece.model/tokenizer.model -> SentencePiece with T5's or LLaMA's conventions, by
//                                   tokenizer_class (default: spiece.model T5, tokenizer.model LLaMA)

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tokenizers/tokenizer.h"
#include "tokenizers/tokenizer_engine.h"
#include "tokenizers/tokenizer_files.h"

namespace zoo {

inline constexpr const char* kSentencePieceT5File = "spiece.model";
inline constexpr const char* kSentencePieceModelFile = "tokenizer.model";

struct HfDirectory {
  TokenizerBackend kind = TokenizerBackend::kTokenizerJson;
  std::shared_ptr<const TokenizerEngine> engine;
  TokenizerFiles files;  // those the backend reads, and the configs
  SpecialTokenIds special;
  std::optional<std::string> chat_template;
  // The special tokens the config names, by role ("bos" -> "<s>"): what transformers passes a
  // chat template as bos_token, eos_token, ...
  std::map<std::string, std::string> special_token_texts;
  std::optional<int64_t> model_max_length;
};

// Every file name read from a directory (model files and configs).
const std::vector<std::string>& hf_tokenizer_file_names();

// Reads a directory's files; `dir` names it (and prefixes file names) in errors, and
// `json_name`, when given, names the tokenizer.json (a file read on its own). Throws
// std::runtime_error "<dir>: no tokenizer (looked for ...)" when none of the model files is there.
HfDirectory read_hf_directory(const TokenizerFiles& files, const std::string& dir, const std::string& json_name = "");

}  // namespace zoo
