#include "kernels/bf16_dot.h"

#include <cstring>
#include <stdexcept>

#if defined(__GNUC__) && defined(__x86_64__)
#define ZOO_X86_64_GNU 1
#include <immintrin.h>
#endif

namespace zoo {
namespace {

inline float bf16_to_float(uint16_t bits) {
  const uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &wide, sizeof f);
  return f;
}

// Float32 sums in 16 independent lanes, which the compiler turns into one vector register.
// Built for AVX-512, AVX2 and plain x86-64 and chosen at load time (GCC's target_clones).
#if ZOO_X86_64_GNU && !defined(__clang__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
void widen_rows_dot(const uint16_t* w, const uint16_t* x, int64_t in, int64_t begin, int64_t end, float* y) {
  constexpr int64_t kLanes = 16;
  for (int64_t i = begin; i < end; ++i) {
    const uint16_t* row = w + i * in;
    float lanes[kLanes] = {};
    int64_t j = 0;
    for (; j + kLanes <= in; j += kLanes) {
      for (int64_t l = 0; l < kLanes; ++l) lanes[l] += bf16_to_float(row[j + l]) * bf16_to_float(x[j + l]);
    }
    float sum = 0;
    for (; j < in; ++j) sum += bf16_to_float(row[j]) * bf16_to_float(x[j]);
    for (int64_t l = 0; l < kLanes; ++l) sum += lanes[l];
    y[i] = sum;
  }
}

#if ZOO_X86_64_GNU
// One row at a time in two independent accumulators (so that successive instructions do not
// wait on each other), the row's tail through a masked load. vdpbf16ps multiplies bf16 pairs
// exactly and adds them into float32; it treats subnormal bf16 inputs as zero (below 1e-38,
// which weights and activations do not reach).
__attribute__((target("avx512f,avx512bw,avx512bf16")))
void instruction_rows_dot(const uint16_t* w, const uint16_t* x, int64_t in, int64_t begin, int64_t end, float* y) {
  constexpr int64_t kPerRegister = 32;
  const int64_t tail = in % kPerRegister;
  const __mmask32 tail_mask = static_cast<__mmask32>((uint64_t{1} << tail) - 1);
  for (int64_t i = begin; i < end; ++i) {
    const uint16_t* row = w + i * in;
    __m512 even = _mm512_setzero_ps(), odd = _mm512_setzero_ps();
    int64_t j = 0;
    for (; j + 2 * kPerRegister <= in; j += 2 * kPerRegister) {
      even = _mm512_dpbf16_ps(even, (__m512bh)_mm512_loadu_si512(row + j), (__m512bh)_mm512_loadu_si512(x + j));
      odd = _mm512_dpbf16_ps(odd, (__m512bh)_mm512_loadu_si512(row + j + kPerRegister),
                             (__m512bh)_mm512_loadu_si512(x + j + kPerRegister));
    }
    if (j + kPerRegister <= in) {
      even = _mm512_dpbf16_ps(even, (__m512bh)_mm512_loadu_si512(row + j), (__m512bh)_mm512_loadu_si512(x + j));
      j += kPerRegister;
    }
    if (tail > 0) {
      odd = _mm512_dpbf16_ps(odd, (__m512bh)_mm512_maskz_loadu_epi16(tail_mask, row + j),
                             (__m512bh)_mm512_maskz_loadu_epi16(tail_mask, x + j));
    }
    // Through memory rather than _mm512_reduce_add_ps, which GCC 12 warns about in its own header.
    alignas(64) float lanes[16];
    _mm512_store_ps(lanes, _mm512_add_ps(even, odd));
    float sum = 0;
    for (const float lane : lanes) sum += lane;
    y[i] = sum;
  }
}
#endif

}  // namespace

bool cpu_runs(Bf16DotKernel kernel) {
  switch (kernel) {
    case Bf16DotKernel::kDotProductInstruction:
#if ZOO_X86_64_GNU
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512bf16");
#else
      return false;
#endif
    case Bf16DotKernel::kWidenToFloat32:
      return true;
  }
  return false;
}

Bf16DotKernel fastest_bf16_dot_kernel() {
  static const Bf16DotKernel fastest = cpu_runs(Bf16DotKernel::kDotProductInstruction)
                                           ? Bf16DotKernel::kDotProductInstruction
                                           : Bf16DotKernel::kWidenToFloat32;
  return fastest;
}

void round_to_bf16(const float* values, const uint16_t* bias, int64_t n, uint16_t* out) {
  for (int64_t i = 0; i < n; ++i) {
    const float value = bias != nullptr ? values[i] + bf16_to_float(bias[i]) : values[i];
    uint32_t bits;
    std::memcpy(&bits, &value, sizeof bits);
    if ((bits & 0x7fffffffu) > 0x7f800000u) {
      out[i] = static_cast<uint16_t>((bits >> 16) | 0x40);  // NaN stays a (quiet) NaN
    } else {
      out[i] = static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
    }
  }
}

#if ZOO_X86_64_GNU && !defined(__clang__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
void bf16_weighted_row_sum(const float* p, const uint16_t* v, int64_t rows, int64_t width, float* y) {
  for (int64_t c = 0; c < width; ++c) y[c] = 0;
  for (int64_t j = 0; j < rows; ++j) {
    const uint16_t* row = v + j * width;
    const float weight = p[j];
    for (int64_t c = 0; c < width; ++c) y[c] += weight * bf16_to_float(row[c]);
  }
}

void bf16_rows_dot(Bf16DotKernel kernel, const uint16_t* w, const uint16_t* x, int64_t in, int64_t begin, int64_t end,
                   float* y) {
  switch (kernel) {
    case Bf16DotKernel::kDotProductInstruction:
#if ZOO_X86_64_GNU
      if (cpu_runs(kernel)) return instruction_rows_dot(w, x, in, begin, end, y);
#endif
      throw std::invalid_argument("bf16_rows_dot: this CPU has no AVX-512 BF16 dot-product instruction");
    case Bf16DotKernel::kWidenToFloat32:
      return widen_rows_dot(w, x, in, begin, end, y);
  }
}

}  // namespace zoo
