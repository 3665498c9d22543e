#include "kernels/decode_attention.h"

#include <algorithm>
#include <cstdint>
#include <memory>

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include "kernels/bf16_dot.h"

namespace zoo {
namespace {

bool rows_contiguous_per_head(const torch::Tensor& t) {
  return t.dim() == 4 && t.stride(3) == 1 && t.stride(2) == t.size(3);
}

const uint16_t* bf16_bits(const torch::Tensor& t) {
  return reinterpret_cast<const uint16_t*>(t.data_ptr<at::BFloat16>());
}

}  // namespace

bool takes_bf16_decode_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                 double dropout, bool is_causal, bool need_weights) {
  const bool differentiable =
      torch::GradMode::is_enabled() && (q.requires_grad() || k.requires_grad() || v.requires_grad());
  return q.device().is_cpu() && q.scalar_type() == torch::kBFloat16 && k.scalar_type() == torch::kBFloat16 &&
         v.scalar_type() == torch::kBFloat16 && q.dim() == 4 && q.size(2) == 1 && !differentiable &&
         dropout == 0.0 && !is_causal && !need_weights && rows_contiguous_per_head(k) &&
         rows_contiguous_per_head(v);
}

torch::Tensor bf16_decode_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                    const torch::Tensor& bias, double scale) {
  TORCH_CHECK(rows_contiguous_per_head(k) && rows_contiguous_per_head(v),
              "bf16_decode_attention: keys and values need contiguous rows within each head");
  const int64_t b = q.size(0), hkv = q.size(1), m = q.size(2), d = q.size(3), tk = k.size(2);
  const auto queries = q.contiguous();
  std::unique_ptr<float[]> sums(new float[static_cast<size_t>(b * hkv * m * std::max(tk, d))]);
  auto scores = torch::empty({b, hkv, m, tk}, q.options());
  auto out = torch::empty({b, hkv, m, d}, q.options());
  const uint16_t* q_bits = bf16_bits(queries);
  const uint16_t* k_bits = bf16_bits(k);
  const uint16_t* v_bits = bf16_bits(v);
  auto* score_bits = reinterpret_cast<uint16_t*>(scores.data_ptr<at::BFloat16>());
  auto* out_bits = reinterpret_cast<uint16_t*>(out.data_ptr<at::BFloat16>());
  const auto head_offset = [&](const torch::Tensor& t, int64_t head) {  // head: batch * hkv + group
    return (head / hkv) * t.stride(0) + (head % hkv) * t.stride(1);
  };
  // Heads in blocks of at least 64K multiply-adds: a short context stays on one thread.
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(1, m * tk * d));
  const Bf16DotKernel kernel = fastest_bf16_dot_kernel();
  at::parallel_for(0, b * hkv, grain, [&](int64_t begin, int64_t end) {
    for (int64_t head = begin; head < end; ++head) {
      for (int64_t row = head * m; row < (head + 1) * m; ++row) {
        bf16_rows_dot(kernel, k_bits + head_offset(k, head), q_bits + row * d, d, 0, tk, sums.get() + row * tk);
        round_to_bf16(sums.get() + row * tk, nullptr, tk, score_bits + row * tk);
      }
    }
  });
  // Rounded where LibTorch's bf16 attention rounds (scores, their scaling and bias, the
  // probabilities), so that decoding gives what the full pass and a bf16 TorchScript export give.
  auto biased = scores * scale;
  if (bias.defined()) biased = biased + bias;
  const auto probs = torch::softmax(biased, -1, torch::kFloat).to(torch::kBFloat16).to(torch::kFloat);
  const float* prob_data = probs.data_ptr<float>();
  at::parallel_for(0, b * hkv, grain, [&](int64_t begin, int64_t end) {
    for (int64_t head = begin; head < end; ++head) {
      for (int64_t row = head * m; row < (head + 1) * m; ++row) {
        bf16_weighted_row_sum(prob_data + row * tk, v_bits + head_offset(v, head), tk, d, sums.get() + row * d);
        round_to_bf16(sums.get() + row * d, nullptr, d, out_bits + row * d);
      }
    }
  });
  return out;
}

}  // namespace zoo
