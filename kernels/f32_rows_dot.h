#pragma once
// A few float32 rows through a row-major matrix, y = x W^T + b: a batch of decoding sequences
// (1 to kFewRowsMax rows) through a projection, which reads every weight from memory for a few
// products each. Blocks of 6 rows of W by 4 rows of x sit in 24 AVX-512 accumulators while the
// blocks a few ahead are fetched into L2, so the weights stream at the memory's speed and each is
// loaded once for 4 rows. On 2 Zen 4 cores it runs gpt2-small's projections for one decoding step
// in 14-15 ms for 1 row, 16-18 for 8 and 24-25 for 16, where oneDNN's linear takes 21, 33 and
// 44 ms (LibTorch's, MKL: 36, 62, 75).
// Every output is the same sum in the same order (16 lanes over the row, then one fixed tree)
// whatever the number of rows and wherever it falls in the block: a sequence decoded in a batch
// gets bit for bit the projections it gets alone. Plain C++ with x86 intrinsics, no torch.

#include <cstdint>

namespace zoo {

// Past this many rows oneDNN's blocked GEMM was as fast (32 rows, against this kernel's 4-by-4
// blocks of 2026-11-26) or faster.
constexpr int64_t kFewRowsMax = 24;

// Whether this CPU runs the kernel (AVX-512F; built with GCC or Clang for x86-64).
bool cpu_runs_f32_rows_dot();

// x: (rows, in) row-major, w: (out, in) row-major, bias: (out) or null. Writes columns
// [begin, end) of y: (rows, ld_y), y[r * ld_y + n] = x[r, :] . w[n, :] + bias[n].
void f32_rows_dot(const float* x, int64_t rows, const float* w, int64_t in, const float* bias, int64_t begin,
                  int64_t end, float* y, int64_t ld_y);

// y = sum over rows j of p[j] * v[j, :]: the probabilities of one attention query times a head's
// values, v: (rows, width) row-major, y: (width). Summed in row order, 16 columns per register.
void f32_weighted_row_sum(const float* p, const float* v, int64_t rows, int64_t width, float* y);

}  // namespace zoo
