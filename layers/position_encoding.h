#pragma once
// The position variant a model is configured with, behind one module: absolute embeddings
// (learned, sinusoidal) added to the token embeddings, or attention biases (ALiBi, T5 relative)
// added to the scores. Rotary positions live inside Attention, so for rope (and none) this
// module contributes nothing.

#include <cstdint>

#include <torch/nn/cloneable.h>
#include <torch/nn/pimpl.h>

#include "layers/position_bias.h"
#include "layers/positions.h"
#include "layers/variants.h"

namespace zoo {

struct PositionEncodingOptions {
  PositionEncodingOptions(PositionKind kind, int64_t d_model, int64_t n_heads, int64_t max_positions)
      : kind_(kind), d_model_(d_model), n_heads_(n_heads), max_positions_(max_positions) {}
  TORCH_ARG(PositionKind, kind);
  TORCH_ARG(int64_t, d_model);
  TORCH_ARG(int64_t, n_heads);
  TORCH_ARG(int64_t, max_positions);
  TORCH_ARG(int64_t, num_buckets) = 32;    // relative
  TORCH_ARG(int64_t, max_distance) = 128;  // relative
  TORCH_ARG(bool, bidirectional) = true;   // relative: encoders true, decoders false
};

class PositionEncodingImpl : public torch::nn::Cloneable<PositionEncodingImpl> {
 public:
  explicit PositionEncodingImpl(const PositionEncodingOptions& options);
  void reset() override;

  // To add to token embeddings: positions (B, T) -> (B, T, d_model) of `dtype`; undefined when
  // the kind has no absolute embedding. `below` > 0: every position is known on the host to be
  // under it (counted from a mask), which is checked here instead of reading the positions back.
  torch::Tensor embedding(const torch::Tensor& positions, torch::ScalarType dtype, int64_t below = 0);
  // The same for positions start..start+length-1 of every row, (1, length, d_model): a slice of
  // the table, with no gather and nothing read back to check the positions.
  torch::Tensor embedding(int64_t start, int64_t length, torch::ScalarType dtype, const torch::Device& device);
  // To add to attention scores: (1, H, q_len, k_len) of `dtype` for queries at q_start.. and keys
  // at k_start..; undefined when the kind has no score bias.
  torch::Tensor attention_bias(int64_t q_len, int64_t k_len, int64_t q_start, int64_t k_start,
                               torch::Device device, torch::ScalarType dtype);

  PositionEncodingOptions options;
  LearnedPositions learned{nullptr};
  SinusoidalPositions sinusoidal{nullptr};
  AlibiBias alibi{nullptr};
  RelativePositionBias relative{nullptr};
};
TORCH_MODULE(PositionEncoding);

}  // namespace zoo
