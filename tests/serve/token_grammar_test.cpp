#include "serve/token_grammar.h"

#include <algorithm>
#include <array>
#include <filesystem>
#include <random>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base_test_util.h"
#include "reference_texts.h"

namespace zoo {
namespace {

using nlohmann::json;

Tokenizer mistral_v3() {
  const auto dir = testing::scratch_path("token-grammar-mistral");
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(testing::reference_file("mistral/tokenizer.model.v3"), dir / "tokenizer.model",
                             std::filesystem::copy_options::overwrite_existing);
  return Tokenizer::load(dir.string());
}

// The grammar reads each token as the bytes the tokenizer's own decoding gives it after another
// token (so that SentencePiece's word marker reads as the space it is): GPT-2's byte-level
// vocabulary (tokenizer.json and vocab.json + merges.txt), Qwen3's, and Mistral's SentencePiece
// model with byte tokens. Tokens that are part of a UTF-8 character decode to U+FFFD and are
// left out; special tokens have no bytes.
TEST(TokenGrammar, TokenBytesAreTheTokenizersOwnText) {
  const std::vector<std::pair<std::string, Tokenizer>> tokenizers = {
      {"gpt2-json", Tokenizer::load(testing::reference_file("gpt2-json"))},
      {"gpt2-files", Tokenizer::load(testing::reference_file("gpt2-files"))},
      {"qwen3-json", Tokenizer::load(testing::reference_file("qwen3-json"))},
      {"mistral-v3", mistral_v3()}};
  for (const auto& [name, tokenizer] : tokenizers) {
    SCOPED_TRACE(name);
    TokenGrammars grammars(tokenizer, tokenizer.vocab_size() + 5, {});
    const auto& bytes = grammars.token_bytes();
    ASSERT_EQ(static_cast<int64_t>(bytes.size()), tokenizer.vocab_size());
    const auto anchor = tokenizer.encode("a");
    ASSERT_EQ(anchor.size(), 1u);
    const std::string before = tokenizer.decode(anchor);
    int64_t compared = 0;
    for (int64_t id = 0; id < tokenizer.vocab_size(); id += 3) {  // a third of each vocabulary
      if (tokenizer.is_special(id)) {
        EXPECT_EQ(bytes[id], "") << id;
        continue;
      }
      const std::string text = tokenizer.decode({anchor[0], id}).substr(before.size());
      if (text.find("\xEF\xBF\xBD") != std::string::npos) continue;
      EXPECT_EQ(bytes[id], text) << "token " << id << " (" << tokenizer.piece(id) << ")";
      ++compared;
    }
    EXPECT_GT(compared, tokenizer.vocab_size() / 4);
  }
}

// A walk of random allowed tokens, half the time among those holding a JSON delimiter (so that
// strings end), until the grammar is complete: `max_steps` at most.
std::string walk(TokenConstraint& constraint, const std::vector<std::string>& bytes, int64_t stop, std::mt19937& rng,
                 int max_steps) {
  std::string out;
  for (int step = 0; step < max_steps && !constraint.terminated(); ++step) {
    const auto& mask = constraint.allowed();
    std::vector<int64_t> allowed, delimiting;
    for (int64_t t = 0; t < static_cast<int64_t>(mask.size()) * 32; ++t) {
      if (!token_in_bitmask(mask, t)) continue;
      allowed.push_back(t);
      if (t == stop || (t < static_cast<int64_t>(bytes.size()) &&
                        bytes[t].find_first_of("\"{}[],:") != std::string::npos)) {
        delimiting.push_back(t);
      }
    }
    if (allowed.empty()) {
      ADD_FAILURE() << "no token allowed after " << out;
      return out;
    }
    const auto& pool = !delimiting.empty() && rng() % 2 == 0 ? delimiting : allowed;
    const int64_t token = pool[rng() % pool.size()];
    EXPECT_TRUE(constraint.accept(token)) << token;
    if (token != stop) out += bytes[token];
  }
  EXPECT_TRUE(constraint.terminated()) << "not complete after " << max_steps << " tokens: " << out;
  return out;
}

// Every walk through allowed tokens ends as JSON its grammar describes: any object (json_object),
// and a schema's object with its enum, integer range and array length. Tokens the grammar does
// not allow are refused; the stop token is allowed only once the value is complete; a vocabulary
// wider than the tokenizer's never allows the ids past it.
TEST(TokenGrammar, AllowedTokensSpellTheGrammarsJson) {
  const auto tokenizer = Tokenizer::load(testing::reference_file("gpt2-json"));
  const int64_t stop = *tokenizer.special().eos, vocab = tokenizer.vocab_size() + 40;
  TokenGrammars grammars(tokenizer, vocab, {stop});
  const auto& bytes = grammars.token_bytes();
  std::mt19937 rng(5);

  const auto any = grammars.compile({ResponseFormatKind::kJsonObject, ""});
  for (int i = 0; i < 4; ++i) {
    TokenConstraint constraint(any);
    const auto& first = constraint.allowed();
    EXPECT_FALSE(token_in_bitmask(first, stop)) << "an empty answer";
    EXPECT_FALSE(token_in_bitmask(first, *tokenizer.token_to_id("hello")));
    EXPECT_TRUE(token_in_bitmask(first, *tokenizer.token_to_id("{")));
    for (int64_t t = tokenizer.vocab_size(); t < vocab; ++t) EXPECT_FALSE(token_in_bitmask(first, t)) << t;
    EXPECT_FALSE(constraint.accept(*tokenizer.token_to_id("hello")));
    const auto text = walk(constraint, bytes, stop, rng, 3000);
    const auto value = json::parse(text, nullptr, false);
    ASSERT_FALSE(value.is_discarded()) << text;
    EXPECT_TRUE(value.is_object()) << text;
  }

  const json schema = {{"type", "object"},
                       {"properties",
                        {{"color", {{"enum", {"red", "green"}}}},
                         {"n", {{"type", "integer"}, {"minimum", 3}, {"maximum", 7}}},
                         {"list", {{"type", "array"}, {"items", {{"type", "boolean"}}}, {"maxItems", 2}}}}},
                       {"required", {"color", "n", "list"}},
                       {"additionalProperties", false}};
  const auto typed = grammars.compile({ResponseFormatKind::kJsonSchema, schema.dump()});
  for (int i = 0; i < 8; ++i) {
    TokenConstraint constraint(typed);
    const auto text = walk(constraint, bytes, stop, rng, 3000);
    const auto value = json::parse(text, nullptr, false);
    ASSERT_FALSE(value.is_discarded()) << text;
    ASSERT_TRUE(value.is_object()) << text;
    EXPECT_EQ(value.size(), 3u) << text;
    EXPECT_TRUE(value["color"] == "red" || value["color"] == "green") << text;
    ASSERT_TRUE(value["n"].is_number_integer()) << text;
    EXPECT_GE(value["n"].get<int>(), 3) << text;
    EXPECT_LE(value["n"].get<int>(), 7) << text;
    ASSERT_TRUE(value["list"].is_array()) << text;
    EXPECT_LE(value["list"].size(), 2u) << text;
    for (const auto& b : value["list"]) EXPECT_TRUE(b.is_boolean()) << text;
  }
  EXPECT_THROW(grammars.compile({ResponseFormatKind::kJsonSchema, R"({"type": "decimal"})"}), std::invalid_argument);
}

// Bytes as text, those outside printable ASCII as \xHH.
std::string shown(const std::string& bytes) {
  std::string out;
  for (const unsigned char c : bytes) {
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      static const char* digits = "0123456789ABCDEF";
      out += std::string("\\x") + digits[c >> 4] + digits[c & 15];
    }
  }
  return out;
}

// A string's `pattern` with a negated class or a dot admits any character, not any byte: after
// the lead byte of a UTF-8 character only its continuation bytes are allowed, the stop token is
// not, and walks that take tokens of single bytes often still end in valid UTF-8 (which
// nlohmann-json's parser checks) that the pattern describes.
TEST(TokenGrammar, PatternsAdmitCharactersNotStrayBytes) {
  const auto tokenizer = Tokenizer::load(testing::reference_file("gpt2-json"));
  const int64_t stop = *tokenizer.special().eos;
  TokenGrammars grammars(tokenizer, tokenizer.vocab_size(), {stop});
  const auto& bytes = grammars.token_bytes();
  auto token_of = [&](const std::string& text) {
    const auto at = std::find(bytes.begin(), bytes.end(), text);
    EXPECT_NE(at, bytes.end()) << "no token of bytes " << shown(text);
    return static_cast<int64_t>(at - bytes.begin());
  };
  for (const std::string pattern : {"^[^a]{1,3}$", "^.{1,3}$"}) {
    SCOPED_TRACE(pattern);
    const json schema = {{"type", "string"}, {"pattern", pattern}};
    const auto grammar = grammars.compile({ResponseFormatKind::kJsonSchema, schema.dump()});
    TokenConstraint constraint(grammar);
    ASSERT_TRUE(constraint.accept(token_of("\"")));
    ASSERT_TRUE(constraint.accept(token_of("\xC3")));  // the lead byte of a two-byte character
    const auto& mask = constraint.allowed();
    EXPECT_TRUE(token_in_bitmask(mask, token_of("\xA9")));  // é's second byte
    for (const std::string stray : {"b", "\"", "\xC3", "\xE2"}) {
      EXPECT_FALSE(token_in_bitmask(mask, token_of(stray))) << shown(stray);
    }
    EXPECT_FALSE(token_in_bitmask(mask, stop));
    EXPECT_FALSE(constraint.accept(token_of("b")));
    // Overlong forms, surrogates and code points past U+10FFFF (RFC 3629's table): the byte after
    // each lead that is one past its range is refused, the edge of the range allowed.
    const std::vector<std::array<std::string, 3>> leads = {
        {"\xE0", "\xA0", "\x9F"}, {"\xED", "\x9F", "\xA0"}, {"\xF0", "\x90", "\x8F"}, {"\xF4", "\x8F", "\x90"}};
    for (const auto& [lead, edge, past] : leads) {
      TokenConstraint inside(grammar);
      ASSERT_TRUE(inside.accept(token_of("\"")));
      const auto& opening = inside.allowed();
      for (const std::string never : {"\x80", "\xC0", "\xC1", "\xF5", "\xFF"}) {
        EXPECT_FALSE(token_in_bitmask(opening, token_of(never))) << shown(never);
      }
      ASSERT_TRUE(inside.accept(token_of(lead))) << shown(lead);
      const auto& after = inside.allowed();
      EXPECT_TRUE(token_in_bitmask(after, token_of(edge))) << shown(lead + edge);
      EXPECT_FALSE(token_in_bitmask(after, token_of(past))) << shown(lead + past);
      EXPECT_FALSE(inside.accept(token_of(past))) << shown(lead + past);
    }
    // Walks that pick single-byte tokens at random: characters of one to four bytes.
    std::mt19937 rng(11);
    std::vector<int64_t> single;
    for (int64_t t = 0; t < static_cast<int64_t>(bytes.size()); ++t) {
      if (bytes[t].size() == 1) single.push_back(t);
    }
    int complete = 0;
    for (int i = 0; i < 200; ++i) {
      TokenConstraint walker(grammar);
      std::string text;
      for (int step = 0; step < 16 && !walker.terminated(); ++step) {
        const auto& allowed = walker.allowed();
        std::vector<int64_t> pool;
        for (int64_t t : single) {
          if (token_in_bitmask(allowed, t)) pool.push_back(t);
        }
        if (token_in_bitmask(allowed, stop)) pool.push_back(stop);
        ASSERT_FALSE(pool.empty()) << shown(text);
        const int64_t token = pool[rng() % pool.size()];
        ASSERT_TRUE(walker.accept(token));
        if (token != stop) text += bytes[token];
      }
      if (!walker.terminated()) continue;
      ++complete;
      const auto value = json::parse(text, nullptr, false);
      ASSERT_FALSE(value.is_discarded()) << shown(text);
      ASSERT_TRUE(value.is_string()) << shown(text);
      const auto chars = value.get<std::string>();
      const auto count = std::count_if(chars.begin(), chars.end(), [](char c) { return (c & 0xC0) != 0x80; });
      EXPECT_TRUE(count >= 1 && count <= 3) << shown(text);
      if (pattern[1] == '[') EXPECT_EQ(chars.find('a'), std::string::npos) << shown(text);
    }
    EXPECT_GT(complete, 50);
  }
}

// Without a stop token the answer is complete when its value is.
TEST(TokenGrammar, WithoutAStopTokenTheValueEndsTheAnswer) {
  const auto tokenizer = Tokenizer::load(testing::reference_file("gpt2-json"));
  TokenGrammars grammars(tokenizer, tokenizer.vocab_size(), {});
  TokenConstraint constraint(grammars.compile({ResponseFormatKind::kJsonSchema, R"({"enum": [true]})"}));
  EXPECT_FALSE(constraint.terminated());
  EXPECT_TRUE(constraint.accept(*tokenizer.token_to_id("true")));
  EXPECT_TRUE(constraint.terminated());
}

TEST(TokenGrammar, WordPieceVocabulariesAreRefused) {
  const auto tokenizer = Tokenizer::load(testing::reference_file("bert-vocab"));
  EXPECT_THROW(TokenGrammars(tokenizer, tokenizer.vocab_size(), {}), std::invalid_argument);
}

}  // namespace
}  // namespace zoo
