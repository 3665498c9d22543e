#pragma once
// Linformer's attention (Wang et al., 2020): the keys and values of a sequence of T tokens
// projected along the sequence to k rows by learned (k, n) matrices, then softmax attention of
// the T queries over those k rows, O(T k) time and memory where full attention is O(T^2):
//
//   head i:  softmax(scale * Q_i (E_j K_j)^T) (F_j V_j),   j = i / (H / Hkv)
//
// E and F are (P, k, n): P = 1 (shared by every head) or Hkv (one per key/value head); a sequence
// of T <= n tokens takes their first T columns, what zero keys and values past T would give. The
// projection mixes every position, so a padded token cannot be masked out after it: its key and
// value are zeroed before (as the Linformer paper's code pads). Not causal: every projected row
// holds future tokens. Its plain reference, head by head as the paper writes it, is beside it.

#include <torch/types.h>

namespace zoo {

// q (B, H, T, D); k, v (B, Hkv, T, D), H a multiple of Hkv; e, f (P, k, n) with P 1 or Hkv and
// n >= T; token_mask (B, T) nonzero at real tokens, or undefined (all real). Returns (B, H, T, D),
// differentiable in q, k, v, e and f. The projected keys and values go to LibTorch's fused kernel
// (no mask: k rows, all real), with dropout on the weights.
torch::Tensor linformer_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                  const torch::Tensor& e, const torch::Tensor& f, const torch::Tensor& token_mask,
                                  double scale, double dropout);

// The same, written out for each batch row and query head with the explicit softmax, in the
// inputs' dtype, no dropout: what linformer_attention is tested against.
torch::Tensor linformer_attention_reference(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                            const torch::Tensor& e, const torch::Tensor& f,
                                            const torch::Tensor& token_mask, double scale);

}  // namespace zoo
