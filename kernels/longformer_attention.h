#pragma once
// Longformer's attention (Beltagy et al., 2020): each token attends to a sliding window of w
// tokens on each side (dilated per head: every d-th token, reaching w * d), plus the tokens a
// global mask marks; the global tokens attend to every token, through their own query, key and
// value projections. O(T (w + g)) time and memory for g global tokens, where full attention is
// O(T^2):
//
//   query i not global:  softmax over keys j with (|i - j| <= w d_h, d_h divides i - j, j not
//                        global) or j global; scores scale q_i . k_j; values v_j
//   query i global:      softmax over every key j; scores scale gq_i . gk_j; values gv_j
//
// padded keys masked in both, padded queries' rows 0, as transformers' LongformerSelfAttention
// (which removes the global keys from the window and adds them as extra columns, so each is
// counted once). The window runs on zoo's tiled kernel (kernels/tiled_attention.h) with the
// global and padded keys as its key mask: a dilation d reorders the sequence into d classes of
// tokens d apart, in each of which the dilated window is a plain one of w. The g global keys of
// the local rows are one more (T, g) block, merged with the window's rows by their log-sum-exp;
// the global rows are a (g, T) block. Nothing (T, T) exists. Its plain reference, the explicit
// (T, T) scores with the equivalent mask, is beside it; CUDA tensors take that reference for now.

#include <cstdint>
#include <vector>

#include <torch/arg.h>
#include <torch/types.h>

namespace zoo {

struct LongformerAttentionOptions {
  explicit LongformerAttentionOptions(int64_t window) : window_(window) {}
  // One-sided: a query sees w tokens on each side (transformers' attention_window / 2).
  TORCH_ARG(int64_t, window);
  // One dilation per query head, or empty (1 everywhere).
  TORCH_ARG(std::vector<int64_t>, dilation);
  // (B, T) nonzero at global tokens, or undefined (none).
  TORCH_ARG(torch::Tensor, global_mask);
  // (B, T) nonzero at real tokens, or undefined (all real).
  TORCH_ARG(torch::Tensor, token_mask);
  // 0 means 1 / sqrt(D).
  TORCH_ARG(double, scale) = 0.0;
  // The probability of zeroing a weight, in training.
  TORCH_ARG(double, dropout) = 0.0;
};

// q, k, v: (B, H, T, D), the local projections; global_q, global_k, global_v: the same shapes,
// the global projections (global_q is read at global tokens only). float32 or bfloat16 (float64
// on the reference's path). Returns (B, H, T, D), differentiable in all six.
torch::Tensor longformer_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                   const torch::Tensor& global_q, const torch::Tensor& global_k,
                                   const torch::Tensor& global_v, const LongformerAttentionOptions& options);

// The same from the explicit (T, T) scores of every head with the equivalent mask and a softmax,
// in the inputs' dtype, no dropout: what longformer_attention is tested against, and the path of
// tensors the tiled kernel does not take (CUDA, float64).
torch::Tensor longformer_attention_reference(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                             const torch::Tensor& global_q, const torch::Tensor& global_k,
                                             const torch::Tensor& global_v, const LongformerAttentionOptions& options);

}  // namespace zoo
