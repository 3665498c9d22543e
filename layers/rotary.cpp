#include "layers/rotary.h"

#include <cmath>
#include <stdexcept>

#include <torch/torch.h>

namespace zoo {
namespace {

void validate(const RotaryEmbeddingOptions& options) {
  if (options.head_dim() <= 0 || options.head_dim() % 2 != 0) {
    throw std::invalid_argument(
        c10::str("rope: head_dim (", options.head_dim(), ") must be positive and even"));
  }
  if (!(options.base() > 1.0)) {
    throw std::invalid_argument(c10::str("rope: rope_base (", options.base(), ") must be > 1"));
  }
  if (const auto problem = rope_scaling_problem(options.scaling()); !problem.empty()) {
    throw std::invalid_argument("rope: " + problem);
  }
}

}  // namespace

torch::Tensor rope_inverse_frequencies(const RotaryEmbeddingOptions& options) {
  validate(options);
  const int64_t d = options.head_dim();
  const auto& s = options.scaling();
  auto theta = torch::pow(options.base(), -torch::arange(0, d, 2, torch::kDouble) / double(d));
  switch (s.kind) {
    case RopeScalingKind::kNone: return theta;
    case RopeScalingKind::kLinear: return theta / s.factor;
    case RopeScalingKind::kLlama3: {
      const double original = static_cast<double>(s.original_max_positions);
      auto wavelength = 2.0 * M_PI / theta;
      auto blend = (original / wavelength - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
      auto medium = (1.0 - blend) * theta / s.factor + blend * theta;
      auto scaled = torch::where(wavelength > original / s.low_freq_factor, theta / s.factor, medium);
      return torch::where(wavelength < original / s.high_freq_factor, theta, scaled);
    }
    case RopeScalingKind::kYarn: {
      // The dimension pair whose frequency turns `rotations` times in the trained context.
      const double dims = static_cast<double>(d), original = static_cast<double>(s.original_max_positions);
      auto pair_turning = [&](double rotations) {
        return dims * std::log(original / (rotations * 2.0 * M_PI)) / (2.0 * std::log(options.base()));
      };
      double low = pair_turning(s.beta_fast), high = pair_turning(s.beta_slow);
      if (s.truncate) low = std::floor(low), high = std::ceil(high);
      low = std::max(low, 0.0), high = std::min(high, dims - 1.0);
      if (low == high) high += 0.001;
      // 0 up to pair `low` (kept), 1 from pair `high` (divided by the factor), linear between.
      auto ramp = ((torch::arange(d / 2, torch::kDouble) - low) / (high - low)).clamp(0.0, 1.0);
      return theta / s.factor * ramp + theta * (1.0 - ramp);
    }
  }
  throw std::logic_error("unhandled rope_scaling");
}

std::pair<torch::Tensor, torch::Tensor> rotary_table(const RotaryEmbeddingOptions& options, int64_t n) {
  auto angle = torch::arange(n, torch::kDouble).unsqueeze(1) * rope_inverse_frequencies(options);  // (n, d/2)
  const double factor = rope_attention_factor(options.scaling());  // yarn's, else 1
  return {(angle.cos() * factor).to(torch::kFloat), (angle.sin() * factor).to(torch::kFloat)};
}

RotaryEmbeddingImpl::RotaryEmbeddingImpl(const RotaryEmbeddingOptions& options)
    : options(options) {
  reset();
}

void RotaryEmbeddingImpl::reset() {
  validate(options);
  cos_ = sin_ = torch::Tensor();
}

void RotaryEmbeddingImpl::ensure_table(int64_t n, torch::Device device) {
  if (cos_.defined() && cos_.size(0) >= n && cos_.device() == device) return;
  int64_t size = cos_.defined() ? std::max<int64_t>(n, 2 * cos_.size(0)) : std::max<int64_t>(n, 256);
  auto [cos, sin] = rotary_table(options, size);
  cos_ = cos.to(device);
  sin_ = sin.to(device);
}

torch::Tensor RotaryEmbeddingImpl::rotate(const torch::Tensor& x, const torch::Tensor& cos,
                                          const torch::Tensor& sin) {
  // cos, sin: broadcastable to (B, H, T, d/2).
  const int64_t half = options.head_dim() / 2;
  auto c = cos.to(x.scalar_type());
  auto s = sin.to(x.scalar_type());
  switch (options.layout()) {
    case RopeLayout::kHalf: {
      auto x1 = x.narrow(-1, 0, half);
      auto x2 = x.narrow(-1, half, half);
      return torch::cat({x1 * c - x2 * s, x2 * c + x1 * s}, -1);
    }
    case RopeLayout::kInterleaved: {
      auto pairs = x.unflatten(-1, {half, 2});  // (..., d/2, 2)
      auto x1 = pairs.select(-1, 0);
      auto x2 = pairs.select(-1, 1);
      return torch::stack({x1 * c - x2 * s, x2 * c + x1 * s}, -1).flatten(-2);
    }
  }
  throw std::logic_error("unhandled rope layout");
}

torch::Tensor RotaryEmbeddingImpl::forward(const torch::Tensor& x, const torch::Tensor& positions) {
  TORCH_CHECK(x.dim() == 4 && x.size(-1) == options.head_dim(),
              "rope: expected (B, H, T, ", options.head_dim(), "), got ", x.sizes());
  TORCH_CHECK(positions.size(-1) == x.size(2), "rope: ", positions.size(-1),
              " positions for ", x.size(2), " tokens");
  if (positions.numel() == 0) return x;
  TORCH_CHECK(positions.min().item<int64_t>() >= 0, "rope: negative position");
  ensure_table(positions.max().item<int64_t>() + 1, x.device());
  auto flat = positions.reshape(-1).to(x.device());
  auto shape = positions.sizes().vec();  // (B, T) or (T)
  shape.push_back(options.head_dim() / 2);
  auto c = cos_.index_select(0, flat).view(shape);
  auto s = sin_.index_select(0, flat).view(shape);
  if (positions.dim() == 2) {  // (B, T, d/2) -> (B, 1, T, d/2)
    c = c.unsqueeze(1);
    s = s.unsqueeze(1);
  }
  return rotate(x, c, s);
}

torch::Tensor RotaryEmbeddingImpl::forward(const torch::Tensor& x, int64_t start) {
  TORCH_CHECK(x.dim() == 4 && x.size(-1) == options.head_dim(),
              "rope: expected (B, H, T, ", options.head_dim(), "), got ", x.sizes());
  TORCH_CHECK(start >= 0, "rope: negative start position ", start);
  const int64_t t = x.size(2);
  ensure_table(start + t, x.device());
  return rotate(x, cos_.narrow(0, start, t), sin_.narrow(0, start, t));
}

}  // namespace zoo
