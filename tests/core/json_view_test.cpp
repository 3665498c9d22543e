#include "core/json_view.h"

#include <gtest/gtest.h>

#include "base_test_util.h"

namespace zoo {
namespace {

using testing::error_of;

TEST(JsonView, ErrorsNameTheFileAndThePath) {
  const auto doc = JsonView::parse(R"({"model": {"merges": [["a", 3]], "n": -2, "c": "ab"}})", "t.json");
  const JsonView root(doc, "t.json");
  const auto merge = root.at("model").at("merges").elements()[0].elements()[1];
  EXPECT_EQ(merge.path(), "model.merges[0][1]");
  EXPECT_EQ(error_of([&] { merge.as_string(); }), "t.json: model.merges[0][1]: expected a string, found number");
  EXPECT_EQ(error_of([&] { root.at("model").at("vocab"); }), "t.json: model: missing 'vocab'");
  EXPECT_EQ(error_of([&] { root.at("model").at("c").as_char(); }), "t.json: model.c: expected one character, found 'ab'");
  EXPECT_EQ(root.at("model").int_at("n"), -2);
  EXPECT_FALSE(root.has("absent"));
  EXPECT_TRUE(root.at("model").bool_or("absent", true));
}

TEST(JsonView, MalformedAndTruncatedDocuments) {
  EXPECT_NE(error_of([] { JsonView::parse(R"({"model": {"vocab": )", "tok.json"); }).find("tok.json: not valid JSON"),
            std::string::npos);
  EXPECT_NE(error_of([] { JsonView::parse("{'single': 1}", "tok.json"); }).find("tok.json: not valid JSON (parse error"),
            std::string::npos);
}

}  // namespace
}  // namespace zoo
