#pragma once
// Learning-rate schedules: linear warmup then cosine, linear or constant, and Vaswani et al.'s
// inverse square root.

#include <cstdint>
#include <string>
#include <utility>

#include "core/enum_names.h"

namespace zoo {

enum class ScheduleKind { kCosine, kLinear, kConstant, kInverseSqrt };

ZOO_ENUM_NAMES(ScheduleKind, "schedule",
               {"cosine", ScheduleKind::kCosine}, {"linear", ScheduleKind::kLinear},
               {"constant", ScheduleKind::kConstant}, {"inverse_sqrt", ScheduleKind::kInverseSqrt});

struct ScheduleOptions {
  ScheduleKind kind = ScheduleKind::kCosine;
  double lr = 3e-4;            // peak rate; for inverse_sqrt a multiplier of the formula
  double min_lr = 0.0;         // cosine and linear decay to this
  int64_t warmup_steps = 0;    // linear warmup from lr / warmup_steps
  int64_t total_steps = 1;     // cosine and linear reach min_lr here
  int64_t d_model = 512;       // inverse_sqrt
  void validate() const;       // throws std::invalid_argument naming the field
};

// The rate for optimizer step `step` (0-based: the first update is step 0).
//   warmup (step < warmup_steps): lr * (step + 1) / warmup_steps
//   cosine: min_lr + (lr - min_lr) * (1 + cos(pi * p)) / 2, p = (step - warmup) / (total - warmup)
//   linear: lr - (lr - min_lr) * p;  constant: lr
//   inverse_sqrt: lr * d_model^-0.5 * min(s^-0.5, s * warmup^-1.5), s = step + 1
// Past total_steps cosine and linear stay at min_lr.
double learning_rate(const ScheduleOptions& options, int64_t step);

}  // namespace zoo
