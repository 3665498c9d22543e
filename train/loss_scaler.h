#pragma once
// Dynamic loss scaling for fp16 training (Micikevicius et al., 2018): the loss is multiplied
// by a large scale before backward so small gradients survive fp16; gradients are divided by it
// before clipping. An overflow (a non-finite gradient norm) halves the scale and skips the
// update; 2000 clean updates in a row double it. Disabled, the scale is 1 and nothing changes.

#include <cstdint>
#include <vector>

#include <torch/types.h>

namespace zoo {

class LossScaler {
 public:
  explicit LossScaler(bool enabled, double initial_scale = 65536.0);

  double scale() const { return scale_; }
  // Divides the gradients of `parameters` by the scale (before clipping).
  void unscale(const std::vector<torch::Tensor>& parameters) const;
  // After clipping: false when the update must be skipped (the gradients overflowed).
  bool update(double grad_norm);
  // A resumed run continues with its saved scale.
  void restore(double scale) { scale_ = scale; }

 private:
  bool enabled_;
  double scale_;
  int64_t clean_steps_ = 0;  // updates since the scale last changed
};

}  // namespace zoo
