#pragma once
// The numeric precision of a run: fp32, or mixed precision (Micikevicius et al., 2018) with
// bf16 or fp16 matrix products under LibTorch's autocast while master weights, optimizer state
// and reductions stay fp32. fp16 also needs loss scaling (train/loss_scaler.h). No LibTorch here:
// the run config (and its fuzz target) reads it.

#include <string>
#include <utility>

#include "core/enum_names.h"

namespace zoo {

enum class Precision { kAuto, kFp32, kBf16, kFp16 };

ZOO_ENUM_NAMES(Precision, "precision",
               {"auto", Precision::kAuto}, {"fp32", Precision::kFp32}, {"bf16", Precision::kBf16},
               {"fp16", Precision::kFp16});

// kAuto resolved for the device (bf16 on CUDA, fp32 on the CPU). Throws a ConfigError naming
// the precision when the device cannot run it (bf16 and fp16 autocast need CUDA here). The
// autocast itself is train/autocast.h.
Precision resolve_precision(Precision requested, bool cuda);

}  // namespace zoo
