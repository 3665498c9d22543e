#include "layers/position_bias.h"

#include <cmath>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "test_util.h"

namespace zoo {
namespace {

using testing::max_abs_diff;

TEST(AlibiBias, EightHeadSlopesArePowersOfOneHalf) {
  auto slopes = alibi_slopes(8);
  ASSERT_EQ(slopes.size(), 8u);
  for (int i = 0; i < 8; ++i) EXPECT_NEAR(slopes[i], 1.0 / std::pow(2.0, i + 1), 1e-12) << i;
}

TEST(AlibiBias, TwelveHeadsFollowPressRuleForNonPowersOfTwo) {
  // The 8-head slopes 2^-1 .. 2^-8, then every other slope of 16 heads (2^-0.5, 2^-1.5, ...).
  std::vector<double> expected;
  for (int i = 1; i <= 8; ++i) expected.push_back(std::pow(2.0, -i));
  for (double e : {0.5, 1.5, 2.5, 3.5}) expected.push_back(std::pow(2.0, -e));
  auto slopes = alibi_slopes(12);
  ASSERT_EQ(slopes.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_NEAR(slopes[i], expected[i], 1e-12) << i;
}

TEST(AlibiBias, BiasIsMinusSlopeTimesDistance) {
  AlibiBias alibi{AlibiBiasOptions(2)};  // slopes 1/16... for 2 heads: 2^-4, 2^-8
  auto bias = alibi->forward(2, 4, /*q_start=*/2, /*k_start=*/0);
  ASSERT_EQ(bias.sizes(), (std::vector<int64_t>{1, 2, 2, 4}));
  // Head 0, query at position 3, keys 0..3: distances 3, 2, 1, 0.
  EXPECT_LE(max_abs_diff(bias[0][0][1], torch::tensor({-3.0, -2.0, -1.0, 0.0}) / 16.0), 1e-7);
  EXPECT_NEAR(bias[0][1][0][0].item<double>(), -2.0 / 256.0, 1e-9);
  EXPECT_THROW(alibi_slopes(0), std::invalid_argument);
}

int64_t bucket(int64_t relative, bool bidirectional, int64_t buckets = 32, int64_t distance = 128) {
  return relative_position_bucket(torch::tensor({relative}, torch::kLong), bidirectional, buckets,
                                  distance)
      .item<int64_t>();
}

TEST(RelativePositionBias, BidirectionalBucketsByHand) {
  // 32 buckets: 16 per direction, the first 8 exact, then log-spaced up to distance 128.
  // Keys before the query (negative) use buckets 0..15, keys after use 16..31.
  EXPECT_EQ(bucket(0, true), 0);
  EXPECT_EQ(bucket(-1, true), 1);
  EXPECT_EQ(bucket(1, true), 17);
  EXPECT_EQ(bucket(-7, true), 7);
  EXPECT_EQ(bucket(-8, true), 8);    // 8 + floor(log(8/8) / log(16) * 8) = 8
  EXPECT_EQ(bucket(-20, true), 10);  // 8 + floor(log(2.5) / log(16) * 8) = 8 + 2
  EXPECT_EQ(bucket(20, true), 26);
  EXPECT_EQ(bucket(-127, true), 15);  // 8 + floor(7.977)
  EXPECT_EQ(bucket(-128, true), 15);  // beyond max_distance: the last bucket
  EXPECT_EQ(bucket(-1000, true), 15);
  EXPECT_EQ(bucket(1000, true), 31);
}

TEST(RelativePositionBias, CausalBucketsByHand) {
  // 32 buckets looking back only: the first 16 exact; future keys all share bucket 0.
  EXPECT_EQ(bucket(5, false), 0);
  EXPECT_EQ(bucket(-5, false), 5);
  EXPECT_EQ(bucket(-15, false), 15);
  EXPECT_EQ(bucket(-16, false), 16);  // 16 + floor(log(1) / log(8) * 16)
  EXPECT_EQ(bucket(-40, false), 23);  // 16 + floor(log(2.5) / log(8) * 16) = 16 + 7
  EXPECT_EQ(bucket(-500, false), 31);
}

TEST(RelativePositionBias, LooksUpOneLearnedScalarPerHeadAndBucket) {
  RelativePositionBias rel{RelativePositionBiasOptions(3)};
  auto bias = rel->forward(2, 3, 0, 0);
  ASSERT_EQ(bias.sizes(), (std::vector<int64_t>{1, 3, 2, 3}));
  auto table = rel->relative_attention_bias->weight;  // (buckets, heads)
  // Query 1, key 0: relative -1, bucket 1. Query 0, key 2: relative +2, bucket 18.
  EXPECT_LE(max_abs_diff(bias[0].select(1, 1).select(1, 0), table[1]), 0.0);
  EXPECT_LE(max_abs_diff(bias[0].select(1, 0).select(1, 2), table[18]), 0.0);
}

TEST(RelativePositionBias, BackwardReachesTheUsedBuckets) {
  RelativePositionBias rel{RelativePositionBiasOptions(2).bidirectional(false)};
  (rel->forward(4, 4) * torch::randn({1, 2, 4, 4})).sum().backward();
  auto grad = rel->relative_attention_bias->weight.grad();
  EXPECT_TRUE(torch::isfinite(grad).all().item<bool>());
  // Causal distances 0..3 use buckets 0..3 (future keys fall in bucket 0 too); no others.
  EXPECT_GT(grad.narrow(0, 0, 4).abs().min().item<double>(), 0.0);
  EXPECT_EQ(grad.narrow(0, 4, 28).abs().max().item<double>(), 0.0);
}

TEST(RelativePositionBias, BadOptionsAreRejected) {
  EXPECT_THROW(RelativePositionBias(RelativePositionBiasOptions(4).num_buckets(7)),
               std::invalid_argument);
  EXPECT_THROW(RelativePositionBias(RelativePositionBiasOptions(4).max_distance(4)),
               std::invalid_argument);
  EXPECT_THROW(RelativePositionBias(RelativePositionBiasOptions(0)), std::invalid_argument);
}

}  // namespace
}  // namespace zoo
