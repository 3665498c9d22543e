#pragma once
// Position information added to the attention scores: ALiBi (Press et al., 2022) and T5's
// learned relative position bias (Raffel et al., 2020). Both return (1, H, Tq, Tk) for queries
// at absolute positions q_start.. and keys at k_start.., the bias Attention takes.

#include <cstdint>
#include <vector>

#include <torch/nn/cloneable.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/pimpl.h>

#include "kernels/masks.h"

namespace zoo {

// Press et al.'s head slopes: for n a power of two the geometric sequence starting at
// 2^(-8/n); otherwise those of the nearest lower power of two m, then every other slope of 2m.
std::vector<double> alibi_slopes(int64_t n_heads);

struct AlibiBiasOptions {
  explicit AlibiBiasOptions(int64_t n_heads) : n_heads_(n_heads) {}
  TORCH_ARG(int64_t, n_heads);
};

// bias[h, i, j] = -slope_h * |q_i - k_j|. For causal attention this equals the paper's
// slope_h * (k_j - q_i) on every visible key; the absolute value also serves encoders.
class AlibiBiasImpl : public torch::nn::Cloneable<AlibiBiasImpl> {
 public:
  explicit AlibiBiasImpl(const AlibiBiasOptions& options);
  void reset() override;
  torch::Tensor forward(int64_t q_len, int64_t k_len, int64_t q_start = 0, int64_t k_start = 0,
                        torch::Device device = torch::kCPU);
  // (H) float32, on the CPU.
  const torch::Tensor& slopes() const { return slopes_; }

  AlibiBiasOptions options;

 private:
  torch::Tensor slopes_;  // (H) float32, not a parameter
};
TORCH_MODULE(AlibiBias);

struct RelativePositionBiasOptions {
  explicit RelativePositionBiasOptions(int64_t n_heads) : n_heads_(n_heads) {}
  TORCH_ARG(int64_t, n_heads);
  TORCH_ARG(int64_t, num_buckets) = 32;
  TORCH_ARG(int64_t, max_distance) = 128;
  // Encoders look both ways (half the buckets each); decoders only back.
  TORCH_ARG(bool, bidirectional) = true;
};

class RelativePositionBiasImpl : public torch::nn::Cloneable<RelativePositionBiasImpl> {
 public:
  explicit RelativePositionBiasImpl(const RelativePositionBiasOptions& options);
  void reset() override;
  torch::Tensor forward(int64_t q_len, int64_t k_len, int64_t q_start = 0, int64_t k_start = 0);

  RelativePositionBiasOptions options;
  torch::nn::Embedding relative_attention_bias{nullptr};  // (num_buckets, n_heads)
};
TORCH_MODULE(RelativePositionBias);

}  // namespace zoo
