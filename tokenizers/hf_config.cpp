#include "tokenizers/hf_config.h"

#include <filesystem>

#include "core/json_view.h"

namespace zoo {
namespace {

// A special token written as a string or as an AddedToken object. Special tokens are not
// normalized unless the object says so (transformers' AddedToken(special=True) default).
AddedToken special_token(const JsonView& json) {
  AddedToken t;
  t.special = true;
  t.normalized = false;
  if (json.value().is_string()) {
    t.content = json.as_string();
    return t;
  }
  t.content = json.string_at("content");
  t.single_word = json.bool_or("single_word", false);
  t.lstrip = json.bool_or("lstrip", false);
  t.rstrip = json.bool_or("rstrip", false);
  t.normalized = json.bool_or("normalized", false);
  t.special = json.bool_or("special", true);
  return t;
}

// The special-token entries shared by tokenizer_config.json and special_tokens_map.json.
void read_special_tokens(const JsonView& root, HfConfig& config) {
  for (const char* role : kSpecialTokenRoles) {
    if (const auto v = root.find(std::string(role) + "_token")) config.roles[role] = special_token(*v);
  }
  if (const auto extra = root.find("additional_special_tokens")) {
    config.additional_special_tokens.clear();
    for (const auto& t : extra->elements()) config.additional_special_tokens.push_back(special_token(t));
  }
}

std::optional<bool> optional_bool(const JsonView& root, const std::string& key) {
  if (const auto v = root.find(key)) return v->as_bool();
  return std::nullopt;
}

void read_tokenizer_config(const JsonView& root, HfConfig& config) {
  read_special_tokens(root, config);
  config.tokenizer_class = root.optional_string("tokenizer_class");
  config.add_bos_token = optional_bool(root, "add_bos_token");
  config.add_eos_token = optional_bool(root, "add_eos_token");
  config.add_prefix_space = optional_bool(root, "add_prefix_space");
  config.do_lower_case = optional_bool(root, "do_lower_case");
  config.tokenize_chinese_chars = optional_bool(root, "tokenize_chinese_chars");
  config.strip_accents = optional_bool(root, "strip_accents");
  if (const auto v = root.find("extra_ids")) config.extra_ids = v->as_int();
  if (const auto v = root.find("model_max_length")) {
    // transformers writes int(1e30) for "no limit"; it arrives as a float.
    const double n = v->as_number();
    if (n < 0) v->fail("must not be negative");
    if (n < 9.0e18) config.model_max_length = static_cast<int64_t>(n);
  }
  if (const auto decoder = root.find("added_tokens_decoder")) {
    for (const auto& [id_text, token] : decoder->members()) {
      if (id_text.empty() || id_text.size() > 12 || id_text.find_first_not_of("0123456789") != std::string::npos) {
        token.fail("expected a token id as the key, found '" + id_text + "'");
      }
      AddedToken t = special_token(token);
      t.special = token.bool_or("special", false);
      config.added_tokens_decoder.emplace_back(std::stoll(id_text), t);
    }
  }
  if (const auto chat = root.find("chat_template")) {
    if (chat->value().is_string()) {
      config.chat_template = chat->as_string();
    } else {
      for (const auto& entry : chat->elements()) {
        config.named_chat_templates[entry.string_at("name")] = entry.string_at("template");
      }
      if (const auto d = config.named_chat_templates.find("default"); d != config.named_chat_templates.end()) {
        config.chat_template = d->second;
      }
    }
  }
}

}  // namespace

std::optional<std::string> HfConfig::role(const std::string& name) const {
  const auto it = roles.find(name);
  if (it == roles.end()) return std::nullopt;
  return it->second.content;
}

std::string HfConfig::base_class() const {
  std::string c = tokenizer_class.value_or("");
  if (c.size() > 4 && c.compare(c.size() - 4, 4, "Fast") == 0) c.resize(c.size() - 4);
  return c;
}

ConfigAddedTokens config_added_tokens(const HfConfig& config, std::vector<std::pair<int64_t, AddedToken>> implicit) {
  ConfigAddedTokens out;
  if (!config.added_tokens_decoder.empty()) {
    out.with_ids = config.added_tokens_decoder;
  } else {
    out.with_ids = std::move(implicit);
    for (const auto& [content, id] : config.added_tokens_file) {
      AddedToken t;
      t.content = content;
      out.with_ids.emplace_back(id, t);
    }
  }
  const auto known = [&](const std::string& content) {
    for (const auto& [id, t] : out.with_ids) {
      if (t.content == content) return true;
    }
    for (const auto& t : out.by_content) {
      if (t.content == content) return true;
    }
    return false;
  };
  for (const char* role : kSpecialTokenRoles) {
    const auto it = config.roles.find(role);
    if (it != config.roles.end() && !known(it->second.content)) out.by_content.push_back(it->second);
  }
  for (const auto& token : config.additional_special_tokens) {
    if (!known(token.content)) out.by_content.push_back(token);
  }
  return out;
}

HfConfig read_hf_config(const TokenizerFiles& files, const std::string& dir) {
  HfConfig config;
  const auto name_of = [&](const char* file) { return (std::filesystem::path(dir) / file).string(); };
  if (const auto it = files.find(kTokenizerConfigJson); it != files.end()) {
    const auto json = JsonView::parse(it->second, name_of(kTokenizerConfigJson));
    const JsonView root(json, name_of(kTokenizerConfigJson));
    if (!json.is_object()) root.fail("expected an object");
    read_tokenizer_config(root, config);
  }
  if (const auto it = files.find(kSpecialTokensMapJson); it != files.end()) {
    const auto json = JsonView::parse(it->second, name_of(kSpecialTokensMapJson));
    const JsonView root(json, name_of(kSpecialTokensMapJson));
    if (!json.is_object()) root.fail("expected an object");
    read_special_tokens(root, config);
  }
  if (const auto it = files.find(kAddedTokensJson); it != files.end()) {
    const auto json = JsonView::parse(it->second, name_of(kAddedTokensJson));
    for (const auto& [token, id] : JsonView(json, name_of(kAddedTokensJson)).members()) {
      config.added_tokens_file.emplace_back(token, id.as_int());
    }
  }
  if (const auto it = files.find(kChatTemplateJinja); it != files.end()) config.chat_template = it->second;
  return config;
}

}  // namespace zoo
