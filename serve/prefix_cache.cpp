#include "serve/prefix_cache.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

#include <torch/torch.h>

#include "core/splitmix.h"

namespace zoo {

uint64_t PrefixCache::key(uint64_t parent, const std::vector<int64_t>& prompt, int64_t begin) {
  uint64_t h = splitmix64(parent);
  for (int64_t i = begin; i < begin + kBlockTokens; ++i) h = splitmix64(h ^ static_cast<uint64_t>(prompt[i]));
  return h == 0 ? 1 : h;  // 0 stands for "no parent"
}

const PrefixCache::Block* PrefixCache::find(uint64_t k, uint64_t parent, const std::vector<int64_t>& prompt,
                                            int64_t begin) const {
  const auto found = blocks_.find(k);
  if (found == blocks_.end()) return nullptr;
  const Block& b = found->second;
  // A key names its tokens and its parent only with high probability: both are checked.
  if (b.parent != parent || !std::equal(b.tokens.begin(), b.tokens.end(), prompt.begin() + begin)) return nullptr;
  return &b;
}

int64_t PrefixCache::match(const std::vector<int64_t>& prompt, uint64_t root) {
  const auto n = static_cast<int64_t>(prompt.size());
  ++counts_.lookups;
  counts_.lookup_tokens += n;
  if (!enabled()) return 0;
  ++tick_;
  int64_t walked = 0, matched = 0;
  uint64_t parent = 0;
  // Whole blocks short of the last token, up to the last one a prompt can go on from.
  while (walked + kBlockTokens < n) {
    const uint64_t k = key(parent == 0 ? root : parent, prompt, walked);
    const Block* b = find(k, parent, prompt, walked);
    if (b == nullptr) break;
    blocks_.at(k).used = tick_;
    parent = k;
    walked += kBlockTokens;
    if (b->resumes) matched = walked;
  }
  counts_.hit_tokens += matched;
  return matched;
}

void PrefixCache::fill(const std::vector<int64_t>& prompt, int64_t tokens, KVCache& cache, uint64_t root) const {
  if (tokens % kBlockTokens != 0 || tokens >= static_cast<int64_t>(prompt.size()) || cache.seen() != 0) {
    throw std::logic_error("PrefixCache::fill: " + std::to_string(tokens) + " tokens are not a match of this prompt");
  }
  if (tokens == 0) return;
  std::vector<const Block*> chain;
  uint64_t parent = 0;
  for (int64_t begin = 0; begin < tokens; begin += kBlockTokens) {
    const uint64_t k = key(parent == 0 ? root : parent, prompt, begin);
    const Block* b = find(k, parent, prompt, begin);
    if (b == nullptr) throw std::logic_error("PrefixCache::fill: a block of the match was evicted");
    chain.push_back(b);
    parent = k;
  }
  if (!chain.back()->resumes) throw std::logic_error("PrefixCache::fill: the match ends at a block without its states");
  for (int64_t layer = 0; layer < cache.n_layers(); ++layer) {
    if (!chain.back()->states.empty() && chain.back()->states[layer].defined()) {
      cache.self_attention(layer).set_state(chain.back()->states[layer].unsqueeze(0).clone(), tokens);
      continue;
    }
    std::vector<torch::Tensor> keys, values;
    for (const Block* b : chain) keys.push_back(b->keys[layer]), values.push_back(b->values[layer]);
    cache.self_attention(layer).append(torch::cat(keys, 1).unsqueeze(0), torch::cat(values, 1).unsqueeze(0));
  }
}

void PrefixCache::insert(const std::vector<int64_t>& prompt, const KVCache& cache, int64_t row, uint64_t root) {
  if (!enabled()) return;
  const auto n = static_cast<int64_t>(prompt.size());
  const int64_t whole = n / kBlockTokens * kBlockTokens;
  if (whole == 0) return;
  std::vector<torch::Tensor> keys(cache.n_layers()), values(cache.n_layers()), states(cache.n_layers());
  bool recurrent = false;
  for (int64_t layer = 0; layer < cache.n_layers(); ++layer) {
    auto& self = const_cast<KVCache&>(cache).self_attention(layer);
    if (self.is_static()) return;
    if (const auto state = self.state(); state.defined()) {
      // The state after the whole prompt: the end of its last block only if it ends one.
      if (whole != n) return;
      states[layer] = state[row];
      recurrent = true;
      continue;
    }
    if (self.length() < n || !self.keys().defined()) return;  // dropped keys
    // The row's prompt is its last n positions; its blocks the first `whole` of them.
    keys[layer] = self.keys()[row].narrow(1, self.length() - n, whole);
    values[layer] = self.values()[row].narrow(1, self.length() - n, whole);
  }
  // The last block's states, which a block of another read may lack (it ended elsewhere).
  // Returns the bytes they add.
  auto keep_states = [&](Block& b) {
    int64_t added = 0;
    b.states.clear();
    for (const auto& s : states) {
      b.states.push_back(s.defined() ? s.clone() : s);
      if (s.defined()) added += s.numel() * s.element_size();
    }
    b.bytes += added;
    b.resumes = true;
    return added;
  };
  ++tick_;
  uint64_t parent = 0;
  for (int64_t begin = 0; begin < whole; begin += kBlockTokens) {
    const uint64_t k = key(parent == 0 ? root : parent, prompt, begin);
    const bool last = begin + kBlockTokens == whole;
    if (const Block* b = find(k, parent, prompt, begin)) {
      Block& found = blocks_.at(k);
      found.used = tick_;
      if (last && recurrent && !b->resumes) counts_.bytes += keep_states(found);
      parent = k;
      continue;
    }
    if (blocks_.count(k) != 0) return;  // another chain's block under this key: leave both alone
    Block b;
    b.parent = parent;
    b.tokens.assign(prompt.begin() + begin, prompt.begin() + begin + kBlockTokens);
    for (int64_t layer = 0; layer < cache.n_layers(); ++layer) {
      if (!keys[layer].defined()) {  // a recurrent layer
        b.keys.emplace_back(), b.values.emplace_back();
        continue;
      }
      b.keys.push_back(keys[layer].narrow(1, begin, kBlockTokens).clone());
      b.values.push_back(values[layer].narrow(1, begin, kBlockTokens).clone());
      b.bytes += 2 * b.keys.back().numel() * b.keys.back().element_size();
    }
    b.resumes = !recurrent;
    if (last && recurrent) keep_states(b);
    b.used = tick_;
    if (parent != 0) ++blocks_.at(parent).children;
    counts_.bytes += b.bytes;
    ++counts_.blocks;
    blocks_.emplace(k, std::move(b));
    parent = k;
  }
  evict();
}

void PrefixCache::evict() {
  while (counts_.bytes > budget_) {
    // The least recently used block that no cached block continues (a chain's blocks are used
    // together: its last goes first).
    auto victim = blocks_.end();
    for (auto it = blocks_.begin(); it != blocks_.end(); ++it) {
      if (it->second.children == 0 && (victim == blocks_.end() || it->second.used < victim->second.used)) victim = it;
    }
    if (victim == blocks_.end()) break;
    if (victim->second.parent != 0) --blocks_.at(victim->second.parent).children;
    counts_.bytes -= victim->second.bytes;
    --counts_.blocks;
    ++counts_.evicted_blocks;
    blocks_.erase(victim);
  }
}

}  // namespace zoo
