#include "layers/norm.h"

#include <stdexcept>

#include <torch/torch.h>

namespace zoo {

NormImpl::NormImpl(const NormOptions& options) : options(options) { reset(); }

void NormImpl::reset() {
  if (options.d_model() <= 0) {
    throw std::invalid_argument(c10::str("norm: d_model (", options.d_model(), ") must be positive"));
  }
  if (!(options.eps() > 0.0)) {
    throw std::invalid_argument(c10::str("norm: eps (", options.eps(), ") must be positive"));
  }
  weight = register_parameter("weight", torch::ones({options.d_model()}));
  bias = torch::Tensor();
  switch (options.kind()) {
    case NormKind::kLayerNorm:
      if (options.bias()) bias = register_parameter("bias", torch::zeros({options.d_model()}));
      break;
    case NormKind::kRMSNorm: break;  // RMSNorm has no bias (Zhang & Sennrich, 2019)
    case NormKind::kRMSNormPlusOne: weight.detach().zero_(); break;  // scale 1 + 0
  }
}

void NormImpl::reset_parameters() {
  torch::NoGradGuard no_grad;
  weight.fill_(options.kind() == NormKind::kRMSNormPlusOne ? 0.0 : 1.0);
  if (bias.defined()) bias.zero_();
}

torch::Tensor NormImpl::forward(const torch::Tensor& x) {
  TORCH_CHECK(x.size(-1) == options.d_model(), "norm: expected last dimension ",
              options.d_model(), ", got input of shape ", x.sizes());
  switch (options.kind()) {
    case NormKind::kLayerNorm:
      // Under mixed precision a bf16 input meets fp32 weights: normalise in the weights'
      // precision, as autocast runs norms in fp32.
      return torch::layer_norm(x.to(weight.scalar_type()), {options.d_model()}, weight, bias, options.eps());
    case NormKind::kRMSNorm: {
      // Half-precision inputs take their mean square in float32; float and double stay as they are.
      const bool low = x.scalar_type() == torch::kHalf || x.scalar_type() == torch::kBFloat16;
      auto xf = low ? x.to(torch::kFloat) : x;
      auto normed = xf * torch::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + options.eps());
      return weight * normed.to(x.scalar_type());
    }
    case NormKind::kRMSNormPlusOne: {
      // Gemma: everything in float32 (float64 stays), rounded once at the end.
      const auto wide = x.scalar_type() == torch::kDouble ? torch::kDouble : torch::kFloat;
      const auto xf = x.to(wide);
      const auto normed = xf * torch::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + options.eps());
      return (normed * (1.0 + weight.to(wide))).to(x.scalar_type());
    }
  }
  throw std::logic_error("unhandled norm kind");
}

}  // namespace zoo
