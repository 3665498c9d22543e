#include "kernels/f32_rows_dot.h"

#include <algorithm>
#include <stdexcept>

#include "kernels/avx512_sum.h"

namespace zoo {

#if ZOO_X86_64_AVX512
ZOO_AVX512_KERNELS_BEGIN
namespace {

// A share of the weights a few blocks ahead, fetched into L2 while a block computes: floats
// [from, to) of `data`, `lines` cache lines of 16 floats for each 16 of the row. Into L2, not
// L1: with _MM_HINT_T0 the fetches queue behind the block's own loads and gpt2-small's 16-row
// step took 31 ms; with T1, 25.
struct Prefetch {
  const float* data = nullptr;
  int64_t from = 0, to = 0, lines = 0;
};

// Rows [0, R) of x against rows [0, C) of w (C of them from `w`), each dot product in one
// accumulator of 16 lanes, the row's tail through masked loads; `ahead` fetched meanwhile.
template <int R, int C>
__attribute__((target("avx512f"))) inline void dot_block(const float* x, const float* w, int64_t in, const float* bias,
                                                          float* y, int64_t ld_y, const Prefetch& ahead) {
  __m512 sums[R][C];
  ZOO_UNROLL for (int r = 0; r < R; ++r) {
    ZOO_UNROLL for (int c = 0; c < C; ++c) sums[r][c] = _mm512_setzero_ps();
  }
  int64_t k = 0;
  for (; k + 16 <= in; k += 16) {
    __m512 weights[C];
    ZOO_UNROLL for (int c = 0; c < C; ++c) weights[c] = _mm512_loadu_ps(w + c * in + k);
    for (int64_t line = 0, at = ahead.from + k * ahead.lines; line < ahead.lines && at < ahead.to; ++line, at += 16) {
      _mm_prefetch(reinterpret_cast<const char*>(ahead.data + at), _MM_HINT_T1);
    }
    ZOO_UNROLL for (int r = 0; r < R; ++r) {
      const __m512 row = _mm512_loadu_ps(x + r * in + k);
      ZOO_UNROLL for (int c = 0; c < C; ++c) sums[r][c] = _mm512_fmadd_ps(row, weights[c], sums[r][c]);
    }
  }
  if (k < in) {
    const auto tail = static_cast<__mmask16>((1u << (in - k)) - 1);
    __m512 weights[C];
    ZOO_UNROLL for (int c = 0; c < C; ++c) weights[c] = _mm512_maskz_loadu_ps(tail, w + c * in + k);
    ZOO_UNROLL for (int r = 0; r < R; ++r) {
      const __m512 row = _mm512_maskz_loadu_ps(tail, x + r * in + k);
      ZOO_UNROLL for (int c = 0; c < C; ++c) sums[r][c] = _mm512_fmadd_ps(row, weights[c], sums[r][c]);
    }
  }
  ZOO_UNROLL for (int r = 0; r < R; ++r) {
    ZOO_UNROLL for (int c = 0; c < C; ++c) y[r * ld_y + c] = lane_sum(sums[r][c]) + (bias ? bias[c] : 0.0f);
  }
}

// Columns [begin, end) in blocks of C, each block against every row of x in blocks of R, a
// last partial block of rows one at a time; the columns that do not fill a block one at a time.
// Each pass over a block fetches its share of the block kBlocksAhead further on, so that the
// fetches spread evenly over the block's arithmetic (all of them in its first pass, as before,
// left 16 rows waiting on memory: 31 ms a step against 25).
template <int R, int C>
__attribute__((target("avx512f"))) void dot_columns(const float* x, int64_t rows, const float* w, int64_t in,
                                                     const float* bias, int64_t begin, int64_t end, float* y,
                                                     int64_t ld_y) {
  constexpr int64_t kBlocksAhead = 4;
  const int64_t passes = rows / R + rows % R;
  const int64_t lines = (C + passes - 1) / passes;  // for each 16 floats of a pass's row
  int64_t n = begin;
  for (; n + C <= end; n += C) {
    const float* block = w + n * in;
    const float* block_bias = bias ? bias + n : nullptr;
    const int64_t ahead_from = std::min(end, n + kBlocksAhead * C) * in;
    const int64_t ahead_to = std::min(end, n + (kBlocksAhead + 1) * C) * in;
    int64_t r = 0, pass = 0;
    const auto share = [&] { return Prefetch{w, ahead_from + pass * lines * in, ahead_to, lines}; };
    for (; r + R <= rows; r += R, ++pass) {
      dot_block<R, C>(x + r * in, block, in, block_bias, y + r * ld_y + n, ld_y, share());
    }
    for (; r < rows; ++r, ++pass) dot_block<1, C>(x + r * in, block, in, block_bias, y + r * ld_y + n, ld_y, share());
  }
  for (; n < end; ++n) {
    const float* column_bias = bias ? bias + n : nullptr;
    int64_t r = 0;
    for (; r + R <= rows; r += R) {
      dot_block<R, 1>(x + r * in, w + n * in, in, column_bias, y + r * ld_y + n, ld_y, Prefetch{});
    }
    for (; r < rows; ++r) dot_block<1, 1>(x + r * in, w + n * in, in, column_bias, y + r * ld_y + n, ld_y, Prefetch{});
  }
}

// Up to 4 registers of 16 columns at a time (a head of 64), the rows in pairs into two sets of
// sums (independent chains of multiply-adds, not one waiting on the last), added at the end.
template <int G>
__attribute__((target("avx512f"))) inline void weighted_columns(const float* p, const float* v, int64_t rows,
                                                                 int64_t width, int64_t c, float* y) {
  __mmask16 masks[G];
  __m512 even[G], odd[G];
  ZOO_UNROLL for (int g = 0; g < G; ++g) {
    const int64_t left = width - c - 16 * g;
    masks[g] = static_cast<__mmask16>(left >= 16 ? 0xffff : (1u << left) - 1);
    even[g] = _mm512_setzero_ps(), odd[g] = _mm512_setzero_ps();
  }
  int64_t j = 0;
  for (; j + 2 <= rows; j += 2) {
    const __m512 p0 = _mm512_set1_ps(p[j]), p1 = _mm512_set1_ps(p[j + 1]);
    ZOO_UNROLL for (int g = 0; g < G; ++g) {
      even[g] = _mm512_fmadd_ps(p0, _mm512_maskz_loadu_ps(masks[g], v + j * width + c + 16 * g), even[g]);
      odd[g] = _mm512_fmadd_ps(p1, _mm512_maskz_loadu_ps(masks[g], v + (j + 1) * width + c + 16 * g), odd[g]);
    }
  }
  if (j < rows) {
    const __m512 p0 = _mm512_set1_ps(p[j]);
    ZOO_UNROLL for (int g = 0; g < G; ++g) {
      even[g] = _mm512_fmadd_ps(p0, _mm512_maskz_loadu_ps(masks[g], v + j * width + c + 16 * g), even[g]);
    }
  }
  ZOO_UNROLL for (int g = 0; g < G; ++g) {
    _mm512_mask_storeu_ps(y + c + 16 * g, masks[g], _mm512_add_ps(even[g], odd[g]));
  }
}

__attribute__((target("avx512f"))) void weighted_row_sum(const float* p, const float* v, int64_t rows, int64_t width,
                                                          float* y) {
  int64_t c = 0;
  for (; c + 64 <= width; c += 64) weighted_columns<4>(p, v, rows, width, c, y);
  for (; c < width; c += 16) weighted_columns<1>(p, v, rows, width, c, y);
}

}  // namespace
ZOO_AVX512_KERNELS_END
#endif

bool cpu_runs_f32_rows_dot() {
#if ZOO_X86_64_AVX512
  return __builtin_cpu_supports("avx512f");
#else
  return false;
#endif
}

void f32_rows_dot(const float* x, int64_t rows, const float* w, int64_t in, const float* bias, int64_t begin,
                  int64_t end, float* y, int64_t ld_y) {
  if (!cpu_runs_f32_rows_dot()) throw std::logic_error("f32_rows_dot: this CPU has no AVX-512F");
#if ZOO_X86_64_AVX512
  // One row streams through 8 columns at a time (more loads in flight). More rows go 4 at a time
  // against 6 columns: 24 sums, 6 weights and a row in 31 of the 32 registers, 10 loads for 24
  // multiply-adds (4 by 4 took 8 for 16: 16 rows 25 ms a step, 12 rows 22, against 24 and 19).
  if (rows == 1) {
    dot_columns<1, 8>(x, rows, w, in, bias, begin, end, y, ld_y);
  } else {
    dot_columns<4, 6>(x, rows, w, in, bias, begin, end, y, ld_y);
  }
#endif
}

void f32_weighted_row_sum(const float* p, const float* v, int64_t rows, int64_t width, float* y) {
  if (!cpu_runs_f32_rows_dot()) throw std::logic_error("f32_weighted_row_sum: this CPU has no AVX-512F");
#if ZOO_X86_64_AVX512
  weighted_row_sum(p, v, rows, width, y);
#endif
}

}  // namespace zoo
