#include "bench/measure.h"

#include <stdexcept>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace zoo::bench {
namespace {

TEST(BenchMedian, OddCountIsTheMiddleValue) {
  EXPECT_EQ(median({0.30, 0.10, 0.50, 0.20, 0.40}), 0.30);
  EXPECT_EQ(median({7.0}), 7.0);
  // An outlier (a run the machine interrupted) moves the median not at all.
  EXPECT_EQ(median({0.2, 9.0, 0.1}), 0.2);
}

TEST(BenchMedian, EvenCountIsTheUpperMiddleValue) {
  // 2 and 3 are in the middle: the upper one, a time that was measured, not their mean 2.5.
  EXPECT_EQ(median({4.0, 1.0, 3.0, 2.0}), 3.0);
  EXPECT_EQ(median({5.0, 6.0}), 6.0);
}

TEST(BenchMedian, NoValuesIsRefused) { EXPECT_THROW(median({}), std::invalid_argument); }

TEST(BenchMedianSeconds, RunsTheWarmUpThenTheTimedRuns) {
  std::vector<int> calls;
  int call = 0;
  const double s = median_seconds(2, 3, [&] { calls.push_back(call++); });
  EXPECT_EQ(calls.size(), 5u);
  EXPECT_GE(s, 0.0);
}

// Resident memory grows by what is touched: 64 MiB written is 64 MiB more, give or take what the
// allocator and the test framework move meanwhile.
TEST(BenchMemory, ResidentMemoryCountsTouchedPages) {
  const double before = rss_mb();
  EXPECT_GT(before, 0.0);
  std::vector<char> block(64u << 20, 1);
  const double after = rss_mb();
  EXPECT_NEAR(after - before, 64.0 * 1.048576, 8.0);  // MB, not MiB
  EXPECT_GE(peak_rss_mb(), after - 1.0);
  EXPECT_EQ(block[12345], 1);
}

TEST(BenchMemory, GpuAllocatorCountsItsTensors) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "CUDA is not available";
  const c10::Device gpu(c10::kCUDA);
  const double before = gpu_allocated_mb(gpu);
  auto tensor = torch::ones({16 << 20}, torch::TensorOptions().device(gpu));  // 64 MiB of float32
  synchronize(gpu);
  EXPECT_NEAR(gpu_allocated_mb(gpu) - before, 64.0 * 1.048576, 1.0);
  EXPECT_GE(gpu_allocated_mb(gpu, /*peak=*/true), gpu_allocated_mb(gpu));
  EXPECT_EQ(tensor.sum().item<double>(), 16.0 * (1 << 20));
}

}  // namespace
}  // namespace zoo::bench
