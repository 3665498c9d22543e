#include "tokenizers/sentencepiece_tokenizer.h"

#include <gtest/gtest.h>

#include "base_test_util.h"
#include "core/files.h"
#include "reference_texts.h"

namespace zoo {
namespace {

using testing::error_of;
using Ids = std::vector<int64_t>;

SentencePieceProcessor model(const std::string& name) {
  const std::string path = testing::spm_references() + "/" + name + "/m.model";
  return SentencePieceProcessor::load(read_file(path), path);
}

AddedToken special(const std::string& content) {
  AddedToken t;
  t.content = content;
  t.special = true;
  return t;
}

// T5Tokenizer's rules worked by hand: </s> after each sequence unless it already ends one.
TEST(SentencePieceTokenizer, T5Conventions) {
  SentencePieceSpecials s;
  s.convention = SentencePieceConvention::kT5;
  s.eos_token = "</s>";
  s.add_eos = true;
  const SentencePieceTokenizer t(model("t5"), {{2005, special("<x>")}}, {special("</s>"), special("<new>")}, s);
  EXPECT_EQ(*t.token_to_id("</s>"), 1);     // a piece of the model keeps its id
  EXPECT_EQ(*t.token_to_id("<new>"), 2006); // a new token comes after every id so far
  EXPECT_EQ(t.vocab_size(), 2007);
  const Ids a = t.encode("Hello", false).ids;
  Ids expected = a;
  expected.push_back(1);
  EXPECT_EQ(t.encode("Hello", true).ids, expected);
  EXPECT_EQ(t.encode("Hello</s>", true).ids, expected);  // _add_eos_if_not_present
  EXPECT_TRUE(t.is_special(2005));
  EXPECT_FALSE(t.is_special(5));
  EXPECT_FALSE(t.starts_word(2005));
}

TEST(SentencePieceTokenizer, LlamaConventions) {
  SentencePieceSpecials s;
  s.convention = SentencePieceConvention::kLlama;
  s.bos_token = "<s>";
  s.eos_token = "</s>";
  s.add_bos = true;
  s.add_eos = true;
  const SentencePieceTokenizer t(model("llama"), {}, {special("<s>"), special("</s>"), special("<unk>")}, s);
  const Ids a = t.encode("a", false).ids, b = t.encode("b", false).ids;
  const Encoding pair = t.encode_pair("a", "b", true);
  Ids ids{1};
  ids.insert(ids.end(), a.begin(), a.end());
  ids.push_back(2);
  const size_t first_part = ids.size();
  ids.push_back(1);
  ids.insert(ids.end(), b.begin(), b.end());
  ids.push_back(2);
  EXPECT_EQ(pair.ids, ids);
  EXPECT_EQ(pair.type_ids, [&] {
    Ids types(ids.size(), 1);
    std::fill(types.begin(), types.begin() + first_part, 0);
    return types;
  }());
  EXPECT_EQ(pair.special_mask.front(), 1);
  // Special tokens in the text are cut out; pieces that start words carry U+2581.
  EXPECT_EQ(t.encode("<s>", false).ids, (Ids{1}));
  // Each stretch gets SentencePiece's word mark in front ("y" -> "▁y"), which decodes as a space
  // after other text; skipped special tokens leave one stretch.
  EXPECT_EQ(t.decode(t.encode("x<s>y", false).ids, false), "x<s> y");
  EXPECT_EQ(t.decode(t.encode("x<s>y", false).ids, true), "x y");
  EXPECT_TRUE(t.starts_word(t.encode("hello", false).ids.front()));
  EXPECT_EQ(error_of([&] { t.decode({5000}, false); }), "tokenizer: id 5000 is outside the vocabulary (2000)");
}

TEST(SentencePieceTokenizer, ZooLayout) {
  std::string why;
  EXPECT_FALSE(SentencePieceTokenizer::has_zoo_layout(model("llama"), &why));
  EXPECT_EQ(why, "special token <pad> is not at id 0");
  const auto zoo = SentencePieceTokenizer::zoo(model("t5"));
  EXPECT_TRUE(zoo->is_special(106));  // zoo's fixed block, whatever the model says
  EXPECT_FALSE(zoo->is_special(107));
}

}  // namespace
}  // namespace zoo
