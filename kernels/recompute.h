#pragma once
// Activation checkpointing (Chen et al., 2016, "Training Deep Nets with Sublinear Memory Cost";
// torch.utils.checkpoint): a block runs forward without keeping its intermediate activations,
// only its input, and runs again in backward to produce the gradients of its input and weights.
// Memory for a stack of L blocks falls from L blocks' activations to their inputs plus one
// block's; the price is a second forward of each block.

#include <functional>
#include <vector>

#include <torch/nn/module.h>
#include <torch/types.h>

namespace zoo {

using RecomputedFn = std::function<torch::Tensor(const std::vector<torch::Tensor>&)>;
using RecomputedOutputsFn = std::function<std::vector<torch::Tensor>(const std::vector<torch::Tensor>&)>;

// fn(inputs), remembering only the inputs (a block's input, its attention bias, an encoder's
// output; undefined ones stay undefined). In backward, fn runs again with the random state
// (dropout) and autocast it had the first time, and the gradients flow to the inputs and to
// `parameters` (the trainable tensors fn reads). Without gradients needed, simply fn(inputs).
torch::Tensor recompute_in_backward(const RecomputedFn& fn, const std::vector<torch::Tensor>& inputs,
                                    const std::vector<torch::Tensor>& parameters);

// The same for a function of several outputs (a mixture-of-experts block's output and its router
// logits, which the load-balancing loss reads): gradients reaching any of them flow back.
std::vector<torch::Tensor> recompute_outputs_in_backward(const RecomputedOutputsFn& fn,
                                                         const std::vector<torch::Tensor>& inputs,
                                                         const std::vector<torch::Tensor>& parameters);

// The tensors of `module` that require gradients: what recompute_in_backward needs to know.
std::vector<torch::Tensor> trainable_parameters(const torch::nn::Module& module);

}  // namespace zoo
