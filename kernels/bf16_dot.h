#pragma once
// The inner loop of batch-1 bf16 decoding: y[i] = w[i, :] . x for rows [begin, end) of a
// row-major bf16 matrix and a bf16 vector, summed in float32. Decoding a token reads every
// weight once, so this runs at the speed the memory delivers the weights, given code that
// keeps up with it; LibTorch 1.13's bf16 mv widens element by element (3 GB/s here).
// Plain C++ on raw bf16 bits (the top half of a float32), so that it compiles without torch.

#include <cstdint>

namespace zoo {

enum class Bf16DotKernel {
  kDotProductInstruction,  // AVX-512 BF16's vdpbf16ps: 32 bf16 products summed into float32 per instruction
  kWidenToFloat32,         // widen to float32 and multiply-add: any x86-64, AVX-512/AVX2 where present
};

// The dot-product instruction on a CPU that has it (Zen 4, Cooper Lake, Sapphire Rapids), else
// the widening kernel.
Bf16DotKernel fastest_bf16_dot_kernel();

// Whether this CPU can run `kernel`.
bool cpu_runs(Bf16DotKernel kernel);

// w: (rows, in) bf16 bits, x: (in) bf16 bits, y: float32 outputs for rows [begin, end).
void bf16_rows_dot(Bf16DotKernel kernel, const uint16_t* w, const uint16_t* x, int64_t in, int64_t begin, int64_t end,
                   float* y);

// out[i] = values[i] + bias[i] rounded to the nearest bf16, ties to even (as LibTorch rounds);
// bias may be null. The end of a bf16 projection: its float32 sums rounded once.
void round_to_bf16(const float* values, const uint16_t* bias, int64_t n, uint16_t* out);

// y = sum over rows j of p[j] * v[j, :]: float32 weights of bf16 rows (the probabilities of one
// attention query times a head's values), v: (rows, width) bf16 bits, y: (width) float32.
void bf16_weighted_row_sum(const float* p, const uint16_t* v, int64_t rows, int64_t width, float* y);

}  // namespace zoo
