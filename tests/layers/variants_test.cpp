#include "layers/variants.h"

#include <gtest/gtest.h>

namespace zoo {
namespace {

TEST(Variants, RoundTripEverySpelling) {
  for (const auto& name : enum_names<Activation>()) EXPECT_EQ(to_string(from_string<Activation>(name)), name);
  for (const auto& name : enum_names<PositionKind>()) EXPECT_EQ(to_string(from_string<PositionKind>(name)), name);
  EXPECT_EQ(from_string<NormKind>("rmsnorm"), NormKind::kRMSNorm);
  EXPECT_EQ(from_string<NormPosition>("post"), NormPosition::kPost);
  EXPECT_EQ(from_string<RopeLayout>("interleaved"), RopeLayout::kInterleaved);
  EXPECT_EQ(from_string<AttentionBackend>("math"), AttentionBackend::kMath);
  EXPECT_EQ(from_string<AttentionBackend>("auto"), AttentionBackend::kAuto);
  EXPECT_EQ(from_string<AttentionBackend>("tiled"), AttentionBackend::kTiled);
}

TEST(Variants, UnknownNameListsTheAcceptedOnes) {
  try {
    from_string<Activation>("gelu_new");
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "unknown activation 'gelu_new' (expected one of: relu, gelu, gelu_tanh, silu, "
                 "swiglu, geglu, geglu_tanh)");
  }
  EXPECT_THROW(from_string<NormKind>("batchnorm"), std::invalid_argument);
}

TEST(Variants, GatedActivations) {
  EXPECT_TRUE(is_gated(Activation::kSwiGLU));
  EXPECT_TRUE(is_gated(Activation::kGeGLUTanh));
  EXPECT_FALSE(is_gated(Activation::kGELU));
}

}  // namespace
}  // namespace zoo
