#include "templates/python_str.h"

#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace zoo::jinja {
namespace {

std::vector<std::string> texts(const List& items) {
  std::vector<std::string> out;
  for (const auto& item : items) out.push_back(item.as_string());
  return out;
}

// Each value is what CPython 3 gives for the same call.
TEST(PythonStr, CaseMappingAsPythonDoes) {
  EXPECT_EQ(lower("ΟΔΟΣ ΣΑΣ"), "οδος σας");  // the final sigma
  EXPECT_EQ(title("they're bill's"), "They'Re Bill'S");
  EXPECT_EQ(capitalize("hELLO wORLD"), "Hello world");
  EXPECT_TRUE(is_lower("abc1"));
  EXPECT_FALSE(is_lower("123"));  // nothing cased
  EXPECT_TRUE(is_upper("ABC"));
}

TEST(PythonStr, SplitStripReplaceFindCountAsPythonDoes) {
  EXPECT_EQ(texts(split("a,b,,c", std::string(","), 2)), (std::vector<std::string>{"a", "b", ",c"}));
  EXPECT_EQ(texts(split(" \t a  b\n", std::nullopt, -1)), (std::vector<std::string>{"a", "b"}));
  // With a maxsplit the rest keeps its trailing whitespace (CPython 3.11: '  a b  c '.split(None, 1)).
  EXPECT_EQ(texts(split("  a b  c ", std::nullopt, 1)), (std::vector<std::string>{"a", "b  c "}));
  EXPECT_EQ(texts(split(" a b ", std::nullopt, 0)), (std::vector<std::string>{"a b "}));
  EXPECT_EQ(texts(split("a b", std::nullopt, 5)), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(splitlines("a\r\nb\x0b" "c\n"), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(strip("xxhixx", std::string("x"), true, true), "hi");
  EXPECT_EQ(strip(" \x1c hi\t", std::nullopt, true, true), "hi");
  EXPECT_EQ(replace("abc", "", "-", -1), "-a-b-c-");
  EXPECT_EQ(replace("abc", "", "-", 2), "-a-bc");
  EXPECT_EQ(find("héllo", "l"), 2);  // in code points, not bytes
  EXPECT_EQ(count("aaa", ""), 4);
  EXPECT_EQ(count("aaaa", "aa"), 2);
  EXPECT_EQ(html_escape("<a href=\"x\">'&'</a>"), "&lt;a href=&#34;x&#34;&gt;&#39;&amp;&#39;&lt;/a&gt;");
}

}  // namespace
}  // namespace zoo::jinja
