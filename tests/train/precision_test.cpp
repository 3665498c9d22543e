#include "train/precision.h"

#include <cmath>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "models/config.h"
#include "test_util.h"
#include "train/autocast.h"

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

}  // namespace
}  // namespace zoo
