#include "tokenizers/byte_trie.h"

#include <gtest/gtest.h>

namespace zoo {
namespace {

TEST(ByteTrie, FindsPrefixesShortestFirst) {
  ByteTrie trie;
  EXPECT_TRUE(trie.empty());
  trie.insert("a", 1);
  trie.insert("ab", 2);
  trie.insert("abcd", 3);
  trie.insert("b", 4);
  trie.insert("ab", 5);  // a repeated key keeps the later value
  std::vector<std::pair<size_t, int64_t>> found;
  trie.for_each_prefix("xabcde", 1, [&](size_t n, int64_t v) { found.emplace_back(n, v); });
  EXPECT_EQ(found, (std::vector<std::pair<size_t, int64_t>>{{1, 1}, {2, 5}, {4, 3}}));
  EXPECT_EQ(trie.longest_prefix("abcx", 0), (std::pair<size_t, int64_t>{2, 5}));
  EXPECT_EQ(trie.longest_prefix("zzz", 0).first, 0u);
  EXPECT_EQ(trie.longest_prefix("ab", 2).first, 0u);
}

}  // namespace
}  // namespace zoo
