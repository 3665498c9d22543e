#pragma once
// Linear and gated linear attention layers: token mixers whose decoding state is one
// (heads x d_k x d_v) matrix per layer instead of every key and value, so each new token costs
// the same at position 100 and at position 100,000. The recurrence and its chunkwise training
// form are kernels/linear_attention.h.
//
// linear (Katharopoulos et al., 2020): q, k and v of n_heads heads, phi (feature_map) on q and
//   k, o_t = phi(q_t) S_t, optionally divided by phi(q_t) . sum_j<=t phi(k_j); the projections
//   are softmax attention's, so a linear model has a softmax model's parameter count.
// gated_linear (Yang et al., 2024; flash-linear-attention's GLA layer): q and k of key_dim,
//   v of value_dim, a per-key-dimension decay alpha_t = sigmoid(x W1 W2 + b)^(1/tau) through a
//   rank-r gate, then a per-head RMSNorm times swish(x W_g) (the output gate), then out.

#include <cstdint>

#include <torch/nn/cloneable.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include "layers/kv_cache.h"
#include "layers/norm.h"
#include "layers/variants.h"

namespace zoo {

struct LinearAttentionOptions {
  LinearAttentionOptions(int64_t d_model, int64_t n_heads, AttentionKind kind)
      : d_model_(d_model), n_heads_(n_heads), kind_(kind) {}
  TORCH_ARG(int64_t, d_model);
  TORCH_ARG(int64_t, n_heads);
  TORCH_ARG(AttentionKind, kind);    // linear or gated_linear
  TORCH_ARG(int64_t, head_dim) = 0;  // linear: the width of a head; 0 = d_model / n_heads
  TORCH_ARG(bool, bias) = true;      // linear: projection biases (as softmax attention's)
  TORCH_ARG(bool, qkv_bias) = false;  // linear: q/k/v biases only (Qwen2's layout)
  TORCH_ARG(FeatureMap, feature_map) = FeatureMap::kElu1;
  TORCH_ARG(bool, normalize) = true;
  TORCH_ARG(int64_t, performer_features) = 256;
  TORCH_ARG(int64_t, performer_seed) = 0;
  TORCH_ARG(int64_t, key_dim) = 0;    // gated_linear: q and k width, all heads
  TORCH_ARG(int64_t, value_dim) = 0;  // gated_linear: v width, all heads
  TORCH_ARG(int64_t, gate_rank) = 16;
  TORCH_ARG(double, gate_normalizer) = 16.0;
  TORCH_ARG(double, norm_eps) = 1e-5;  // gated_linear: the per-head RMSNorm

 public:  // TORCH_ARG leaves the section private
  int64_t head_k() const;  // per head, before any feature map
  int64_t head_v() const;
  void validate() const;
};

class LinearAttentionImpl : public torch::nn::Cloneable<LinearAttentionImpl> {
 public:
  explicit LinearAttentionImpl(const LinearAttentionOptions& options);
  void reset() override;

  // x (B, T, d_model) -> (B, T, d_model), causal. token_mask (B, T): nonzero at real tokens;
  // padding neither adds to the state nor decays it. cache: the state continues from it and is
  // left in it (decoding).
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& token_mask = {}, AttentionCache* cache = nullptr);

  LinearAttentionOptions options;
  torch::nn::Linear q{nullptr}, k{nullptr}, v{nullptr}, out{nullptr};
  torch::nn::Linear gate{nullptr};                          // gated_linear: the output gate
  torch::nn::Linear decay_down{nullptr}, decay_up{nullptr};  // gated_linear: the low-rank decay
  // gated_linear: per head. (Not "norm": blocks.N.self_attn.norm would flatten to the name of
  // the block's own self_attn_norm in the TorchScript export.)
  Norm head_norm{nullptr};
  torch::Tensor features;  // performer: (performer_features, head_dim) buffer, drawn once
};
TORCH_MODULE(LinearAttention);

}  // namespace zoo
