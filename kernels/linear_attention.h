#pragma once
// Linear and gated linear attention as a recurrence over a (d_k x d_v) state per head:
//
//   S_t = diag(exp(g_t)) S_{t-1} + k_t^T v_t,    o_t = scale q_t S_t
//
// with g_t <= 0 the log of a per-key-dimension decay (gated linear attention, Yang et al., 2024)
// or no decay at all (linear attention, Katharopoulos et al., 2020, whose feature maps the layer
// applies to q and k before calling). Training runs the chunkwise-parallel form: within a chunk
// of 64 tokens the terms are exact (sub-chunks of 16: the diagonal 16 x 16 blocks pairwise in
// the log-decay, the others through a reference point inside the chunk, so no exponent is ever
// positive); across chunks through the state at each chunk boundary. Decays are accumulated in
// log space and everything is computed in float32 (float64 inputs stay float64), the output
// returned in the inputs' dtype. Its plain reference, token by token, is beside it.

#include <cstdint>

#include <torch/types.h>

namespace zoo {

struct LinearAttentionResult {
  torch::Tensor output;       // (B, H, T, Dv), the dtype of v
  torch::Tensor final_state;  // (B, H, Dk, Dv) in float32 (float64 for float64 inputs); undefined unless asked
};

constexpr int64_t kLinearAttentionChunk = 64;
constexpr int64_t kLinearAttentionSubChunk = 16;

// q, k: (B, H, T, Dk); v: (B, H, T, Dv); log_decay: (B, H, T, Dk), every entry <= 0, or
// undefined for no decay; initial_state (B, H, Dk, Dv) or undefined (zeros). With gradients
// needed and no final state asked for (training), the forward keeps only its inputs and the
// backward runs it again (the chunk states are recomputed, not kept).
LinearAttentionResult chunked_linear_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                               const torch::Tensor& log_decay, const torch::Tensor& initial_state,
                                               double scale, bool want_final_state);

// The same recurrence token by token from `state` (B, H, Dk, Dv), which may be undefined
// (zeros): what decoding runs, one or a few tokens at a time. Returns the outputs and the new
// state (float32, or float64 for float64 inputs).
LinearAttentionResult recurrent_linear_attention(const torch::Tensor& q, const torch::Tensor& k,
                                                 const torch::Tensor& v, const torch::Tensor& log_decay,
                                                 const torch::Tensor& state, double scale);

// The plain reference, as flash-linear-attention's naive.py writes it: token by token in the
// inputs' dtype, S = S * exp(g_t) + k_t^T v_t, o_t = (q_t scale) S; the output and the final
// state, both in the inputs' dtype. What the chunked and recurrent forms are tested against.
LinearAttentionResult linear_attention_reference(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                                 const torch::Tensor& log_decay, const torch::Tensor& initial_state,
                                                 double scale);

// FAVOR+'s positive random features (Choromanski et al., 2021): `features` rows of dimension
// `dim`, drawn from `seed` in blocks of `dim` orthogonal directions, each row scaled to the norm
// of a Gaussian vector (so rows are marginally N(0, I)). float32 on the CPU.
torch::Tensor orthogonal_random_features(int64_t features, int64_t dim, int64_t seed);

// phi(x) = exp(W x' - |x'|^2 / 2) / sqrt(m), x' = x dim^-1/4, for `projection` W (m, dim): then
// phi(q) . phi(k) estimates exp(q . k / sqrt(dim)) without bias. x (..., dim) -> (..., m).
// `stabilize` subtracts each row's largest exponent, a per-row factor that a normalised
// attention divides out (queries); keys must not use it, their factors would not cancel.
torch::Tensor performer_features(const torch::Tensor& x, const torch::Tensor& projection, bool stabilize);

}  // namespace zoo
