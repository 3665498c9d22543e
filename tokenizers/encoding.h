#pragma once
// The ids of encoded text with their token type ids and which of them a post-processor added
// (tokenizers' Encoding, without offsets).

#include <cstdint>
#include <vector>

namespace zoo {

struct Encoding {
  std::vector<int64_t> ids;
  std::vector<int64_t> type_ids;      // 0 for the first sequence's part, 1 for the second's, ...
  std::vector<uint8_t> special_mask;  // 1 where a special token was added around the text

  void append(const Encoding& other) {
    ids.insert(ids.end(), other.ids.begin(), other.ids.end());
    type_ids.insert(type_ids.end(), other.type_ids.begin(), other.type_ids.end());
    special_mask.insert(special_mask.end(), other.special_mask.begin(), other.special_mask.end());
  }
  size_t size() const { return ids.size(); }
};

}  // namespace zoo
