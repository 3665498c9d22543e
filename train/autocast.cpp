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
  struct Product {
    at::Tensor a, b, c;
    double best = 0.0;  // products per second, the best seen
    explicit Product(c10::ScalarType dtype)
        : a(at::randn({n, n}).to(dtype)), b(at::randn({n, n}).to(dtype)), c(at::empty({n, n}, a.options())) {}
    void run() {
      const auto start = std::chrono::steady_clock::now();
      at::mm_out(c, a, b);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      best = std::max(best, 1.0 / s);
    }
  };
  Product fp32(c10::kFloat), bf16(c10::kBFloat16);
  fp32.run(), fp32.run();  // kernels chosen, memory touched
  // A CPU without bf16 arithmetic (AVX2 alone) runs these products ~100x slower than fp32's
  // under LibTorch 2.15: one product says so, without spending seconds on more.
  bf16.run();
  if (bf16.best < 0.1 * fp32.best) return bf16.best / fp32.best;
  bf16.run();
  // Taken in turns, best of each: a busy spell on a shared machine slows both kinds alike rather
  // than whichever was being timed (a run's precision was seen to flip on a loaded CI machine).
  for (int round = 0; round < 5; ++round) fp32.run(), bf16.run();
  return bf16.best / fp32.best;
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
