#include "train/loss_scaler.h"

#include <torch/torch.h>

namespace zoo {

LossScaler::LossScaler(bool enabled, double initial_scale, int64_t growth_interval)
    : enabled_(enabled), initial_(initial_scale), growth_interval_(growth_interval) {}

torch::Tensor LossScaler::scale(const torch::Device& device) {
  if (!enabled_) return {};
  if (!scale_.defined() || scale_.device() != device) {
    scale_ = scale_.defined() ? scale_.to(device) : torch::full({1}, initial_, torch::dtype(torch::kFloat).device(device));
    growth_tracker_ = growth_tracker_.defined() ? growth_tracker_.to(device)
                                                : torch::zeros({1}, torch::dtype(torch::kInt).device(device));
  }
  return scale_;
}

void LossScaler::unscale(const std::vector<torch::Tensor>& parameters, torch::Tensor& found_inf) {
  if (!enabled_) return;
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> grads;
  for (const auto& p : parameters) {
    if (p.grad().defined()) grads.push_back(p.grad());
  }
  if (grads.empty()) return;
  const auto inverse = scale(grads[0].device()).reciprocal();
  torch::_amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inverse);
}

void LossScaler::update(const torch::Tensor& found_inf) {
  if (!enabled_) return;
  torch::_amp_update_scale_(scale_, growth_tracker_, found_inf, 2.0, 0.5, growth_interval_);
}

double LossScaler::value() const {
  if (!enabled_) return 1.0;
  return scale_.defined() ? scale_.item<double>() : initial_;
}

void LossScaler::restore(double scale) {
  initial_ = scale;
  scale_ = growth_tracker_ = torch::Tensor();
}

}  // namespace zoo
