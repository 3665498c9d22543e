#include "kernels/bf16_dot.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

namespace zoo {
namespace {

// bf16 bits of a float32, rounded to nearest even (as torch's .to(torch::kBFloat16)).
uint16_t to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  bits += 0x7fff + ((bits >> 16) & 1);
  return static_cast<uint16_t>(bits >> 16);
}

double to_double(uint16_t bf16) {
  const uint32_t bits = static_cast<uint32_t>(bf16) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// The kernels this machine can run: the widening one always, the instruction one on AVX-512 BF16.
std::vector<Bf16DotKernel> runnable_kernels() {
  std::vector<Bf16DotKernel> kernels = {Bf16DotKernel::kWidenToFloat32};
  if (cpu_runs(Bf16DotKernel::kDotProductInstruction)) kernels.push_back(Bf16DotKernel::kDotProductInstruction);
  return kernels;
}

const char* name(Bf16DotKernel kernel) {
  switch (kernel) {
    case Bf16DotKernel::kDotProductInstruction:
      return "dot-product instruction";
    case Bf16DotKernel::kWidenToFloat32:
      return "widen to float32";
  }
  return "";
}

// A worked example: exact in bf16 and float32, so every kernel must give it to the last bit, and
// rows outside [begin, end) are not written.
TEST(Bf16Dot, WorkedExampleAndRowRange) {
  const std::vector<float> w = {1, 2, 3, 0.5f, -1, 0.25f, 4, 4, 4};
  const std::vector<float> x = {1, 1, 2};
  std::vector<uint16_t> wb, xb;
  for (float v : w) wb.push_back(to_bf16(v));
  for (float v : x) xb.push_back(to_bf16(v));
  for (const auto kernel : runnable_kernels()) {
    std::vector<float> y = {-7, -7, -7};
    bf16_rows_dot(kernel, wb.data(), xb.data(), 3, 0, 2, y.data());
    EXPECT_EQ(y, (std::vector<float>{9, 0, -7})) << name(kernel);
  }
}

// Random rows of every length around the kernels' 16- and 32-element steps, against float64
// sums of the same bf16 values: float32 accumulation errs by at most in * 2^-23 of the sum of
// the products' magnitudes.
TEST(Bf16Dot, FloatSumsOfBf16ProductsMatchDoublePrecision) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  for (const int64_t in : {1, 5, 16, 31, 32, 33, 63, 64, 65, 100, 768, 771, 3072}) {
    const int64_t rows = 37;
    std::vector<uint16_t> w(rows * in), x(in);
    for (auto& v : w) v = to_bf16(normal(rng));
    for (auto& v : x) v = to_bf16(normal(rng));
    std::vector<double> exact(rows), magnitude(rows);
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < in; ++j) {
        const double p = to_double(w[i * in + j]) * to_double(x[j]);
        exact[i] += p, magnitude[i] += std::abs(p);
      }
    }
    for (const auto kernel : runnable_kernels()) {
      std::vector<float> y(rows);
      bf16_rows_dot(kernel, w.data(), x.data(), in, 0, rows, y.data());
      for (int64_t i = 0; i < rows; ++i) {
        EXPECT_LE(std::abs(y[i] - exact[i]), static_cast<double>(in) * std::ldexp(magnitude[i], -23))
            << name(kernel) << ", in " << in << ", row " << i;
      }
    }
  }
}

// Worked by hand: bf16 keeps 7 fraction bits, so near 1 its step is 2^-7; halfway cases go to the
// even neighbour, as LibTorch's float-to-bf16 conversion does.
TEST(Bf16Dot, RoundsSumsPlusBiasToNearestEven) {
  const float nan = std::nanf("");
  const std::vector<float> values = {1.0f, 1.0f + 0x1p-8f, 1.0f + 0x3p-8f, 1.0f + 0x1.8p-8f, -2.5f, 1e30f, nan};
  const std::vector<uint16_t> bias = {to_bf16(0.5f), 0, 0, 0, to_bf16(0.25f), 0, 0};
  std::vector<uint16_t> out(values.size());
  round_to_bf16(values.data(), bias.data(), static_cast<int64_t>(values.size()), out.data());
  EXPECT_EQ(to_double(out[0]), 1.5);
  EXPECT_EQ(to_double(out[1]), 1.0);                   // halfway, to the even 1.0
  EXPECT_EQ(to_double(out[2]), 1.0 + std::ldexp(1, -6));  // halfway, to the even 1 + 2^-6
  EXPECT_EQ(to_double(out[3]), 1.0 + std::ldexp(1, -7));  // past halfway, up
  EXPECT_EQ(to_double(out[4]), -2.25);
  EXPECT_NEAR(to_double(out[5]), 1e30, 1e30 / 128);
  EXPECT_TRUE(std::isnan(to_double(out[6])));
  round_to_bf16(values.data(), nullptr, 1, out.data());
  EXPECT_EQ(to_double(out[0]), 1.0);
}

TEST(Bf16Dot, FastestKernelIsTheInstructionWhereTheCpuHasIt) {
  const bool has_instruction = cpu_runs(Bf16DotKernel::kDotProductInstruction);
  EXPECT_EQ(fastest_bf16_dot_kernel(), has_instruction ? Bf16DotKernel::kDotProductInstruction
                                                       : Bf16DotKernel::kWidenToFloat32);
  EXPECT_TRUE(cpu_runs(Bf16DotKernel::kWidenToFloat32));
  ::testing::Test::RecordProperty("fastest_kernel", name(fastest_bf16_dot_kernel()));
}

}  // namespace
}  // namespace zoo
