#pragma once
// Attention masks. Convention throughout zoo: a boolean mask is true where attention is
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

// (B, K) key padding mask -> (B, 1, 1, K) boolean, broadcastable over heads and queries.
torch::Tensor padding_mask(const torch::Tensor& key_padding_mask);

// Boolean allow-mask -> additive bias of `dtype`: 0 where allowed, the dtype's lowest finite
// value where not. Finite rather than -inf so that a row with every key masked (a padding
// query) gives a uniform softmax instead of NaN.
torch::Tensor mask_to_bias(const torch::Tensor& allowed, torch::ScalarType dtype);

}  // namespace zoo
