#include "tokenizers/vocabulary.h"

#include <gtest/gtest.h>

#include "base_test_util.h"

namespace zoo {
namespace {

using testing::error_of;

TEST(Vocabulary, LooksUpBothWays) {
  const Vocabulary v({{"a", 0}, {"bcd", 5}});
  EXPECT_EQ(v.find("bcd"), 5);
  EXPECT_FALSE(v.find("x"));
  EXPECT_EQ(*v.token(0), "a");
  EXPECT_EQ(v.token(3), nullptr);  // ids may leave holes
  EXPECT_EQ(v.size(), 2);
  EXPECT_EQ(v.max_id(), 5);
  EXPECT_EQ(v.longest_token(), 3u);
}

TEST(Vocabulary, IdsMustBeSmallNonNegativeIntegers) {
  const auto read = [](const std::string& json) {
    const auto doc = JsonView::parse(json, "v.json");
    return Vocabulary::from_json(JsonView(doc, "v.json", "model.vocab"));
  };
  EXPECT_EQ(read(R"({"a": 0, "b": 1})").size(), 2);
  EXPECT_EQ(error_of([&] { read(R"({"a": 2147483648})"); }), "v.json: model.vocab.a: id 2147483648 is outside [0, 2^31)");
  EXPECT_EQ(error_of([&] { read(R"({"a": "0"})"); }), "v.json: model.vocab.a: expected an integer, found string");
  EXPECT_EQ(error_of([&] { read(R"(["a"])"); }), "v.json: model.vocab: expected an object, found array");
}

}  // namespace
}  // namespace zoo
