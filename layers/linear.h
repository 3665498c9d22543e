#pragma once
// y = x W^T + b, as torch::nn::Linear computes it, with one exception: a single input vector
// (batch-1 decoding) goes through a matrix-vector product. OpenBLAS's sgemm with one row reads
// the weights at 9-16 GB/s on this project's machine, its sgemv at 28-89 GB/s, and decoding a
// token is nothing but reading every weight once (README, Performance).

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
