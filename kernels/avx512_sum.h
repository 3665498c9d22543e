#pragma once
// What zoo's AVX-512 row kernels (kernels/f32_rows_dot.h, kernels/quantized_rows_dot.h) share:
// whether the compiler can build them (ZOO_X86_64_AVX512: GCC or Clang for x86-64; each kernel
// still asks the CPU at run time), the one fixed tree that sums 16 lanes, and the unrolling that
// keeps a block's sums in registers. Kernels sit between ZOO_AVX512_KERNELS_BEGIN and _END.

#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
#define ZOO_X86_64_AVX512 1
#include <immintrin.h>

// The loops over a block's rows and columns unrolled at -O2 too, so that its sums stay in
// registers (at -O2 GCC keeps them in memory: 1.5-2x slower).
#define ZOO_UNROLL _Pragma("GCC unroll 16")

// GCC 12's AVX-512 headers warn about their own placeholder operands (`__Y = __Y`).
#define ZOO_AVX512_KERNELS_BEGIN                               \
  _Pragma("GCC diagnostic push")                               \
  _Pragma("GCC diagnostic ignored \"-Wuninitialized\"")        \
  _Pragma("GCC diagnostic ignored \"-Wmaybe-uninitialized\"")
#define ZOO_AVX512_KERNELS_END _Pragma("GCC diagnostic pop")

namespace zoo {

// The 16 lanes' sum by halves in registers, one fixed tree (lanes 8 apart, then 4, 2, 1). Not
// _mm512_reduce_add_ps, which GCC 12 warns about in its own header.
__attribute__((target("avx512f"))) inline float lane_sum(__m512 v) {
  v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, 0x4e));  // the 256-bit halves swapped
  v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, 0xb1));  // 128-bit quarters swapped in pairs
  v = _mm512_add_ps(v, _mm512_permute_ps(v, 0x4e));        // pairs of lanes swapped
  v = _mm512_add_ps(v, _mm512_permute_ps(v, 0xb1));        // neighbouring lanes swapped
  return _mm512_cvtss_f32(v);
}

}  // namespace zoo
#endif
