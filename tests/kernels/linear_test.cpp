#include "kernels/linear.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "kernels/bf16_dot.h"
#include "test_util.h"

namespace zoo {
namespace {

using testing::max_abs_diff;

TEST(Project, MatchesTorchLinearForBatchesAndSingleVectors) {
  torch::nn::Linear reference(torch::nn::LinearOptions(37, 23));
  for (const auto& shape : std::vector<std::vector<int64_t>>{{5, 37}, {2, 3, 37}, {37}, {1, 1, 37}}) {
    auto x = torch::randn(shape);
    EXPECT_LE(max_abs_diff(project(reference, x), reference->forward(x)), 1e-5) << x.sizes();
  }
}

// A few rows against an output head over a vocabulary (a batch of decoding sequences) goes
// through the head in blocks of rows: the same products as LibTorch's linear, with and without a
// bias, with a ragged last block, and not where gradients are wanted.
TEST(Project, FewRowsThroughAWideMatrixInBlocks) {
  torch::NoGradGuard no_grad;
  const auto weight = torch::randn({20001, 48}), bias = torch::randn({20001});
  for (const auto& shape : std::vector<std::vector<int64_t>>{{2, 48}, {16, 1, 48}, {3, 5, 48}}) {
    const auto x = torch::randn(shape);
    EXPECT_LE(max_abs_diff(project(x, weight, bias), torch::nn::functional::linear(x, weight, bias)), 1e-4) << x.sizes();
    EXPECT_LE(max_abs_diff(project(x, weight), torch::nn::functional::linear(x, weight)), 1e-4) << x.sizes();
    EXPECT_EQ(project(x, weight).sizes(), torch::nn::functional::linear(x, weight).sizes());
  }
  torch::AutoGradMode grad(true);
  auto trained = weight.clone().requires_grad_();
  auto y = project(torch::randn({4, 48}), trained);
  y.sum().backward();
  EXPECT_TRUE(trained.grad().defined());
}

// A bf16 vector through bf16 weights (batch-1 decoding in bf16). With AVX-512 BF16, zoo's kernel:
// float32 sums of the bf16 products, rounded once to bf16 with the bias; float64's linear of the
// same values, rounded to bf16, is the reference: every output within one bf16 step of it, nearly
// all identical. Without it, LibTorch's bf16 linear, bit for bit (what PyTorch and transformers
// compute in bf16; it rounds the sum before adding the bias, so the one-step bound is not its).
TEST(Project, Bf16VectorSumsInFloat32AndRoundsOnceOrIsLibTorchsLinear) {
  torch::manual_seed(3);
  const bool own_kernel = fastest_bf16_dot_kernel() == Bf16DotKernel::kDotProductInstruction;
  ::testing::Test::RecordProperty("bf16_vector_path", own_kernel ? "zoo's vdpbf16ps kernel" : "LibTorch's linear");
  for (const int64_t in : {771, 768, 5}) {  // with and without a tail past the 16 lanes
    const int64_t out = 1000;
    auto weight = torch::randn({out, in}).to(torch::kBFloat16);
    auto bias = torch::randn({out}).to(torch::kBFloat16);
    auto x = torch::randn({1, 1, in}).to(torch::kBFloat16);
    torch::Tensor y;
    {
      torch::NoGradGuard no_grad;
      y = project(x, weight, bias);
    }
    ASSERT_EQ(y.scalar_type(), torch::kBFloat16);
    ASSERT_EQ(y.sizes(), (std::vector<int64_t>{1, 1, out}));
    if (!own_kernel) {
      torch::NoGradGuard no_grad;
      EXPECT_TRUE(y.equal(torch::nn::functional::linear(x, weight, bias))) << "in " << in;
      continue;
    }
    auto exact = torch::nn::functional::linear(x.to(torch::kDouble), weight.to(torch::kDouble), bias.to(torch::kDouble));
    auto rounded = exact.to(torch::kBFloat16);
    // One bf16 step at each output's magnitude: 2^-7 relative.
    auto step = exact.abs().clamp_min(1e-3) * (1.0 / 128);
    EXPECT_TRUE((y.to(torch::kDouble) - exact).abs().le(step).all().item<bool>()) << "in " << in;
    const double same = y.eq(rounded).to(torch::kDouble).mean().item<double>();
    EXPECT_GE(same, 0.97) << "in " << in;
  }
}

// Without bias, and where gradients are wanted the usual differentiable path is taken.
TEST(Project, Bf16KeepsGradientsWhereTheyAreWanted) {
  auto weight = torch::randn({8, 16}).to(torch::kBFloat16).requires_grad_();
  auto x = torch::randn({16}).to(torch::kBFloat16);
  auto y = project(x, weight);
  y.to(torch::kFloat).sum().backward();
  ASSERT_TRUE(weight.grad().defined());
  EXPECT_LE(max_abs_diff(weight.grad().to(torch::kFloat), x.to(torch::kFloat).expand({8, 16})), 0.0);
}

}  // namespace
}  // namespace zoo
