#include "layers/kv_cache.h"

#include <algorithm>

#include <torch/torch.h>

namespace zoo {

std::pair<torch::Tensor, torch::Tensor> AttentionCache::append(const torch::Tensor& keys,
                                                               const torch::Tensor& values,
                                                               int64_t window) {
  TORCH_CHECK(!is_static_, "AttentionCache: append on a cross-attention (static) cache");
  TORCH_CHECK(keys.dim() == 4 && keys.sizes() == values.sizes(),
              "AttentionCache: keys and values must both be (B, Hkv, T, D), got ", keys.sizes(),
              " and ", values.sizes());
  const int64_t t = keys.size(2);
  if (keys_.defined()) {
    TORCH_CHECK(keys.size(0) == keys_.size(0) && keys.size(1) == keys_.size(1) &&
                    keys.size(3) == keys_.size(3),
                "AttentionCache: appended keys ", keys.sizes(), " do not match the cached ",
                keys_.sizes(), " (batch, heads and head size must stay the same)");
  }
  // The first new query, at position seen_, sees keys > seen_ - window: keep window - 1.
  if (window > 0 && length_ > window - 1) {
    begin_ += length_ - (window - 1);
    length_ = window - 1;
  }
  const int64_t needed = length_ + t;
  if (!keys_.defined() || begin_ + needed > keys_.size(2)) {
    int64_t cap = std::max({needed, 2 * capacity(), reserved_});
    if (window > 0) cap = std::min(cap, std::max(needed, 2 * (window - 1 + t)));
    auto shape = keys.sizes().vec();
    shape[2] = cap;
    auto k_new = torch::empty(shape, keys.options());
    auto v_new = torch::empty(shape, values.options());
    if (length_ > 0) {
      k_new.narrow(2, 0, length_).copy_(keys_.narrow(2, begin_, length_));
      v_new.narrow(2, 0, length_).copy_(values_.narrow(2, begin_, length_));
    }
    keys_ = k_new;
    values_ = v_new;
    begin_ = 0;
  }
  keys_.narrow(2, begin_ + length_, t).copy_(keys);
  values_.narrow(2, begin_ + length_, t).copy_(values);
  length_ += t;
  seen_ += t;
  return {this->keys(), this->values()};
}

void AttentionCache::set_static(torch::Tensor keys, torch::Tensor values) {
  TORCH_CHECK(keys.dim() == 4 && keys.sizes() == values.sizes(),
              "AttentionCache: keys and values must both be (B, Hkv, S, D), got ", keys.sizes(),
              " and ", values.sizes());
  keys_ = std::move(keys);
  values_ = std::move(values);
  begin_ = 0;
  length_ = seen_ = keys_.size(2);
  is_static_ = true;
}

void AttentionCache::set_state(torch::Tensor state, int64_t tokens) {
  TORCH_CHECK(!keys_.defined() && !is_static_, "AttentionCache: a recurrent state in a cache holding keys");
  TORCH_CHECK(tokens >= 0, "AttentionCache: set_state after ", tokens, " tokens");
  state_ = std::move(state);
  seen_ += tokens;
}

void AttentionCache::reorder(const torch::Tensor& indices) {
  if (state_.defined()) state_ = state_.index_select(0, indices.to(state_.device()));
  if (!keys_.defined()) return;
  keys_ = keys_.index_select(0, indices.to(keys_.device()));
  values_ = values_.index_select(0, indices.to(values_.device()));
}

void AttentionCache::clear() { *this = AttentionCache(); }

torch::Tensor AttentionCache::keys() const {
  return length_ > 0 ? keys_.narrow(2, begin_, length_) : torch::Tensor();
}

torch::Tensor AttentionCache::values() const {
  return length_ > 0 ? values_.narrow(2, begin_, length_) : torch::Tensor();
}

KVCache::KVCache(int64_t n_layers) : self_(n_layers), cross_(n_layers) {
  TORCH_CHECK(n_layers >= 0, "KVCache: n_layers must be >= 0, got ", n_layers);
}

AttentionCache& KVCache::self_attention(int64_t layer) {
  TORCH_CHECK(layer >= 0 && layer < n_layers(), "KVCache: layer ", layer, " out of range (",
              n_layers(), " layers)");
  return self_[layer];
}

AttentionCache& KVCache::cross_attention(int64_t layer) {
  TORCH_CHECK(layer >= 0 && layer < n_layers(), "KVCache: layer ", layer, " out of range (",
              n_layers(), " layers)");
  return cross_[layer];
}

void KVCache::reserve(int64_t capacity) {
  for (auto& c : self_) c.reserve(capacity);
}

void KVCache::reorder(const torch::Tensor& indices) {
  for (auto& c : self_) c.reorder(indices);
  for (auto& c : cross_) c.reorder(indices);
}

void KVCache::clear() {
  for (auto& c : self_) c.clear();
  for (auto& c : cross_) c.clear();
}

}  // namespace zoo
