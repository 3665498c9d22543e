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

// What a run's precision is chosen on: CUDA, or the CPU and how much faster its bf16 matrix
// products are than fp32's (measured at start-up: AMX runs them ~5x faster, AVX512-BF16 ~2x;
// CPUs without either, or oneDNN without a bf16 kernel for them, slower).
struct ComputeDevice {
  bool cuda = false;
  double cpu_bf16_speedup = 0.0;  // bf16 matmul rate / fp32 matmul rate on this CPU
};

// Below this measured speedup, auto keeps a CPU in fp32: the rest of a step (norms, softmax,
// the loss, casts) runs no faster in bf16.
constexpr double kBf16SpeedupForAuto = 1.3;

// kAuto resolved for the device: bf16 on CUDA and on CPUs whose bf16 matmuls are at least
// kBf16SpeedupForAuto times fp32's, else fp32. bf16 runs anywhere when asked; fp16 needs CUDA
// (LibTorch's CPU autocast is bf16 only): a ConfigError names it. `why`, when given, says in
// words why the precision was chosen. The autocast itself is train/autocast.h.
Precision resolve_precision(Precision requested, const ComputeDevice& device, std::string* why = nullptr);

}  // namespace zoo
