#include "tokenizers/vocabulary.h"

#include <algorithm>

namespace zoo {

Vocabulary::Vocabulary(std::unordered_map<std::string, int64_t> ids) : ids_(std::move(ids)) {
  for (const auto& [token, id] : ids_) {
    tokens_[id] = token;
    max_id_ = std::max(max_id_, id);
    longest_token_ = std::max(longest_token_, token.size());
  }
}

Vocabulary Vocabulary::from_json(const JsonView& object) {
  std::unordered_map<std::string, int64_t> ids;
  for (const auto& [token, id] : object.members()) {
    const int64_t value = id.as_int();
    if (value < 0 || value >= (int64_t{1} << 31)) id.fail("id " + std::to_string(value) + " is outside [0, 2^31)");
    ids[token] = value;
  }
  return Vocabulary(std::move(ids));
}

const std::string* Vocabulary::token(int64_t id) const {
  const auto it = tokens_.find(id);
  return it == tokens_.end() ? nullptr : &it->second;
}

}  // namespace zoo
