#include "kernels/f32_rows_dot.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

namespace zoo {
namespace {

std::vector<float> uniform(int64_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(g);
  return v;
}

// The plain reference: each dot product summed in float64.
std::vector<double> reference(const std::vector<float>& x, int64_t rows, const std::vector<float>& w, int64_t in,
                              const std::vector<float>& bias, int64_t out) {
  std::vector<double> y(static_cast<size_t>(rows * out));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t n = 0; n < out; ++n) {
      double s = bias.empty() ? 0.0 : bias[n];
      for (int64_t k = 0; k < in; ++k) s += static_cast<double>(x[r * in + k]) * w[n * in + k];
      y[r * out + n] = s;
    }
  }
  return y;
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

class F32RowsDotTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // zoo's projections take oneDNN's linear on a CPU without AVX-512F (kernels/linear.cpp); this
    // kernel cannot run there, and the project's machines have it.
    if (!cpu_runs_f32_rows_dot()) GTEST_SKIP() << "no AVX-512F on this CPU: projections take oneDNN's linear";
  }
};

// Against float64 sums, for every shape of block the kernel has: 1 row (8 columns at a time), 2-7
// and 16-24 rows (blocks of 4 rows by 6 columns, the rest of the rows one at a time; the columns
// past the last whole block one at a time, 4 rows or 1), widths with and without a tail past the
// 16 lanes, ranges of columns that do not fill a block, with and without bias.
TEST_F(F32RowsDotTest, MatchesFloat64SumsForEveryBlockShape) {
  for (const int64_t in : {int64_t{768}, int64_t{771}, int64_t{16}, int64_t{5}, int64_t{33}}) {
    for (const int64_t rows : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{4}, int64_t{5}, int64_t{7}, int64_t{16}, int64_t{23}, kFewRowsMax}) {
      const int64_t out = 45;
      const auto x = uniform(rows * in, 1 + static_cast<uint32_t>(in * 31 + rows));
      const auto w = uniform(out * in, 2 + static_cast<uint32_t>(in));
      const auto bias = uniform(out, 3);
      for (const bool with_bias : {true, false}) {
        const std::vector<float> b = with_bias ? bias : std::vector<float>{};
        const auto want = reference(x, rows, w, in, b, out);
        std::vector<float> y(static_cast<size_t>(rows * out), -7.0f);
        // Two ranges of columns, as two threads would take them.
        f32_rows_dot(x.data(), rows, w.data(), in, with_bias ? bias.data() : nullptr, 0, 13, y.data(), out);
        f32_rows_dot(x.data(), rows, w.data(), in, with_bias ? bias.data() : nullptr, 13, out, y.data(), out);
        for (int64_t i = 0; i < rows * out; ++i) {
          // float32 sums of `in` products of values below 1: a few float32 steps at the sum's scale.
          ASSERT_NEAR(y[i], want[i], 1e-6 * std::sqrt(static_cast<double>(in)) * 8) << "in " << in << " rows " << rows
                                                                                     << " output " << i;
        }
      }
    }
  }
}

// Only the range's columns are written.
TEST_F(F32RowsDotTest, WritesOnlyTheRangeOfColumns) {
  const int64_t rows = 5, in = 40, out = 30;
  const auto x = uniform(rows * in, 4), w = uniform(out * in, 5);
  std::vector<float> y(static_cast<size_t>(rows * out), -7.0f);
  f32_rows_dot(x.data(), rows, w.data(), in, nullptr, 9, 21, y.data(), out);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t n = 0; n < out; ++n) {
      EXPECT_EQ(y[r * out + n] == -7.0f, n < 9 || n >= 21) << "row " << r << " column " << n;
    }
  }
}

// A row's outputs are the same bits whatever rows share the call and wherever the columns' range
// starts: a sequence decoded in a batch gets the projections it gets alone.
TEST_F(F32RowsDotTest, EachRowGetsTheSameBitsAloneAsInABatch) {
  const int64_t rows = 19, in = 771, out = 37;
  const auto x = uniform(rows * in, 6), w = uniform(out * in, 7), bias = uniform(out, 8);
  std::vector<float> batch(static_cast<size_t>(rows * out));
  f32_rows_dot(x.data(), rows, w.data(), in, bias.data(), 0, out, batch.data(), out);
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<float> alone(static_cast<size_t>(out));
    f32_rows_dot(x.data() + r * in, 1, w.data(), in, bias.data(), 0, 3, alone.data(), out);
    f32_rows_dot(x.data() + r * in, 1, w.data(), in, bias.data(), 3, out, alone.data(), out);
    for (int64_t n = 0; n < out; ++n) {
      EXPECT_TRUE(same_bits(alone[n], batch[r * out + n])) << "row " << r << " column " << n;
    }
  }
}

// Probabilities times a head's values, against float64 sums: widths of whole registers, with a
// partial last one, and narrower than one.
TEST_F(F32RowsDotTest, WeightedRowSumMatchesFloat64Sums) {
  for (const int64_t width : {int64_t{64}, int64_t{72}, int64_t{5}}) {
    const int64_t rows = 37;
    const auto p = uniform(rows, 9), v = uniform(rows * width, 10);
    std::vector<float> y(static_cast<size_t>(width) + 1, -7.0f);
    f32_weighted_row_sum(p.data(), v.data(), rows, width, y.data());
    for (int64_t c = 0; c < width; ++c) {
      double want = 0;
      for (int64_t j = 0; j < rows; ++j) want += static_cast<double>(p[j]) * v[j * width + c];
      EXPECT_NEAR(y[c], want, 1e-5) << "width " << width << " column " << c;
    }
    EXPECT_EQ(y[width], -7.0f) << "wrote past the width";
  }
}

}  // namespace
}  // namespace zoo
