#include "train/autocast.h"

#include <algorithm>
#include <chrono>

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <torch/nn/modules/linear.h>
#include <torch/version.h>

namespace zoo {

c10::ScalarType compute_dtype(Precision precision) {
  switch (precision) {
    case Precision::kBf16: return c10::kBFloat16;
    case Precision::kFp16: return c10::kHalf;
    case Precision::kAuto:
    case Precision::kFp32: return c10::kFloat;
  }
  return c10::kFloat;
}

int64_t hold_frozen_projections_in_compute_dtype(torch::nn::Module& module, Precision precision) {
  const c10::ScalarType dtype = compute_dtype(precision);
  if (dtype == c10::kFloat) return 0;
  at::NoGradGuard no_grad;
  int64_t converted = 0;
  for (const auto& item : module.modules()) {
    auto* linear = dynamic_cast<torch::nn::LinearImpl*>(item.get());
    // A quantized weight (QLoRA's base) is dequantized into the rows' type as it is used.
    if (linear == nullptr || linear->weight.requires_grad() || linear->weight.numel() == 0 ||
        (linear->bias.defined() && linear->bias.requires_grad())) {
      continue;
    }
    linear->weight.set_data(linear->weight.to(dtype));
    if (linear->bias.defined()) linear->bias.set_data(linear->bias.to(dtype));
    ++converted;
  }
  return converted;
}

double measure_cpu_bf16_speedup() {
  const int64_t n = 768;
  // The best rate of `runs` products after `warmups` (kernels chosen, memory touched).
  auto rate = [&](c10::ScalarType dtype, int warmups, int runs) {
    const auto a = at::randn({n, n}).to(dtype), b = at::randn({n, n}).to(dtype);
    auto c = at::empty({n, n}, a.options());
    for (int i = 0; i < warmups; ++i) at::mm_out(c, a, b);
    double best = 0.0;
    for (int i = 0; i < runs; ++i) {
      const auto start = std::chrono::steady_clock::now();
      at::mm_out(c, a, b);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      best = std::max(best, 1.0 / s);
    }
    return best;
  };
  const double fp32 = rate(c10::kFloat, 2, 5);
  // A CPU without bf16 arithmetic (AVX2 alone) runs these products ~100x slower than fp32's
  // under LibTorch 2.15: one product says so, without spending seconds on more.
  const double first = rate(c10::kBFloat16, 0, 1);
  if (first < 0.1 * fp32) return first / fp32;
  return rate(c10::kBFloat16, 2, 5) / fp32;
}

AutocastScope::AutocastScope(Precision precision, const c10::Device& device) {
  const c10::ScalarType dtype = compute_dtype(precision);
  enabled_ = dtype != c10::kFloat;
  cuda_ = device.is_cuda();
  if (!enabled_) return;
  const auto type = cuda_ ? at::kCUDA : at::kCPU;
  at::autocast::set_autocast_enabled(type, true);
  at::autocast::set_autocast_dtype(type, dtype);
}

AutocastScope::~AutocastScope() {
  if (!enabled_) return;
  at::autocast::set_autocast_enabled(cuda_ ? at::kCUDA : at::kCPU, false);
  at::autocast::clear_cache();
}

}  // namespace zoo
