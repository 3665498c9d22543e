#pragma once
// LibTorch's autocast for a run's precision (train/precision.h): matrix products in bf16 or
// fp16 while the scope lives, everything else as the autocast lists say.

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include "train/precision.h"

namespace zoo {

// Autocast's dtype for a mixed precision; kFloat for fp32.
c10::ScalarType compute_dtype(Precision precision);

// How many times faster this CPU multiplies bf16 matrices than fp32 ones (768^3 products with
// the run's threads, a few milliseconds each): what precision auto decides on.
double measure_cpu_bf16_speedup();

// Mixed precision on for the forward pass and the loss while the scope lives (fp32: nothing).
class AutocastScope {
 public:
  AutocastScope(Precision precision, const c10::Device& device);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  bool enabled_ = false;
  bool cuda_ = false;
};

}  // namespace zoo
