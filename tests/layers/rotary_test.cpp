#include "layers/rotary.h"

#include <cmath>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "test_util.h"

namespace zoo {
namespace {

using testing::max_abs_diff;

class RotaryLayoutTest : public ::testing::TestWithParam<RopeLayout> {};

TEST_P(RotaryLayoutTest, PreservesNorms) {
  RotaryEmbedding rope(RotaryEmbeddingOptions(16).layout(GetParam()));
  auto x = torch::randn({2, 3, 7, 16});
  auto y = rope->forward(x, 5);
  EXPECT_LE(max_abs_diff(y.norm(2, -1), x.norm(2, -1)), 1e-4);
  EXPECT_GT(max_abs_diff(y, x), 1e-2);  // it did rotate
}

TEST_P(RotaryLayoutTest, DotProductDependsOnlyOnDistance) {
  RotaryEmbedding rope(RotaryEmbeddingOptions(32).base(500.0).layout(GetParam()));
  auto q = torch::randn({1, 1, 1, 32}, torch::kDouble);
  auto k = torch::randn({1, 1, 1, 32}, torch::kDouble);
  auto dot = [&](int64_t qpos, int64_t kpos) {
    return (rope->forward(q, qpos) * rope->forward(k, kpos)).sum().item<double>();
  };
  for (int64_t shift : {1, 17, 300}) {
    EXPECT_NEAR(dot(9, 4), dot(9 + shift, 4 + shift), 1e-4) << "shift " << shift;
  }
  EXPECT_GT(std::abs(dot(9, 4) - dot(9, 5)), 1e-6);  // but it does depend on the distance
}

TEST_P(RotaryLayoutTest, PositionTensorEqualsStartOffset) {
  RotaryEmbedding rope(RotaryEmbeddingOptions(8).layout(GetParam()));
  auto x = torch::randn({2, 2, 4, 8});
  auto ids = torch::arange(3, 7).unsqueeze(0).expand({2, 4});
  EXPECT_LE(max_abs_diff(rope->forward(x, ids), rope->forward(x, 3)), 1e-6);
  EXPECT_LE(max_abs_diff(rope->forward(x, torch::arange(3, 7)), rope->forward(x, 3)), 1e-6);
  // Growing the table past its first size keeps earlier angles.
  auto far = rope->forward(x, 1000);
  EXPECT_LE(max_abs_diff(rope->forward(x, 3), rope->forward(x, ids)), 1e-6);
  EXPECT_EQ(far.sizes(), x.sizes());
}

INSTANTIATE_TEST_SUITE_P(Layouts, RotaryLayoutTest,
                         ::testing::Values(RopeLayout::kHalf, RopeLayout::kInterleaved),
                         [](const auto& info) { return to_string(info.param); });

TEST(RotaryEmbedding, RotatesEachPairByPositionTimesFrequency) {
  // head_dim 4, base 100: pair 0 turns by p radians, pair 1 by p / 10.
  const double p = 3.0;
  auto x = torch::tensor({1.0, 2.0, 3.0, 4.0}, torch::kDouble).view({1, 1, 1, 4});
  auto rotate = [](double a, double b, double angle) {
    return std::pair{a * std::cos(angle) - b * std::sin(angle), b * std::cos(angle) + a * std::sin(angle)};
  };
  // Interleaved pairs (x0, x1) and (x2, x3).
  RotaryEmbedding inter(RotaryEmbeddingOptions(4).base(100.0).layout(RopeLayout::kInterleaved));
  auto [a0, a1] = rotate(1, 2, p);
  auto [a2, a3] = rotate(3, 4, p / 10);
  EXPECT_LE(max_abs_diff(inter->forward(x, 3).view(-1), torch::tensor({a0, a1, a2, a3}, torch::kDouble)), 1e-6);
  // Half layout pairs (x0, x2) and (x1, x3).
  RotaryEmbedding half(RotaryEmbeddingOptions(4).base(100.0).layout(RopeLayout::kHalf));
  auto [h0, h2] = rotate(1, 3, p);
  auto [h1, h3] = rotate(2, 4, p / 10);
  EXPECT_LE(max_abs_diff(half->forward(x, 3).view(-1), torch::tensor({h0, h1, h2, h3}, torch::kDouble)), 1e-6);
}

TEST(RotaryEmbedding, RejectsOddHeadDim) {
  EXPECT_THROW(RotaryEmbedding(RotaryEmbeddingOptions(7)), std::invalid_argument);
  EXPECT_THROW(RotaryEmbedding(RotaryEmbeddingOptions(8).base(1.0)), std::invalid_argument);
}

}  // namespace
}  // namespace zoo
