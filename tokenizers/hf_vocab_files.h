#pragma once
// The Hugging Face tokenizer formats that came before tokenizer.json, assembled into the same
// pipeline transformers' converters build from them (convert_slow_tokenizer.py), so they
// encode exactly as the fast tokenizers do:
//   GPT-2 (vocab.json + merges.txt): ByteLevel pre-tokenizer (add_prefix_space from the config,
//     default false) + BPE + ByteLevel decoder; "<bos> $A" when add_bos_token is set.
//   BERT (vocab.txt): BertNormalizer (lowercase and accent stripping from do_lower_case,
//     default true, and strip_accents) + BertPreTokenizer + WordPiece ("##", [UNK] past 100
//     characters) + "[CLS] $A [SEP]" / "[CLS] $A [SEP] $B:1 [SEP]:1" + WordPiece decoder.
// Special tokens come from tokenizer_config.json / special_tokens_map.json, with the defaults
// of transformers' GPT2Tokenizer and BertTokenizer.

#include <string>

#include "tokenizers/hf_config.h"
#include "tokenizers/hf_tokenizer.h"
#include "tokenizers/tokenizer_files.h"

namespace zoo {

inline constexpr const char* kTokenizerJson = "tokenizer.json";
inline constexpr const char* kGpt2VocabJson = "vocab.json";
inline constexpr const char* kGpt2MergesTxt = "merges.txt";
inline constexpr const char* kBertVocabTxt = "vocab.txt";

// `config` gains the class defaults for roles it does not name.
HfPipelineParts gpt2_pipeline(const TokenizerFiles& files, HfConfig& config, const std::string& dir);
HfPipelineParts bert_pipeline(const TokenizerFiles& files, HfConfig& config, const std::string& dir);

// Sets `role` to `content` (a special, unnormalized token) unless the config names it.
void default_role(HfConfig& config, const std::string& role, const std::string& content);

}  // namespace zoo
