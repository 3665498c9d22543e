#pragma once
// AdamW (Loshchilov & Hutter, 2019) with decoupled weight decay on matrices only: biases, norm
// weights and embedding tables are not decayed, as in GPT-2/nanoGPT, BERT and Hugging Face.

#include <memory>
#include <string>
#include <vector>

#include <torch/nn/module.h>
#include <torch/optim/adamw.h>

namespace zoo {

struct ParameterGroups {
  std::vector<std::string> decay_names, no_decay_names;
  std::vector<torch::Tensor> decay, no_decay;
};

// Splits the trainable parameters of `model`: no decay for every parameter of a norm or an
// embedding module (token, position, segment, relative-bias tables) and for every bias; decay
// for the rest (linear weights). A tensor shared by two modules (a tied head) appears once.
ParameterGroups parameter_groups(const torch::nn::Module& model);

struct OptimizerOptions {
  double lr = 3e-4;
  double weight_decay = 0.1;
  double beta1 = 0.9, beta2 = 0.95;
  double eps = 1e-8;
};

// A torch::optim::AdamW (same state and checkpoints) whose CPU float32 update makes one fused
// pass per parameter (optimizer.cpp); other cases take LibTorch's own update.
std::unique_ptr<torch::optim::AdamW> make_adamw(const torch::nn::Module& model, const OptimizerOptions& options);

// Drops the gradients of every parameter the optimizer holds (set_to_none, as PyTorch's
// zero_grad does by default): backward then writes fresh gradients instead of adding into
// zero-filled ones, which costs a pass over all of them. LibTorch 1.13's zero_grad zero-fills.
void clear_gradients(torch::optim::Optimizer& optimizer);

// Sets the learning rate of every parameter group.
void set_learning_rate(torch::optim::Optimizer& optimizer, double lr);

}  // namespace zoo
