#pragma once
// Position-wise feed-forward network: down(act(up(x))), or for gated activations
// down(act(gate(x)) * up(x)) (Shazeer, 2020, "GLU Variants Improve Transformer").

#include <cstdint>
#include <vector>

#include <torch/nn/cloneable.h>
#include <torch/nn/modules/dropout.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include "layers/lora.h"
#include "layers/variants.h"

namespace zoo {

struct FeedForwardOptions {
  FeedForwardOptions(int64_t d_model, int64_t d_ff) : d_model_(d_model), d_ff_(d_ff) {}
  TORCH_ARG(int64_t, d_model);
  TORCH_ARG(int64_t, d_ff);  // hidden width (4 * d_model in GPT-2 and BERT)
  TORCH_ARG(Activation, activation) = Activation::kGELU;
  TORCH_ARG(bool, bias) = true;
  // Applied to the hidden activations, as in PyTorch's TransformerEncoderLayer and T5.
  TORCH_ARG(double, dropout) = 0.0;
};

class FeedForwardImpl : public torch::nn::Cloneable<FeedForwardImpl> {
 public:
  explicit FeedForwardImpl(const FeedForwardOptions& options);
  void reset() override;
  torch::Tensor forward(const torch::Tensor& x);  // (..., d_model) -> (..., d_model)

  FeedForwardOptions options;
  torch::nn::Linear up{nullptr};
  torch::nn::Linear gate{nullptr};  // gated activations only
  torch::nn::Linear down{nullptr};
  torch::nn::Dropout dropout{nullptr};
  ProjectionAdapters lora;  // LoRA adapters of up, gate, down (none unless attached)

  // What LoRA can adapt: up, gate (gated activations), down.
  std::vector<ProjectionPart> projection_parts() const;
};
TORCH_MODULE(FeedForward);

// The activation alone (for gated kinds, the one applied to the gate).
torch::Tensor activate(const torch::Tensor& x, Activation activation);

}  // namespace zoo
