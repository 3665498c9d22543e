#include "tokenizers/hf_config.h"

#include <gtest/gtest.h>

#include "base_test_util.h"

namespace zoo {
namespace {

using testing::error_of;

// special_tokens_map.json wins over tokenizer_config.json, as in transformers' from_pretrained;
// tokens come as strings or AddedToken objects.
TEST(HfConfig, ReadsSpecialTokensAndSettings) {
  const TokenizerFiles files{
      {kTokenizerConfigJson, R"({"tokenizer_class": "LlamaTokenizerFast", "add_bos_token": true, "add_eos_token": false,
          "bos_token": {"__type": "AddedToken", "content": "<s>", "lstrip": false, "normalized": true,
                        "rstrip": false, "single_word": false},
          "eos_token": "</s>", "unk_token": "<unk>", "model_max_length": 1000000000000000019884624838656,
          "do_lower_case": false, "strip_accents": null,
          "added_tokens_decoder": {"0": {"content": "<unk>", "lstrip": false, "normalized": false, "rstrip": false,
                                         "single_word": false, "special": true},
                                   "32000": {"content": "<pad>", "lstrip": true, "normalized": false,
                                             "rstrip": false, "single_word": false, "special": false}},
          "chat_template": [{"name": "default", "template": "{{ x }}"}, {"name": "tool_use", "template": "{{ y }}"}]})"},
      {kSpecialTokensMapJson, R"({"eos_token": {"content": "<eos>", "rstrip": true}, "pad_token": "<pad>",
                                  "additional_special_tokens": ["<a>", "<b>"]})"}};
  const HfConfig c = read_hf_config(files, "d");
  EXPECT_EQ(c.base_class(), "LlamaTokenizer");
  EXPECT_EQ(c.role("bos"), "<s>");
  EXPECT_TRUE(c.roles.at("bos").normalized);
  EXPECT_EQ(c.role("eos"), "<eos>");
  EXPECT_TRUE(c.roles.at("eos").rstrip);
  EXPECT_TRUE(c.roles.at("eos").special);
  EXPECT_EQ(c.role("pad"), "<pad>");
  EXPECT_FALSE(c.role("mask"));
  EXPECT_EQ(c.additional_special_tokens.size(), 2u);
  EXPECT_EQ(c.add_bos_token, true);
  EXPECT_EQ(c.do_lower_case, false);
  EXPECT_FALSE(c.strip_accents.has_value());
  EXPECT_FALSE(c.model_max_length.has_value());  // transformers' "no limit"
  ASSERT_EQ(c.added_tokens_decoder.size(), 2u);
  EXPECT_EQ(c.added_tokens_decoder[1].first, 32000);
  EXPECT_TRUE(c.added_tokens_decoder[1].second.lstrip);
  EXPECT_FALSE(c.added_tokens_decoder[1].second.special);
  EXPECT_EQ(c.chat_template, "{{ x }}");
  EXPECT_EQ(c.named_chat_templates.at("tool_use"), "{{ y }}");
}

TEST(HfConfig, ChatTemplateFileAndAddedTokensFile) {
  const HfConfig c = read_hf_config({{kTokenizerConfigJson, R"({"chat_template": "old", "model_max_length": 512})"},
                                     {kChatTemplateJinja, "{{ new }}"},
                                     {kAddedTokensJson, R"({"<new>": 30522})"}},
                                    "d");
  EXPECT_EQ(c.chat_template, "{{ new }}");
  EXPECT_EQ(c.model_max_length, 512);
  EXPECT_EQ(c.added_tokens_file, (std::vector<std::pair<std::string, int64_t>>{{"<new>", 30522}}));
}

// Tokens stated with ids first; then the special tokens not among them, in transformers' order.
TEST(HfConfig, AddedTokensFromTheConfig) {
  HfConfig c = read_hf_config({{kTokenizerConfigJson, R"({"unk_token": "<unk>", "bos_token": "<s>",
                                                         "additional_special_tokens": ["<x>", "<unk>"]})"},
                               {kAddedTokensJson, R"({"<unk>": 5})"}},
                              "d");
  const auto tokens = config_added_tokens(c);
  ASSERT_EQ(tokens.with_ids.size(), 1u);
  EXPECT_EQ(tokens.with_ids[0].first, 5);
  ASSERT_EQ(tokens.by_content.size(), 2u);
  EXPECT_EQ(tokens.by_content[0].content, "<s>");
  EXPECT_EQ(tokens.by_content[1].content, "<x>");
}

TEST(HfConfig, BadConfigsAreErrorsNamingTheFile) {
  EXPECT_EQ(error_of([] { read_hf_config({{kTokenizerConfigJson, R"({"add_bos_token": "yes"})"}}, "d"); }),
            "d/tokenizer_config.json: add_bos_token: expected true or false, found string");
  EXPECT_EQ(error_of([] { read_hf_config({{kSpecialTokensMapJson, R"({"bos_token": {"lstrip": true}})"}}, "d"); }),
            "d/special_tokens_map.json: bos_token: missing 'content'");
  EXPECT_EQ(error_of([] { read_hf_config({{kTokenizerConfigJson, R"({"added_tokens_decoder": {"x": {}}})"}}, "d"); }),
            "d/tokenizer_config.json: added_tokens_decoder.x: expected a token id as the key, found 'x'");
  EXPECT_NE(error_of([] { read_hf_config({{kAddedTokensJson, "{"}}, "d"); }).find("d/added_tokens.json: not valid JSON"),
            std::string::npos);
}

}  // namespace
}  // namespace zoo
