#pragma once
// Rotary position embedding (RoPE; Su et al., 2021, "RoFormer"): rotates pairs of query and
// key features by an angle proportional to the position, so q.k depends only on the distance.

#include <cstdint>
#include <utility>

#include <torch/nn/cloneable.h>
#include <torch/nn/pimpl.h>

#include "layers/variants.h"

namespace zoo {

struct RotaryEmbeddingOptions {
  explicit RotaryEmbeddingOptions(int64_t head_dim) : head_dim_(head_dim) {}
  TORCH_ARG(int64_t, head_dim);
  // theta_i = base^(-2i / head_dim); 10000 in the paper, 500000 in LLaMA 3.
  TORCH_ARG(double, base) = 10000.0;
  TORCH_ARG(RopeLayout, layout) = RopeLayout::kHalf;
};

// The rotation angles of positions 0 .. n - 1: their cos and sin, (n, head_dim / 2) each, computed
// in double and stored in float32. RotaryEmbedding gathers from this table; the TorchScript export
// stores it.
std::pair<torch::Tensor, torch::Tensor> rotary_table(int64_t head_dim, double base, int64_t n);

// No parameters: the cos/sin table is built on demand, grown as positions require, and kept
// on the device of use.
class RotaryEmbeddingImpl : public torch::nn::Cloneable<RotaryEmbeddingImpl> {
 public:
  explicit RotaryEmbeddingImpl(const RotaryEmbeddingOptions& options);
  void reset() override;

  // x: (B, H, T, head_dim). positions: (B, T) or (T) integer absolute positions.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& positions);
  // Same, for the contiguous positions start .. start + T - 1.
  torch::Tensor forward(const torch::Tensor& x, int64_t start);

  RotaryEmbeddingOptions options;

 private:
  // Grows the table to hold `n` positions on `device`.
  void ensure_table(int64_t n, torch::Device device);
  torch::Tensor rotate(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);

  torch::Tensor cos_, sin_;  // (n, head_dim / 2) float32
};
TORCH_MODULE(RotaryEmbedding);

}  // namespace zoo
