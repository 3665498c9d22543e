#pragma once
// Absolute position embeddings, added to the token embeddings: sinusoidal (Vaswani et al.,
// 2017, section 3.5) and learned (BERT, GPT-2).

#include <cstdint>

#include <torch/nn/cloneable.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/pimpl.h>

namespace zoo {

// PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d)).
// A fixed table, not a parameter: it is rebuilt, never saved.
struct SinusoidalPositionsOptions {
  SinusoidalPositionsOptions(int64_t d_model, int64_t max_positions)
      : d_model_(d_model), max_positions_(max_positions) {}
  TORCH_ARG(int64_t, d_model);
  TORCH_ARG(int64_t, max_positions);
  TORCH_ARG(double, base) = 10000.0;
};

class SinusoidalPositionsImpl : public torch::nn::Cloneable<SinusoidalPositionsImpl> {
 public:
  explicit SinusoidalPositionsImpl(const SinusoidalPositionsOptions& options);
  void reset() override;
  // positions: integer tensor of any shape (...) -> (..., d_model) in float32.
  torch::Tensor forward(const torch::Tensor& positions);
  // The whole table (max_positions, d_model) on `device`.
  const torch::Tensor& table(const torch::Device& device);

  SinusoidalPositionsOptions options;

 private:
  torch::Tensor table_;  // (max_positions, d_model), moved to the device of use on demand
};
TORCH_MODULE(SinusoidalPositions);

struct LearnedPositionsOptions {
  LearnedPositionsOptions(int64_t d_model, int64_t max_positions)
      : d_model_(d_model), max_positions_(max_positions) {}
  TORCH_ARG(int64_t, d_model);
  TORCH_ARG(int64_t, max_positions);
};

class LearnedPositionsImpl : public torch::nn::Cloneable<LearnedPositionsImpl> {
 public:
  explicit LearnedPositionsImpl(const LearnedPositionsOptions& options);
  void reset() override;
  // positions (...) -> (..., d_model). Positions beyond max_positions are an error.
  torch::Tensor forward(const torch::Tensor& positions);

  LearnedPositionsOptions options;
  torch::nn::Embedding embedding{nullptr};
};
TORCH_MODULE(LearnedPositions);

// Checks `positions` against a table of `max_positions` rows with a message naming both.
void check_positions(const torch::Tensor& positions, int64_t max_positions);

}  // namespace zoo
