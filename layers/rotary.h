#pragma once
// Rotary position embedding (RoPE; Su et al., 2021, "RoFormer"): rotates pairs of query and
// key features by an angle proportional to the position, so q.k depends only on the distance.

#include <cstdint>
#include <utility>

#include <torch/nn/cloneable.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include "layers/variants.h"

namespace zoo {

struct RotaryEmbeddingOptions {
  explicit RotaryEmbeddingOptions(int64_t head_dim) : head_dim_(head_dim) {}
  TORCH_ARG(int64_t, head_dim);
  // theta_i = base^(-2i / head_dim); 10000 in the paper, 500000 in LLaMA 3.
  TORCH_ARG(double, base) = 10000.0;
  TORCH_ARG(RopeLayout, layout) = RopeLayout::kHalf;
  // Frequencies stretched for longer contexts (position interpolation, LLaMA 3.1).
  TORCH_ARG(RopeScaling, scaling) = {};
};

// theta_i for i < head_dim / 2, in double: base^(-2i / head_dim), then scaled. linear divides
// each by the factor; llama3 (Meta's llama-models apply_scaling for LLaMA 3.1) divides those
// whose wavelength 2 pi / theta exceeds original_max_positions / low_freq_factor, keeps those
// under original_max_positions / high_freq_factor, and in between blends the two with weight
// s = (original_max_positions / wavelength - low_freq_factor) / (high_freq_factor -
// low_freq_factor): (1 - s) theta / factor + s theta. yarn (transformers'
// _compute_yarn_parameters) finds the pairs turning beta_fast and beta_slow times in
// original_max_positions, keeps the frequencies below the first, divides those past the second
// by the factor, and ramps linearly between. Throws std::invalid_argument for inconsistent options.
torch::Tensor rope_inverse_frequencies(const RotaryEmbeddingOptions& options);

// The rotation angles of positions 0 .. n - 1 at those frequencies: their cos and sin, (n,
// head_dim / 2) each, times yarn's attention factor, computed in double and stored in float32. RotaryEmbedding gathers from this
// table; the TorchScript export stores it.
std::pair<torch::Tensor, torch::Tensor> rotary_table(const RotaryEmbeddingOptions& options, int64_t n);

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
