#pragma once
// The ids of recently tokenized words, shared by the threads that encode with one model: prose
// repeats its words, so most pieces are found here instead of being merged again.

#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace zoo {

class WordCache {
 public:
  WordCache() = default;
  // Copies start empty: what was cached is not part of a model's value.
  WordCache(const WordCache&) {}
  WordCache& operator=(const WordCache&) {
    std::lock_guard<std::mutex> lock(mutex_);
    ids_.clear();
    return *this;
  }

  // Appends the cached ids of `word` to `out`; false when it is not cached.
  bool lookup(const std::string& word, std::vector<int64_t>& out) const {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = ids_.find(word);
    if (it == ids_.end()) return false;
    out.insert(out.end(), it->second.begin(), it->second.end());
    return true;
  }

  void store(const std::string& word, const int64_t* ids, size_t count) const {
    // Long words are rare and would crowd the cache (tokenizers caches words under 256 bytes).
    if (word.size() >= kMaxWordBytes) return;
    std::lock_guard<std::mutex> lock(mutex_);
    // Emptied when full, so it follows the words of the text being encoded now.
    if (ids_.size() >= kCapacity) ids_.clear();
    ids_.emplace(word, std::vector<int32_t>(ids, ids + count));
  }

 private:
  static constexpr size_t kCapacity = 1 << 16;
  static constexpr size_t kMaxWordBytes = 256;
  mutable std::mutex mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> ids_;
};

}  // namespace zoo
