#include "layers/positions.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "test_util.h"

namespace zoo {
namespace {

using testing::max_abs_diff;

TEST(SinusoidalPositions, MatchesVaswaniFormulaByHand) {
  SinusoidalPositions pe{SinusoidalPositionsOptions(4, 16)};
  auto table = pe->forward(torch::tensor({0, 1, 2}, torch::kLong));
  EXPECT_LE(max_abs_diff(table[0], torch::tensor({0.0, 1.0, 0.0, 1.0})), 1e-6);
  EXPECT_LE(max_abs_diff(table[1], torch::tensor({0.8415, 0.5403, 0.0100, 1.0000})), 1e-4);
  EXPECT_LE(max_abs_diff(table[2], torch::tensor({0.9093, -0.4161, 0.0200, 0.9998})), 1e-4);
  EXPECT_TRUE(pe->parameters().empty());  // fixed, never trained or saved
}

TEST(SinusoidalPositions, KeepsTheShapeOfThePositions) {
  SinusoidalPositions pe{SinusoidalPositionsOptions(8, 32)};
  auto positions = torch::tensor({{0, 1, 2}, {5, 6, 7}}, torch::kLong);
  auto out = pe->forward(positions);
  EXPECT_EQ(out.sizes(), (std::vector<int64_t>{2, 3, 8}));
  EXPECT_LE(max_abs_diff(out[1][0], pe->forward(torch::tensor({5}, torch::kLong))[0]), 0.0);
}

TEST(SinusoidalPositions, RejectsOddWidthAndPositionsOutOfRange) {
  EXPECT_THROW(SinusoidalPositions(SinusoidalPositionsOptions(5, 16)), std::invalid_argument);
  SinusoidalPositions pe{SinusoidalPositionsOptions(4, 16)};
  try {
    pe->forward(torch::tensor({3, 16}, torch::kLong));
    FAIL() << "no error";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot use position 16: max_positions is 16"),
              std::string::npos);
  }
}

TEST(LearnedPositions, LooksUpRowsOfATrainableTable) {
  LearnedPositions pe{LearnedPositionsOptions(6, 10)};
  ASSERT_EQ(pe->parameters().size(), 1u);
  auto positions = torch::tensor({{2, 9}}, torch::kLong);
  auto out = pe->forward(positions);
  EXPECT_LE(max_abs_diff(out[0][1], pe->embedding->weight[9]), 0.0);
  out.sum().backward();
  EXPECT_EQ(pe->embedding->weight.grad().abs().sum(1).nonzero().numel(), 2);  // rows 2 and 9
  EXPECT_THROW(pe->forward(torch::tensor({10}, torch::kLong)), c10::Error);
}

}  // namespace
}  // namespace zoo
