#include "tokenizers/added_vocabulary.h"

#include <gtest/gtest.h>

namespace zoo {
namespace {

AddedToken token(const std::string& content, bool special = true) {
  AddedToken t;
  t.content = content;
  t.special = special;
  t.normalized = !special;
  return t;
}

// (text, id) of each piece after cutting out the added tokens from raw text.
std::vector<std::pair<std::string, int64_t>> cut(const AddedVocabulary& v, const std::string& text) {
  TextPieces pieces{{text, true, -1}};
  v.split(pieces, false);
  std::vector<std::pair<std::string, int64_t>> out;
  for (const auto& p : pieces) out.emplace_back(p.text, p.added_token);
  return out;
}

std::optional<int64_t> no_model(const std::string&) { return std::nullopt; }

TEST(AddedVocabulary, IdsFollowTheModelsOrComeAfterIt) {
  AddedVocabulary v;
  v.add({token("<s>"), token("[NEW]"), token(""), token("hello", false)},
        [](const std::string& t) -> std::optional<int64_t> {
          if (t == "<s>") return 1;
          return std::nullopt;
        },
        10, {});
  EXPECT_EQ(*v.token_to_id("<s>"), 1);
  EXPECT_EQ(*v.token_to_id("[NEW]"), 10);
  EXPECT_EQ(*v.token_to_id("hello"), 11);
  EXPECT_FALSE(v.token_to_id(""));
  EXPECT_TRUE(v.is_special_content("<s>"));
  EXPECT_FALSE(v.is_special_content("hello"));
  EXPECT_EQ(v.ids(), (std::vector<int64_t>{1, 10, 11}));
}

TEST(AddedVocabulary, LeftmostLongestMatches) {
  AddedVocabulary v;
  v.add({token("<s>"), token("<s>x"), token("</s>")}, no_model, 5, {});
  EXPECT_EQ(cut(v, "a<s>xb</s>"),
            (std::vector<std::pair<std::string, int64_t>>{{"a", -1}, {"<s>x", 6}, {"b", -1}, {"</s>", 7}}));
  EXPECT_EQ(cut(v, ""), (std::vector<std::pair<std::string, int64_t>>{}));
}

TEST(AddedVocabulary, SingleWordAndStripping) {
  AddedToken word = token("ab");
  word.single_word = true;
  AddedToken mask = token("<mask>");
  mask.lstrip = true;
  AddedToken sep = token("<sep>");
  sep.rstrip = true;
  AddedVocabulary v;
  v.add({word, mask, sep}, no_model, 0, {});
  // "ab" counts only between non-word characters.
  EXPECT_EQ(cut(v, "ab cab ab."),
            (std::vector<std::pair<std::string, int64_t>>{{"ab", 0}, {" cab ", -1}, {"ab", 0}, {".", -1}}));
  EXPECT_EQ(cut(v, "a  <mask> b"),
            (std::vector<std::pair<std::string, int64_t>>{{"a", -1}, {"  <mask>", 1}, {" b", -1}}));
  EXPECT_EQ(cut(v, "a <sep>\t b"),
            (std::vector<std::pair<std::string, int64_t>>{{"a ", -1}, {"<sep>\t ", 2}, {"b", -1}}));
}

TEST(AddedVocabulary, NormalizedTokensMatchTheirNormalizedForm) {
  AddedVocabulary v;
  AddedToken hello = token("HeLLo", false);
  v.add({hello}, no_model, 3, [](const std::string& s) {
    std::string lower = s;
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return lower;
  });
  TextPieces pieces{{"hello there", true, -1}};
  v.split(pieces, false);  // not matched in raw text: it is a normalized token
  ASSERT_EQ(pieces.size(), 1u);
  v.split(pieces, true);
  ASSERT_EQ(pieces.size(), 2u);
  EXPECT_EQ(pieces[0].added_token, 3);
  EXPECT_EQ(*v.id_to_token(3), "hello");  // decodes as its normalized form
}

TEST(AddedVocabulary, StatedIds) {
  AddedVocabulary v;
  v.add_with_ids({{32099, token("<extra_id_0>")}, {32098, token("<extra_id_1>")}}, {});
  EXPECT_EQ(*v.token_to_id("<extra_id_0>"), 32099);
  EXPECT_EQ(v.max_id(), 32099);
  EXPECT_EQ(v.token(32098)->content, "<extra_id_1>");
}

}  // namespace
}  // namespace zoo
