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
  int64_t resolved_rotary_dim() const { return rotary_dim_ > 0 ? rotary_dim_ : head_dim_; }
  TORCH_ARG(int64_t, head_dim);
  // The features rotated, the first of each head; the rest pass unrotated (Phi-3's
  // partial_rotary_factor, GPT-NeoX's rotary_pct). 0 = all of them.
  TORCH_ARG(int64_t, rotary_dim) = 0;
  // theta_i = base^(-2i / rotary_dim); 10000 in the paper, 500000 in LLaMA 3.
  TORCH_ARG(double, base) = 10000.0;
  TORCH_ARG(RopeLayout, layout) = RopeLayout::kHalf;
  // Frequencies stretched for longer contexts (position interpolation, LLaMA 3.1).
  TORCH_ARG(RopeScaling, scaling) = {};
};

// theta_i for i < rotary_dim / 2, in double: base^(-2i / rotary_dim), then scaled. linear divides
// each by the factor; llama3 (Meta's llama-models apply_scaling for LLaMA 3.1) divides those
// whose wavelength 2 pi / theta exceeds original_max_positions / low_freq_factor, keeps those
// under original_max_positions / high_freq_factor, and in between blends the two with weight
// s = (original_max_positions / wavelength - low_freq_factor) / (high_freq_factor -
// low_freq_factor): (1 - s) theta / factor + s theta. yarn (transformers'
// _compute_yarn_parameters) finds the pairs turning beta_fast and beta_slow times in
// original_max_positions, keeps the frequencies below the first, divides those past the second
// by the factor, and ramps linearly between. longrope divides each by its own factor: the long
// list's when `long_factors`, else the short one's. Throws std::invalid_argument for
// inconsistent options.
torch::Tensor rope_inverse_frequencies(const RotaryEmbeddingOptions& options, bool long_factors = false);

// The rotation angles of positions 0 .. n - 1 at those frequencies: their cos and sin, (n,
// rotary_dim / 2) each, times yarn's or longrope's attention factor, computed in double and
// stored in float32. RotaryEmbedding gathers from this table; the TorchScript export stores it.
std::pair<torch::Tensor, torch::Tensor> rotary_table(const RotaryEmbeddingOptions& options, int64_t n,
                                                     bool long_factors = false);

// Positions given per token for RoPE: ids (B, T) or (T), and `below` > 0 when every one is known
// on the host to be under it (counted from a mask, which one row fills), so that the table is
// sized without reading the positions back; longrope then picks factors by that bound (and by
// each row's own positions, with (B, T) ids). Converts from a bare tensor of ids (below 0: read).
struct RopePositions {
  RopePositions() = default;
  RopePositions(torch::Tensor ids, int64_t below = 0) : ids(std::move(ids)), below(below) {}  // NOLINT: from ids
  bool defined() const { return ids.defined(); }
  torch::Tensor ids;
  int64_t below = 0;
};

// No parameters: the cos/sin table is built on demand, grown as positions require, and kept
// on the device of use. A forward reaching past longrope's trained context rotates by the long
// factors' table, every position of it (as transformers does, per call); with (B, T) positions,
// each row by its own positions.
class RotaryEmbeddingImpl : public torch::nn::Cloneable<RotaryEmbeddingImpl> {
 public:
  explicit RotaryEmbeddingImpl(const RotaryEmbeddingOptions& options);
  void reset() override;

  // x: (B, H, T, head_dim). positions: (B, T) or (T) integer absolute positions.
  torch::Tensor forward(const torch::Tensor& x, const RopePositions& positions);
  // Same, for the contiguous positions start .. start + T - 1.
  torch::Tensor forward(const torch::Tensor& x, int64_t start);

  RotaryEmbeddingOptions options;

 private:
  struct Table {
    // (n, rotary_dim / 2) float32; the half layout's repeated, (n, rotary_dim), for its rotation
    // x * cos + (-x2, x1) * sin.
    torch::Tensor cos, sin;
  };
  // The short or long factors' table, grown to hold positions below `n` on `device`.
  const Table& table(int64_t n, bool long_factors, torch::Device device);
  torch::Tensor rotate(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);

  Table short_, long_;  // long_: longrope's long factors only
};
TORCH_MODULE(RotaryEmbedding);

}  // namespace zoo
