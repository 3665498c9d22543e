#include "kernels/linear.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "kernels/bf16_dot.h"
#include "kernels/f32_rows_dot.h"
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

// Without gradients, float32 goes through oneDNN's linear: against float64's linear of the same
// values for one row, a few rows (a decoding batch) through a head over a vocabulary, a batch of
// sequences, with and without a bias, through a weight that is a view of a larger one; with
// gradients, the differentiable path.
TEST(Project, Float32WithoutGradientsMatchesFloat64sLinear) {
  torch::manual_seed(5);
  torch::NoGradGuard no_grad;
  const auto weight = torch::randn({20001, 48}), bias = torch::randn({20001});
  const auto exact = [](const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b) {
    return torch::nn::functional::linear(x.to(torch::kDouble), w.to(torch::kDouble),
                                          b.defined() ? b.to(torch::kDouble) : b);
  };
  for (const auto& shape : std::vector<std::vector<int64_t>>{{48}, {1, 1, 48}, {2, 48}, {16, 1, 48}, {3, 5, 48}}) {
    const auto x = torch::randn(shape);
    const auto y = project(x, weight, bias);
    EXPECT_EQ(y.scalar_type(), torch::kFloat);
    EXPECT_EQ(y.sizes(), exact(x, weight, bias).sizes()) << x.sizes();
    EXPECT_LE(max_abs_diff(y, exact(x, weight, bias)), 1e-4) << x.sizes();
    EXPECT_LE(max_abs_diff(project(x, weight), exact(x, weight, torch::Tensor())), 1e-4) << x.sizes();
  }
  const auto rows = weight.narrow(0, 100, 300), columns = weight.narrow(1, 8, 32);  // views
  const auto x = torch::randn({4, 32});
  EXPECT_LE(max_abs_diff(project(x, columns, bias.narrow(0, 0, 20001)), exact(x, columns, bias)), 1e-4);
  EXPECT_LE(max_abs_diff(project(x.narrow(1, 0, 32), rows.narrow(1, 0, 32)),
                         exact(x, rows.narrow(1, 0, 32), torch::Tensor())), 1e-4);
  // Up to kFewRowsMax rows, each row's outputs are the bits it gets alone (batching changes no
  // decoded token); zoo's kernel needs AVX-512F, oneDNN makes no such promise.
  if (cpu_runs_f32_rows_dot()) {
    const auto batch = torch::randn({kFewRowsMax, 48});
    const auto together = project(batch, weight, bias);
    for (int64_t r = 0; r < kFewRowsMax; ++r) {
      EXPECT_TRUE(project(batch[r], weight, bias).equal(together[r])) << "row " << r;
    }
  }
  torch::AutoGradMode grad(true);
  auto trained = weight.clone().requires_grad_();
  auto out = project(torch::randn({4, 48}), trained);
  out.sum().backward();
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
