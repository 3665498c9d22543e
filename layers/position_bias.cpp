#include "layers/position_bias.h"

#include <cmath>
#include <stdexcept>

#include <torch/torch.h>

namespace zoo {

std::vector<double> alibi_slopes(int64_t n_heads) {
  if (n_heads <= 0) {
    throw std::invalid_argument(c10::str("alibi: n_heads (", n_heads, ") must be positive"));
  }
  auto power_of_two = [](int64_t n) {
    std::vector<double> s;
    const double start = std::pow(2.0, -8.0 / static_cast<double>(n));
    for (int64_t i = 0; i < n; ++i) s.push_back(std::pow(start, static_cast<double>(i + 1)));
    return s;
  };
  int64_t m = 1;
  while (m * 2 <= n_heads) m *= 2;
  auto slopes = power_of_two(m);
  if (m == n_heads) return slopes;
  auto extra = alibi_slopes(2 * m);
  for (int64_t i = 0; i < n_heads - m; ++i) slopes.push_back(extra[2 * i]);
  return slopes;
}

AlibiBiasImpl::AlibiBiasImpl(const AlibiBiasOptions& options) : options(options) { reset(); }

void AlibiBiasImpl::reset() {
  auto s = alibi_slopes(options.n_heads());
  slopes_ = torch::tensor(s, torch::kDouble).to(torch::kFloat);
}

torch::Tensor AlibiBiasImpl::forward(int64_t q_len, int64_t k_len, int64_t q_start,
                                     int64_t k_start, torch::Device device) {
  auto opts = torch::TensorOptions().dtype(torch::kFloat).device(device);
  auto q = torch::arange(q_start, q_start + q_len, opts).unsqueeze(1);
  auto k = torch::arange(k_start, k_start + k_len, opts).unsqueeze(0);
  auto distance = (q - k).abs();                                      // (Tq, Tk)
  return -slopes_.to(device).view({1, -1, 1, 1}) * distance.unsqueeze(0);  // (1, H, Tq, Tk)
}

RelativePositionBiasImpl::RelativePositionBiasImpl(const RelativePositionBiasOptions& options)
    : options(options) {
  reset();
}

void RelativePositionBiasImpl::reset() {
  const auto& o = options;
  if (o.n_heads() <= 0) {
    throw std::invalid_argument(c10::str("relative bias: n_heads (", o.n_heads(),
                                         ") must be positive"));
  }
  const int64_t per_side = o.bidirectional() ? o.num_buckets() / 2 : o.num_buckets();
  if (o.num_buckets() <= 0 || (o.bidirectional() && o.num_buckets() % 2 != 0) || per_side < 2) {
    throw std::invalid_argument(c10::str(
        "relative bias: num_buckets (", o.num_buckets(), ") must be >= ",
        o.bidirectional() ? "4 and even for bidirectional attention" : "2"));
  }
  if (o.max_distance() <= per_side / 2) {
    throw std::invalid_argument(c10::str("relative bias: max_distance (", o.max_distance(),
                                         ") must exceed the exact range (", per_side / 2, ")"));
  }
  relative_attention_bias = register_module(
      "relative_attention_bias", torch::nn::Embedding(o.num_buckets(), o.n_heads()));
}

torch::Tensor RelativePositionBiasImpl::forward(int64_t q_len, int64_t k_len, int64_t q_start,
                                                int64_t k_start) {
  auto device = relative_attention_bias->weight.device();
  auto opts = torch::TensorOptions().dtype(torch::kLong).device(device);
  auto q = torch::arange(q_start, q_start + q_len, opts).unsqueeze(1);
  auto k = torch::arange(k_start, k_start + k_len, opts).unsqueeze(0);
  auto buckets = relative_position_bucket(k - q, options.bidirectional(), options.num_buckets(),
                                          options.max_distance());              // (Tq, Tk)
  return relative_attention_bias->forward(buckets).permute({2, 0, 1}).unsqueeze(0);  // (1, H, Tq, Tk)
}

}  // namespace zoo
