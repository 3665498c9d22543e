#pragma once
// What transformers keeps beside a tokenizer's model files: tokenizer_config.json,
// special_tokens_map.json (whose entries win over tokenizer_config.json's, as in
// transformers' from_pretrained), added_tokens.json and chat_template.jinja.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tokenizers/added_vocabulary.h"
#include "tokenizers/tokenizer_files.h"

namespace zoo {

// Special-token roles in transformers' order (SPECIAL_TOKENS_ATTRIBUTES without the prefix).
inline constexpr const char* kSpecialTokenRoles[] = {"bos", "eos", "unk", "sep", "pad", "cls", "mask"};

struct HfConfig {
  // Special tokens by role: "bos", "eos", "unk", "sep", "pad", "cls", "mask". Written as a
  // string or as an AddedToken object ({"content": ..., "lstrip": ..., ...}).
  std::map<std::string, AddedToken> roles;
  std::vector<AddedToken> additional_special_tokens;
  // tokenizer_config.json's added_tokens_decoder: every added token with its id (newer files).
  std::vector<std::pair<int64_t, AddedToken>> added_tokens_decoder;
  // added_tokens.json: {token: id} (older files).
  std::vector<std::pair<std::string, int64_t>> added_tokens_file;

  std::optional<std::string> tokenizer_class;  // "T5Tokenizer", "LlamaTokenizerFast", ...
  std::optional<bool> add_bos_token, add_eos_token;
  std::optional<bool> add_prefix_space;
  std::optional<bool> do_lower_case, tokenize_chinese_chars;
  std::optional<bool> strip_accents;  // null: follows do_lower_case
  std::optional<int64_t> extra_ids;   // T5's sentinel count
  // Absent when the file gives none, or transformers' "no limit" (1e30).
  std::optional<int64_t> model_max_length;
  // The default chat template (chat_template.jinja, else tokenizer_config.json's string or
  // its entry named "default"), and any named ones.
  std::optional<std::string> chat_template;
  std::map<std::string, std::string> named_chat_templates;

  // The token text of a role, if the config names one.
  std::optional<std::string> role(const std::string& name) const;
  // The tokenizer class without a "Fast" suffix, or "" when the config names none.
  std::string base_class() const;
};

// The added tokens transformers registers from a config, split by how their ids are found.
struct ConfigAddedTokens {
  std::vector<std::pair<int64_t, AddedToken>> with_ids;  // at the ids given
  std::vector<AddedToken> by_content;                    // the model's id, else the next free one
};
// added_tokens_decoder when the config has one; otherwise `implicit` (T5's sentinels) and
// added_tokens.json's tokens at their ids. Then every special token (roles in transformers'
// order, additional_special_tokens) not among those, by content.
ConfigAddedTokens config_added_tokens(const HfConfig& config,
                                      std::vector<std::pair<int64_t, AddedToken>> implicit = {});

// Reads the config files present in `files`; `dir` prefixes file names in errors.
HfConfig read_hf_config(const TokenizerFiles& files, const std::string& dir);

// Config file names read beside the model files.
inline constexpr const char* kTokenizerConfigJson = "tokenizer_config.json";
inline constexpr const char* kSpecialTokensMapJson = "special_tokens_map.json";
inline constexpr const char* kAddedTokensJson = "added_tokens.json";
inline constexpr const char* kChatTemplateJinja = "chat_template.jinja";

}  // namespace zoo
