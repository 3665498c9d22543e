#include "train/autocast.h"

#include <ATen/autocast_mode.h>
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

AutocastScope::AutocastScope(Precision precision, const c10::Device& device) {
  const c10::ScalarType dtype = compute_dtype(precision);
  enabled_ = dtype != c10::kFloat && device.is_cuda();
  if (!enabled_) return;
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
  at::autocast::set_autocast_enabled(at::kCUDA, true);
  at::autocast::set_autocast_dtype(at::kCUDA, dtype);
#else
  at::autocast::set_enabled(true);
  at::autocast::set_autocast_gpu_dtype(dtype);
#endif
}

AutocastScope::~AutocastScope() {
  if (!enabled_) return;
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
  at::autocast::set_autocast_enabled(at::kCUDA, false);
#else
  at::autocast::set_enabled(false);
#endif
  at::autocast::clear_cache();
}

}  // namespace zoo
