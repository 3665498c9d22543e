#pragma once
// Loss spikes: a training loss far above the losses just before it (an update that threw the
// model off; the curve comes back steps later). The trainer names each as it happens and in its
// summary, so a recipe that spikes on some CPU or precision is seen, not averaged away in a plot.

#include <cstdint>
#include <deque>
#include <optional>
#include <string>

namespace zoo {

struct LossSpike {
  int64_t step = 0;
  double loss = 0;
  double median = 0;     // of the losses before it
  double grad_norm = 0;  // of that step's gradient, before clipping
};

// "step 35: loss 10.13 against 6.86 just before (gradient norm 70.7)".
std::string describe(const LossSpike& spike);

class LossSpikes {
 public:
  // A spike: a loss above the median of the last kWindow losses by more than kNats. Early steps
  // (fewer than kWindow / 2 before it) are not judged: the loss falls fast there.
  static constexpr int kWindow = 20;
  static constexpr double kNats = 1.0;

  // The step's loss (NaN for a skipped step, which is not judged) and gradient norm; the spike
  // it is, if one.
  std::optional<LossSpike> add(int64_t step, double loss, double grad_norm);

 private:
  std::deque<double> recent_;
};

}  // namespace zoo
