#include "kernels/masks.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "test_util.h"

namespace zoo {
namespace {

TEST(Masks, CausalIsLowerTriangular) {
  auto m = causal_mask(4, 4);
  EXPECT_TRUE(m.equal(torch::ones({4, 4}, torch::kBool).tril()));
}

TEST(Masks, SlidingWindowIsABand) {
  // window 2: query i sees keys i-1 and i.
  auto m = causal_mask(4, 4, 0, 0, 2);
  auto expected = torch::tensor({{1, 0, 0, 0}, {1, 1, 0, 0}, {0, 1, 1, 0}, {0, 0, 1, 1}}).to(torch::kBool);
  EXPECT_TRUE(m.equal(expected));
}

TEST(Masks, TwoSidedWindowIsASymmetricBand) {
  // window 2 without causal: query i sees keys i-1, i and i+1 (ModernBERT's local_attention 2).
  auto m = band_mask(4, 4, 0, 0, 2);
  auto expected = torch::tensor({{1, 1, 0, 0}, {1, 1, 1, 0}, {0, 1, 1, 1}, {0, 0, 1, 1}}).to(torch::kBool);
  EXPECT_TRUE(m.equal(expected));
  // Offsets: query 3 against keys 0..5 with window 3 sees keys 1..5.
  EXPECT_TRUE(band_mask(1, 6, 3, 0, 3).equal(torch::tensor({{0, 1, 1, 1, 1, 1}}).to(torch::kBool)));
  EXPECT_THROW(band_mask(2, 2, 0, 0, 0), c10::Error);
}

TEST(Masks, OffsetsPlaceQueriesAfterCachedKeys) {
  // One new query at position 5 against kept keys 2..5 with window 3: sees 3, 4, 5.
  auto m = causal_mask(1, 4, 5, 2, 3);
  EXPECT_TRUE(m.equal(torch::tensor({{0, 1, 1, 1}}).to(torch::kBool)));
}

TEST(Masks, PaddingMaskBroadcastsOverHeadsAndQueries) {
  auto keep = torch::tensor({{1, 1, 0}, {0, 1, 1}});
  auto m = padding_mask(keep);
  EXPECT_EQ(m.sizes(), (std::vector<int64_t>{2, 1, 1, 3}));
  EXPECT_TRUE(m.view({2, 3}).equal(keep.to(torch::kBool)));
  EXPECT_THROW(padding_mask(torch::ones({3})), c10::Error);
}

TEST(Masks, BiasIsZeroOrLowestFinite) {
  auto bias = mask_to_bias(torch::tensor({1, 0}).to(torch::kBool), torch::kFloat);
  EXPECT_EQ(bias[0].item<float>(), 0.0f);
  EXPECT_EQ(bias[1].item<float>(), std::numeric_limits<float>::lowest());
  // A row with every key masked still softmaxes to finite numbers.
  auto row = torch::softmax(torch::randn({3}) + mask_to_bias(torch::zeros({3}, torch::kBool), torch::kFloat), 0);
  EXPECT_TRUE(torch::isfinite(row).all().item<bool>());
  EXPECT_TRUE(torch::isfinite(mask_to_bias(torch::zeros({2}, torch::kBool), torch::kHalf)).all().item<bool>());
}

TEST(Masks, BiasIsTheLowestFiniteOfEachDtype) {
  // -(2 - 2^-(mantissa bits)) * 2^(largest exponent)
  const std::vector<std::pair<torch::ScalarType, double>> lowest = {
      {torch::kFloat, -(2 - std::ldexp(1.0, -23)) * std::ldexp(1.0, 127)},
      {torch::kDouble, -std::numeric_limits<double>::max()},
      {torch::kHalf, -(2 - std::ldexp(1.0, -10)) * std::ldexp(1.0, 15)},
      {torch::kBFloat16, -(2 - std::ldexp(1.0, -7)) * std::ldexp(1.0, 127)}};
  for (const auto& [dtype, expected] : lowest) {
    auto bias = mask_to_bias(torch::tensor({1, 0}).to(torch::kBool), dtype);
    EXPECT_EQ(bias.scalar_type(), dtype);
    EXPECT_EQ(bias[0].item<double>(), 0.0) << dtype;
    EXPECT_EQ(bias[1].item<double>(), expected) << dtype;
  }
}

// One stack's bias by hand: causal with a window of 2, a padded key, a position term, and the
// last columns taken from longer masks.
TEST(Masks, StackBiasFoldsEveryMaskAndTermOnce) {
  AttentionBiasInputs in;
  in.queries = 3, in.keys = 3, in.causal = true, in.window = 2;
  in.key_padding_mask = torch::tensor({{1, 1, 1, 0}}).to(torch::kBool);  // 4 columns: the last 3 are used
  in.position_bias = torch::arange(12, torch::kFloat).view({1, 1, 3, 4});
  const auto bias = additive_attention_bias(in, torch::kFloat, torch::kCPU);
  ASSERT_FALSE(bias.kernel_causal);
  const float low = std::numeric_limits<float>::lowest();
  // allowed: query i sees keys i-1..i (window 2), and key 2 is padding.
  const auto expected = torch::tensor({{1.f, low, low}, {5.f, 6.f, low}, {low, 10.f, low}});
  EXPECT_TRUE(torch::equal(bias.additive.view({3, 3}), expected)) << bias.additive;
}

TEST(Masks, APlainCausalStackIsLeftToTheKernelWhereItCan) {
  AttentionBiasInputs in;
  in.queries = 4, in.keys = 4, in.causal = true;
  in.kernel_may_mask = true;
  auto bias = additive_attention_bias(in, torch::kFloat, torch::kCPU);
  EXPECT_TRUE(bias.kernel_causal);
  EXPECT_FALSE(bias.additive.defined());
  in.kernel_may_mask = false;  // grouped queries: the mask is built
  bias = additive_attention_bias(in, torch::kFloat, torch::kCPU);
  EXPECT_FALSE(bias.kernel_causal);
  EXPECT_TRUE(torch::equal(bias.additive.eq(0), causal_mask(4, 4)));
  in.kernel_may_mask = true, in.query_start = 2, in.keys = 6;  // queries after cached keys
  EXPECT_FALSE(additive_attention_bias(in, torch::kFloat, torch::kCPU).kernel_causal);
}

TEST(Masks, StackBiasShapesAreChecked) {
  AttentionBiasInputs in;
  in.queries = 2, in.keys = 5;
  in.key_padding_mask = torch::ones({1, 3}, torch::kBool);
  EXPECT_THROW(additive_attention_bias(in, torch::kFloat, torch::kCPU), c10::Error);
  in.key_padding_mask = torch::Tensor();
  in.position_bias = torch::zeros({1, 1, 3, 5});
  EXPECT_THROW(additive_attention_bias(in, torch::kFloat, torch::kCPU), c10::Error);
}

}  // namespace
}  // namespace zoo
