#include "train/schedule.h"

#include <cmath>

#include <gtest/gtest.h>

namespace zoo {
namespace {

TEST(Schedule, WarmupThenCosineEqualsTheFormula) {
  ScheduleOptions o;
  o.kind = ScheduleKind::kCosine;
  o.lr = 1e-3;
  o.min_lr = 1e-4;
  o.warmup_steps = 10;
  o.total_steps = 110;
  EXPECT_DOUBLE_EQ(learning_rate(o, 0), 1e-4);   // 1e-3 * 1/10
  EXPECT_DOUBLE_EQ(learning_rate(o, 4), 5e-4);   // 1e-3 * 5/10
  EXPECT_DOUBLE_EQ(learning_rate(o, 9), 1e-3);   // end of warmup
  EXPECT_DOUBLE_EQ(learning_rate(o, 10), 1e-3);  // cos(0)
  // Halfway through the decay: min + (max - min) / 2.
  EXPECT_NEAR(learning_rate(o, 60), 1e-4 + 0.5 * 9e-4, 1e-15);
  // A quarter: min + (max - min) * (1 + cos(pi / 4)) / 2.
  EXPECT_NEAR(learning_rate(o, 35), 1e-4 + 9e-4 * (1 + std::cos(M_PI / 4)) / 2, 1e-15);
  EXPECT_DOUBLE_EQ(learning_rate(o, 110), 1e-4);
  EXPECT_DOUBLE_EQ(learning_rate(o, 500), 1e-4);  // stays at the floor
}

TEST(Schedule, LinearAndConstant) {
  ScheduleOptions o;
  o.kind = ScheduleKind::kLinear;
  o.lr = 2.0;
  o.min_lr = 0.0;
  o.warmup_steps = 0;
  o.total_steps = 100;
  EXPECT_DOUBLE_EQ(learning_rate(o, 0), 2.0);
  EXPECT_DOUBLE_EQ(learning_rate(o, 25), 1.5);
  EXPECT_DOUBLE_EQ(learning_rate(o, 100), 0.0);
  o.kind = ScheduleKind::kConstant;
  o.warmup_steps = 4;
  EXPECT_DOUBLE_EQ(learning_rate(o, 1), 1.0);
  EXPECT_DOUBLE_EQ(learning_rate(o, 50), 2.0);
}

TEST(Schedule, InverseSquareRootIsVaswanisFormula) {
  // lr = d_model^-0.5 * min(step^-0.5, step * warmup^-1.5), 1-based step; peak at step = warmup.
  ScheduleOptions o;
  o.kind = ScheduleKind::kInverseSqrt;
  o.lr = 1.0;
  o.d_model = 512;
  o.warmup_steps = 4000;
  auto paper = [](double step) { return std::pow(512.0, -0.5) * std::min(std::pow(step, -0.5), step * std::pow(4000.0, -1.5)); };
  for (int64_t step : {0, 1, 999, 3999, 4000, 10000, 100000}) {
    EXPECT_DOUBLE_EQ(learning_rate(o, step), paper(step + 1.0)) << step;
  }
  // The peak: 512^-0.5 * 4000^-0.5 ~ 6.99e-4.
  EXPECT_NEAR(learning_rate(o, 3999), 6.988e-4, 1e-6);
  EXPECT_GT(learning_rate(o, 3999), learning_rate(o, 3000));
  EXPECT_GT(learning_rate(o, 3999), learning_rate(o, 5000));
}

TEST(Schedule, BadOptionsAreNamed) {
  ScheduleOptions o;
  o.lr = 0;
  EXPECT_THROW(o.validate(), std::invalid_argument);
  o = ScheduleOptions();
  o.kind = ScheduleKind::kInverseSqrt;
  o.warmup_steps = 0;
  EXPECT_THROW(o.validate(), std::invalid_argument);
  try {
    from_string<ScheduleKind>("exponential");
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "unknown schedule 'exponential' (expected one of: cosine, linear, constant, inverse_sqrt)");
  }
}

}  // namespace
}  // namespace zoo
