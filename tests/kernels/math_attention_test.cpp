#include "kernels/math_attention.h"

#include <cmath>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "test_util.h"

namespace zoo {
namespace {

using testing::max_abs_diff;

// Grouped heads against the published definition: each key/value head repeated for the query
// heads that share it (repeat_interleave), softmax(q k^T * scale + bias) v, in float64.
TEST(MathAttention, GroupedHeadsWithABiasMatchRepeatedHeads) {
  torch::manual_seed(5);
  const int64_t b = 2, h = 6, hkv = 2, t = 4, tk = 7, d = 8;
  auto q = torch::randn({b, h, t, d}, torch::kDouble);
  auto k = torch::randn({b, hkv, tk, d}, torch::kDouble), v = torch::randn({b, hkv, tk, d}, torch::kDouble);
  auto bias = torch::randn({1, h, t, tk}, torch::kDouble);
  const double scale = 0.3;
  auto [out, weights] = math_attention(q, k, v, bias, scale, 0.0);
  auto scores = torch::matmul(q, k.repeat_interleave(h / hkv, 1).transpose(-1, -2)) * scale + bias;
  auto expected_weights = torch::softmax(scores, -1);
  EXPECT_LE(max_abs_diff(weights, expected_weights), 1e-12);
  EXPECT_LE(max_abs_diff(out, torch::matmul(expected_weights, v.repeat_interleave(h / hkv, 1))), 1e-12);
  EXPECT_EQ(out.sizes(), q.sizes());
}

TEST(MathAttention, FoldingQueryHeadsRoundTrips) {
  auto q = torch::randn({2, 6, 3, 4});
  auto bias = torch::randn({2, 1, 3, 5});
  const auto folded = fold_query_heads(q, bias, 2);
  EXPECT_EQ(folded.q.sizes(), (std::vector<int64_t>{2, 2, 9, 4}));
  EXPECT_EQ(folded.bias.sizes(), (std::vector<int64_t>{2, 2, 9, 5}));
  EXPECT_TRUE(torch::equal(folded.q[1][1].narrow(0, 3, 3), q[1][4]));  // head 4 is the 2nd of group 1
  EXPECT_TRUE(torch::equal(unfold_query_heads(folded.q, 6), q));
  EXPECT_THROW(fold_query_heads(q, {}, 4), c10::Error);  // 6 heads cannot share 4
}

// bfloat16 scores are normalised in float32: the weights of a row still sum to one.
TEST(MathAttention, Bf16WeightsAreNormalisedInFloat32) {
  auto q = torch::randn({1, 2, 3, 8}).to(torch::kBFloat16), k = torch::randn({1, 2, 5, 8}).to(torch::kBFloat16);
  auto [out, weights] = math_attention(q, k, k, {}, 1.0, 0.0);
  EXPECT_EQ(weights.scalar_type(), torch::kBFloat16);
  EXPECT_LE((weights.to(torch::kFloat).sum(-1) - 1).abs().max().item<double>(), 1e-2);
}

}  // namespace
}  // namespace zoo
