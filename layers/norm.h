#pragma once
// Normalisation: LayerNorm (Ba et al., 2016; bias optional) and RMSNorm (Zhang & Sennrich,
// 2019; T5, LLaMA), plain or scaled by (1 + weight) (Gemma), one module chosen by NormKind.

#include <cstdint>

#include <torch/nn/cloneable.h>
#include <torch/nn/pimpl.h>

#include "layers/variants.h"

namespace zoo {

struct NormOptions {
  explicit NormOptions(int64_t d_model) : d_model_(d_model) {}
  TORCH_ARG(int64_t, d_model);
  TORCH_ARG(NormKind, kind) = NormKind::kLayerNorm;
  // 1e-5 is PyTorch's LayerNorm default; BERT uses 1e-12, T5 and LLaMA 1e-6.
  TORCH_ARG(double, eps) = 1e-5;
  // LayerNorm only: RMSNorm has no bias by definition.
  TORCH_ARG(bool, bias) = true;
};

class NormImpl : public torch::nn::Cloneable<NormImpl> {
 public:
  explicit NormImpl(const NormOptions& options);
  void reset() override;
  void reset_parameters();
  // x (..., d_model) -> same shape. RMSNorm takes the mean square of half-precision inputs in
  // float32, as T5 does, so they do not overflow.
  torch::Tensor forward(const torch::Tensor& x);

  NormOptions options;
  torch::Tensor weight;
  torch::Tensor bias;  // undefined for RMSNorm and bias-free LayerNorm
};
TORCH_MODULE(Norm);

}  // namespace zoo
