#pragma once
// Dynamic loss scaling for fp16 training (Micikevicius et al., 2018), as torch.amp.GradScaler
// does it: the loss is multiplied by a large scale before backward so small gradients survive
// fp16; gradients are divided by it before clipping. An overflow (a non-finite gradient) halves
// the scale and skips the update; `growth_interval` clean updates in a row double it. The scale
// and its count live on the device and change there (ATen's _amp_foreach_non_finite_check_and_
// unscale_ and _amp_update_scale_), so a step reads nothing back. Disabled, the scale is 1 and
// nothing changes.

#include <cstdint>
#include <vector>

#include <torch/types.h>

namespace zoo {

class LossScaler {
 public:
  explicit LossScaler(bool enabled, double initial_scale = 65536.0, int64_t growth_interval = 2000);

  bool enabled() const { return enabled_; }
  // What the loss is multiplied by before backward: a float32 scalar on `device` (undefined
  // when disabled).
  torch::Tensor scale(const torch::Device& device);
  // Divides the gradients of `parameters` by the scale (before clipping) and sets `found_inf`
  // (a float32 scalar on their device) to 1 where any of them is not finite.
  void unscale(const std::vector<torch::Tensor>& parameters, torch::Tensor& found_inf);
  // After the update: halves the scale where `found_inf` is 1, else counts a clean update.
  void update(const torch::Tensor& found_inf);
  // The scale as a number, for checkpoints (reads the device).
  double value() const;
  // A resumed run continues with its saved scale.
  void restore(double scale);

 private:
  bool enabled_;
  double initial_;
  int64_t growth_interval_;
  torch::Tensor scale_, growth_tracker_;  // (1) float32 and int32, made on the first scale()
};

}  // namespace zoo
