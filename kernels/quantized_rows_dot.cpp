#include "kernels/quantized_rows_dot.h"

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/f32_rows_dot.h"

#include "kernels/avx512_sum.h"

namespace zoo {

#if ZOO_X86_64_AVX512
ZOO_AVX512_KERNELS_BEGIN
#define ZOO_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))
namespace {

// Rows [0, R) of x against int8 rows [0, C) of w: 16 weights widened to floats per load, one
// accumulator of 16 lanes per product, the row's tail through masked loads, the output's scale
// applied once to the sum (a multiply per weight would cost a fifth of the 1-row speed).
template <int R, int C>
ZOO_AVX512 inline void int8_block(const float* x, const int8_t* w, int64_t in, const float* scale, const float* bias,
                                  float* y, int64_t ld_y) {
  __m512 sums[R][C];
  ZOO_UNROLL for (int r = 0; r < R; ++r) {
    ZOO_UNROLL for (int c = 0; c < C; ++c) sums[r][c] = _mm512_setzero_ps();
  }
  for (int64_t k = 0; k < in; k += 16) {
    const auto mask = static_cast<__mmask16>(in - k >= 16 ? 0xffff : (1u << (in - k)) - 1);
    __m512 weights[C];
    ZOO_UNROLL for (int c = 0; c < C; ++c) {
      weights[c] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(mask, w + c * in + k)));
    }
    ZOO_UNROLL for (int r = 0; r < R; ++r) {
      const __m512 row = _mm512_maskz_loadu_ps(mask, x + r * in + k);
      ZOO_UNROLL for (int c = 0; c < C; ++c) sums[r][c] = _mm512_fmadd_ps(row, weights[c], sums[r][c]);
    }
  }
  ZOO_UNROLL for (int r = 0; r < R; ++r) {
    // Explicit fused multiply-adds: contracting or not is left to no compiler, so that every
    // instantiation of the block (row counts) rounds the same way.
    ZOO_UNROLL for (int c = 0; c < C; ++c) y[r * ld_y + c] = std::fma(scale[c], lane_sum(sums[r][c]), bias ? bias[c] : 0.0f);
  }
}

// Rows [0, R) of x against int4 rows [0, C) of w, 16 inputs at a time (16 bytes give 32 values:
// their low halves the first 16 inputs, high halves the next 16), each value times its group's
// scale (one multiply shared by the R rows) summed against x; the zeros' and the -8 offsets'
// share, sum over groups of (zero - 8 scale) * (the row's sum over the group), added at the end.
template <int R, int C>
ZOO_AVX512 inline void int4_block(const float* x, const float* x_group_sums, const uint8_t* w, const float* scale,
                                  const float* zero, int64_t in, int64_t group, const float* bias, float* y,
                                  int64_t ld_y) {
  const int64_t groups = in / group, row_bytes = in / 2;
  const __m512i low_half = _mm512_set1_epi32(0x0f);
  __m512 sums[R][C];
  ZOO_UNROLL for (int r = 0; r < R; ++r) {
    ZOO_UNROLL for (int c = 0; c < C; ++c) sums[r][c] = _mm512_setzero_ps();
  }
  int64_t g = 0, left_in_group = group;  // counted, not divided: a division per 16 inputs cost a fifth
  for (int64_t k = 0; k < in; k += 16) {
    __m512 weights[C];
    ZOO_UNROLL for (int c = 0; c < C; ++c) {
      const auto* bytes = reinterpret_cast<const __m128i*>(w + c * row_bytes + (k / 32) * 16);
      const __m512i wide = _mm512_cvtepu8_epi32(_mm_loadu_si128(bytes));
      const __m512i values = (k & 16) ? _mm512_srli_epi32(wide, 4) : _mm512_and_si512(wide, low_half);
      weights[c] = _mm512_mul_ps(_mm512_cvtepi32_ps(values), _mm512_set1_ps(scale[c * groups + g]));
    }
    ZOO_UNROLL for (int r = 0; r < R; ++r) {
      const __m512 row = _mm512_loadu_ps(x + r * in + k);
      ZOO_UNROLL for (int c = 0; c < C; ++c) sums[r][c] = _mm512_fmadd_ps(row, weights[c], sums[r][c]);
    }
    if ((left_in_group -= 16) == 0) ++g, left_in_group = group;
  }
  // The offsets 16 groups at a time: (zero - 8 scale) against the row's group sums.
  __m512 offsets[R][C];
  ZOO_UNROLL for (int r = 0; r < R; ++r) {
    ZOO_UNROLL for (int c = 0; c < C; ++c) offsets[r][c] = _mm512_setzero_ps();
  }
  for (int64_t g = 0; g < groups; g += 16) {
    const auto mask = static_cast<__mmask16>(groups - g >= 16 ? 0xffff : (1u << (groups - g)) - 1);
    ZOO_UNROLL for (int c = 0; c < C; ++c) {
      const __m512 shift = _mm512_fmadd_ps(_mm512_set1_ps(-8.0f), _mm512_maskz_loadu_ps(mask, scale + c * groups + g),
                                           _mm512_maskz_loadu_ps(mask, zero + c * groups + g));
      ZOO_UNROLL for (int r = 0; r < R; ++r) {
        offsets[r][c] = _mm512_fmadd_ps(shift, _mm512_maskz_loadu_ps(mask, x_group_sums + r * groups + g), offsets[r][c]);
      }
    }
  }
  ZOO_UNROLL for (int r = 0; r < R; ++r) {
    ZOO_UNROLL for (int c = 0; c < C; ++c) {
      y[r * ld_y + c] = lane_sum(sums[r][c]) + lane_sum(offsets[r][c]) + (bias ? bias[c] : 0.0f);
    }
  }
}

// Columns [begin, end) in blocks of C, each against every row of x in blocks of R and a last
// partial block one row at a time; the columns that do not fill a block one at a time.
template <int R, int C, class Block>
ZOO_AVX512 void columns(int64_t rows, int64_t begin, int64_t end, const Block& block) {
  int64_t n = begin;
  for (; n + C <= end; n += C) {
    int64_t r = 0;
    for (; r + R <= rows; r += R) block.template run<R, C>(r, n);
    for (; r < rows; ++r) block.template run<1, C>(r, n);
  }
  for (; n < end; ++n) {
    int64_t r = 0;
    for (; r + R <= rows; r += R) block.template run<R, 1>(r, n);
    for (; r < rows; ++r) block.template run<1, 1>(r, n);
  }
}

struct Int8Block {
  const float* x;
  const int8_t* w;
  const float *scale, *bias;
  int64_t in;
  float* y;
  int64_t ld_y;
  template <int R, int C>
  ZOO_AVX512 void run(int64_t r, int64_t n) const {
    int8_block<R, C>(x + r * in, w + n * in, in, scale + n, bias ? bias + n : nullptr, y + r * ld_y + n, ld_y);
  }
};

struct Int4Block {
  const float *x, *x_group_sums;
  const uint8_t* w;
  const float *scale, *zero, *bias;
  int64_t in, group;
  float* y;
  int64_t ld_y;
  template <int R, int C>
  ZOO_AVX512 void run(int64_t r, int64_t n) const {
    const int64_t groups = in / group;
    int4_block<R, C>(x + r * in, x_group_sums + r * groups, w + n * (in / 2), scale + n * groups, zero + n * groups,
                     in, group, bias ? bias + n : nullptr, y + r * ld_y + n, ld_y);
  }
};

}  // namespace
ZOO_AVX512_KERNELS_END
#endif

bool cpu_runs_quantized_rows_dot() {
#if ZOO_X86_64_AVX512
  return cpu_runs_f32_rows_dot() && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
#else
  return false;
#endif
}

void int8_rows_dot(const float* x, int64_t rows, const int8_t* w, const float* scale, int64_t in, const float* bias,
                   int64_t begin, int64_t end, float* y, int64_t ld_y) {
  if (!cpu_runs_quantized_rows_dot()) throw std::logic_error("int8_rows_dot: this CPU has no AVX-512F/BW");
#if ZOO_X86_64_AVX512
  // As f32_rows_dot: one row against 8 columns (more loads in flight), more rows 4 at a time
  // against 6 columns (24 sums, 6 weights and a row in 31 of the 32 registers).
  const Int8Block block{x, w, scale, bias, in, y, ld_y};
  if (rows == 1) {
    columns<1, 8>(rows, begin, end, block);
  } else {
    columns<4, 6>(rows, begin, end, block);
  }
#endif
}

void int4_rows_dot(const float* x, int64_t rows, const uint8_t* w, const float* scale, const float* zero, int64_t in,
                   int64_t group, const float* bias, int64_t begin, int64_t end, float* y, int64_t ld_y) {
  if (!cpu_runs_quantized_rows_dot()) throw std::logic_error("int4_rows_dot: this CPU has no AVX-512F/BW");
  if (group <= 0 || group % 32 != 0 || in % group != 0) {
    throw std::invalid_argument("int4_rows_dot: the group (" + std::to_string(group) +
                                ") must be a multiple of 32 dividing the inputs (" + std::to_string(in) + ")");
  }
#if ZOO_X86_64_AVX512
  // Each row's sum over each group, in input order (the same for a row alone or batched).
  const int64_t groups = in / group;
  std::vector<float> group_sums(static_cast<size_t>(rows * groups));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t g = 0; g < groups; ++g) {
      float sum = 0.0f;
      for (int64_t k = g * group; k < (g + 1) * group; ++k) sum += x[r * in + k];
      group_sums[static_cast<size_t>(r * groups + g)] = sum;
    }
  }
  // The blocks of int8_rows_dot.
  const Int4Block block{x, group_sums.data(), w, scale, zero, bias, in, group, y, ld_y};
  if (rows == 1) {
    columns<1, 8>(rows, begin, end, block);
  } else {
    columns<4, 6>(rows, begin, end, block);
  }
#endif
}

}  // namespace zoo
