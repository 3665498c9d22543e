#include "kernels/recompute.h"

#include <ATen/autocast_mode.h>
#include <ATen/core/ivalue.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/nn/module.h>
#include <torch/torch.h>
#include <torch/version.h>

namespace zoo {
namespace {

// The autocast settings of the forward, to run the recomputation under the same ones.
struct AutocastState {
  bool cpu = false, cuda = false;
  c10::ScalarType cpu_dtype = c10::kBFloat16, cuda_dtype = c10::kHalf;

  static AutocastState current() {
    AutocastState s;
    s.cpu = at::autocast::is_autocast_enabled(at::kCPU), s.cuda = at::autocast::is_autocast_enabled(at::kCUDA);
    s.cpu_dtype = at::autocast::get_autocast_dtype(at::kCPU), s.cuda_dtype = at::autocast::get_autocast_dtype(at::kCUDA);
    return s;
  }
  void apply() const {
    at::autocast::set_autocast_enabled(at::kCPU, cpu), at::autocast::set_autocast_enabled(at::kCUDA, cuda);
    at::autocast::set_autocast_dtype(at::kCPU, cpu_dtype), at::autocast::set_autocast_dtype(at::kCUDA, cuda_dtype);
  }
};

// What backward needs besides x: the function, the weights, the random and autocast state.
struct Recomputation : torch::CustomClassHolder {
  RecomputedOutputsFn fn;
  std::vector<torch::Tensor> inputs;  // as given; the defined ones are the autograd inputs
  std::vector<torch::Tensor> parameters;
  at::Generator generator;
  torch::Tensor generator_state;
  AutocastState autocast;
};

// Inputs: the defined tensors among `inputs`, then the parameters, then the recomputation.
struct RecomputeFunction : public torch::autograd::Function<RecomputeFunction> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, at::TensorList inputs,
                                                at::TensorList parameters,
                                                c10::intrusive_ptr<Recomputation> recomputation) {
    ctx->save_for_backward(inputs.vec());
    ctx->saved_data["recomputation"] = c10::IValue::make_capsule(recomputation);
    torch::NoGradGuard no_grad;
    return recomputation->fn(recomputation->inputs);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    auto r = c10::static_intrusive_pointer_cast<Recomputation>(ctx->saved_data["recomputation"].toCapsule());
    // The inputs again, detached: the recomputation's graph starts here.
    std::vector<torch::Tensor> inputs = r->inputs, wrt;
    std::vector<bool> differentiable;
    size_t next_saved = 0;
    for (auto& input : inputs) {
      if (!input.defined()) continue;
      const auto& original = saved[next_saved++];
      input = original.detach().requires_grad_(original.requires_grad());
      differentiable.push_back(original.requires_grad());
      if (original.requires_grad()) wrt.push_back(input);
    }
    const size_t input_count = wrt.size();
    for (const auto& p : r->parameters) wrt.push_back(p);
    // The forward's random state for the second run (the same dropout masks); the state reached
    // since then is put back afterwards, and so is the autocast outside.
    torch::Tensor after;
    {
      std::lock_guard<std::mutex> lock(r->generator.mutex());
      after = r->generator.get_state();
      r->generator.set_state(r->generator_state);
    }
    const AutocastState outside = AutocastState::current();
    r->autocast.apply();
    std::vector<torch::Tensor> outputs;
    try {
      torch::AutoGradMode enable(true);
      outputs = r->fn(inputs);
    } catch (...) {
      outside.apply();
      throw;
    }
    outside.apply();
    {
      std::lock_guard<std::mutex> lock(r->generator.mutex());
      r->generator.set_state(after);
    }
    // The outputs a gradient reached, with theirs.
    torch::autograd::variable_list reached, their_grads;
    for (size_t i = 0; i < outputs.size(); ++i) {
      if (outputs[i].defined() && outputs[i].requires_grad() && grad_outputs[i].defined()) {
        reached.push_back(outputs[i]), their_grads.push_back(grad_outputs[i]);
      }
    }
    torch::autograd::variable_list grads(wrt.size());
    if (!wrt.empty() && !reached.empty()) {
      grads = torch::autograd::grad(reached, wrt, their_grads, /*retain_graph=*/false,
                                    /*create_graph=*/false, /*allow_unused=*/true);
    }
    // One gradient per autograd input: each defined input, each parameter, none for the rest.
    torch::autograd::variable_list out;
    size_t next = 0;
    for (const bool d : differentiable) out.push_back(d ? grads[next++] : torch::Tensor());
    for (size_t i = 0; i < r->parameters.size(); ++i) out.push_back(grads[input_count + i]);
    out.push_back(torch::Tensor());
    return out;
  }
};

}  // namespace

torch::Tensor recompute_in_backward(const RecomputedFn& fn, const std::vector<torch::Tensor>& inputs,
                                    const std::vector<torch::Tensor>& parameters) {
  const auto one = [fn](const std::vector<torch::Tensor>& in) { return std::vector<torch::Tensor>{fn(in)}; };
  return recompute_outputs_in_backward(one, inputs, parameters).at(0);
}

std::vector<torch::Tensor> recompute_outputs_in_backward(const RecomputedOutputsFn& fn,
                                                         const std::vector<torch::Tensor>& inputs,
                                                         const std::vector<torch::Tensor>& parameters) {
  std::vector<torch::Tensor> defined;
  bool any_grad = !parameters.empty();
  for (const auto& input : inputs) {
    if (!input.defined()) continue;
    defined.push_back(input);
    any_grad = any_grad || input.requires_grad();
  }
  if (!torch::GradMode::is_enabled() || !any_grad || defined.empty()) return fn(inputs);
  auto r = c10::make_intrusive<Recomputation>();
  r->fn = fn;
  r->inputs = inputs;
  r->parameters = parameters;
  r->generator = at::globalContext().defaultGenerator(defined.front().device());
  {
    std::lock_guard<std::mutex> lock(r->generator.mutex());
    r->generator_state = r->generator.get_state();
  }
  r->autocast = AutocastState::current();
  return RecomputeFunction::apply(at::TensorList(defined), at::TensorList(parameters), r);
}

std::vector<torch::Tensor> trainable_parameters(const torch::nn::Module& module) {
  std::vector<torch::Tensor> out;
  for (const auto& p : module.parameters())
    if (p.requires_grad()) out.push_back(p);
  return out;
}

}  // namespace zoo
