#include "train/schedule.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace zoo {

void ScheduleOptions::validate() const {
  auto fail = [](const std::string& m) { throw std::invalid_argument(m); };
  if (!(lr > 0.0)) fail("lr (" + std::to_string(lr) + ") must be positive");
  if (min_lr < 0.0 || min_lr > lr) fail("min_lr (" + std::to_string(min_lr) + ") must be in [0, lr]");
  if (warmup_steps < 0) fail("warmup_steps (" + std::to_string(warmup_steps) + ") must be >= 0");
  if (total_steps < 1) fail("total_steps (" + std::to_string(total_steps) + ") must be >= 1");
  if (kind == ScheduleKind::kInverseSqrt && warmup_steps < 1) fail("inverse_sqrt needs warmup_steps >= 1");
  if (kind == ScheduleKind::kInverseSqrt && d_model < 1) fail("inverse_sqrt needs d_model >= 1");
}

double learning_rate(const ScheduleOptions& o, int64_t step) {
  const bool warming_up = step < o.warmup_steps;
  const double warmup = o.lr * static_cast<double>(step + 1) / static_cast<double>(std::max<int64_t>(1, o.warmup_steps));
  const int64_t span = std::max<int64_t>(1, o.total_steps - o.warmup_steps);
  const double p = std::min(1.0, static_cast<double>(step - o.warmup_steps) / static_cast<double>(span));
  switch (o.kind) {
    case ScheduleKind::kInverseSqrt: {
      const double s = static_cast<double>(step + 1);
      return o.lr / std::sqrt(static_cast<double>(o.d_model)) *
             std::min(1.0 / std::sqrt(s), s * std::pow(static_cast<double>(o.warmup_steps), -1.5));
    }
    case ScheduleKind::kConstant: return warming_up ? warmup : o.lr;
    case ScheduleKind::kLinear: return warming_up ? warmup : o.lr - (o.lr - o.min_lr) * p;
    case ScheduleKind::kCosine: return warming_up ? warmup : o.min_lr + (o.lr - o.min_lr) * 0.5 * (1.0 + std::cos(M_PI * p));
  }
  return o.lr;
}

}  // namespace zoo
