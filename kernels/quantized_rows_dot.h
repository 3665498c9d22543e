#pragma once
// A few float32 rows through quantized weights, y = x W^T + b, with W read packed: the few-row
// products of decoding and serving, which read every weight once for a few products each, so
// int8 reads a quarter of float32's bytes and int4 an eighth. The formats are
// kernels/quantized_weight.h's; the reference is dequantize-then-matmul (its tests).
// The integers are widened to floats 16 at a time and summed against x in float32, the scales
// applied to each output's sum (int8) or each group's (int4), so that a weight costs a load and
// two conversions, not a dequantization. Blocks as kernels/f32_rows_dot.h's: every output is the
// same sum in the same order (16 lanes over the row, one fixed tree, the groups in order)
// whatever the number of rows and wherever it falls in a block, so a sequence decoded in a batch
// gets bit for bit the products it gets alone. An AVX2 twin (8 lanes, FMA) serves CPUs without
// AVX-512; its sums are in another order, so its bits differ from AVX-512's, not between rows.
// Products of many rows (prefill) multiply floats instead: *_dequantize_rows give a tile of the
// weight's outputs in float32, dequantize_weight's bits, for LibTorch's matmul (quantized_project).
// Plain C++ with x86 intrinsics, no torch.

#include <cstdint>
#include <optional>

#include "core/enum_names.h"

namespace zoo {

enum class QuantizedRowsKernel { kAvx512, kAvx2 };
ZOO_ENUM_NAMES(QuantizedRowsKernel, "quantized rows kernel", {"avx512", QuantizedRowsKernel::kAvx512},
               {"avx2", QuantizedRowsKernel::kAvx2});

// Whether this CPU runs `kernel` (built with GCC or Clang for x86-64; AVX-512F/BW/VL, or AVX2 and
// FMA), and the best it runs (nullopt: neither; the environment's ZOO_QUANTIZED_KERNEL=avx2 or
// avx512 asks for one, refused when this CPU cannot run it).
bool cpu_runs(QuantizedRowsKernel kernel);
std::optional<QuantizedRowsKernel> quantized_rows_kernel();
bool cpu_runs_quantized_rows_dot();

// int8 weights, one scale per output: x (rows, in) row-major, w (out, in) row-major,
// scale (out), bias (out) or null. Writes columns [begin, end) of y (rows, ld_y):
// y[r * ld_y + n] = scale[n] * (x[r, :] . w[n, :]) + bias[n].
// `kernel`: which (nullopt: the best this CPU runs; one it does not run is a logic error).
void int8_rows_dot(const float* x, int64_t rows, const int8_t* w, const float* scale, int64_t in, const float* bias,
                   int64_t begin, int64_t end, float* y, int64_t ld_y,
                   std::optional<QuantizedRowsKernel> kernel = std::nullopt);

// The same for bf16 rows (x: their raw bits, (rows, in) row-major), on CPUs with AVX-512 BF16
// (Intel since Cooper Lake, AMD Zen 4; cpu_runs_int8_bf16_rows_dot, else a logic error): each
// pair of products summed by one dot instruction (vdpbf16ps), the int8 values exact in bf16 and
// the products exact in float32, so a bf16 row's sum is what float32 rows give it but for the
// order of the additions (and subnormals flushed), for half the instructions per product; each
// weight widened once for 8 rows. The same bits alone or batched.
bool cpu_runs_int8_bf16_rows_dot();
void int8_bf16_rows_dot(const uint16_t* x, int64_t rows, const int8_t* w, const float* scale, int64_t in,
                        const float* bias, int64_t begin, int64_t end, float* y, int64_t ld_y);

// int4 weights in groups of `group` inputs (a multiple of 32 dividing `in`): w (out, in / 2)
// bytes, each 32 inputs in 16 bytes, byte j holding input j in its low half and input j + 16 in
// its high half; a value q in [0, 15] stands for (q - 8) * scale + zero of its output's group,
// scale and zero (out, in / group): y = sum over groups of scale * (x . q) + (zero - 8 scale) *
// (the sum of x over the group), plus bias. Writes columns [begin, end) of y as int8_rows_dot does.
void int4_rows_dot(const float* x, int64_t rows, const uint8_t* w, const float* scale, const float* zero, int64_t in,
                   int64_t group, const float* bias, int64_t begin, int64_t end, float* y, int64_t ld_y,
                   std::optional<QuantizedRowsKernel> kernel = std::nullopt);

// Rows [begin, end) of an int8 weight (out, in) in float32 into out ((end - begin), in):
// w * scale, one multiply, the bits dequantize_weight gives.
void int8_dequantize_rows(const int8_t* w, const float* scale, int64_t in, int64_t begin, int64_t end, float* out,
                          std::optional<QuantizedRowsKernel> kernel = std::nullopt);

// The same of an int4 weight (int4_rows_dot's layout): (q - 8) * scale + zero, the product and
// the sum each rounded to float32 (no fused multiply-add), as dequantize_weight's two operations.
void int4_dequantize_rows(const uint8_t* w, const float* scale, const float* zero, int64_t in, int64_t group,
                          int64_t begin, int64_t end, float* out, std::optional<QuantizedRowsKernel> kernel = std::nullopt);

}  // namespace zoo
