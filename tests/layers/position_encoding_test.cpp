#include "layers/position_encoding.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "test_util.h"

namespace zoo {
namespace {

using testing::max_abs_diff;

PositionEncoding make(PositionKind kind) {
  return PositionEncoding(PositionEncodingOptions(kind, 8, 2, 16));
}

TEST(PositionEncoding, EachKindContributesItsOwnTerm) {
  auto ids = torch::arange(5).unsqueeze(0);
  auto learned = make(PositionKind::kLearned);
  EXPECT_LE(max_abs_diff(learned->embedding(ids, torch::kFloat)[0], learned->learned->embedding->weight.narrow(0, 0, 5)), 0.0);
  EXPECT_FALSE(learned->attention_bias(5, 5, 0, 0, torch::kCPU, torch::kFloat).defined());

  auto sinusoidal = make(PositionKind::kSinusoidal);
  EXPECT_TRUE(sinusoidal->parameters().empty());
  EXPECT_NEAR(sinusoidal->embedding(ids, torch::kDouble)[0][1][0].item<double>(), std::sin(1.0), 1e-6);

  auto alibi = make(PositionKind::kAlibi);
  EXPECT_FALSE(alibi->embedding(ids, torch::kFloat).defined());
  auto bias = alibi->attention_bias(1, 3, 2, 0, torch::kCPU, torch::kDouble);
  EXPECT_EQ(bias.scalar_type(), torch::kDouble);
  EXPECT_LE(max_abs_diff(bias[0][0][0], torch::tensor({-2.0, -1.0, 0.0}) / 16.0), 1e-7);

  auto relative = make(PositionKind::kRelative);
  EXPECT_EQ(relative->attention_bias(3, 4, 0, 0, torch::kCPU, torch::kFloat).sizes(), (std::vector<int64_t>{1, 2, 3, 4}));

  for (auto kind : {PositionKind::kRope, PositionKind::kNone}) {
    auto none = make(kind);
    EXPECT_TRUE(none->parameters().empty());
    EXPECT_FALSE(none->embedding(ids, torch::kFloat).defined());
    EXPECT_FALSE(none->attention_bias(5, 5, 0, 0, torch::kCPU, torch::kFloat).defined());
  }
}

}  // namespace
}  // namespace zoo
