#include "kernels/decode_attention.h"

#include <limits>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "kernels/f32_rows_dot.h"
#include "layers/attention.h"
#include "test_util.h"

namespace zoo {
namespace {

// A bias for the decode path with `additive` as its terms.
AttentionBias decode_path(const torch::Tensor& additive) {
  AttentionBias bias;
  bias.choice.path = AttentionPath::kDecode;
  bias.additive = additive;
  return bias;
}

// bf16 decoding's attention (kernels/decode_attention.h): grouped query heads, a padding bias and
// keys narrowed from a longer cache. References: float32 products of the bf16 values rounded to
// bf16 where LibTorch's bf16 attention rounds (the formula a bf16 TorchScript export decodes
// with, interop/script/blocks.py), and float64; attend runs it on the decode path.
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
  auto [o, w] = attend(q, k, v, decode_path(bias), {.scale = scale});
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
  auto [o2, w2] = attend(q, k, v2, decode_path(bias), {.scale = scale});
  EXPECT_TRUE(torch::equal(o2[1], o[1]));
  // Routed here: the same bits as the kernel called on the folded query heads.
  auto direct = bf16_decode_attention(q.reshape({b, hkv, h / hkv, d}), k, v, bias, scale);
  EXPECT_TRUE(torch::equal(o, direct.view({b, h, 1, d})));
}

// float32 decoding's attention: grouped query heads, a padding bias and keys narrowed from a
// longer cache, against float64's attention of the same values; attend runs it on the decode
// path, and LibTorch's products on the math path.
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
  auto [o, w] = attend(q, k, v, decode_path(bias), {.scale = scale});
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
  // The math path keeps LibTorch's products.
  AttentionBias math_path = decode_path(bias);
  math_path.choice.path = AttentionPath::kMath;
  auto [math, weights] = attend(q, k, v, math_path, {.scale = scale});
  EXPECT_LE((math.to(torch::kDouble) - exact).abs().max().item<double>(), 1e-5);
  // Keys and values laid out (B, T, H, D) and transposed, rows not contiguous within a head: the
  // kernel reads a copy.
  const auto strided_k = k.transpose(1, 2).contiguous().transpose(1, 2);
  const auto strided_v = v.transpose(1, 2).contiguous().transpose(1, 2);
  EXPECT_TRUE(torch::equal(float32_decode_attention(q.reshape({b, hkv, h / hkv, d}), strided_k, strided_v, bias, scale),
                           direct));
}

// Soft-capped scores (Gemma 2) on the decode path, float32 and bf16, equal the math path's
// formula: cap * tanh(scale q.k / cap) + bias before the softmax.
TEST(DecodeAttention, SoftCapsTheScaledScoresBeforeTheBias) {
  torch::manual_seed(13);
  const int64_t b = 2, h = 4, hkv = 2, d = 32, tk = 9;
  auto q = torch::randn({b, h, 1, d}), k = torch::randn({b, hkv, tk, d}), v = torch::randn({b, hkv, tk, d});
  auto bias = torch::randn({b, 1, 1, tk}) * 0.5;
  const double scale = 0.25, cap = 1.5;
  torch::NoGradGuard no_grad;
  auto k_per_head = k.repeat_interleave(h / hkv, 1), v_per_head = v.repeat_interleave(h / hkv, 1);
  auto scores = torch::matmul(q.to(torch::kDouble), k_per_head.to(torch::kDouble).transpose(-2, -1)) * scale;
  auto exact = torch::matmul(torch::softmax(torch::tanh(scores / cap) * cap + bias.to(torch::kDouble), -1),
                             v_per_head.to(torch::kDouble));
  if (cpu_runs_f32_rows_dot()) {
    auto [o, w] = attend(q, k, v, decode_path(bias), {.scale = scale, .softcap = cap});
    EXPECT_LE((o.to(torch::kDouble) - exact).abs().max().item<double>(), 1e-5);
  }
  AttentionBias math_path = decode_path(bias);
  math_path.choice.path = AttentionPath::kMath;
  auto [math, weights] = attend(q, k, v, math_path, {.scale = scale, .softcap = cap});
  EXPECT_LE((math.to(torch::kDouble) - exact).abs().max().item<double>(), 1e-5);
  const auto to_bf16 = [](const torch::Tensor& t) { return t.to(torch::kBFloat16); };
  auto [o16, w16] = attend(to_bf16(q), to_bf16(k), to_bf16(v), decode_path(to_bf16(bias)), {.scale = scale, .softcap = cap});
  EXPECT_LE((o16.to(torch::kDouble) - exact).abs().max().item<double>(), 5e-2);
  // Uncapped differs.
  auto [plain, pw] = attend(q, k, v, math_path, {.scale = scale});
  EXPECT_GT((plain - math).abs().max().item<double>(), 1e-2);
}

// The decode path is chosen for a layer's call (attention_bias, as models build theirs) with one
// bf16 query and grad mode off; a second query, dropout in training or grad mode refuse it.
TEST(Bf16DecodeAttention, ChosenForOneBf16QueryWithoutGradients) {
  Attention attn(AttentionOptions(16, 2).n_kv_heads(1).causal(true).dropout(0.1));
  attn->to(torch::kBFloat16);
  attn->eval();
  const auto one = torch::randn({2, 1, 16}).to(torch::kBFloat16), two = torch::randn({2, 2, 16}).to(torch::kBFloat16);
  const auto path = [&](const torch::Tensor& x) { return attention_bias(*attn, x, {.query_start = 5}).choice.path; };
  EXPECT_EQ(path(one), AttentionPath::kLibTorch);  // grad mode on
  torch::NoGradGuard no_grad;
  EXPECT_EQ(path(one), AttentionPath::kDecode);
  EXPECT_NE(path(two), AttentionPath::kDecode);
  EXPECT_NE(path(one.to(torch::kDouble)), AttentionPath::kDecode);
  attn->train();
  EXPECT_NE(path(one), AttentionPath::kDecode);  // dropout
  attn->eval();
  // Decoding through the cache on that path agrees with the full pass.
  const auto x = torch::randn({2, 6, 16}).to(torch::kBFloat16);
  const auto full = attn->forward(x, attention_bias(*attn, x)).to(torch::kFloat);
  AttentionCache cache;
  std::vector<torch::Tensor> steps;
  for (int64_t i = 0; i < 6; ++i) {
    const auto step = x.narrow(1, i, 1);
    steps.push_back(attn->forward(step, attention_bias(*attn, step, {.query_start = i}), {}, &cache));
  }
  EXPECT_LE((torch::cat(steps, 1).to(torch::kFloat) - full).abs().max().item<double>(), 0.05);
}

}  // namespace
}  // namespace zoo
