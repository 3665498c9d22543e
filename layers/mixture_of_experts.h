#pragma once
// A sparse mixture-of-experts feed-forward (Shazeer et al., 2017; Mixtral, Jiang et al., 2024;
// Qwen3-MoE): a router scores E experts per token, each token goes to its top k, and its output is
// the experts' gated feed-forwards weighted by their renormalised (or raw) router probabilities.
// Computed per expert over the tokens routed to it: one gather, two matmuls and one scatter-add
// per expert that has tokens, never a loop over tokens nor all E experts over every token.
//
// The plain reference, mixture_of_experts_reference, walks token by token and expert by expert;
// tests/layers/mixture_of_experts_test.cpp compares the two and both with transformers'
// MixtralSparseMoeBlock and Qwen3MoeSparseMoeBlock.

#include <cstdint>
#include <vector>

#include <torch/nn/cloneable.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include "kernels/quantized_weight.h"
#include "layers/lora.h"
#include "layers/variants.h"

namespace zoo {

struct MixtureOfExpertsOptions {
  MixtureOfExpertsOptions(int64_t d_model, int64_t d_ff, int64_t experts, int64_t top_k)
      : d_model_(d_model), d_ff_(d_ff), experts_(experts), top_k_(top_k) {}
  TORCH_ARG(int64_t, d_model);
  TORCH_ARG(int64_t, d_ff);  // each expert's hidden width
  TORCH_ARG(int64_t, experts);
  TORCH_ARG(int64_t, top_k);
  // Each expert's feed-forward: a gated kind (swiglu in Mixtral and Qwen3-MoE).
  TORCH_ARG(Activation, activation) = Activation::kSwiGLU;
  // The top k probabilities divided by their sum (Mixtral always; Qwen3-MoE's norm_topk_prob),
  // else the softmax's own.
  TORCH_ARG(bool, normalize_top_k) = true;
  // The routing weights rounded to the input's dtype before they weight an expert's output, as
  // transformers' Qwen3-MoE does; else the weighting is in float32 (Mixtral). Equal in float32.
  TORCH_ARG(bool, round_weights) = false;
};

struct MixtureOfExpertsOutput {
  torch::Tensor out;            // the input's shape
  torch::Tensor router_logits;  // (N, E) for the N tokens, float32: the load-balancing loss reads them
};

// gate_up and down quantize with the model's weights (QuantizableStacks): each expert's rows then
// read the packed integers through quantized_project.
class MixtureOfExpertsImpl : public torch::nn::Cloneable<MixtureOfExpertsImpl>, public QuantizableStacks {
 public:
  explicit MixtureOfExpertsImpl(const MixtureOfExpertsOptions& options);
  void reset() override;

  // x: (..., d_model).
  MixtureOfExpertsOutput forward(const torch::Tensor& x);

  MixtureOfExpertsOptions options;
  torch::Tensor router;   // (E, d_model)
  // (E, 2 d_ff, d_model): expert e's gate projection is gate_up[e]'s first d_ff rows, its up
  // projection the rest (transformers' MixtralExperts.gate_up_proj, and what PEFT adapts).
  torch::Tensor gate_up;
  torch::Tensor down;     // (E, d_model, d_ff)
  // LoRA adapters of every expert's gate_up and down (none unless attached).
  ExpertLora lora_gate_up{nullptr}, lora_down{nullptr};

  // What LoRA can adapt: "gate_up" and "down", each (rows, in) per expert.
  static std::vector<std::string> lora_parts() { return {"gate_up", "down"}; }
  std::pair<int64_t, int64_t> lora_shape(const std::string& part) const;
  // Attaches an adapter of `rank` and `alpha` to `part` of every expert, registered as lora_<part>.
  void add_lora(const std::string& part, int64_t rank, double alpha);
  // Adds the adapters' updates into gate_up and down and removes them (float weights).
  void merge_lora();

  std::vector<std::string> quantizable_stacks() const override { return {"gate_up", "down"}; }
};
TORCH_MODULE(MixtureOfExperts);

// The router's choice for N tokens: each token's top k experts (N, k) and their weights (N, k),
// from logits (N, E), as transformers' MixtralTopKRouter and Qwen3MoeTopKRouter (softmax in
// float32, then top k, renormalised when `normalize`).
struct Routing {
  torch::Tensor experts, weights;
};
Routing route(const torch::Tensor& router_logits, int64_t top_k, bool normalize);

// The Switch Transformer's load-balancing loss over every MoE layer's router logits, as
// transformers' load_balancing_loss_func: E * sum_e f_e * P_e, where f_e is the share of the top-k
// assignments that went to expert e and P_e the mean router probability of e, both pooled over the
// layers and the tokens; `token_mask` (N), when defined, counts real tokens only.
torch::Tensor load_balancing_loss(const std::vector<torch::Tensor>& router_logits, int64_t top_k,
                                  const torch::Tensor& token_mask = {});

// The plain reference: token by token, each of its k experts' feed-forward by matrix-vector
// products, weighted and summed (float weights; a quantized layer's are checked against this
// over its weights dequantized).
torch::Tensor mixture_of_experts_reference(const MixtureOfExpertsImpl& moe, const torch::Tensor& x);

}  // namespace zoo
