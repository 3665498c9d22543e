#pragma once
// LibTorch's autocast for a run's precision (train/precision.h): matrix products in bf16 or
// fp16 while the scope lives, everything else as the autocast lists say.

#include <cstdint>

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>
#include <torch/nn/module.h>

#include "train/precision.h"

namespace zoo {

// Autocast's dtype for a mixed precision; kFloat for fp32.
c10::ScalarType compute_dtype(Precision precision);

// A frozen projection (a LoRA run's base) computes under autocast with its weight and bias cast
// to the compute dtype on every use, and that cast is what backward keeps, beside the float32
// original. Holding them in the compute dtype instead gives the same products bit for bit, in a
// third of the memory and with no cast per step. Norms, embeddings and every trainable tensor
// stay float32. Returns the projections converted (none in fp32).
int64_t hold_frozen_projections_in_compute_dtype(torch::nn::Module& module, Precision precision);

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
