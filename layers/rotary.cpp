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
  const int64_t rotated = options.resolved_rotary_dim();
  if (rotated <= 0 || rotated % 2 != 0 || rotated > options.head_dim()) {
    throw std::invalid_argument(c10::str("rope: rotary_dim (", options.rotary_dim(),
                                         ") must be even and at most head_dim (", options.head_dim(), ")"));
  }
  if (!(options.base() > 1.0)) {
    throw std::invalid_argument(c10::str("rope: rope_base (", options.base(), ") must be > 1"));
  }
  if (const auto problem = rope_scaling_problem(options.scaling()); !problem.empty()) {
    throw std::invalid_argument("rope: " + problem);
  }
  const auto& s = options.scaling();
  if (s.kind == RopeScalingKind::kLongrope && static_cast<int64_t>(s.short_factor.size()) != rotated / 2) {
    throw std::invalid_argument(c10::str("rope: rope_short_factor and rope_long_factor hold ", s.short_factor.size(),
                                         " factors; rope_scaling longrope needs one per rotated pair (", rotated / 2,
                                         ")"));
  }
}

}  // namespace

torch::Tensor rope_inverse_frequencies(const RotaryEmbeddingOptions& options, bool long_factors) {
  validate(options);
  const int64_t d = options.resolved_rotary_dim();
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
    case RopeScalingKind::kLongrope:
      return theta / torch::tensor(long_factors ? s.long_factor : s.short_factor, torch::kDouble);
  }
  throw std::logic_error("unhandled rope_scaling");
}

std::pair<torch::Tensor, torch::Tensor> rotary_table(const RotaryEmbeddingOptions& options, int64_t n,
                                                     bool long_factors) {
  auto angle = torch::arange(n, torch::kDouble).unsqueeze(1) * rope_inverse_frequencies(options, long_factors);
  const double factor = rope_attention_factor(options.scaling());  // yarn's and longrope's, else 1
  return {(angle.cos() * factor).to(torch::kFloat), (angle.sin() * factor).to(torch::kFloat)};
}

RotaryEmbeddingImpl::RotaryEmbeddingImpl(const RotaryEmbeddingOptions& options)
    : options(options) {
  reset();
}

void RotaryEmbeddingImpl::reset() {
  validate(options);
  short_ = long_ = Table{};
}

const RotaryEmbeddingImpl::Table& RotaryEmbeddingImpl::table(int64_t n, bool long_factors, torch::Device device) {
  Table& t = long_factors ? long_ : short_;
  if (t.cos.defined() && t.cos.size(0) >= n && t.cos.device() == device) return t;
  int64_t size = t.cos.defined() ? std::max<int64_t>(n, 2 * t.cos.size(0)) : std::max<int64_t>(n, 256);
  auto [cos, sin] = rotary_table(options, size, long_factors);
  if (options.layout() == RopeLayout::kHalf) cos = torch::cat({cos, cos}, -1), sin = torch::cat({sin, sin}, -1);
  t = {cos.to(device), sin.to(device)};
  return t;
}

torch::Tensor RotaryEmbeddingImpl::rotate(const torch::Tensor& x, const torch::Tensor& cos,
                                          const torch::Tensor& sin) {
  // cos, sin: the table's rows, broadcastable to (B, H, T, width); features past rotary_dim pass as they are.
  const int64_t rotated = options.resolved_rotary_dim(), half = rotated / 2;
  const auto r = rotated < options.head_dim() ? x.narrow(-1, 0, rotated) : x;
  auto c = cos.to(x.scalar_type());
  auto s = sin.to(x.scalar_type());
  torch::Tensor out;
  switch (options.layout()) {
    case RopeLayout::kHalf: {
      // (x1 c - x2 s, x2 c + x1 s) as x * cos + (-x2, x1) * sin over the repeated table, as
      // transformers writes it: the same products and sums, bit for bit, in fewer ops.
      out = r * c + torch::cat({-r.narrow(-1, half, half), r.narrow(-1, 0, half)}, -1) * s;
      break;
    }
    case RopeLayout::kInterleaved: {
      auto pairs = r.unflatten(-1, {half, 2});  // (..., d/2, 2)
      auto x1 = pairs.select(-1, 0);
      auto x2 = pairs.select(-1, 1);
      out = torch::stack({x1 * c - x2 * s, x2 * c + x1 * s}, -1).flatten(-2);
      break;
    }
  }
  if (rotated == options.head_dim()) return out;
  return torch::cat({out, x.narrow(-1, rotated, options.head_dim() - rotated)}, -1);
}

torch::Tensor RotaryEmbeddingImpl::forward(const torch::Tensor& x, const RopePositions& given) {
  const torch::Tensor& positions = given.ids;
  TORCH_CHECK(x.dim() == 4 && x.size(-1) == options.head_dim(),
              "rope: expected (B, H, T, ", options.head_dim(), "), got ", x.sizes());
  TORCH_CHECK(positions.size(-1) == x.size(2), "rope: ", positions.size(-1),
              " positions for ", x.size(2), " tokens");
  if (positions.numel() == 0) return x;
  int64_t n = given.below;  // the table's rows: known on the host, or read from the positions
  if (n <= 0) {
    TORCH_CHECK(positions.min().item<int64_t>() >= 0, "rope: negative position");
    n = positions.max().item<int64_t>() + 1;
  }
  auto flat = positions.reshape(-1).to(x.device());
  auto gather = [&](bool long_factors) {
    const Table& t = table(n, long_factors, x.device());
    auto shape = positions.sizes().vec();  // (B, T) or (T), then the table's width
    shape.push_back(t.cos.size(1));
    return std::pair{t.cos.index_select(0, flat).view(shape), t.sin.index_select(0, flat).view(shape)};
  };
  auto [c, s] = gather(uses_long_factors(options.scaling(), n));
  if (positions.dim() == 2 && uses_long_factors(options.scaling(), n)) {
    // longrope per row: a row whose own positions stay within the trained context keeps the short
    // factors, as it would decoded alone (transformers decides per call, over the batch).
    // Chosen on the device for every row, with nothing read back.
    const auto row_long = positions.amax(1).add(1).gt(options.scaling().original_max_positions).to(x.device());
    auto [short_c, short_s] = gather(false);
    const auto pick = row_long.view({-1, 1, 1});
    c = torch::where(pick, c, short_c), s = torch::where(pick, s, short_s);
  }
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
  const int64_t n = x.size(2);
  const Table& t = table(start + n, uses_long_factors(options.scaling(), start + n), x.device());
  return rotate(x, t.cos.narrow(0, start, n), t.sin.narrow(0, start, n));
}

}  // namespace zoo
