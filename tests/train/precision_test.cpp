#include "train/precision.h"

#include <cmath>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "models/config.h"
#include "test_util.h"
#include "train/autocast.h"
#include "train/loss_scaler.h"

namespace zoo {
namespace {

using testing::error_of;

// auto picks bf16 on CUDA and on CPUs whose bf16 matmuls are clearly faster, and says why.
TEST(Precision, AutoFollowsTheHardwareAndSaysWhy) {
  std::string why;
  EXPECT_EQ(resolve_precision(Precision::kAuto, {true, 0.0}, &why), Precision::kBf16);
  EXPECT_EQ(why, "auto: bf16 on CUDA");
  EXPECT_EQ(resolve_precision(Precision::kAuto, {false, 5.4}, &why), Precision::kBf16);  // AMX
  EXPECT_EQ(why, "auto: bf16, bf16 matmuls run 5.4x fp32's on this CPU (measured)");
  EXPECT_EQ(resolve_precision(Precision::kAuto, {false, 0.7}, &why), Precision::kFp32);
  EXPECT_EQ(why, "auto: fp32, bf16 matmuls run 0.7x fp32's on this CPU (measured)");
  EXPECT_EQ(resolve_precision(Precision::kAuto, {false, 0.021}, &why), Precision::kFp32);  // AVX2 alone
  EXPECT_EQ(why, "auto: fp32, bf16 matmuls run 0.02x fp32's on this CPU (measured)");
  EXPECT_EQ(resolve_precision(Precision::kAuto, {false, kBf16SpeedupForAuto}), Precision::kBf16);
  for (const ComputeDevice device : {ComputeDevice{true, 0.0}, ComputeDevice{false, 0.5}, ComputeDevice{false, 3.0}}) {
    EXPECT_EQ(resolve_precision(Precision::kBf16, device, &why), Precision::kBf16);
    EXPECT_EQ(why, "as asked");
    EXPECT_EQ(resolve_precision(Precision::kFp32, device), Precision::kFp32);
  }
  EXPECT_EQ(resolve_precision(Precision::kFp16, {true, 0.0}), Precision::kFp16);
  EXPECT_EQ(error_of([] { resolve_precision(Precision::kFp16, {false, 3.0}); }),
            "precision fp16 needs a CUDA device (on the CPU, mixed precision is bf16)");
}

// The measurement is a ratio of two positive rates (its value is this machine's business).
TEST(Precision, MeasuresTheCpuBf16Speedup) {
  const double speedup = measure_cpu_bf16_speedup();
  EXPECT_GT(speedup, 0.0);
  EXPECT_TRUE(std::isfinite(speedup));
}

// Under the scope on the CPU, a matrix product of fp32 tensors comes out bf16 (autocast's
// lower-precision list) while a reduction stays fp32; after it, fp32 again.
TEST(Precision, CpuAutocastScopeRunsMatmulsInBf16) {
  const auto a = torch::randn({8, 16}), b = torch::randn({16, 4});
  {
    AutocastScope scope(Precision::kBf16, torch::kCPU);
    const auto product = torch::mm(a, b);
    EXPECT_EQ(product.scalar_type(), torch::kBFloat16);
    EXPECT_TRUE(torch::allclose(product.to(torch::kFloat), torch::mm(a.to(torch::kBFloat16), b.to(torch::kBFloat16)).to(torch::kFloat)));
  }
  EXPECT_EQ(torch::mm(a, b).scalar_type(), torch::kFloat);
  {
    AutocastScope scope(Precision::kFp32, torch::kCPU);
    EXPECT_EQ(torch::mm(a, b).scalar_type(), torch::kFloat);
  }
}

// fp16's dynamic loss scale as torch.amp.GradScaler keeps it, all on the device: gradients
// divided by the scale, an overflow flagged (and the scale halved), `growth_interval` clean
// updates in a row doubling it; value() reads it for checkpoints, restore() starts from a saved one.
TEST(LossScaler, UnscalesFlagsOverflowsAndAdjustsTheScale) {
  LossScaler scaler(true, 1024.0, /*growth_interval=*/3);
  torch::nn::Linear net(2, 1);
  const auto params = net->parameters();
  const auto clean_step = [&] {
    net->weight.mutable_grad() = torch::full({1, 2}, 2048.0);
    net->bias.mutable_grad() = torch::full({1}, -1024.0);
    auto found_inf = torch::zeros({});
    scaler.unscale(params, found_inf);
    EXPECT_EQ(found_inf.item<float>(), 0.0f);
    scaler.update(found_inf);
  };
  EXPECT_EQ(scaler.scale(torch::kCPU).item<float>(), 1024.0f);
  clean_step();
  EXPECT_TRUE(torch::equal(net->weight.grad(), torch::full({1, 2}, 2048.0 / 1024.0)));
  EXPECT_TRUE(torch::equal(net->bias.grad(), torch::full({1}, -1.0)));
  net->weight.mutable_grad() = torch::tensor({{1.0f, INFINITY}});
  auto found_inf = torch::zeros({});
  scaler.unscale(params, found_inf);
  EXPECT_EQ(found_inf.item<float>(), 1.0f);
  scaler.update(found_inf);
  EXPECT_EQ(scaler.value(), 512.0);  // halved; the clean count starts again
  clean_step(), clean_step();
  EXPECT_EQ(scaler.value(), 512.0);
  clean_step();
  EXPECT_EQ(scaler.value(), 1024.0);  // three clean updates in a row
  scaler.restore(64.0);
  EXPECT_EQ(scaler.scale(torch::kCPU).item<float>(), 64.0f);
  LossScaler off(false);
  EXPECT_FALSE(off.scale(torch::kCPU).defined());
  EXPECT_EQ(off.value(), 1.0);
}

}  // namespace
}  // namespace zoo
