#include "layers/masks.h"

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

}  // namespace
}  // namespace zoo
