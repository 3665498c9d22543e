#include "train/loss_spikes.h"

#include <cmath>
#include <vector>

#include <gtest/gtest.h>

namespace zoo {
namespace {

std::vector<LossSpike> spikes_of(const std::vector<double>& losses) {
  LossSpikes detector;
  std::vector<LossSpike> out;
  for (size_t i = 0; i < losses.size(); ++i) {
    if (auto s = detector.add(static_cast<int64_t>(i + 1), losses[i], 0.5)) out.push_back(*s);
  }
  return out;
}

// The demo's first 40 steps on an Intel Xeon in fp32 (issue #52): the update of step 34 threw the
// model off (its validation loss was 10.4), the clipped one of step 35 brought it most of the way
// back. Step 35 is the spike; step 36 (7.48) is within a nat of the curve before.
TEST(LossSpikes, NamesTheDemosStep35) {
  const std::vector<double> losses = {
      9.0494, 8.9774, 8.8624, 8.7835, 8.6903, 8.6061, 8.5440, 8.5155, 8.4954, 8.4032, 8.3241, 8.2582, 8.1420, 8.0375,
      7.9608, 7.8242, 7.7293, 7.6057, 7.5439, 7.4342, 7.3976, 7.3073, 7.1314, 7.0294, 7.0227, 7.0180, 6.8784, 7.0251,
      6.9452, 6.8500, 6.7723, 6.8628, 6.6618, 6.8576, 10.1298, 7.4791, 6.8676, 6.8368, 6.8973, 6.7830};
  const auto spikes = spikes_of(losses);
  ASSERT_EQ(spikes.size(), 1u);
  EXPECT_EQ(spikes[0].step, 35);
  EXPECT_DOUBLE_EQ(spikes[0].loss, 10.1298);
  EXPECT_NEAR(spikes[0].median, (7.0251 + 7.0294) / 2, 1e-12);  // the middle two of steps 15-34
  EXPECT_EQ(describe(spikes[0]), "step 35: loss 10.13 against 7.03 just before (gradient norm 0.5)");
}

// A falling curve, its noise, a skipped step (NaN) and the first steps are no spikes.
TEST(LossSpikes, FallingNoisyCurvesAreNot) {
  std::vector<double> losses;
  for (int i = 0; i < 300; ++i) losses.push_back(9.0 * std::exp(-i / 60.0) + 3.0 + 0.3 * std::sin(i * 1.7));
  losses[5] = 12.0;       // in the first steps: not judged
  losses[150] = NAN;      // a skipped step
  EXPECT_TRUE(spikes_of(losses).empty());
  losses[200] += 1.2;     // a nat above the steps before it, and more
  ASSERT_EQ(spikes_of(losses).size(), 1u);
  EXPECT_EQ(spikes_of(losses)[0].step, 201);
}

}  // namespace
}  // namespace zoo
