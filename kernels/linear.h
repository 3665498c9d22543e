#pragma once
// y = x W^T + b, as torch::nn::Linear computes it, by the fastest path the CPU has where no
// gradient is wanted: float32 through oneDNN's linear (LibTorch's goes to MKL, half its speed on
// AMD's CPUs), and a single bf16 vector (batch-1 decoding) through zoo's own kernel where the
// CPU has AVX-512 BF16 (kernels/bf16_dot.h). Decoding a token is nothing but reading every
// weight once (docs/performance.md says why each was chosen).

#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/types.h>

namespace zoo {

// x: (..., in), weight: (out, in), bias: (out) or undefined. Returns (..., out).
torch::Tensor project(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias = {});

// The same through a torch::nn::Linear's parameters, or its quantized weight
// (kernels/quantized_weight.h: quantized_project) when it holds one.
torch::Tensor project(const torch::nn::Linear& layer, const torch::Tensor& x);

// x (..., d) onto a token embedding's table (vocabulary, d): a head tied to the embedding, its
// table float or quantized.
torch::Tensor project(const torch::Tensor& x, const torch::nn::Embedding& table);

// The rows `ids` of an embedding's table, float or quantized (in the dtype its weight had).
torch::Tensor embed(const torch::nn::Embedding& table, const torch::Tensor& ids);

}  // namespace zoo
