#include "kernels/linformer_attention.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "kernels/math_attention.h"
#include "test_util.h"

namespace zoo {
namespace {

using testing::max_abs_diff;

// The fused path against the paper's formula head by head, in float64: projections per key head
// and shared, grouped query heads, a sequence shorter than the projections' n (their first T
// columns), padded tokens; and the gradients of q, k, v, E and F.
TEST(LinformerAttention, EqualsThePapersFormulaHeadByHeadWithItsGradients) {
  torch::manual_seed(3);
  const int64_t b = 2, h = 4, hkv = 2, t = 7, d = 8, rows = 5, n = 10;
  for (const int64_t shared : {1, 2}) {
    SCOPED_TRACE(shared);
    const auto opts = torch::TensorOptions(torch::kDouble).requires_grad(true);
    auto q = torch::randn({b, h, t, d}, opts), k = torch::randn({b, hkv, t, d}, opts);
    auto v = torch::randn({b, hkv, t, d}, opts);
    auto e = torch::randn({shared, rows, n}, opts), f = torch::randn({shared, rows, n}, opts);
    auto mask = torch::ones({b, t}, torch::kLong);
    mask[1].narrow(0, 5, 2).zero_();
    const auto fast = linformer_attention(q, k, v, e, f, mask, 0.35, 0.0);
    const auto plain = linformer_attention_reference(q, k, v, e, f, mask, 0.35);
    EXPECT_EQ(fast.sizes(), q.sizes());
    EXPECT_LE(max_abs_diff(fast, plain), 1e-10);
    const auto upstream = torch::randn_like(fast);
    const auto fast_grads = torch::autograd::grad({fast}, {q, k, v, e, f}, {upstream});
    const auto plain_grads = torch::autograd::grad({plain}, {q, k, v, e, f}, {upstream});
    for (size_t i = 0; i < fast_grads.size(); ++i) EXPECT_LE(max_abs_diff(fast_grads[i], plain_grads[i]), 1e-9) << i;
    // A padded token changes nothing: its key and value are zeroed before the projection.
    auto k2 = k.detach().clone(), v2 = v.detach().clone();
    k2[1].narrow(1, 5, 2).normal_(), v2[1].narrow(1, 5, 2).normal_();
    EXPECT_LE(max_abs_diff(linformer_attention(q, k2, v2, e, f, mask, 0.35, 0.0), fast), 1e-12);
  }
}

// k = T with identity projections is full attention (the paper's limit), with grouped heads;
// float32 through the fused kernel.
TEST(LinformerAttention, IdentityProjectionsOfTRowsAreFullAttention) {
  torch::manual_seed(4);
  const int64_t b = 2, h = 4, hkv = 1, t = 9, d = 16;
  const auto q = torch::randn({b, h, t, d}), k = torch::randn({b, hkv, t, d}), v = torch::randn({b, hkv, t, d});
  const auto identity = torch::eye(t).unsqueeze(0);
  const auto out = linformer_attention(q, k, v, identity, identity, {}, 0.25, 0.0);
  const auto [full, weights] = math_attention(q, k, v, {}, 0.25, 0.0);
  EXPECT_LE(max_abs_diff(out, full), 1e-5);
}

TEST(LinformerAttention, ImpossibleShapesAreNamed) {
  const auto q = torch::randn({1, 2, 6, 4}), k = torch::randn({1, 2, 6, 4});
  const auto short_e = torch::randn({1, 3, 5});  // n = 5 < T = 6
  EXPECT_THROW(linformer_attention(q, k, k, short_e, short_e, {}, 1.0, 0.0), c10::Error);
  const auto three = torch::randn({3, 3, 8});  // 3 projections for 2 key heads
  EXPECT_THROW(linformer_attention(q, k, k, three, three, {}, 1.0, 0.0), c10::Error);
  const auto e = torch::randn({1, 3, 8});
  EXPECT_THROW(linformer_attention(q, k, k, e, e, torch::ones({1, 5}), 1.0, 0.0), c10::Error);
  try {
    linformer_attention(q, k, k, short_e, short_e, {}, 1.0, 0.0);
  } catch (const c10::Error& error) {
    EXPECT_NE(std::string(error.what_without_backtrace()).find("n >= 6"), std::string::npos);
  }
}

}  // namespace
}  // namespace zoo
