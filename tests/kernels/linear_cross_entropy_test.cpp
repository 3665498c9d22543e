#include "kernels/linear_cross_entropy.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "test_util.h"
#include "train/autocast.h"

namespace zoo {
namespace {

namespace F = torch::nn::functional;

// Against torch.nn.functional.cross_entropy on the whole logits, in float64: the loss and the
// gradients of the hidden states and the weight, with ignored rows, label smoothing, and chunks
// that do not divide the rows.
TEST(LinearCrossEntropy, EqualsCrossEntropyOfTheWholeLogits) {
  torch::manual_seed(0);
  for (double smoothing : {0.0, 0.1}) {
   for (double softcap : {0.0, 1.5}) {  // Gemma 2's final_logit_softcapping: cap * tanh(logit / cap)
    for (int64_t chunk : {0, 3, 64}) {
      auto hidden = torch::randn({10, 6}, torch::kDouble).requires_grad_();
      auto weight = torch::randn({13, 6}, torch::kDouble).requires_grad_();
      auto labels = torch::randint(13, {10}, torch::kLong);
      labels[2] = -100, labels[7] = -100;
      auto logits = torch::mm(hidden, weight.t());
      if (softcap > 0) logits = torch::tanh(logits / softcap) * softcap;
      const auto expected = F::cross_entropy(
          logits, labels,
          F::CrossEntropyFuncOptions().ignore_index(-100).label_smoothing(smoothing));
      expected.backward();
      const auto grad_hidden = hidden.grad().clone(), grad_weight = weight.grad().clone();
      hidden.mutable_grad() = torch::Tensor(), weight.mutable_grad() = torch::Tensor();
      const auto loss = linear_cross_entropy(hidden, weight, labels, smoothing, -100, chunk, softcap);
      (loss * 3.0).backward();  // backward scales by the incoming gradient
      EXPECT_NEAR(loss.item<double>(), expected.item<double>(), 1e-12) << smoothing << " " << chunk;
      EXPECT_ALLCLOSE(hidden.grad(), grad_hidden * 3.0, 1e-12);
      EXPECT_ALLCLOSE(weight.grad(), grad_weight * 3.0, 1e-12);
    }
   }
  }
}

// Under bf16 autocast the chunks multiply in bf16 as autocast's mm of the whole logits does (the
// logits rounded to bf16, the softmax in float32): the loss equals that reference's to float32
// rounding, which an fp32 product would miss by bf16's rounding of the logits (~1e-3), and the
// gradients agree to bf16's precision.
TEST(LinearCrossEntropy, MultipliesInBf16UnderAutocast) {
  torch::manual_seed(0);
  auto hidden = torch::randn({40, 32}).requires_grad_();
  auto weight = torch::randn({50, 32}).requires_grad_();
  auto labels = torch::randint(50, {40}, torch::kLong);
  labels[5] = -100;
  torch::Tensor expected, loss;
  {
    AutocastScope autocast(Precision::kBf16, torch::kCPU);
    expected = F::cross_entropy(torch::mm(hidden, weight.t()), labels, F::CrossEntropyFuncOptions().ignore_index(-100));
  }
  expected.backward();
  const auto grad_hidden = hidden.grad().clone(), grad_weight = weight.grad().clone();
  hidden.mutable_grad() = torch::Tensor(), weight.mutable_grad() = torch::Tensor();
  {
    AutocastScope autocast(Precision::kBf16, torch::kCPU);
    loss = linear_cross_entropy(hidden, weight, labels, 0.0, -100, 7);
  }
  loss.backward();
  EXPECT_EQ(loss.scalar_type(), torch::kFloat);
  EXPECT_NEAR(loss.item<double>(), expected.item<double>(), 1e-5 * expected.item<double>());
  const auto fp32 = F::cross_entropy(torch::mm(hidden, weight.t()), labels, F::CrossEntropyFuncOptions().ignore_index(-100));
  EXPECT_GT(std::abs(fp32.item<double>() - expected.item<double>()), 1e-4 * expected.item<double>());
  EXPECT_EQ(hidden.grad().scalar_type(), torch::kFloat);
  EXPECT_EQ(weight.grad().scalar_type(), torch::kFloat);
  EXPECT_TRUE(torch::allclose(hidden.grad(), grad_hidden, 2e-2, 1e-4));
  EXPECT_TRUE(torch::allclose(weight.grad(), grad_weight, 2e-2, 1e-4));
}

TEST(LinearCrossEntropy, NoTargetsGiveZeroAndFrozenWeightsNoGradient) {
  auto hidden = torch::randn({4, 3}).requires_grad_();
  auto weight = torch::randn({5, 3});
  const auto loss = linear_cross_entropy(hidden, weight, torch::full({4}, -100, torch::kLong));
  EXPECT_EQ(loss.item<double>(), 0.0);
  loss.backward();
  EXPECT_EQ(hidden.grad().abs().sum().item<double>(), 0.0);
  EXPECT_FALSE(weight.grad().defined());
}

// The chunk is one function of the device, the sizes and a budget: on the CPU at least 8M logits
// and 512 rows within 256 MB;
// on a GPU the whole batch when its float32 logits fit the budget, else the fewest equal chunks
// that fit, in multiples of 128 rows.
TEST(LinearCrossEntropy, ChunkRowsFollowTheDeviceAndTheBudget) {
  const torch::Device cpu(torch::kCPU), cuda(torch::kCUDA, 0);
  EXPECT_EQ(loss_chunk_rows(cpu, 8192, 50257), 512);  // GPT-2's vocabulary: 103 MB
  EXPECT_EQ(loss_chunk_rows(cpu, 8192, 256000), 256);  // Gemma's: 32 equal chunks within 262 rows (256 MB)
  EXPECT_EQ(loss_chunk_rows(cpu, 512, 151936), 256);   // Qwen2's: 441 rows fit, so two of 256
  EXPECT_EQ(loss_chunk_rows(cpu, 8192, 4096), 2048);  // 8M logits of a small vocabulary
  EXPECT_EQ(loss_chunk_rows(cpu, 1000, 50257), 500);  // two equal chunks, not 512 and 488
  EXPECT_EQ(loss_chunk_rows(cpu, 100, 50257), 100);
  EXPECT_EQ(loss_chunk_rows(cpu, 10, 100000000), 1);
  // gpt2-small at B=8, T=1024: 1.6 GB of float32 logits against 1 GiB: two chunks of 4096 rows.
  const int64_t rows = loss_chunk_rows(cuda, 8192, 50257);
  EXPECT_EQ(rows, 4096);
  EXPECT_LE(rows * 50257 * 4, kGpuLossBudgetBytes);
  EXPECT_EQ(loss_chunk_rows(cuda, 2048, 50257), 2048);  // 412 MB: one chunk
  EXPECT_EQ(loss_chunk_rows(cuda, 8192, 50257, int64_t{4} << 30), 8192);
  // 10000 rows where 3000 fit: 4 chunks of 2500, rounded up to 2560 rows.
  EXPECT_EQ(loss_chunk_rows(cuda, 10000, 1000, 3000 * 1000 * 4), 2560);
  EXPECT_EQ(loss_chunk_rows(cuda, 100, 1000, 50 * 1000 * 4), 50);  // a budget under 128 rows: equal chunks
}

}  // namespace
}  // namespace zoo
