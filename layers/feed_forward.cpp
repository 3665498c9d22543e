#include "layers/feed_forward.h"

#include <stdexcept>

#include <torch/torch.h>

#include "kernels/linear.h"

namespace zoo {

torch::Tensor activate(const torch::Tensor& x, Activation activation) {
  switch (activation) {
    case Activation::kReLU:
      return torch::relu(x);
    case Activation::kGELU:
    case Activation::kGeGLU:
      return torch::gelu(x);  // exact, erf-based
    case Activation::kGELUTanh:
    case Activation::kGeGLUTanh:
      return torch::gelu(x, "tanh");
    case Activation::kSiLU:
    case Activation::kSwiGLU:
      return torch::silu(x);
  }
  throw std::logic_error("unhandled activation");
}

FeedForwardImpl::FeedForwardImpl(const FeedForwardOptions& options) : options(options) { reset(); }

void FeedForwardImpl::reset() {
  const auto& o = options;
  if (o.d_model() <= 0 || o.d_ff() <= 0) {
    throw std::invalid_argument(c10::str("feed-forward: d_model (", o.d_model(), ") and d_ff (",
                                         o.d_ff(), ") must be positive"));
  }
  if (o.dropout() < 0.0 || o.dropout() >= 1.0) {
    throw std::invalid_argument(c10::str("feed-forward: dropout (", o.dropout(),
                                         ") must be in [0, 1)"));
  }
  auto linear = [&](int64_t in, int64_t out) {
    return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(o.bias()));
  };
  if (is_gated(o.activation())) gate = register_module("gate", linear(o.d_model(), o.d_ff()));
  up = register_module("up", linear(o.d_model(), o.d_ff()));
  down = register_module("down", linear(o.d_ff(), o.d_model()));
  dropout = register_module("dropout", torch::nn::Dropout(o.dropout()));
}

torch::Tensor FeedForwardImpl::forward(const torch::Tensor& x) {
  auto h = is_gated(options.activation())
               ? activate(lora.project(gate, x), options.activation()) * lora.project(up, x)
               : activate(lora.project(up, x), options.activation());
  // No dropout op at all where it would return its input (rate 0, or evaluation).
  return lora.project(down, is_training() && options.dropout() > 0.0 ? dropout->forward(h) : h);
}

std::vector<ProjectionPart> FeedForwardImpl::projection_parts() const {
  std::vector<ProjectionPart> parts = {{"up", up, 0, options.d_ff()}};
  if (gate) parts.push_back({"gate", gate, 0, options.d_ff()});
  parts.push_back({"down", down, 0, options.d_model()});
  return parts;
}

}  // namespace zoo
