#include "train/loss_spikes.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

namespace zoo {

std::string describe(const LossSpike& spike) {
  char line[160];
  std::snprintf(line, sizeof line, "step %lld: loss %.2f against %.2f just before (gradient norm %.1f)",
                static_cast<long long>(spike.step), spike.loss, spike.median, spike.grad_norm);
  return line;
}

std::optional<LossSpike> LossSpikes::add(int64_t step, double loss, double grad_norm) {
  if (!std::isfinite(loss)) return std::nullopt;
  std::optional<LossSpike> spike;
  if (static_cast<int>(recent_.size()) >= kWindow / 2) {
    std::vector<double> sorted(recent_.begin(), recent_.end());
    std::sort(sorted.begin(), sorted.end());
    const size_t n = sorted.size();
    const double median = n % 2 == 1 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
    if (loss > median + kNats) spike = LossSpike{step, loss, median, grad_norm};
  }
  // A spike does not enter the window: the steps after it are judged against the curve before.
  if (!spike) {
    recent_.push_back(loss);
    if (static_cast<int>(recent_.size()) > kWindow) recent_.pop_front();
  }
  return spike;
}

}  // namespace zoo
