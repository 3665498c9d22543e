#include "kernels/longformer_attention.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "test_util.h"

namespace zoo {
namespace {

using testing::max_abs_diff;

struct Heads {
  std::vector<torch::Tensor> all;  // q, k, v, global q, k, v
};

Heads random_heads(int64_t b, int64_t h, int64_t t, int64_t d, torch::Dtype dtype) {
  Heads heads;
  for (int i = 0; i < 6; ++i) heads.all.push_back(torch::randn({b, h, t, d}, torch::TensorOptions(dtype)).requires_grad_(true));
  return heads;
}

torch::Tensor run(const Heads& x, const LongformerAttentionOptions& o, bool reference) {
  const auto& a = x.all;
  return reference ? longformer_attention_reference(a[0], a[1], a[2], a[3], a[4], a[5], o)
                   : longformer_attention(a[0], a[1], a[2], a[3], a[4], a[5], o);
}

// The tiled path (float32) against the explicit (T, T) path in float64: an odd length, dilations
// 1, 2 and 3 among the heads, global tokens at the start and scattered (a different number per
// row), right padding, a window past the sequence; outputs and the gradients of all six inputs.
TEST(LongformerAttention, EqualsTheExplicitMaskWithItsGradients) {
  torch::manual_seed(5);
  const int64_t b = 2, h = 4, t = 37, d = 8;
  auto global = torch::zeros({b, t}, torch::kBool), tokens = torch::ones({b, t}, torch::kBool);
  global[0][0] = global[0][17] = global[0][30] = true;
  global[1][5] = global[1][33] = true;  // 33: a padded token marked global is no key
  tokens[1].narrow(0, 31, 6).fill_(false);
  struct Case {
    int64_t window;
    std::vector<int64_t> dilation;
    bool globals;
  };
  for (const auto& c : {Case{3, {}, true}, Case{3, {1, 1, 2, 3}, true}, Case{2, {2, 2, 2, 2}, false},
                        Case{0, {}, true}, Case{40, {1, 3, 1, 3}, true}}) {
    SCOPED_TRACE(c.window);
    SCOPED_TRACE(c.dilation.size());
    const auto x = random_heads(b, h, t, d, torch::kFloat);
    Heads wide;
    for (const auto& a : x.all) wide.all.push_back(a.detach().to(torch::kDouble).requires_grad_(true));
    LongformerAttentionOptions o(c.window);
    o.dilation(c.dilation).token_mask(tokens).global_mask(c.globals ? global : torch::Tensor());
    const auto fast = run(x, o, false);
    const auto plain = run(wide, o, true);
    EXPECT_EQ(fast.sizes(), x.all[0].sizes());
    EXPECT_LE(max_abs_diff(fast.to(torch::kDouble), plain), 2e-6);
    const auto upstream = torch::randn_like(plain);
    const auto fast_grads = torch::autograd::grad({fast}, x.all, {upstream.to(torch::kFloat)}, /*retain_graph=*/{},
                                                  /*create_graph=*/false, /*allow_unused=*/true);
    const auto plain_grads = torch::autograd::grad({plain}, wide.all, {upstream}, /*retain_graph=*/{},
                                                   /*create_graph=*/false, /*allow_unused=*/true);
    for (size_t i = 0; i < fast_grads.size(); ++i) {
      // Without global tokens the global projections are unused (the reference: zero gradients).
      const auto want = plain_grads[i].defined() ? plain_grads[i] : torch::zeros_like(wide.all[i]);
      const auto got = fast_grads[i].defined() ? fast_grads[i].to(torch::kDouble) : torch::zeros_like(want);
      EXPECT_LE(max_abs_diff(got, want), 2e-5) << "input " << i;
    }
  }
}

// The window counts each global key once and the global rows see every real token: with the
// window covering everything, no dilation and the global projections equal to the local ones,
// every row is full attention over the real keys.
TEST(LongformerAttention, AWindowOverEverythingIsFullAttention) {
  torch::manual_seed(6);
  const int64_t b = 2, h = 2, t = 11, d = 4;
  const auto q = torch::randn({b, h, t, d}), k = torch::randn({b, h, t, d}), v = torch::randn({b, h, t, d});
  auto global = torch::zeros({b, t}, torch::kBool), tokens = torch::ones({b, t}, torch::kBool);
  global[0][3] = global[1][0] = global[1][1] = true;
  tokens[1].narrow(0, 8, 3).fill_(false);
  LongformerAttentionOptions o(t);
  o.global_mask(global).token_mask(tokens);
  const auto out = longformer_attention(q, k, v, q, k, v, o);
  const auto key_mask = tokens.view({b, 1, 1, t});
  const auto scores = (torch::matmul(q, k.transpose(2, 3)) / 2.0).masked_fill(key_mask.logical_not(), -1e30);
  const auto full = torch::matmul(torch::softmax(scores, -1), v) * tokens.view({b, 1, t, 1});
  EXPECT_LE(max_abs_diff(out, full), 1e-5);
}

// With dropout the backward is the forward's: a central difference along a random direction,
// the masks redrawn from the same seed, equals the gradient's projection on it.
TEST(LongformerAttention, DropoutsBackwardIsTheDerivativeOfItsForward) {
  const int64_t b = 1, h = 2, t = 19, d = 4;
  torch::manual_seed(7);
  const auto x = random_heads(b, h, t, d, torch::kFloat);
  std::vector<torch::Tensor> direction;
  for (const auto& a : x.all) direction.push_back(torch::randn_like(a));
  auto global = torch::zeros({b, t}, torch::kBool);
  global[0][2] = global[0][11] = true;
  LongformerAttentionOptions o(2);
  o.dilation({1, 2}).global_mask(global).dropout(0.3);
  const auto upstream = torch::randn({b, h, t, d});
  const auto loss_at = [&](double step) {
    torch::NoGradGuard no_grad;
    Heads moved;
    for (size_t i = 0; i < x.all.size(); ++i) moved.all.push_back(x.all[i].detach() + step * direction[i]);
    torch::manual_seed(8);
    return (run(moved, o, false) * upstream).sum().item<double>();
  };
  torch::manual_seed(8);
  const auto out = run(x, o, false);
  const auto grads = torch::autograd::grad({(out * upstream).sum()}, x.all);
  double projected = 0;
  for (size_t i = 0; i < grads.size(); ++i) projected += (grads[i] * direction[i]).sum().item<double>();
  const double step = 1e-2;
  const double difference = (loss_at(step) - loss_at(-step)) / (2 * step);
  EXPECT_NEAR(difference, projected, 2e-3 * std::max(1.0, std::abs(projected)));
  // Dropout did apply: the output differs from the one without it.
  torch::manual_seed(8);
  EXPECT_GT(max_abs_diff(out, run(x, LongformerAttentionOptions(o).dropout(0.0), false)), 1e-3);
}

// bfloat16 inputs take the same path (the tiled kernel's bf16 tiles, the global blocks in float32)
// and follow float32 to bf16's rounding, gradients included.
TEST(LongformerAttention, Bfloat16FollowsFloat32) {
  torch::manual_seed(9);
  const int64_t b = 2, h = 2, t = 23, d = 8;
  const auto x = random_heads(b, h, t, d, torch::kFloat);
  Heads half;
  for (const auto& a : x.all) half.all.push_back(a.detach().to(torch::kBFloat16).requires_grad_(true));
  auto global = torch::zeros({b, t}, torch::kBool);
  global[0][4] = global[1][0] = global[1][20] = true;
  LongformerAttentionOptions o(3);
  o.dilation({1, 2}).global_mask(global);
  const auto full = run(x, o, false), low = run(half, o, false);
  EXPECT_EQ(low.scalar_type(), torch::kBFloat16);
  EXPECT_LE(max_abs_diff(low.to(torch::kFloat), full), 3e-2);
  const auto upstream = torch::randn_like(full);
  const auto grads = torch::autograd::grad({full}, x.all, {upstream});
  const auto low_grads = torch::autograd::grad({low}, half.all, {upstream.to(torch::kBFloat16)});
  for (size_t i = 0; i < grads.size(); ++i) {
    EXPECT_LE(max_abs_diff(low_grads[i].to(torch::kFloat), grads[i]), 5e-2 * std::max(1.0, grads[i].abs().max().item<double>()))
        << "input " << i;
  }
}

TEST(LongformerAttention, ImpossibleShapesAreNamed) {
  const auto q = torch::randn({1, 2, 6, 4});
  const auto error = [&](const torch::Tensor& k, const LongformerAttentionOptions& o) {
    return testing::error_of([&] { longformer_attention(q, k, k, q, k, k, o); });
  };
  EXPECT_NE(error(torch::randn({1, 1, 6, 4}), LongformerAttentionOptions(2)).find("must have q's shape"),
            std::string::npos);
  EXPECT_NE(error(q, LongformerAttentionOptions(2).dilation({1, 2, 3})).find("one dilation per head (2), got 3"),
            std::string::npos);
  EXPECT_NE(error(q, LongformerAttentionOptions(2).dilation({1, 0})).find("dilations must be >= 1"), std::string::npos);
  EXPECT_NE(error(q, LongformerAttentionOptions(2).global_mask(torch::ones({1, 5}))).find("must be (1, 6)"),
            std::string::npos);
  EXPECT_NE(error(q, LongformerAttentionOptions(-1)).find("window must be >= 0"), std::string::npos);
}

}  // namespace
}  // namespace zoo
