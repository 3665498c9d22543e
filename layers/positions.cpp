#include "layers/positions.h"

#include <stdexcept>

#include <c10/util/StringUtil.h>
#include <torch/torch.h>

namespace zoo {

void check_positions(const torch::Tensor& positions, int64_t max_positions) {
  if (positions.numel() == 0) return;
  int64_t lo = positions.min().item<int64_t>();
  int64_t hi = positions.max().item<int64_t>();
  TORCH_CHECK(lo >= 0, "position ", lo, " is negative");
  TORCH_CHECK(hi < max_positions, "cannot use position ", hi, ": max_positions is ",
              max_positions);
}

SinusoidalPositionsImpl::SinusoidalPositionsImpl(const SinusoidalPositionsOptions& options)
    : options(options) {
  reset();
}

void SinusoidalPositionsImpl::reset() {
  const int64_t d = options.d_model();
  if (d <= 0 || d % 2 != 0) {
    throw std::invalid_argument(
        c10::str("sinusoidal positions: d_model (", d, ") must be positive and even"));
  }
  if (options.max_positions() <= 0) {
    throw std::invalid_argument(
        c10::str("sinusoidal positions: max_positions (", options.max_positions(),
                 ") must be positive"));
  }
  // Computed in double, stored in float32.
  auto pos = torch::arange(options.max_positions(), torch::kDouble).unsqueeze(1);
  auto two_i = torch::arange(0, d, 2, torch::kDouble);
  auto angle = pos * torch::pow(options.base(), -two_i / static_cast<double>(d));  // (N, d/2)
  table_ = torch::stack({angle.sin(), angle.cos()}, -1).reshape({-1, d}).to(torch::kFloat);
}

torch::Tensor SinusoidalPositionsImpl::forward(const torch::Tensor& positions) {
  check_positions(positions, options.max_positions());
  return table(positions.device()).index_select(0, positions.reshape(-1))
      .view([&] {
        auto s = positions.sizes().vec();
        s.push_back(options.d_model());
        return s;
      }());
}

const torch::Tensor& SinusoidalPositionsImpl::table(const torch::Device& device) {
  if (table_.device() != device) table_ = table_.to(device);
  return table_;
}

LearnedPositionsImpl::LearnedPositionsImpl(const LearnedPositionsOptions& options)
    : options(options) {
  reset();
}

void LearnedPositionsImpl::reset() {
  if (options.d_model() <= 0 || options.max_positions() <= 0) {
    throw std::invalid_argument(c10::str("learned positions: d_model (", options.d_model(),
                                         ") and max_positions (", options.max_positions(),
                                         ") must be positive"));
  }
  embedding = register_module(
      "embedding", torch::nn::Embedding(options.max_positions(), options.d_model()));
}

torch::Tensor LearnedPositionsImpl::forward(const torch::Tensor& positions) {
  check_positions(positions, options.max_positions());
  return embedding->forward(positions);
}

}  // namespace zoo
