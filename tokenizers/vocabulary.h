#pragma once
// A model's vocabulary: tokens and their ids both ways ({token: id}, as tokenizer.json,
// vocab.json and vocab.txt give it). Ids need not be contiguous.

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>

#include "core/json_view.h"

namespace zoo {

class Vocabulary {
 public:
  Vocabulary() = default;
  explicit Vocabulary(std::unordered_map<std::string, int64_t> ids);
  // A JSON object {token: id}; ids must be integers in [0, 2^31).
  static Vocabulary from_json(const JsonView& object);

  std::optional<int64_t> find(const std::string& token) const {
    const auto it = ids_.find(token);
    if (it == ids_.end()) return std::nullopt;
    return it->second;
  }
  // The token of `id`, or nullptr when no token has it.
  const std::string* token(int64_t id) const;
  int64_t size() const { return static_cast<int64_t>(ids_.size()); }
  int64_t max_id() const { return max_id_; }
  size_t longest_token() const { return longest_token_; }  // bytes

 private:
  std::unordered_map<std::string, int64_t> ids_;
  std::unordered_map<int64_t, std::string> tokens_;
  int64_t max_id_ = -1;
  size_t longest_token_ = 0;
};

}  // namespace zoo
