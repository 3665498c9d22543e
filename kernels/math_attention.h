#pragma once
// The explicit attention: scores (T, Tk), softmax, weights, written out. It is the math path of
// layers/attention_path.h, the plain reference the fused, tiled, ring and decoding kernels are
// tested against, and the only one that returns the weights.

#include <tuple>

#include <torch/types.h>

namespace zoo {

// Grouped queries folded: the H / Hkv query heads that share a key/value head become rows of one
// query, q (B, H, T, D) -> (B, Hkv, H / Hkv * T, D), and the additive bias, broadcastable to
// (B, H, T, Tk), alike; keys and values are then never copied per query head.
struct FoldedQueries {
  torch::Tensor q;
  torch::Tensor bias;  // undefined when none was given
};
FoldedQueries fold_query_heads(const torch::Tensor& q, const torch::Tensor& bias, int64_t key_heads);

// (B, Hkv, H / Hkv * T, D) -> (B, H, T, D); reshape, not view: CUDA's fused kernels return
// their output laid out as (B, H / Hkv * T, Hkv, D).
torch::Tensor unfold_query_heads(const torch::Tensor& out, int64_t heads);

// cap * tanh(scores / cap) in the scores' type, as transformers writes it: Gemma 2's soft-capping of
// attention scores and of final logits. cap 0 returns the scores.
torch::Tensor soft_cap(const torch::Tensor& scores, double cap);

// softmax(softcap(scale * q k^T) + bias) v with dropout on the weights (softcap 0: none). q: (B, H, T, D); k, v: (B, Hkv,
// Tk, D), query head h reading key/value head h / (H / Hkv); bias additive, broadcastable to
// (B, H, T, Tk), or undefined. Half-precision scores are normalised in float32. Returns the
// output (B, H, T, D) and the weights (B, H, T, Tk).
std::tuple<torch::Tensor, torch::Tensor> math_attention(const torch::Tensor& q, const torch::Tensor& k,
                                                        const torch::Tensor& v, const torch::Tensor& bias,
                                                        double scale, double dropout, double softcap = 0.0);

}  // namespace zoo
