#include "kernels/quantized_rows_dot.h"

#include <cmath>
#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/f32_rows_dot.h"

#include "kernels/avx512_sum.h"

namespace zoo {

#if ZOO_X86_64_AVX512
namespace {
// Columns [begin, end) in blocks of C, each against every row of x in blocks of R and a last
// partial block one row at a time; the columns that do not fill a block one at a time. Shared
// by the AVX-512 and AVX2 blocks (each block a call: the loops are inside it).
template <int R, int C, class Block>
void columns(int64_t rows, int64_t begin, int64_t end, const Block& block) {
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

// An int4 block's next block's scales and zeros (`count` floats each, after this block's), fetched
// a share at each of `steps` steps, as the weights are: without it a decoding step's int4 blocks
// waited on them (a block of 8 columns of 768 inputs in groups of 32 reads 6 lines of weights
// and 6 of scales and zeros); with it a 1-row product from memory runs 1.25x faster on one thread
// (Zen 4). A share under a line asks for the same line at several steps: asking once per line
// measured no faster than not asking at all, so the repeats stay.
inline int64_t next_scales_share(int64_t count, int64_t steps) { return (count * 4 + 64 + steps - 1) / steps; }
inline void fetch_next_scales(const float* scale, const float* zero, int64_t count, int64_t share, int64_t step) {
  const char* next_scale = reinterpret_cast<const char*>(scale + count);
  const char* next_zero = reinterpret_cast<const char*>(zero + count);
  for (int64_t at = step * share; at < (step + 1) * share; at += 64) {
    _mm_prefetch(next_scale + at, _MM_HINT_T0);
    _mm_prefetch(next_zero + at, _MM_HINT_T0);
  }
}

}  // namespace

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
  // The next block's C * in bytes, which follow these, fetched a share at each step: C rows of
  // a few hundred bytes each are too short for the hardware's stream prefetcher to catch up.
  const char* next = reinterpret_cast<const char*>(w + C * in);
  for (int64_t k = 0; k < in; k += 16) {
    for (int64_t at = k * C; at < (k + 16) * C; at += 64) _mm_prefetch(next + at, _MM_HINT_T0);
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
  const char* next = reinterpret_cast<const char*>(w + C * row_bytes);  // as int8_block's
  const int64_t share = next_scales_share(C * groups, in / 16);
  for (int64_t k = 0; k < in; k += 16) {
    for (int64_t at = k / 2 * C; at < (k / 2 + 8) * C; at += 64) _mm_prefetch(next + at, _MM_HINT_T0);
    fetch_next_scales(scale, zero, C * groups, share, k / 16);
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

#define ZOO_AVX512_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

// Rows [0, R) of bf16 x against int8 rows [0, C) of w, 32 inputs at a time: the weights widened
// to float32 and packed to bf16 (exact: |q| <= 127 needs 7 bits), each pair of products summed
// into 16 float32 lanes by one dot instruction (bf16 products are exact in float32), the tail
// through masked loads, the output's scale applied once to the sum.
template <int R, int C>
ZOO_AVX512_BF16 inline void int8_bf16_block(const uint16_t* x, const int8_t* w, int64_t in, const float* scale,
                                            const float* bias, float* y, int64_t ld_y) {
  __m512 sums[R][C];
  ZOO_UNROLL for (int r = 0; r < R; ++r) {
    ZOO_UNROLL for (int c = 0; c < C; ++c) sums[r][c] = _mm512_setzero_ps();
  }
  // Whole steps of 32 with plain loads (the widening reads memory directly), then the tail masked.
  const int64_t whole = in / 32 * 32;
  const char* next = reinterpret_cast<const char*>(w + C * in);  // as int8_block's
  for (int64_t k = 0; k < in; k += 32) {
    for (int64_t at = k * C; at < (k + 32) * C; at += 64) _mm_prefetch(next + at, _MM_HINT_T0);
    const bool tail = k == whole;
    const auto mask = static_cast<__mmask32>(tail ? (1u << (in - k)) - 1 : 0xffffffffu);
    __m512bh weights[C];
    ZOO_UNROLL for (int c = 0; c < C; ++c) {
      const int8_t* at = w + c * in + k;
      __m128i first, second;
      if (tail) {
        const __m256i bytes = _mm256_maskz_loadu_epi8(mask, at);
        first = _mm256_castsi256_si128(bytes), second = _mm256_extracti128_si256(bytes, 1);
      } else {
        first = _mm_loadu_si128(reinterpret_cast<const __m128i*>(at));
        second = _mm_loadu_si128(reinterpret_cast<const __m128i*>(at + 16));
      }
      const __m512 low = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(first));
      const __m512 high = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(second));
      weights[c] = _mm512_cvtne2ps_pbh(high, low);  // inputs k .. k + 31 in order
    }
    ZOO_UNROLL for (int r = 0; r < R; ++r) {
      const auto row = tail ? (__m512bh)_mm512_maskz_loadu_epi16(mask, x + r * in + k)
                            : (__m512bh)_mm512_loadu_si512(x + r * in + k);
      ZOO_UNROLL for (int c = 0; c < C; ++c) sums[r][c] = _mm512_dpbf16_ps(sums[r][c], row, weights[c]);
    }
  }
  ZOO_UNROLL for (int r = 0; r < R; ++r) {
    ZOO_UNROLL for (int c = 0; c < C; ++c) y[r * ld_y + c] = std::fma(scale[c], lane_sum(sums[r][c]), bias ? bias[c] : 0.0f);
  }
}

// Rows of an int8 weight in float32, 16 at a time (the row's tail masked).
ZOO_AVX512 void int8_dequantize_avx512(const int8_t* w, const float* scale, int64_t in, int64_t rows, float* out) {
  for (int64_t n = 0; n < rows; ++n) {
    const __m512 s = _mm512_set1_ps(scale[n]);
    for (int64_t k = 0; k < in; k += 16) {
      const auto mask = static_cast<__mmask16>(in - k >= 16 ? 0xffff : (1u << (in - k)) - 1);
      const __m512 q = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(mask, w + n * in + k)));
      _mm512_mask_storeu_ps(out + n * in + k, mask, _mm512_mul_ps(q, s));
    }
  }
}

// Rows of an int4 weight in float32, 32 inputs (16 bytes) at a time. The _round_ forms: no
// compiler contracts a builtin into a fused multiply-add, which would round once where
// dequantize_weight rounds twice.
ZOO_AVX512 void int4_dequantize_avx512(const uint8_t* w, const float* scale, const float* zero, int64_t in,
                                       int64_t group, int64_t rows, float* out) {
  constexpr int kNearest = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  const int64_t groups = in / group;
  const __m512i low_half = _mm512_set1_epi32(0x0f);
  const __m512 eight = _mm512_set1_ps(8.0f);
  for (int64_t n = 0; n < rows; ++n) {
    for (int64_t k = 0; k < in; k += 32) {
      const __m512 s = _mm512_set1_ps(scale[n * groups + k / group]), z = _mm512_set1_ps(zero[n * groups + k / group]);
      const __m512i wide = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + n * (in / 2) + k / 2)));
      const __m512 low = _mm512_sub_ps(_mm512_cvtepi32_ps(_mm512_and_si512(wide, low_half)), eight);
      const __m512 high = _mm512_sub_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(wide, 4)), eight);
      _mm512_storeu_ps(out + n * in + k, _mm512_add_round_ps(_mm512_mul_round_ps(low, s, kNearest), z, kNearest));
      _mm512_storeu_ps(out + n * in + k + 16,
                       _mm512_add_round_ps(_mm512_mul_round_ps(high, s, kNearest), z, kNearest));
    }
  }
}

}  // namespace

// The AVX2 (and FMA) blocks, for CPUs without AVX-512 (AMD Zen 3 and earlier, many Intel
// desktops): the AVX-512 blocks' scheme in 8 lanes. 16 registers: one row against 4 columns, more
// rows 4 at a time against 3 (12 sums, 3 weights and a row). int8's inputs past the last 8 are
// summed one by one after the lanes; every row's sums are the same operations whatever its block.
#define ZOO_AVX2 __attribute__((target("avx2,fma")))
namespace {

// The 8 lanes' sum, one fixed tree (lanes 4 apart, then 2, then 1).
ZOO_AVX2 inline float lane_sum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

template <int R, int C>
ZOO_AVX2 inline void int8_block_avx2(const float* x, const int8_t* w, int64_t in, const float* scale,
                                     const float* bias, float* y, int64_t ld_y) {
  __m256 sums[R][C];
  ZOO_UNROLL for (int r = 0; r < R; ++r) {
    ZOO_UNROLL for (int c = 0; c < C; ++c) sums[r][c] = _mm256_setzero_ps();
  }
  const int64_t whole = in / 8 * 8;
  const char* next = reinterpret_cast<const char*>(w + C * in);  // as the AVX-512 blocks'
  for (int64_t k = 0; k < whole; k += 8) {
    for (int64_t at = k * C; at < (k + 8) * C; at += 64) _mm_prefetch(next + at, _MM_HINT_T0);
    __m256 weights[C];
    ZOO_UNROLL for (int c = 0; c < C; ++c) {
      const auto eight = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(w + c * in + k));
      weights[c] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(eight));
    }
    ZOO_UNROLL for (int r = 0; r < R; ++r) {
      const __m256 row = _mm256_loadu_ps(x + r * in + k);
      ZOO_UNROLL for (int c = 0; c < C; ++c) sums[r][c] = _mm256_fmadd_ps(row, weights[c], sums[r][c]);
    }
  }
  ZOO_UNROLL for (int r = 0; r < R; ++r) {
    ZOO_UNROLL for (int c = 0; c < C; ++c) {
      float sum = lane_sum8(sums[r][c]);
      for (int64_t k = whole; k < in; ++k) sum = std::fma(x[r * in + k], static_cast<float>(w[c * in + k]), sum);
      y[r * ld_y + c] = std::fma(scale[c], sum, bias ? bias[c] : 0.0f);
    }
  }
}

// 8 inputs at a time: bytes j .. j + 7 of a 32-input block hold inputs j .. j + 7 in their low
// halves and j + 16 .. j + 23 in their high halves; each value times its group's scale.
template <int R, int C>
ZOO_AVX2 inline void int4_block_avx2(const float* x, const float* x_group_sums, const uint8_t* w, const float* scale,
                                     const float* zero, int64_t in, int64_t group, const float* bias, float* y,
                                     int64_t ld_y) {
  const int64_t groups = in / group, row_bytes = in / 2;
  const __m256i low_half = _mm256_set1_epi32(0x0f);
  __m256 sums[R][C];
  ZOO_UNROLL for (int r = 0; r < R; ++r) {
    ZOO_UNROLL for (int c = 0; c < C; ++c) sums[r][c] = _mm256_setzero_ps();
  }
  int64_t g = 0, left_in_group = group;
  const char* next = reinterpret_cast<const char*>(w + C * row_bytes);  // as the AVX-512 blocks'
  for (int64_t k = 0; k < in; k += 8) {
    for (int64_t at = k / 2 * C; at < (k / 2 + 4) * C; at += 64) _mm_prefetch(next + at, _MM_HINT_T0);
    __m256 weights[C];
    ZOO_UNROLL for (int c = 0; c < C; ++c) {
      const auto* bytes = w + c * row_bytes + (k / 32) * 16 + (k % 16);
      const __m256i wide = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(bytes)));
      const __m256i values = (k & 16) ? _mm256_srli_epi32(wide, 4) : _mm256_and_si256(wide, low_half);
      weights[c] = _mm256_mul_ps(_mm256_cvtepi32_ps(values), _mm256_set1_ps(scale[c * groups + g]));
    }
    ZOO_UNROLL for (int r = 0; r < R; ++r) {
      const __m256 row = _mm256_loadu_ps(x + r * in + k);
      ZOO_UNROLL for (int c = 0; c < C; ++c) sums[r][c] = _mm256_fmadd_ps(row, weights[c], sums[r][c]);
    }
    if ((left_in_group -= 8) == 0) ++g, left_in_group = group;
  }
  ZOO_UNROLL for (int r = 0; r < R; ++r) {
    ZOO_UNROLL for (int c = 0; c < C; ++c) {
      // The zeros' and the -8 offsets' share, group by group in order.
      float offset = 0.0f;
      for (int64_t i = 0; i < groups; ++i) {
        const float shift = std::fma(-8.0f, scale[c * groups + i], zero[c * groups + i]);
        offset = std::fma(shift, x_group_sums[r * groups + i], offset);
      }
      y[r * ld_y + c] = lane_sum8(sums[r][c]) + offset + (bias ? bias[c] : 0.0f);
    }
  }
}

// AVX2's dequantizers, 8 lanes. The empty asm keeps the product in a register of its own, so that
// no compiler contracts it and the add into a fused multiply-add (dequantize_weight rounds twice).
ZOO_AVX2 inline __m256 rounded(__m256 v) {
  asm("" : "+x"(v));
  return v;
}

ZOO_AVX2 void int8_dequantize_avx2(const int8_t* w, const float* scale, int64_t in, int64_t rows, float* out) {
  for (int64_t n = 0; n < rows; ++n) {
    const __m256 s = _mm256_set1_ps(scale[n]);
    int64_t k = 0;
    for (; k + 8 <= in; k += 8) {
      const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(w + n * in + k));
      _mm256_storeu_ps(out + n * in + k, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes)), s));
    }
    for (; k < in; ++k) out[n * in + k] = static_cast<float>(w[n * in + k]) * scale[n];
  }
}

ZOO_AVX2 void int4_dequantize_avx2(const uint8_t* w, const float* scale, const float* zero, int64_t in, int64_t group,
                                   int64_t rows, float* out) {
  const int64_t groups = in / group;
  const __m256i low_half = _mm256_set1_epi32(0x0f);
  const __m256 eight = _mm256_set1_ps(8.0f);
  for (int64_t n = 0; n < rows; ++n) {
    for (int64_t k = 0; k < in; k += 32) {
      const __m256 s = _mm256_set1_ps(scale[n * groups + k / group]), z = _mm256_set1_ps(zero[n * groups + k / group]);
      const uint8_t* bytes = w + n * (in / 2) + k / 2;
      for (int half = 0; half < 2; ++half) {  // bytes 0-7, then 8-15: inputs k + 8 half .. and k + 16 + 8 half ..
        const __m256i wide = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(bytes + 8 * half)));
        const __m256 low = _mm256_sub_ps(_mm256_cvtepi32_ps(_mm256_and_si256(wide, low_half)), eight);
        const __m256 high = _mm256_sub_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(wide, 4)), eight);
        _mm256_storeu_ps(out + n * in + k + 8 * half, _mm256_add_ps(rounded(_mm256_mul_ps(low, s)), z));
        _mm256_storeu_ps(out + n * in + k + 16 + 8 * half, _mm256_add_ps(rounded(_mm256_mul_ps(high, s)), z));
      }
    }
  }
}

}  // namespace
ZOO_AVX512_KERNELS_END

namespace {

// A kernel's block of R rows and C columns at row r, column n (the AVX-512 or AVX2 one).
template <QuantizedRowsKernel K>
struct Int8Block {
  const float* x;
  const int8_t* w;
  const float *scale, *bias;
  int64_t in;
  float* y;
  int64_t ld_y;
  template <int R, int C>
  void run(int64_t r, int64_t n) const {
    const float* b = bias ? bias + n : nullptr;
    if constexpr (K == QuantizedRowsKernel::kAvx512) {
      int8_block<R, C>(x + r * in, w + n * in, in, scale + n, b, y + r * ld_y + n, ld_y);
    } else {
      int8_block_avx2<R, C>(x + r * in, w + n * in, in, scale + n, b, y + r * ld_y + n, ld_y);
    }
  }
};

// bf16 rows (AVX-512 BF16 alone: the template's kernel is not asked).
template <QuantizedRowsKernel>
struct Int8Bf16Block {
  const uint16_t* x;
  const int8_t* w;
  const float *scale, *bias;
  int64_t in;
  float* y;
  int64_t ld_y;
  template <int R, int C>
  void run(int64_t r, int64_t n) const {
    int8_bf16_block<R, C>(x + r * in, w + n * in, in, scale + n, bias ? bias + n : nullptr, y + r * ld_y + n, ld_y);
  }
};

template <QuantizedRowsKernel K>
struct Int4Block {
  const float *x, *x_group_sums;
  const uint8_t* w;
  const float *scale, *zero, *bias;
  int64_t in, group;
  float* y;
  int64_t ld_y;
  template <int R, int C>
  void run(int64_t r, int64_t n) const {
    const int64_t groups = in / group;
    const float* b = bias ? bias + n : nullptr;
    if constexpr (K == QuantizedRowsKernel::kAvx512) {
      int4_block<R, C>(x + r * in, x_group_sums + r * groups, w + n * (in / 2), scale + n * groups,
                       zero + n * groups, in, group, b, y + r * ld_y + n, ld_y);
    } else {
      int4_block_avx2<R, C>(x + r * in, x_group_sums + r * groups, w + n * (in / 2), scale + n * groups,
                            zero + n * groups, in, group, b, y + r * ld_y + n, ld_y);
    }
  }
};

// Every block of `rows` rows and columns [begin, end). AVX-512, as f32_rows_dot: one row against
// 8 columns (more loads in flight), more rows 4 at a time against 6 (24 sums, 6 weights and a row
// in 31 of the 32 registers). AVX2's 16 registers: one row against 4, more rows 4 against 3.
template <template <QuantizedRowsKernel> class Block, class... Args>
void run_blocks(QuantizedRowsKernel kernel, int64_t rows, int64_t begin, int64_t end, Args... args) {
  switch (kernel) {
    case QuantizedRowsKernel::kAvx512: {
      const Block<QuantizedRowsKernel::kAvx512> block{args...};
      return rows == 1 ? columns<1, 8>(rows, begin, end, block) : columns<4, 6>(rows, begin, end, block);
    }
    case QuantizedRowsKernel::kAvx2: {
      const Block<QuantizedRowsKernel::kAvx2> block{args...};
      return rows == 1 ? columns<1, 4>(rows, begin, end, block) : columns<4, 3>(rows, begin, end, block);
    }
  }
}

// Every row against columns [n, n + C): 8 rows at a time, then 4, then one.
template <int C, class Block>
void all_rows(int64_t rows, int64_t n, const Block& block) {
  int64_t r = 0;
  for (; r + 8 <= rows; r += 8) block.template run<8, C>(r, n);
  for (; r + 4 <= rows; r += 4) block.template run<4, C>(r, n);
  for (; r < rows; ++r) block.template run<1, C>(r, n);
}

// bf16 rows through int8 weights: widening a weight costs five instructions per 32 inputs, as
// much as 5 of its products, so many rows share each widened weight: 3 columns at a time (24
// sums, 3 weights and a row), all the rows against them before the next 3, whose bytes the cache
// still holds for the later rows. One row: 8 columns at a time (more loads in flight).
void int8_bf16_blocks(int64_t rows, int64_t begin, int64_t end, const Int8Bf16Block<QuantizedRowsKernel::kAvx512>& block) {
  if (rows == 1) return columns<1, 8>(rows, begin, end, block);
  int64_t n = begin;
  for (; n + 3 <= end; n += 3) all_rows<3>(rows, n, block);
  for (; n < end; ++n) all_rows<1>(rows, n, block);
}

}  // namespace
#endif

bool cpu_runs(QuantizedRowsKernel kernel) {
#if ZOO_X86_64_AVX512
  switch (kernel) {
    case QuantizedRowsKernel::kAvx512:
      return cpu_runs_f32_rows_dot() && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
    case QuantizedRowsKernel::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  }
#endif
  return false;
}

std::optional<QuantizedRowsKernel> quantized_rows_kernel() {
  static const std::optional<QuantizedRowsKernel> best = []() -> std::optional<QuantizedRowsKernel> {
    // ZOO_QUANTIZED_KERNEL=avx2 measures the AVX2 twin on an AVX-512 machine.
    if (const char* asked = std::getenv("ZOO_QUANTIZED_KERNEL"); asked != nullptr && *asked != '\0') {
      const auto kernel = from_string<QuantizedRowsKernel>(asked);
      if (!cpu_runs(kernel)) {
        throw std::runtime_error(std::string("ZOO_QUANTIZED_KERNEL=") + asked + ": this CPU cannot run it");
      }
      return kernel;
    }
    if (cpu_runs(QuantizedRowsKernel::kAvx512)) return QuantizedRowsKernel::kAvx512;
    if (cpu_runs(QuantizedRowsKernel::kAvx2)) return QuantizedRowsKernel::kAvx2;
    return std::nullopt;
  }();
  return best;
}

bool cpu_runs_quantized_rows_dot() { return quantized_rows_kernel().has_value(); }

bool cpu_runs_int8_bf16_rows_dot() {
#if ZOO_X86_64_AVX512
  static const bool runs = cpu_runs(QuantizedRowsKernel::kAvx512) && __builtin_cpu_supports("avx512bf16");
  return runs;
#else
  return false;
#endif
}

namespace {

QuantizedRowsKernel chosen(std::optional<QuantizedRowsKernel> kernel, const char* function) {
  if (!kernel) kernel = quantized_rows_kernel();
  if (!kernel || !cpu_runs(*kernel)) {
    throw std::logic_error(std::string(function) + ": this CPU runs neither kernel (AVX-512F/BW, AVX2 with FMA) asked");
  }
  return *kernel;
}

void check_int4_group(int64_t group, int64_t in, const char* function) {
  if (group <= 0 || group % 32 != 0 || in % group != 0) {
    throw std::invalid_argument(std::string(function) + ": the group (" + std::to_string(group) +
                                ") must be a multiple of 32 dividing the inputs (" + std::to_string(in) + ")");
  }
}

}  // namespace

void int8_rows_dot(const float* x, int64_t rows, const int8_t* w, const float* scale, int64_t in, const float* bias,
                   int64_t begin, int64_t end, float* y, int64_t ld_y, std::optional<QuantizedRowsKernel> kernel) {
  const auto use = chosen(kernel, "int8_rows_dot");
  static_cast<void>(use);  // where neither kernel is built
#if ZOO_X86_64_AVX512
  run_blocks<Int8Block>(use, rows, begin, end, x, w, scale, bias, in, y, ld_y);
#endif
}

void int8_bf16_rows_dot(const uint16_t* x, int64_t rows, const int8_t* w, const float* scale, int64_t in,
                        const float* bias, int64_t begin, int64_t end, float* y, int64_t ld_y) {
  if (!cpu_runs_int8_bf16_rows_dot()) throw std::logic_error("int8_bf16_rows_dot: this CPU has no AVX-512 BF16");
#if ZOO_X86_64_AVX512
  int8_bf16_blocks(rows, begin, end, Int8Bf16Block<QuantizedRowsKernel::kAvx512>{x, w, scale, bias, in, y, ld_y});
#endif
}

void int4_rows_dot(const float* x, int64_t rows, const uint8_t* w, const float* scale, const float* zero, int64_t in,
                   int64_t group, const float* bias, int64_t begin, int64_t end, float* y, int64_t ld_y,
                   std::optional<QuantizedRowsKernel> kernel) {
  const auto use = chosen(kernel, "int4_rows_dot");
  static_cast<void>(use);
  check_int4_group(group, in, "int4_rows_dot");
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
  run_blocks<Int4Block>(use, rows, begin, end, x, static_cast<const float*>(group_sums.data()), w, scale, zero, bias,
                        in, group, y, ld_y);
#endif
}

void int8_dequantize_rows(const int8_t* w, const float* scale, int64_t in, int64_t begin, int64_t end, float* out,
                          std::optional<QuantizedRowsKernel> kernel) {
  const auto use = chosen(kernel, "int8_dequantize_rows");
  static_cast<void>(use);
#if ZOO_X86_64_AVX512
  switch (use) {
    case QuantizedRowsKernel::kAvx512: return int8_dequantize_avx512(w + begin * in, scale + begin, in, end - begin, out);
    case QuantizedRowsKernel::kAvx2: return int8_dequantize_avx2(w + begin * in, scale + begin, in, end - begin, out);
  }
#endif
}

void int4_dequantize_rows(const uint8_t* w, const float* scale, const float* zero, int64_t in, int64_t group,
                          int64_t begin, int64_t end, float* out, std::optional<QuantizedRowsKernel> kernel) {
  const auto use = chosen(kernel, "int4_dequantize_rows");
  static_cast<void>(use);
  check_int4_group(group, in, "int4_dequantize_rows");
#if ZOO_X86_64_AVX512
  const int64_t groups = in / group;
  switch (use) {
    case QuantizedRowsKernel::kAvx512:
      return int4_dequantize_avx512(w + begin * (in / 2), scale + begin * groups, zero + begin * groups, in, group,
                                    end - begin, out);
    case QuantizedRowsKernel::kAvx2:
      return int4_dequantize_avx2(w + begin * (in / 2), scale + begin * groups, zero + begin * groups, in, group,
                                  end - begin, out);
  }
#endif
}

}  // namespace zoo
