#include "kernels/masks.h"

#include <cmath>
#include <limits>

#include <torch/torch.h>

namespace zoo {

torch::Tensor causal_mask(int64_t q_len, int64_t k_len, int64_t q_start, int64_t k_start,
                          int64_t window, torch::Device device) {
  TORCH_CHECK(q_len >= 0 && k_len >= 0, "causal_mask: negative length (q_len ", q_len,
              ", k_len ", k_len, ")");
  TORCH_CHECK(window >= 0, "causal_mask: window must be >= 0, got ", window);
  auto opts = torch::TensorOptions().dtype(torch::kLong).device(device);
  auto q = torch::arange(q_start, q_start + q_len, opts).unsqueeze(1);  // (Tq, 1)
  auto k = torch::arange(k_start, k_start + k_len, opts).unsqueeze(0);  // (1, Tk)
  auto allowed = k <= q;
  if (window > 0) allowed = allowed & (k > q - window);
  return allowed;
}

torch::Tensor band_mask(int64_t q_len, int64_t k_len, int64_t q_start, int64_t k_start, int64_t window,
                        torch::Device device) {
  TORCH_CHECK(q_len >= 0 && k_len >= 0, "band_mask: negative length (q_len ", q_len, ", k_len ", k_len, ")");
  TORCH_CHECK(window >= 1, "band_mask: window must be >= 1, got ", window);
  auto opts = torch::TensorOptions().dtype(torch::kLong).device(device);
  auto q = torch::arange(q_start, q_start + q_len, opts).unsqueeze(1);  // (Tq, 1)
  auto k = torch::arange(k_start, k_start + k_len, opts).unsqueeze(0);  // (1, Tk)
  return (k - q).abs() < window;
}

torch::Tensor padding_mask(const torch::Tensor& key_padding_mask) {
  TORCH_CHECK(key_padding_mask.dim() == 2, "key padding mask must be (batch, keys), got shape ",
              key_padding_mask.sizes());
  auto m = key_padding_mask.scalar_type() == torch::kBool ? key_padding_mask
                                                          : key_padding_mask.ne(0);
  return m.unsqueeze(1).unsqueeze(2);
}

AdditiveBias additive_attention_bias(const AttentionBiasInputs& in, torch::ScalarType dtype, torch::Device device) {
  const auto& kpm = in.key_padding_mask;
  const auto& pb = in.position_bias;
  AdditiveBias out;
  const bool plain_causal = in.causal && in.window == 0 && in.query_start == in.key_start &&
                            in.queries == in.keys && !kpm.defined() && !pb.defined();
  if (plain_causal && in.kernel_may_mask) {
    out.kernel_causal = true;
    return out;
  }
  torch::Tensor allowed;
  if (in.causal) allowed = causal_mask(in.queries, in.keys, in.query_start, in.key_start, in.window, device);
  else if (in.window > 0) allowed = band_mask(in.queries, in.keys, in.query_start, in.key_start, in.window, device);
  if (kpm.defined()) {
    TORCH_CHECK(kpm.dim() == 2 && kpm.size(1) >= in.keys, "attention: key padding mask must be (B, K) with K >= ",
                in.keys, " keys, got ", kpm.sizes());
    auto pm = padding_mask(kpm.narrow(1, kpm.size(1) - in.keys, in.keys));
    allowed = allowed.defined() ? allowed & pm : pm;
  }
  if (allowed.defined()) out.additive = mask_to_bias(allowed, dtype);
  if (pb.defined()) {
    TORCH_CHECK(pb.dim() >= 2 && pb.size(-1) >= in.keys && pb.size(-2) == in.queries, "attention: position bias must cover (",
                in.queries, " queries, >= ", in.keys, " keys), got ", pb.sizes());
    auto terms = pb.narrow(-1, pb.size(-1) - in.keys, in.keys).to(dtype);
    out.additive = out.additive.defined() ? out.additive + terms : terms;
  }
  return out;
}

torch::Tensor mask_to_bias(const torch::Tensor& allowed, torch::ScalarType dtype) {
  TORCH_CHECK(allowed.scalar_type() == torch::kBool, "mask_to_bias expects a boolean mask, got ",
              allowed.scalar_type());
  auto bias = torch::zeros(allowed.sizes(), allowed.options().dtype(dtype));
  at::Scalar lowest;
  AT_DISPATCH_FLOATING_TYPES_AND2(torch::kHalf, torch::kBFloat16, dtype, "mask_to_bias",
                                  [&] { lowest = std::numeric_limits<scalar_t>::lowest(); });
  return bias.masked_fill_(allowed.logical_not(), lowest);
}

torch::Tensor relative_position_bucket(const torch::Tensor& relative_position, bool bidirectional,
                                       int64_t num_buckets, int64_t max_distance) {
  auto bucket = torch::zeros_like(relative_position);
  torch::Tensor n;
  if (bidirectional) {
    num_buckets /= 2;
    bucket = bucket + (relative_position > 0).to(torch::kLong) * num_buckets;
    n = relative_position.abs();
  } else {
    n = -torch::clamp_max(relative_position, 0);
  }
  const int64_t max_exact = num_buckets / 2;
  auto is_small = n < max_exact;
  // Clamp at 1 before the log: n = 0 falls in the exact range and is not used here.
  auto large = torch::log(n.clamp_min(1).to(torch::kFloat) / static_cast<float>(max_exact)) /
               static_cast<float>(std::log(static_cast<double>(max_distance) / max_exact)) *
               static_cast<float>(num_buckets - max_exact);
  auto val_if_large = (large.to(torch::kLong) + max_exact).clamp_max(num_buckets - 1);
  return bucket + torch::where(is_small, n, val_if_large);
}

}  // namespace zoo
