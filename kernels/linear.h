#pragma once
// y = x W^T + b, as torch::nn::Linear computes it, with one exception: a single input vector
// (batch-1 decoding) goes through a matrix-vector product, in float32 LibTorch's and in bf16
// zoo's own where the CPU has AVX-512 BF16 (kernels/bf16_dot.h). Decoding a token is nothing but
// reading every weight once (docs/performance-libtorch-1.13.md says why each was chosen).

#include <torch/nn/modules/linear.h>
#include <torch/types.h>

namespace zoo {

// x: (..., in), weight: (out, in), bias: (out) or undefined. Returns (..., out).
torch::Tensor project(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias = {});

// The same through a torch::nn::Linear's parameters.
inline torch::Tensor project(const torch::nn::Linear& layer, const torch::Tensor& x) {
  return project(x, layer->weight, layer->bias);
}

}  // namespace zoo
