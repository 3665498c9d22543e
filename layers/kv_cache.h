#pragma once
// Decoder state for incremental decoding. The caller owns it and passes it to forward; layers
// look up their own entries by index, so nothing hides state inside a module.

#include <cstdint>
#include <utility>
#include <vector>

#include <torch/types.h>

namespace zoo {

// Keys and values one attention module has seen.
//
// Self-attention appends: keys live in a preallocated buffer written in place (no
// concatenation per token), which grows by doubling. With a sliding window only the last
// window - 1 keys can be seen by the next query, so older ones are dropped and the buffer stays
// bounded. The kept keys are always the contiguous run of absolute positions [start(), seen()).
//
// Cross-attention stores the projected memory once (set_static) and reuses it.
class AttentionCache {
 public:
  // Appends (B, Hkv, T, D) keys and values and returns views of every kept key and value,
  // (B, Hkv, length(), D). window > 0 drops keys no future query can see.
  std::pair<torch::Tensor, torch::Tensor> append(const torch::Tensor& keys,
                                                 const torch::Tensor& values, int64_t window = 0);
  void set_static(torch::Tensor keys, torch::Tensor values);
  // Recurrent layers (layers/linear_attention.h) keep one state, (B, H, Dk, Dv), instead of keys
  // and values: the state after `tokens` more positions replaces the last one.
  void set_state(torch::Tensor state, int64_t tokens);
  torch::Tensor state() const;  // (rows in use, H, Dk, Dv); undefined before the first set_state
  bool is_static() const { return is_static_; }

  // Preallocates room for `capacity` positions (once the batch shape is known, at first append).
  void reserve(int64_t capacity) { reserved_ = capacity; }
  // Keeps batch rows `indices` (beam search reordering), in place.
  void reorder(const torch::Tensor& indices);
  void clear();

  // Continuous batching (serve/batch_scheduler.h): a cache of fixed rows, one sequence per row,
  // each right-aligned on the shared axis of positions [0, seen()) and padded on the left.
  // The next appends, set_states, keys(), values() and state() cover rows [0, n) only.
  void use_rows(int64_t n);
  // Drops the first `count` positions of the shared axis (no row may still need them).
  void drop_front(int64_t count);
  // Adds `count` positions in front of the shared axis: every row gains that much left padding.
  void grow_front(int64_t count);
  // Writes row `source_row` of `source` (prompts prefilled together, left-padded) into row `row`
  // of `rows`: its last `length` keys and values (the prompt's; -1: every kept one) as the row's
  // last positions, or its state. seen() must be >= that length.
  void place_row(int64_t row, int64_t rows, const AttentionCache& source, int64_t source_row = 0, int64_t length = -1);
  // Cross-attention (static) entries of an encoder-decoder batch: row `source_row` of `source`
  // (memories projected together, right-padded) into row `row` of `rows`, its first `length`
  // positions (the source's real tokens); the buffer grows to the longest memory, padded with
  // zeros that the memory mask hides.
  void place_static_row(int64_t row, int64_t rows, const AttentionCache& source, int64_t source_row, int64_t length);
  // Copies row `from` onto row `to` (compacting the rows in use after one finishes).
  void copy_row(int64_t from, int64_t to);

  torch::Tensor keys() const;    // (B, Hkv, length, D) view; undefined when empty
  torch::Tensor values() const;  // (B, Hkv, length, D) view; undefined when empty
  int64_t length() const { return length_; }  // kept positions
  int64_t seen() const { return seen_; }      // positions appended in total
  int64_t start() const { return seen_ - length_; }  // absolute position of the first kept key
  int64_t capacity() const { return keys_.defined() ? keys_.size(2) : 0; }
  bool empty() const { return length_ == 0; }

 private:
  torch::Tensor keys_, values_;  // (B, Hkv, capacity, D)
  torch::Tensor state_;          // recurrent layers: (B, H, Dk, Dv)
  int64_t begin_ = 0;            // buffer slot of the first kept key
  int64_t length_ = 0;
  int64_t seen_ = 0;
  int64_t reserved_ = 0;
  int64_t rows_ = -1;  // rows in use; -1: all of them
  bool is_static_ = false;

  int64_t active_rows() const;
  // Makes the kept positions at least the last `count` of seen(), the new ones zero.
  void keep_at_least(int64_t count);
};

// The caches of a whole model: one self-attention and one cross-attention entry per layer.
class KVCache {
 public:
  explicit KVCache(int64_t n_layers);

  AttentionCache& self_attention(int64_t layer);
  AttentionCache& cross_attention(int64_t layer);
  int64_t n_layers() const { return static_cast<int64_t>(self_.size()); }
  // Positions processed so far: the absolute position of the next token.
  int64_t seen() const { return self_.empty() ? 0 : self_.front().seen(); }

  void reserve(int64_t capacity);
  void reorder(const torch::Tensor& indices);
  void clear();
  // Continuous batching, over every layer: see AttentionCache.
  void use_rows(int64_t n);
  void drop_front(int64_t count);
  void grow_front(int64_t count);
  // Self-attention entries take the row's last `length` positions; cross-attention entries (an
  // encoder-decoder's) its first `memory_length` memory positions.
  void place_row(int64_t row, int64_t rows, const KVCache& source, int64_t source_row = 0, int64_t length = -1,
                 int64_t memory_length = -1);
  void copy_row(int64_t from, int64_t to);

 private:
  std::vector<AttentionCache> self_;
  std::vector<AttentionCache> cross_;
};

}  // namespace zoo
