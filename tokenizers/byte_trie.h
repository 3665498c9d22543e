#pragma once
// A trie over the bytes of UTF-8 keys with an integer value per key: prefix searches for the
// Unigram lattice and leftmost-longest matching of added tokens.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace zoo {

class ByteTrie {
 public:
  ByteTrie();
  // Adds `key` (non-empty) with `value`; a key added twice keeps the later value.
  void insert(const std::string& key, int64_t value);

  // Calls visit(length, value) for every key that is a prefix of text[begin..], shortest first.
  template <typename Visit>
  void for_each_prefix(const std::string& text, size_t begin, Visit visit) const {
    int32_t node = 0;
    for (size_t i = begin; i < text.size(); ++i) {
      node = child(node, static_cast<unsigned char>(text[i]));
      if (node < 0) return;
      if (nodes_[node].value >= 0) visit(i + 1 - begin, nodes_[node].value);
    }
  }

  // The longest key that is a prefix of text[begin..] as (length, value); length 0 when none.
  std::pair<size_t, int64_t> longest_prefix(const std::string& text, size_t begin) const;

  bool empty() const { return nodes_.size() == 1; }

 private:
  struct Node {
    std::vector<std::pair<unsigned char, int32_t>> children;  // sorted by byte
    int64_t value = -1;
  };
  int32_t child(int32_t node, unsigned char byte) const;

  std::vector<Node> nodes_;
};

}  // namespace zoo
