#include "kernels/decode_attention.h"

#include <limits>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "kernels/f32_rows_dot.h"
#include "layers/attention.h"
#include "test_util.h"

namespace zoo {
namespace {

// bf16 decoding's attention (kernels/decode_attention.h): grouped query heads, a padding bias and
// keys narrowed from a longer cache. References: float32 products of the bf16 values rounded to
// bf16 where LibTorch's bf16 attention rounds (the formula a bf16 TorchScript export decodes
// with, interop/script/blocks.py), and float64; scaled_dot_product routes one bf16 query
// without gradients to it.
TEST(Bf16DecodeAttention, FloatSumsRoundedAsLibTorchRoundsWithGroupedHeadsBiasAndCachedKeys) {
  torch::manual_seed(11);
  const int64_t b = 2, h = 4, hkv = 2, d = 40, tk = 9;  // d = 40: past one 32-wide step
  auto q = torch::randn({b, h, 1, d}).to(torch::kBFloat16);
  auto k = torch::randn({b, hkv, 13, d}).to(torch::kBFloat16).narrow(2, 0, tk);
  auto v = torch::randn({b, hkv, 13, d}).to(torch::kBFloat16).narrow(2, 0, tk);
  auto bias = (torch::randn({b, 1, 1, tk}) * 0.5).to(torch::kBFloat16);
  bias[1][0][0][3] = -std::numeric_limits<float>::infinity();  // a padded key of the second sequence
  const double scale = 0.125;
  torch::NoGradGuard no_grad;
  ASSERT_TRUE(takes_bf16_decode_attention(q, k, v, 0.0, false, false));
  auto [o, w] = scaled_dot_product(q, k, v, bias, scale, 0.0, false, AttentionBackend::kMath, false);
  ASSERT_EQ(o.scalar_type(), torch::kBFloat16);
  ASSERT_EQ(o.sizes(), q.sizes());

  auto k_per_head = k.repeat_interleave(h / hkv, 1), v_per_head = v.repeat_interleave(h / hkv, 1);
  auto scores = torch::matmul(q.to(torch::kFloat), k_per_head.to(torch::kFloat).transpose(-2, -1)).to(torch::kBFloat16);
  auto probs = torch::softmax(scores * scale + bias, -1, torch::kFloat).to(torch::kBFloat16);
  auto rounded = torch::matmul(probs.to(torch::kFloat), v_per_head.to(torch::kFloat)).to(torch::kBFloat16);
  // Float32 sums in another order can land on the neighbouring bf16 value, rarely.
  const double same = o.eq(rounded).to(torch::kDouble).mean().item<double>();
  EXPECT_GE(same, 0.97);
  auto step = rounded.to(torch::kDouble).abs().clamp_min(1e-2) * (1.0 / 128);  // one bf16 step
  EXPECT_TRUE((o.to(torch::kDouble) - rounded.to(torch::kDouble)).abs().le(step).all().item<bool>());

  auto exact_scores = torch::matmul(q.to(torch::kDouble), k_per_head.to(torch::kDouble).transpose(-2, -1)) * scale +
                      bias.to(torch::kDouble);
  auto exact = torch::matmul(torch::softmax(exact_scores, -1), v_per_head.to(torch::kDouble));
  // bf16 scores and probabilities: within 2% of the values' scale of the float64 attention.
  EXPECT_LE((o.to(torch::kDouble) - exact).abs().max().item<double>(), 0.02 * v.abs().max().item<double>());
  // The padded key has no weight: changing its value changes nothing.
  auto v2 = v.clone();
  v2[1].narrow(1, 3, 1).fill_(100);
  auto [o2, w2] = scaled_dot_product(q, k, v2, bias, scale, 0.0, false, AttentionBackend::kMath, false);
  EXPECT_TRUE(torch::equal(o2[1], o[1]));
  // Routed here: the same bits as the kernel called on the folded query heads.
  auto direct = bf16_decode_attention(q.reshape({b, hkv, h / hkv, d}), k, v, bias, scale);
  EXPECT_TRUE(torch::equal(o, direct.view({b, h, 1, d})));
}

// float32 decoding's attention: grouped query heads, a padding bias and keys narrowed from a
// longer cache, against float64's attention of the same values; scaled_dot_product routes one
// float32 query without gradients to it, except on the math backend (LibTorch's products).
TEST(Float32DecodeAttention, MatchesFloat64WithGroupedHeadsBiasAndCachedKeys) {
  if (!cpu_runs_f32_rows_dot()) GTEST_SKIP() << "no AVX-512F on this CPU: float32 decoding takes LibTorch's attention";
  torch::manual_seed(12);
  const int64_t b = 3, h = 6, hkv = 2, d = 72, tk = 21;  // d = 72: past four 16-wide steps
  auto q = torch::randn({b, h, 1, d});
  auto k = torch::randn({b, hkv, 30, d}).narrow(2, 4, tk);
  auto v = torch::randn({b, hkv, 30, d}).narrow(2, 4, tk);
  auto bias = torch::randn({b, 1, 1, tk}) * 0.5;
  bias[1][0][0].narrow(0, 0, 5).fill_(-std::numeric_limits<float>::infinity());  // the second sequence's padding
  const double scale = 0.125;
  torch::NoGradGuard no_grad;
  ASSERT_TRUE(takes_float32_decode_attention(q, k, v, 0.0, false, false));
  auto [o, w] = scaled_dot_product(q, k, v, bias, scale, 0.0, false, AttentionBackend::kAuto, false);
  ASSERT_EQ(o.scalar_type(), torch::kFloat);
  ASSERT_EQ(o.sizes(), q.sizes());
  auto k_per_head = k.repeat_interleave(h / hkv, 1), v_per_head = v.repeat_interleave(h / hkv, 1);
  auto exact_scores = torch::matmul(q.to(torch::kDouble), k_per_head.to(torch::kDouble).transpose(-2, -1)) * scale +
                      bias.to(torch::kDouble);
  auto exact = torch::matmul(torch::softmax(exact_scores, -1), v_per_head.to(torch::kDouble));
  EXPECT_LE((o.to(torch::kDouble) - exact).abs().max().item<double>(), 1e-5);
  // Routed here: the same bits as the kernel called on the folded query heads.
  auto direct = float32_decode_attention(q.reshape({b, hkv, h / hkv, d}), k, v, bias, scale);
  EXPECT_TRUE(torch::equal(o, direct.view({b, h, 1, d})));
  // The padded keys have no weight: changing their values changes nothing.
  auto v2 = v.clone();
  v2[1].narrow(1, 0, 5).fill_(100);
  EXPECT_TRUE(torch::equal(float32_decode_attention(q.reshape({b, hkv, h / hkv, d}), k, v2, bias, scale)[1], direct[1]));
  // The math backend keeps LibTorch's products.
  auto [math, unused] = scaled_dot_product(q, k, v, bias, scale, 0.0, false, AttentionBackend::kMath, false);
  EXPECT_LE((math.to(torch::kDouble) - exact).abs().max().item<double>(), 1e-5);
  EXPECT_FALSE(takes_float32_decode_attention(q.to(torch::kDouble), k.to(torch::kDouble), v.to(torch::kDouble), 0.0,
                                              false, false));
  EXPECT_FALSE(takes_float32_decode_attention(torch::cat({q, q}, 2), k, v, 0.0, false, false));  // two positions
  EXPECT_FALSE(takes_float32_decode_attention(q, k, v, 0.0, true, false));
  auto strided = torch::randn({b, tk, hkv, d}).transpose(1, 2);
  EXPECT_FALSE(takes_float32_decode_attention(q, strided, v, 0.0, false, false));
}

TEST(Bf16DecodeAttention, TakenOnlyForOneBf16QueryWithoutGradients) {
  auto q = torch::randn({1, 2, 1, 8}).to(torch::kBFloat16);
  auto k = torch::randn({1, 2, 5, 8}).to(torch::kBFloat16), v = k.clone();
  EXPECT_TRUE(takes_bf16_decode_attention(q, k, v, 0.0, false, false));
  EXPECT_FALSE(takes_bf16_decode_attention(q.to(torch::kFloat), k.to(torch::kFloat), v.to(torch::kFloat), 0.0, false, false));
  EXPECT_FALSE(takes_bf16_decode_attention(torch::cat({q, q}, 2), k, v, 0.0, false, false));  // two query positions
  EXPECT_FALSE(takes_bf16_decode_attention(q, k, v, 0.1, false, false));
  EXPECT_FALSE(takes_bf16_decode_attention(q, k, v, 0.0, true, false));
  EXPECT_FALSE(takes_bf16_decode_attention(q, k, v, 0.0, false, true));
  // Keys laid out (B, T, H, D) and transposed: rows are not contiguous within a head.
  auto strided = torch::randn({1, 5, 2, 8}).to(torch::kBFloat16).transpose(1, 2);
  EXPECT_FALSE(takes_bf16_decode_attention(q, strided, v, 0.0, false, false));
  auto trainable = k.clone().requires_grad_();
  EXPECT_FALSE(takes_bf16_decode_attention(q, trainable, v, 0.0, false, false));
  torch::NoGradGuard no_grad;
  EXPECT_TRUE(takes_bf16_decode_attention(q, trainable, v, 0.0, false, false));
}

}  // namespace
}  // namespace zoo
