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

RopeScaling llama3(double factor, int64_t original) {
  RopeScaling s;
  s.kind = RopeScalingKind::kLlama3, s.factor = factor, s.original_max_positions = original;
  return s;  // low_freq_factor 1, high_freq_factor 4, as LLaMA 3.1
}

// LLaMA 3.1's rule worked by hand. head_dim 16, base 10^4, factor 8, original context 100:
// theta_i = 10^(-i/2); wavelengths 2 pi / theta under 100 / 4 = 25 are kept (i = 0, 1), over
// 100 / 1 divided by 8 (i >= 3), and theta_2 = 0.1 (wavelength 62.83) is blended with
// s = (100 / 62.83 - 1) / (4 - 1) = 0.1971831: (1 - s) 0.1 / 8 + s 0.1 = 0.0297535.
TEST(RotaryEmbedding, Llama3ScalingKeepsHighFrequenciesAndDividesLowOnes) {
  auto theta = rope_inverse_frequencies(RotaryEmbeddingOptions(16).base(1e4).scaling(llama3(8, 100)));
  ASSERT_EQ(theta.size(0), 8);
  const double expected[] = {1.0, std::pow(10.0, -0.5), 0.029753525068469, std::pow(10.0, -1.5) / 8,
                             1e-2 / 8, std::pow(10.0, -2.5) / 8, 1e-3 / 8, std::pow(10.0, -3.5) / 8};
  for (int64_t i = 0; i < 8; ++i) EXPECT_NEAR(theta[i].item<double>(), expected[i], 1e-12) << i;
  // Llama 3.2 (head_dim 128, base 500000, factor 32, original 8192): theta_32 = 500000^-0.5 =
  // 0.00141421, wavelength 4442.88 between 2048 and 8192, s = (8192 / 4442.88 - 1) / 3 = 0.281283,
  // (1 - s) theta / 32 + s theta = 0.000429557. theta_28 (wavelength 1956) is kept, theta_35
  // (8219) divided by the factor.
  auto real = rope_inverse_frequencies(RotaryEmbeddingOptions(128).base(5e5).scaling(llama3(32, 8192)));
  EXPECT_NEAR(real[32].item<double>(), 0.001414213562373 * (0.718717394836749 / 32 + 0.281282605163251), 1e-15);
  EXPECT_DOUBLE_EQ(real[28].item<double>(), std::pow(5e5, -28.0 / 64));
  EXPECT_DOUBLE_EQ(real[35].item<double>(), std::pow(5e5, -35.0 / 64) / 32);
}

// YaRN worked by hand, as transformers' _compute_yarn_parameters. head_dim 16, base 10^4,
// factor 4, trained context 64: the pair turning r times in it is 16 ln(64 / (2 pi r)) / (2 ln
// 10^4): -0.994 for beta_fast 32 and 2.016 for beta_slow 1, rounded outward and clamped to 0 and
// 3. theta_i = 10^(-i/2) is kept at i = 0, divided by 4 from i = 3, and between times
// 1 - 0.75 i / 3. Truncation off, the ramp ends at 2.016 instead. cos and sin are scaled by
// 0.1 ln 4 + 1.
TEST(RotaryEmbedding, YarnRampsBetweenKeptAndInterpolatedFrequencies) {
  RopeScaling yarn;
  yarn.kind = RopeScalingKind::kYarn, yarn.factor = 4.0, yarn.original_max_positions = 64;
  auto theta = rope_inverse_frequencies(RotaryEmbeddingOptions(16).base(1e4).scaling(yarn));
  const double expected[] = {1.0, std::pow(10.0, -0.5) * 0.75, 0.1 * 0.5, std::pow(10.0, -1.5) / 4, 1e-2 / 4,
                             std::pow(10.0, -2.5) / 4, 1e-3 / 4, std::pow(10.0, -3.5) / 4};
  for (int64_t i = 0; i < 8; ++i) EXPECT_NEAR(theta[i].item<double>(), expected[i], 1e-12) << i;
  yarn.truncate = false;
  const double high = 16 * std::log(64 / (2 * M_PI)) / (2 * std::log(1e4));
  EXPECT_NEAR(high, 2.016, 1e-3);
  theta = rope_inverse_frequencies(RotaryEmbeddingOptions(16).base(1e4).scaling(yarn));
  EXPECT_NEAR(theta[1].item<double>(), std::pow(10.0, -0.5) * (1 - 0.75 / high), 1e-12);
  EXPECT_NEAR(theta[2].item<double>(), 0.1 * (1 - 0.75 * 2 / high), 1e-12);
  EXPECT_NEAR(theta[3].item<double>(), std::pow(10.0, -1.5) / 4, 1e-12);  // past the ramp's end
  const double factor = 0.1 * std::log(4.0) + 1.0;
  EXPECT_DOUBLE_EQ(rope_attention_factor(yarn), factor);
  auto [cos, sin] = rotary_table(RotaryEmbeddingOptions(16).base(1e4).scaling(yarn), 3);
  EXPECT_NEAR(cos[0][0].item<float>(), factor, 1e-6);  // position 0: cos 1, times the factor
  EXPECT_NEAR(sin[2][0].item<float>(), factor * std::sin(2.0), 1e-6);
  yarn.attention_factor = 1.5;
  EXPECT_DOUBLE_EQ(rope_attention_factor(yarn), 1.5);
}

// Linear scaling is position interpolation: position p turns as p / factor did unscaled.
TEST(RotaryEmbedding, LinearScalingDividesPositions) {
  RopeScaling linear;
  linear.kind = RopeScalingKind::kLinear, linear.factor = 2.0;
  RotaryEmbedding scaled(RotaryEmbeddingOptions(8).scaling(linear));
  RotaryEmbedding plain(RotaryEmbeddingOptions(8));
  auto x = torch::randn({1, 2, 3, 8}, torch::kDouble);
  EXPECT_LE(max_abs_diff(scaled->forward(x, torch::tensor({6, 10, 14})), plain->forward(x, torch::tensor({3, 5, 7}))),
            1e-6);
  EXPECT_GT(max_abs_diff(scaled->forward(x, 6), plain->forward(x, 6)), 1e-2);
}

// A partial rotation (Phi-3's partial_rotary_factor): head_dim 8 with its first 4 features
// rotated as a head of 4 would be (theta_i = base^(-2i / 4)), the last 4 passed as they are.
TEST(RotaryEmbedding, PartialRotationTurnsTheFirstFeaturesAlone) {
  auto x = torch::randn({2, 3, 5, 8}, torch::kDouble);
  RotaryEmbedding partial(RotaryEmbeddingOptions(8).rotary_dim(4).base(100.0));
  RotaryEmbedding four(RotaryEmbeddingOptions(4).base(100.0));
  const auto y = partial->forward(x, 7);
  EXPECT_TRUE(y.narrow(-1, 4, 4).equal(x.narrow(-1, 4, 4)));
  EXPECT_LE(max_abs_diff(y.narrow(-1, 0, 4), four->forward(x.narrow(-1, 0, 4).contiguous(), 7)), 1e-12);
  EXPECT_GT(max_abs_diff(y.narrow(-1, 0, 4), x.narrow(-1, 0, 4)), 1e-2);
  EXPECT_EQ(rope_inverse_frequencies(RotaryEmbeddingOptions(8).rotary_dim(4).base(100.0)).size(0), 2);
  EXPECT_EQ(testing::error_of([] { RotaryEmbedding(RotaryEmbeddingOptions(8).rotary_dim(10)); }),
            "rope: rotary_dim (10) must be even and at most head_dim (8)");
}

// LongRoPE worked by hand, as transformers' _compute_longrope_parameters: head_dim 4, base 100,
// theta = (1, 0.1) divided by the short factors (1, 2) or the long ones (4, 8); a trained context
// of 16 and a factor of 4 make cos and sin times sqrt(1 + ln 4 / ln 16) = sqrt(1.5). A call
// reaching position 16 (its 17th) takes the long factors at every position; one ending at 15 the
// short ones; with (B, T) positions, each row as its own positions say.
TEST(RotaryEmbedding, LongropeDividesByShortOrLongFactorsPerCall) {
  RopeScaling longrope;
  longrope.kind = RopeScalingKind::kLongrope, longrope.factor = 4.0, longrope.original_max_positions = 16;
  longrope.short_factor = {1.0, 2.0}, longrope.long_factor = {4.0, 8.0};
  const auto options = RotaryEmbeddingOptions(4).base(100.0).scaling(longrope);
  auto short_theta = rope_inverse_frequencies(options), long_theta = rope_inverse_frequencies(options, true);
  EXPECT_DOUBLE_EQ(short_theta[1].item<double>(), 0.1 / 2);
  EXPECT_DOUBLE_EQ(long_theta[0].item<double>(), 1.0 / 4);
  EXPECT_DOUBLE_EQ(long_theta[1].item<double>(), 0.1 / 8);
  EXPECT_DOUBLE_EQ(rope_attention_factor(longrope), std::sqrt(1.5));
  EXPECT_FALSE(uses_long_factors(longrope, 16));
  EXPECT_TRUE(uses_long_factors(longrope, 17));
  EXPECT_TRUE(rereads_at(longrope, 17));
  EXPECT_FALSE(rereads_at(longrope, 18));

  // x = (1, 0, 0, 0): pair 0 is (x0, x2), so the output's x0 is factor * cos(p theta_0).
  RotaryEmbedding rope(options);
  auto x = torch::zeros({2, 1, 2, 4}, torch::kDouble);
  x.select(3, 0).fill_(1.0);
  const double f = std::sqrt(1.5);
  auto within = rope->forward(x, 14);  // positions 14, 15
  EXPECT_NEAR(within[0][0][1][0].item<double>(), f * std::cos(15.0), 1e-6);
  auto past = rope->forward(x, 15);  // positions 15, 16: both long
  EXPECT_NEAR(past[0][0][0][0].item<double>(), f * std::cos(15.0 / 4), 1e-6);
  EXPECT_NEAR(past[0][0][1][0].item<double>(), f * std::cos(16.0 / 4), 1e-6);
  // Row 0 at 14, 15 (short), row 1 at 15, 16 (long).
  auto rows = rope->forward(x, torch::tensor({14, 15, 15, 16}).view({2, 2}));
  EXPECT_NEAR(rows[0][0][1][0].item<double>(), f * std::cos(15.0), 1e-6);
  EXPECT_NEAR(rows[1][0][0][0].item<double>(), f * std::cos(15.0 / 4), 1e-6);
  // A bound known on the host instead of the positions read back (a mask's count): the same
  // rotation, every row still by its own positions, with a bound past the trained context while
  // no row is (rows of 14, 15), or with one row past it.
  for (const auto& ids : {torch::tensor({14, 15, 13, 14}).view({2, 2}), torch::tensor({14, 15, 15, 16}).view({2, 2})}) {
    for (int64_t below : {17, 40}) {
      EXPECT_EQ(max_abs_diff(rope->forward(x, RopePositions(ids, below)), rope->forward(x, ids)), 0.0) << below;
    }
  }
  longrope.short_factor = {1.0};
  EXPECT_EQ(testing::error_of([&] { RotaryEmbedding(RotaryEmbeddingOptions(4).scaling(longrope)); }),
            "rope: rope_short_factor and rope_long_factor must be lists of one number per rotated pair, of the same "
            "length (got 1 and 2)");
}

TEST(RotaryEmbedding, RejectsInconsistentScaling) {
  auto bad = llama3(8, 8192);
  bad.high_freq_factor = 1.0;
  EXPECT_EQ(testing::error_of([&] { RotaryEmbedding(RotaryEmbeddingOptions(8).scaling(bad)); }),
            "rope: rope_high_freq_factor (1) must exceed rope_low_freq_factor (1)");
  RopeScaling stray;
  stray.factor = 4.0;  // with kind none
  EXPECT_EQ(testing::error_of([&] { rope_inverse_frequencies(RotaryEmbeddingOptions(8).scaling(stray)); }),
            "rope: rope_scaling_factor (4) applies to rope_scaling linear, llama3, yarn or longrope, not none");
}

}  // namespace
}  // namespace zoo
