#include "layers/norm.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "test_util.h"

namespace zoo {
namespace {

using testing::max_abs_diff;

TEST(Norm, LayerNormMatchesLibTorch) {
  torch::nn::LayerNorm reference(torch::nn::LayerNormOptions({12}).eps(1e-12));
  Norm norm(NormOptions(12).eps(1e-12));
  {
    torch::NoGradGuard no_grad;
    reference->weight.normal_();
    reference->bias.normal_();
    norm->weight.copy_(reference->weight);
    norm->bias.copy_(reference->bias);
  }
  auto x = torch::randn({3, 5, 12});
  EXPECT_LE(max_abs_diff(norm->forward(x), reference->forward(x)), 1e-5);
}

TEST(Norm, LayerNormWithoutBiasHasOnlyAWeight) {
  Norm norm(NormOptions(6).bias(false));
  EXPECT_EQ(norm->parameters().size(), 1u);
  auto x = torch::randn({4, 6});
  auto centred = x - x.mean(-1, true);
  auto expected = centred / torch::sqrt(centred.pow(2).mean(-1, true) + 1e-5);
  EXPECT_LE(max_abs_diff(norm->forward(x), expected), 1e-5);
}

TEST(Norm, RmsNormByHand) {
  // x = [3, 4]: mean square 12.5, so y = x / sqrt(12.5 + eps) * weight.
  Norm norm(NormOptions(2).kind(NormKind::kRMSNorm).eps(1e-6));
  EXPECT_EQ(norm->parameters().size(), 1u);  // no bias by definition
  {
    torch::NoGradGuard no_grad;
    norm->weight.copy_(torch::tensor({2.0, 0.5}));
  }
  auto y = norm->forward(torch::tensor({{3.0f, 4.0f}}));
  const double r = std::sqrt(12.5 + 1e-6);
  EXPECT_LE(max_abs_diff(y, torch::tensor({{2.0 * 3.0 / r, 0.5 * 4.0 / r}})), 1e-6);
}

TEST(Norm, RmsNormPlusOneScalesByOnePlusItsWeightInFloat32) {
  // Gemma's: y = x / sqrt(12.5 + eps) * (1 + weight), the weight starting at 0 (y = x / rms).
  Norm norm(NormOptions(2).kind(NormKind::kRMSNormPlusOne).eps(1e-6));
  EXPECT_EQ(norm->parameters().size(), 1u);
  EXPECT_TRUE(norm->weight.eq(0).all().item<bool>());
  const double r = std::sqrt(12.5 + 1e-6);
  EXPECT_LE(max_abs_diff(norm->forward(torch::tensor({{3.0f, 4.0f}})), torch::tensor({{3.0 / r, 4.0 / r}})), 1e-6);
  {
    torch::NoGradGuard no_grad;
    norm->weight.copy_(torch::tensor({1.0, -0.5}));
  }
  EXPECT_LE(max_abs_diff(norm->forward(torch::tensor({{3.0f, 4.0f}})), torch::tensor({{2.0 * 3.0 / r, 0.5 * 4.0 / r}})),
            1e-6);
  // bf16: the product in float32, rounded once (LLaMA's RMSNorm rounds before the weight).
  norm->to(torch::kBFloat16);
  const auto x = torch::randn({3, 2}).to(torch::kBFloat16);
  const auto xf = x.to(torch::kFloat);
  const auto once = (xf * torch::rsqrt(xf.pow(2).mean(-1, true) + 1e-6) * torch::tensor({2.0f, 0.5f})).to(torch::kBFloat16);
  EXPECT_TRUE(torch::equal(norm->forward(x), once));
  norm->reset_parameters();
  EXPECT_TRUE(norm->weight.eq(0).all().item<bool>());
}

TEST(Norm, RmsNormInHalfPrecisionDoesNotOverflow) {
  Norm norm(NormOptions(4).kind(NormKind::kRMSNorm));
  norm->to(torch::kHalf);
  auto x = torch::full({1, 4}, 1000.0, torch::kHalf);  // 1000^2 overflows float16
  auto y = norm->forward(x);
  EXPECT_EQ(y.scalar_type(), torch::kHalf);
  EXPECT_LE(max_abs_diff(y.to(torch::kFloat), torch::ones({1, 4})), 1e-3);
}

TEST(Norm, RmsNormGradientMatchesFiniteDifferences) {
  Norm norm(NormOptions(5).kind(NormKind::kRMSNorm));
  norm->to(torch::kDouble);
  {
    torch::NoGradGuard no_grad;
    norm->weight.uniform_(0.5, 1.5);
  }
  auto x = torch::randn({3, 5}, torch::kDouble).requires_grad_();
  auto weights = torch::randn({3, 5}, torch::kDouble);
  auto loss = [&] { return (norm->forward(x) * weights).sum(); };
  loss().backward();
  torch::NoGradGuard no_grad;
  const double eps = 1e-6;
  for (auto* t : {&x, &norm->weight}) {
    auto flat = t->view(-1);
    for (int64_t i = 0; i < flat.numel(); ++i) {
      double old = flat[i].item<double>();
      flat[i] = old + eps;
      double up = loss().item<double>();
      flat[i] = old - eps;
      double down = loss().item<double>();
      flat[i] = old;
      EXPECT_NEAR(t->grad().view(-1)[i].item<double>(), (up - down) / (2 * eps), 1e-7) << i;
    }
  }
}

TEST(Norm, BadOptionsAndShapes) {
  EXPECT_THROW(Norm(NormOptions(0)), std::invalid_argument);
  EXPECT_THROW(Norm(NormOptions(4).eps(0.0)), std::invalid_argument);
  Norm norm{NormOptions(4)};
  EXPECT_THROW(norm->forward(torch::randn({2, 5})), c10::Error);
}

}  // namespace
}  // namespace zoo
