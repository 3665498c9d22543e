#pragma once
// Attention of one new token in bf16 on the CPU, the inner step of bf16 decoding. LibTorch 1.13
// sends bf16 batched matmuls to oneDNN, which builds a primitive for every new key length: 100 to
// 300 us a layer at gpt2-small's shapes, as long as the layer's projections. Here both products
// go through the bf16 kernels (kernels/bf16_dot.h) with float32 sums, and everything is rounded
// to bf16 where LibTorch's bf16 attention rounds it (scores, scaled and biased scores,
// probabilities after a float32 softmax, output), so that a bf16 TorchScript export decodes
// token for token as the native model does.

#include <torch/types.h>

namespace zoo {

// Taken when layers/attention_path.h chooses the decode path: one query position per sequence on
// the CPU, nothing to differentiate, no dropout, no weights asked for.
//
// q: (B, Hkv, M, D), the M query rows that share key/value head h (grouped query heads folded
// into M); k, v: (B, Hkv, Tk, D); bias: additive, broadcastable to (B, Hkv, M, Tk), or undefined.
// Returns softmax(soft_cap(scale * q k^T) + bias) v as (B, Hkv, M, D) in bf16 (softcap 0: none,
// kernels/math_attention.h).
torch::Tensor bf16_decode_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                    const torch::Tensor& bias, double scale, double softcap = 0.0);

// The same step in float32, where LibTorch 2.15's fused CPU attention spends 0.4-0.6 ms a layer
// on 16 decoding rows of gpt2-small (one query each against a few dozen keys): the scores and
// the weighted values through zoo's float32 kernels (kernels/f32_rows_dot.h; AVX-512F), the
// softmax in LibTorch. Chosen on the same conditions as the bf16 one, in float32, outside the
// math backend (which a caller asks for to get LibTorch's own products).
// As bf16_decode_attention, in float32 throughout.
torch::Tensor float32_decode_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                       const torch::Tensor& bias, double scale, double softcap = 0.0);

}  // namespace zoo
