#pragma once
// AdamW (Loshchilov & Hutter, 2019) with decoupled weight decay on matrices only: biases, norm
// weights and embedding tables are not decayed, as in GPT-2/nanoGPT, BERT and Hugging Face.

#include <map>
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

// AdamW as torch.optim.AdamW(fused=True) runs it: ATen's _fused_adamw_ over each parameter group
// (one kernel for all of a group's tensors of a dtype, on the CPU and on CUDA), with float32 step
// counts beside the parameters, so that an update reads nothing back to the host. It is a
// torch::optim::AdamW: same state, same checkpoints (the step counts are written into the state
// when it is saved). ATen's CPU kernel took 42-72 ms a step for gpt2-small's 124M parameters where
// zoo's own one-pass loop took 287 ms (2-core AMD Zen 4, avx512f avx512_bf16), so it is the only
// update.
class FusedAdamW : public torch::optim::AdamW {
 public:
  using torch::optim::AdamW::AdamW;

  // One update of every parameter with a gradient. `found_inf`, a float32 scalar on the
  // parameters' device or undefined: where it holds 1 (a non-finite loss, an fp16 overflow)
  // nothing changes, step counts included; it is never read on the host.
  void update(const torch::Tensor& found_inf = {});
  torch::Tensor step(LossClosure closure = nullptr) override;
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;

 private:
  // Each parameter's step count (float32, 0-dim, on its device), keyed as state_ is.
  mutable std::map<void*, torch::Tensor> steps_;
};

std::unique_ptr<FusedAdamW> make_adamw(const torch::nn::Module& model, const OptimizerOptions& options);

// Scales the gradients of `parameters` so that their global L2 norm is at most `max_norm`, as
// torch.nn.utils.clip_grad_norm_(foreach=True) does (coefficient max_norm / (norm + 1e-6), at most
// 1), and returns the norm before clipping as a float32 scalar on their device: no value is read
// back to the host. Parameters without a gradient are left out.
torch::Tensor clip_gradients(const std::vector<torch::Tensor>& parameters, double max_norm);

// Drops the gradients of every parameter the optimizer holds (set_to_none, as PyTorch's
// zero_grad does by default): backward then writes fresh gradients instead of adding into
// zero-filled ones, which costs a pass over all of them. LibTorch 1.13's zero_grad zero-fills.
void clear_gradients(torch::optim::Optimizer& optimizer);

// Sets the learning rate of every parameter group.
void set_learning_rate(torch::optim::Optimizer& optimizer, double lr);

}  // namespace zoo
