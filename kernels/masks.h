#pragma once
// Attention masks and the terms of an attention bias. Convention throughout zoo: a boolean mask is true where attention is
// allowed, and a key padding mask (B, K) is true (or non-zero) at real tokens and false at
// padding, the same meaning as Hugging Face's attention_mask.

#include <cstdint>

#include <torch/types.h>

namespace zoo {

// (q_len, k_len) boolean mask for queries at absolute positions q_start.. and keys at
// k_start..: key <= query (causal), and with window > 0 also key > query - window, so query i
// sees keys i-window+1 .. i (Mistral's sliding window). window = 0 means unbounded.
torch::Tensor causal_mask(int64_t q_len, int64_t k_len, int64_t q_start = 0, int64_t k_start = 0,
                          int64_t window = 0, torch::Device device = torch::kCPU);

// The same for a bidirectional encoder's window (ModernBERT's local layers): |key - query| <
// window, so query i sees keys i-window+1 .. i+window-1. window must be >= 1.
torch::Tensor band_mask(int64_t q_len, int64_t k_len, int64_t q_start, int64_t k_start, int64_t window,
                        torch::Device device = torch::kCPU);

// (B, K) key padding mask -> (B, 1, 1, K) boolean, broadcastable over heads and queries.
torch::Tensor padding_mask(const torch::Tensor& key_padding_mask);

// The masks and position terms of one stack's calls folded into one additive tensor,
// broadcastable to (B, H, T, K), which each layer narrows to the keys it holds; or nothing, the
// causal mask left to the fused kernel (`kernel_causal`) when it is the only term.
struct AdditiveBias {
  torch::Tensor additive;      // undefined: nothing to add
  bool kernel_causal = false;  // the causal mask is left to the fused kernel (nothing else applies)
};

struct AttentionBiasInputs {
  int64_t queries = 0;          // T, at absolute positions query_start..
  int64_t keys = 0;             // K, at absolute positions key_start..
  int64_t query_start = 0;
  int64_t key_start = 0;
  bool causal = false;
  int64_t window = 0;             // sliding window: causal_mask's, or band_mask's without causal; 0 = unbounded
  torch::Tensor key_padding_mask;  // (B, >= K), true at real tokens; its last K columns are used
  torch::Tensor position_bias;     // additive, (..., T, >= K); its last K columns are used
  // The kernel may apply a plain causal mask itself (the fused backend, as many key heads as
  // query heads); the bias is then left empty when nothing else applies.
  bool kernel_may_mask = false;
};

// The bias of `inputs` in `dtype` on `device`; shapes are checked and named.
AdditiveBias additive_attention_bias(const AttentionBiasInputs& inputs, torch::ScalarType dtype, torch::Device device);

// T5's bucketed relative position (key - query): exact buckets for small distances, then
// logarithmically wider ones up to max_distance, beyond which all share the last bucket.
// Computed in float32 like the reference implementation so buckets agree at the edges.
torch::Tensor relative_position_bucket(const torch::Tensor& relative_position, bool bidirectional,
                                       int64_t num_buckets, int64_t max_distance);

// Boolean allow-mask -> additive bias of `dtype`: 0 where allowed, the dtype's lowest finite
// value where not. Finite rather than -inf so that a row with every key masked (a padding
// query) gives a uniform softmax instead of NaN.
torch::Tensor mask_to_bias(const torch::Tensor& allowed, torch::ScalarType dtype);

}  // namespace zoo
