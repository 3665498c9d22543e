#include "layers/linear.h"

#include <torch/torch.h>

namespace zoo {

torch::Tensor project(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  const int64_t in = weight.size(1);
  if (x.numel() != in || !x.device().is_cpu() || x.dim() == 0) {
    return torch::nn::functional::linear(x, weight, bias);
  }
  auto vector = x.reshape({in});
  auto y = bias.defined() ? at::addmv(bias, weight, vector) : at::mv(weight, vector);
  auto sizes = x.sizes().vec();
  sizes.back() = weight.size(0);
  return y.view(sizes);
}

}  // namespace zoo
