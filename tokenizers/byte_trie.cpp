#include "tokenizers/byte_trie.h"

#include <algorithm>

namespace zoo {

ByteTrie::ByteTrie() : nodes_(1) {}

int32_t ByteTrie::child(int32_t node, unsigned char byte) const {
  const auto& children = nodes_[node].children;
  const auto it = std::lower_bound(children.begin(), children.end(), byte,
                                   [](const std::pair<unsigned char, int32_t>& c, unsigned char b) { return c.first < b; });
  return it != children.end() && it->first == byte ? it->second : -1;
}

void ByteTrie::insert(const std::string& key, int64_t value) {
  int32_t node = 0;
  for (unsigned char byte : key) {
    int32_t next = child(node, byte);
    if (next < 0) {
      next = static_cast<int32_t>(nodes_.size());
      nodes_.emplace_back();
      auto& children = nodes_[node].children;
      children.insert(std::lower_bound(children.begin(), children.end(), std::make_pair(byte, int32_t{0})),
                      {byte, next});
    }
    node = next;
  }
  nodes_[node].value = value;
}

std::pair<size_t, int64_t> ByteTrie::longest_prefix(const std::string& text, size_t begin) const {
  std::pair<size_t, int64_t> best{0, -1};
  for_each_prefix(text, begin, [&](size_t length, int64_t value) { best = {length, value}; });
  return best;
}

}  // namespace zoo
