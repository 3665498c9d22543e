#include "train/loss_scaler.h"

#include <cmath>

#include <torch/torch.h>

namespace zoo {

LossScaler::LossScaler(bool enabled, double initial_scale) : enabled_(enabled), scale_(enabled ? initial_scale : 1.0) {}

void LossScaler::unscale(const std::vector<torch::Tensor>& parameters) const {
  if (scale_ == 1.0) return;
  torch::NoGradGuard no_grad;
  for (const auto& p : parameters) {
    if (p.grad().defined()) p.grad().div_(scale_);
  }
}

bool LossScaler::update(double grad_norm) {
  if (!enabled_) return true;
  if (!std::isfinite(grad_norm)) {
    scale_ /= 2, clean_steps_ = 0;
    return false;
  }
  if (++clean_steps_ >= 2000) scale_ *= 2, clean_steps_ = 0;
  return true;
}

}  // namespace zoo
