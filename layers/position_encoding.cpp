#include "layers/position_encoding.h"

#include <torch/torch.h>

namespace zoo {

PositionEncodingImpl::PositionEncodingImpl(const PositionEncodingOptions& options)
    : options(options) {
  reset();
}

void PositionEncodingImpl::reset() {
  const auto& o = options;
  learned = nullptr;
  sinusoidal = nullptr;
  alibi = nullptr;
  relative = nullptr;
  switch (o.kind()) {
    case PositionKind::kLearned:
      learned = register_module("learned", LearnedPositions(LearnedPositionsOptions(o.d_model(), o.max_positions())));
      break;
    case PositionKind::kSinusoidal:
      sinusoidal = register_module(
          "sinusoidal", SinusoidalPositions(SinusoidalPositionsOptions(o.d_model(), o.max_positions())));
      break;
    case PositionKind::kAlibi:
      alibi = register_module("alibi", AlibiBias(AlibiBiasOptions(o.n_heads())));
      break;
    case PositionKind::kRelative:
      relative = register_module("relative", RelativePositionBias(RelativePositionBiasOptions(o.n_heads())
                                                                      .num_buckets(o.num_buckets())
                                                                      .max_distance(o.max_distance())
                                                                      .bidirectional(o.bidirectional())));
      break;
    case PositionKind::kRope:
    case PositionKind::kNone:
      break;
  }
}

torch::Tensor PositionEncodingImpl::embedding(const torch::Tensor& positions, torch::ScalarType dtype,
                                              int64_t below) {
  if (!learned && !sinusoidal) return {};
  if (below <= 0) return (learned ? learned->forward(positions) : sinusoidal->forward(positions)).to(dtype);
  TORCH_CHECK(below <= options.max_positions(), "cannot use position ", below - 1, ": max_positions is ",
              options.max_positions());
  const auto& table = learned ? learned->embedding->weight : sinusoidal->table(positions.device());
  return torch::embedding(table, positions).to(dtype);
}

torch::Tensor PositionEncodingImpl::embedding(int64_t start, int64_t length, torch::ScalarType dtype,
                                              const torch::Device& device) {
  if (!learned && !sinusoidal) return {};
  TORCH_CHECK(start >= 0 && start + length <= options.max_positions(), "cannot use positions ", start, "..",
              start + length - 1, ": max_positions is ", options.max_positions());
  if (learned) return learned->embedding->weight.narrow(0, start, length).unsqueeze(0).to(dtype);
  return sinusoidal->table(device).narrow(0, start, length).unsqueeze(0).to(dtype);
}

torch::Tensor PositionEncodingImpl::attention_bias(int64_t q_len, int64_t k_len, int64_t q_start,
                                                   int64_t k_start, torch::Device device,
                                                   torch::ScalarType dtype) {
  if (alibi) return alibi->forward(q_len, k_len, q_start, k_start, device).to(dtype);
  if (relative) return relative->forward(q_len, k_len, q_start, k_start).to(dtype);
  return {};
}

}  // namespace zoo
