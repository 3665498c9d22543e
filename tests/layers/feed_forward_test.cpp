#include "layers/feed_forward.h"

#include <cmath>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "test_util.h"

namespace zoo {
namespace {

using testing::max_abs_diff;

TEST(FeedForward, ActivationsMatchTheirFormulas) {
  auto x = torch::linspace(-4, 4, 33, torch::kDouble);
  auto erf_gelu = 0.5 * x * (1 + torch::erf(x / std::sqrt(2.0)));
  auto tanh_gelu = 0.5 * x * (1 + torch::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x.pow(3))));
  EXPECT_LE(max_abs_diff(activate(x, Activation::kReLU), x.clamp_min(0)), 0.0);
  EXPECT_LE(max_abs_diff(activate(x, Activation::kGELU), erf_gelu), 1e-12);
  EXPECT_LE(max_abs_diff(activate(x, Activation::kGELUTanh), tanh_gelu), 1e-12);
  EXPECT_LE(max_abs_diff(activate(x, Activation::kSiLU), x * torch::sigmoid(x)), 1e-12);
  // The two GELUs differ, so a mix-up would show.
  EXPECT_GT(max_abs_diff(erf_gelu, tanh_gelu), 1e-5);
}

TEST(FeedForward, PlainIsDownOfActOfUp) {
  FeedForward ff(FeedForwardOptions(8, 32).activation(Activation::kReLU));
  EXPECT_FALSE(ff->gate);
  auto x = torch::randn({2, 3, 8});
  auto expected = torch::matmul(torch::relu(torch::matmul(x, ff->up->weight.t()) + ff->up->bias),
                                ff->down->weight.t()) +
                  ff->down->bias;
  EXPECT_LE(max_abs_diff(ff->forward(x), expected), 1e-5);
}

TEST(FeedForward, GatedVariantsMultiplyTheGate) {
  for (auto act : {Activation::kSwiGLU, Activation::kGeGLU, Activation::kGeGLUTanh}) {
    FeedForward ff(FeedForwardOptions(8, 16).activation(act).bias(false));
    ASSERT_TRUE(ff->gate);
    EXPECT_EQ(ff->parameters().size(), 3u);  // gate, up, down; no biases
    auto x = torch::randn({4, 8});
    auto g = torch::matmul(x, ff->gate->weight.t());
    torch::Tensor a = act == Activation::kSwiGLU ? g * torch::sigmoid(g)
                      : act == Activation::kGeGLU ? 0.5 * g * (1 + torch::erf(g / std::sqrt(2.0)))
                                                  : torch::gelu(g, "tanh");
    auto expected = torch::matmul(a * torch::matmul(x, ff->up->weight.t()), ff->down->weight.t());
    EXPECT_LE(max_abs_diff(ff->forward(x), expected), 1e-5) << to_string(act);
  }
}

TEST(FeedForward, ParameterCountFollowsTheShape) {
  auto count = [](const FeedForward& ff) {
    int64_t n = 0;
    for (const auto& p : ff->parameters()) n += p.numel();
    return n;
  };
  // GPT-2 small's MLP: 768 -> 3072 -> 768 with biases.
  EXPECT_EQ(count(FeedForward(FeedForwardOptions(768, 3072))), 768 * 3072 * 2 + 3072 + 768);
  // LLaMA-style SwiGLU without biases: three matrices.
  EXPECT_EQ(count(FeedForward(FeedForwardOptions(64, 172).activation(Activation::kSwiGLU).bias(false))),
            3 * 64 * 172);
}

TEST(FeedForward, BadOptions) {
  EXPECT_THROW(FeedForward(FeedForwardOptions(8, 0)), std::invalid_argument);
  EXPECT_THROW(FeedForward(FeedForwardOptions(8, 16).dropout(1.0)), std::invalid_argument);
}

}  // namespace
}  // namespace zoo
