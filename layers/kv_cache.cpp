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
    TORCH_CHECK(keys.size(0) == active_rows() && keys.size(1) == keys_.size(1) &&
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
  if (keys_.defined() && begin_ + needed > keys_.size(2) && needed <= keys_.size(2) && begin_ > 0) {
    // Room enough once the kept keys move to the front of the buffer (a sliding window, or a
    // continuous batch whose front was dropped): no larger buffer.
    keys_.narrow(2, 0, length_).copy_(keys_.narrow(2, begin_, length_).clone());
    values_.narrow(2, 0, length_).copy_(values_.narrow(2, begin_, length_).clone());
    begin_ = 0;
  }
  if (!keys_.defined() || begin_ + needed > keys_.size(2)) {
    int64_t cap = std::max({needed, 2 * capacity(), reserved_});
    if (window > 0) cap = std::min(cap, std::max(needed, 2 * (window - 1 + t)));
    auto shape = keys.sizes().vec();
    shape[2] = cap;
    if (keys_.defined()) shape[0] = keys_.size(0);  // every row, in use or not
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
  const int64_t rows = active_rows();
  keys_.narrow(0, 0, rows).narrow(2, begin_ + length_, t).copy_(keys);
  values_.narrow(0, 0, rows).narrow(2, begin_ + length_, t).copy_(values);
  length_ += t;
  seen_ += t;
  return {this->keys(), this->values()};
}

void AttentionCache::set_static(torch::Tensor keys, torch::Tensor values) {
  TORCH_CHECK(keys.dim() == 4 && keys.sizes() == values.sizes(),
              "AttentionCache: keys and values must both be (B, Hkv, S, D), got ", keys.sizes(),
              " and ", values.sizes());
  // Contiguous: the decoding kernel reads each head's rows in place at every step.
  keys_ = keys.contiguous();
  values_ = values.contiguous();
  begin_ = 0;
  length_ = seen_ = keys_.size(2);
  is_static_ = true;
}

void AttentionCache::set_state(torch::Tensor state, int64_t tokens) {
  TORCH_CHECK(!keys_.defined() && !is_static_, "AttentionCache: a recurrent state in a cache holding keys");
  TORCH_CHECK(tokens >= 0, "AttentionCache: set_state after ", tokens, " tokens");
  if (rows_ >= 0 && state_.defined()) {
    state_.narrow(0, 0, rows_).copy_(state);
  } else {
    state_ = std::move(state);
  }
  seen_ += tokens;
}

torch::Tensor AttentionCache::state() const {
  return state_.defined() && rows_ >= 0 ? state_.narrow(0, 0, rows_) : state_;
}

void AttentionCache::reorder(const torch::Tensor& indices) {
  if (state_.defined()) state_ = state_.index_select(0, indices.to(state_.device()));
  if (!keys_.defined()) return;
  keys_ = keys_.index_select(0, indices.to(keys_.device()));
  values_ = values_.index_select(0, indices.to(values_.device()));
}

void AttentionCache::clear() { *this = AttentionCache(); }

torch::Tensor AttentionCache::keys() const {
  return length_ > 0 ? keys_.narrow(0, 0, active_rows()).narrow(2, begin_, length_) : torch::Tensor();
}

torch::Tensor AttentionCache::values() const {
  return length_ > 0 ? values_.narrow(0, 0, active_rows()).narrow(2, begin_, length_) : torch::Tensor();
}

int64_t AttentionCache::active_rows() const {
  if (rows_ >= 0) return rows_;
  return keys_.defined() ? keys_.size(0) : state_.defined() ? state_.size(0) : 0;
}

void AttentionCache::use_rows(int64_t n) {
  const int64_t all = keys_.defined() ? keys_.size(0) : state_.defined() ? state_.size(0) : n;
  TORCH_CHECK(n >= 0 && n <= all, "AttentionCache: use_rows(", n, ") on a cache of ", all, " rows");
  rows_ = n;
}

void AttentionCache::drop_front(int64_t count) {
  TORCH_CHECK(count >= 0 && count <= seen_, "AttentionCache: drop_front(", count, ") of ", seen_, " positions");
  seen_ -= count;
  if (length_ > seen_) {
    begin_ += length_ - seen_;
    length_ = seen_;
  }
}

void AttentionCache::grow_front(int64_t count) {
  TORCH_CHECK(count >= 0, "AttentionCache: grow_front(", count, ")");
  seen_ += count;  // the kept keys stay the last ones; the new positions are padding nobody sees
}

void AttentionCache::keep_at_least(int64_t count) {
  TORCH_CHECK(count <= seen_, "AttentionCache: cannot keep ", count, " of ", seen_, " positions");
  if (length_ >= count) return;
  const int64_t extra = count - length_;
  if (begin_ < extra && count < capacity()) {
    // Room enough in the buffer: the kept keys move up, the new positions go in front.
    keys_.narrow(2, extra, length_).copy_(keys_.narrow(2, begin_, length_).clone());
    values_.narrow(2, extra, length_).copy_(values_.narrow(2, begin_, length_).clone());
    keys_.narrow(2, 0, extra).zero_();
    values_.narrow(2, 0, extra).zero_();
    begin_ = 0;
  } else if (begin_ < extra) {
    auto shape = keys_.sizes().vec();
    shape[2] = std::max({2 * capacity(), count, reserved_});
    auto k_new = torch::zeros(shape, keys_.options());
    auto v_new = torch::zeros(shape, values_.options());
    if (length_ > 0) {
      k_new.narrow(2, extra, length_).copy_(keys_.narrow(2, begin_, length_));
      v_new.narrow(2, extra, length_).copy_(values_.narrow(2, begin_, length_));
    }
    keys_ = k_new, values_ = v_new;
    begin_ = 0;
  } else {
    // Padding is never attended to (the mask), but must be finite: 0 * NaN is NaN.
    begin_ -= extra;
    keys_.narrow(2, begin_, extra).zero_();
    values_.narrow(2, begin_, extra).zero_();
  }
  length_ = count;
}

void AttentionCache::place_row(int64_t row, int64_t rows, const AttentionCache& source, int64_t source_row,
                               int64_t length) {
  TORCH_CHECK(!is_static_ && !source.is_static_, "AttentionCache: place_row on a cross-attention (static) cache");
  TORCH_CHECK(row >= 0 && row < rows, "AttentionCache: place_row(", row, ") of ", rows, " rows");
  if (length < 0) length = source.seen_;
  TORCH_CHECK(length <= seen_ && length <= source.seen_, "AttentionCache: a row of ", length,
              " positions placed in a cache of ", seen_, " (grow_front first)");
  if (source.state_.defined()) {
    TORCH_CHECK(source_row >= 0 && source_row < source.state_.size(0), "AttentionCache: place_row from row ",
                source_row, " of ", source.state_.size(0));
    if (!state_.defined()) {
      auto shape = source.state_.sizes().vec();
      shape[0] = rows;
      state_ = torch::zeros(shape, source.state_.options());
    }
    state_[row].copy_(source.state_[source_row]);
    return;
  }
  const int64_t kept = std::min(length, source.length_);  // a sliding window keeps fewer
  if (kept == 0) return;
  TORCH_CHECK(source_row >= 0 && source_row < source.keys_.size(0), "AttentionCache: place_row from row ", source_row,
              " of ", source.keys_.size(0));
  if (!keys_.defined()) {
    auto shape = source.keys_.sizes().vec();
    shape[0] = rows;
    shape[2] = std::max({seen_, reserved_, int64_t{16}});
    keys_ = torch::zeros(shape, source.keys_.options());
    values_ = torch::zeros(shape, source.values_.options());
    begin_ = 0;
    length_ = std::min(seen_, shape[2]);
  }
  keep_at_least(kept);
  const int64_t at = begin_ + length_ - kept;
  const int64_t from = source.begin_ + source.length_ - kept;
  // The row's positions before its sequence are padding: masked, yet multiplied by a weight of 0,
  // so what a previous sequence left there (NaN, had its activations overflowed) must not stay.
  if (at > begin_) {
    keys_[row].narrow(1, begin_, at - begin_).zero_();
    values_[row].narrow(1, begin_, at - begin_).zero_();
  }
  keys_[row].narrow(1, at, kept).copy_(source.keys_[source_row].narrow(1, from, kept));
  values_[row].narrow(1, at, kept).copy_(source.values_[source_row].narrow(1, from, kept));
}

void AttentionCache::place_static_row(int64_t row, int64_t rows, const AttentionCache& source, int64_t source_row,
                                      int64_t length) {
  TORCH_CHECK(source.is_static_ && (!keys_.defined() || is_static_),
              "AttentionCache: place_static_row takes a cross-attention (static) cache");
  TORCH_CHECK(row >= 0 && row < rows, "AttentionCache: place_static_row(", row, ") of ", rows, " rows");
  TORCH_CHECK(source_row >= 0 && source_row < source.keys_.size(0) && length >= 1 && length <= source.length_,
              "AttentionCache: place_static_row of ", length, " positions from row ", source_row, " of ",
              source.keys_.sizes());
  if (!keys_.defined() || keys_.size(2) < length) {
    auto shape = source.keys_.sizes().vec();
    shape[0] = rows;
    shape[2] = std::max(length, length_);
    auto k_new = torch::zeros(shape, source.keys_.options());
    auto v_new = torch::zeros(shape, source.values_.options());
    if (length_ > 0) {
      k_new.narrow(2, 0, length_).copy_(keys_.narrow(2, 0, length_));
      v_new.narrow(2, 0, length_).copy_(values_.narrow(2, 0, length_));
    }
    keys_ = k_new, values_ = v_new;
    begin_ = 0;
    length_ = seen_ = shape[2];
    is_static_ = true;
  }
  keys_[row].zero_();
  values_[row].zero_();
  keys_[row].narrow(1, 0, length).copy_(source.keys_[source_row].narrow(1, 0, length));
  values_[row].narrow(1, 0, length).copy_(source.values_[source_row].narrow(1, 0, length));
}

void AttentionCache::copy_row(int64_t from, int64_t to) {
  if (from == to) return;
  if (state_.defined()) state_[to].copy_(state_[from]);
  if (length_ == 0) return;
  keys_[to].narrow(1, begin_, length_).copy_(keys_[from].narrow(1, begin_, length_));
  values_[to].narrow(1, begin_, length_).copy_(values_[from].narrow(1, begin_, length_));
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

void KVCache::use_rows(int64_t n) {
  for (auto& c : self_) c.use_rows(n);
  for (auto& c : cross_) {
    if (c.is_static()) c.use_rows(n);
  }
}

void KVCache::drop_front(int64_t count) {
  for (auto& c : self_) c.drop_front(count);
}

void KVCache::grow_front(int64_t count) {
  for (auto& c : self_) c.grow_front(count);
}

void KVCache::place_row(int64_t row, int64_t rows, const KVCache& source, int64_t source_row, int64_t length,
                        int64_t memory_length) {
  TORCH_CHECK(source.n_layers() == n_layers(), "KVCache: place_row from a cache of ", source.n_layers(),
              " layers into one of ", n_layers());
  for (int64_t i = 0; i < n_layers(); ++i) {
    self_[i].place_row(row, rows, source.self_[i], source_row, length);
    if (source.cross_[i].is_static()) cross_[i].place_static_row(row, rows, source.cross_[i], source_row, memory_length);
  }
}

void KVCache::copy_row(int64_t from, int64_t to) {
  for (auto& c : self_) c.copy_row(from, to);
  for (auto& c : cross_) c.copy_row(from, to);
}

void KVCache::clear() {
  for (auto& c : self_) c.clear();
  for (auto& c : cross_) c.clear();
}

}  // namespace zoo
