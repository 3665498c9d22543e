#include "layers/attention_bias.h"

#include <limits>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "layers/position_encoding.h"

namespace zoo {
namespace {

// What each path reads: the tiled path the terms' parameters and no tensor, the others one
// additive tensor, and LibTorch's kernel a plain causal mask of its own.
TEST(AttentionBias, EachPathGetsWhatItReads) {
  PositionEncoding alibi(PositionEncodingOptions(PositionKind::kAlibi, 16, 4, 64));
  const auto like = torch::zeros({2, 600, 16});
  auto keep = torch::ones({2, 600}, torch::kBool);
  keep[0].narrow(0, 0, 3).fill_(false);
  AttentionMasks masks{.queries = 600, .keys = 600, .causal = true, .key_padding_mask = keep,
                       .positions = alibi.get()};
  AttentionCall call;  // auto
  torch::NoGradGuard no_grad;
  auto tiled = build_attention_bias(call, masks, like);
  ASSERT_EQ(tiled.choice.path, AttentionPath::kTiled) << describe(tiled.choice);
  EXPECT_FALSE(tiled.additive.defined());
  EXPECT_TRUE(tiled.terms.causal());
  EXPECT_EQ(tiled.terms.position_bias(), TiledPositionBias::kAlibi);
  EXPECT_TRUE(torch::equal(tiled.terms.alibi_slopes(), alibi->alibi->slopes()));
  EXPECT_TRUE(torch::equal(tiled.terms.key_padding_mask(), keep));

  call.backend = AttentionBackend::kMath;
  auto math = build_attention_bias(call, masks, like);
  ASSERT_EQ(math.choice.path, AttentionPath::kMath);
  ASSERT_TRUE(math.additive.defined());
  // Query 5 of row 0: keys 0-2 padding, 6.. in the future; ALiBi's term on the others.
  const auto row = math.additive[0][0][5];
  const float low = std::numeric_limits<float>::lowest();
  EXPECT_EQ(row[1].item<float>(), low);
  EXPECT_EQ(row[6].item<float>(), low);
  EXPECT_FLOAT_EQ(row[4].item<float>(), alibi->attention_bias(600, 600, 0, 0, torch::kCPU, torch::kFloat)[0][0][5][4].item<float>());

  call.backend = AttentionBackend::kFused;
  masks.key_padding_mask = torch::Tensor(), masks.positions = nullptr;
  auto fused = build_attention_bias(call, masks, like);
  ASSERT_EQ(fused.choice.path, AttentionPath::kLibTorch);
  EXPECT_TRUE(fused.kernel_causal);
  EXPECT_FALSE(fused.additive.defined());
  call.grouped = true;  // folded query heads: the kernel's mask would misalign
  fused = build_attention_bias(call, masks, like);
  EXPECT_FALSE(fused.kernel_causal);
  EXPECT_TRUE(fused.additive.defined());
}

// A ring of one rank that is never asked to pass anything: building a bias exchanges nothing.
class IdleRing : public RingExchange {
 public:
  int64_t ranks() const override { return 1; }
  int64_t rank() const override { return 0; }
  std::function<void()> pass(const torch::Tensor&, const torch::Tensor&, int64_t) override {
    throw std::logic_error("building a bias passes nothing");
  }
};

TEST(AttentionBias, ARingTakesTheWholeSequencesPaddingAndNoTensor) {
  const auto like = torch::zeros({1, 4, 8});
  const auto keep = torch::ones({1, 8}, torch::kBool);
  AttentionMasks masks{.queries = 4, .keys = 4, .key_padding_mask = keep, .ring = std::make_shared<IdleRing>()};
  const auto bias = build_attention_bias(AttentionCall{}, masks, like);
  ASSERT_EQ(bias.choice.path, AttentionPath::kRing);
  EXPECT_EQ(bias.ring, masks.ring);
  EXPECT_EQ(bias.terms.key_padding_mask().size(1), 8);  // not narrowed to this rank's keys
  EXPECT_FALSE(bias.additive.defined());
}

TEST(AttentionBias, ShapesAreChecked) {
  AttentionMasks masks{.queries = 2, .keys = 5, .key_padding_mask = torch::ones({1, 3}, torch::kBool)};
  EXPECT_THROW(build_attention_bias(AttentionCall{}, masks, torch::zeros({1, 2, 8})), c10::Error);
}

}  // namespace
}  // namespace zoo
