#include "train/trainer_state.h"

#include <gtest/gtest.h>

#include "base_test_util.h"

namespace zoo {
namespace {

using testing::error_of;

TrainerState example() {
  TrainerState s;
  s.step = 12, s.world_size = 2, s.sampler_epoch = 1, s.sampler_index = 40;
  s.rng = "0a1b", s.skipped = 1, s.tokens_seen = 4096, s.loss_scale = 1024, s.objective = "causal_lm";
  EvalResult best;
  best.step = 10, best.loss = 2.5, best.perplexity = 12.18, best.accuracy = 0.4, best.targets = 300;
  s.best = best;
  return s;
}

TEST(TrainerState, RoundTripsThroughJson) {
  const auto s = example();
  const auto back = TrainerState::parse(s.to_json().dump(), "state.json");
  EXPECT_EQ(back.step, 12);
  EXPECT_EQ(back.world_size, 2);
  EXPECT_EQ(back.sampler_epoch, 1);
  EXPECT_EQ(back.sampler_index, 40);
  EXPECT_EQ(back.rng, "0a1b");
  EXPECT_EQ(back.skipped, 1);
  EXPECT_EQ(back.tokens_seen, 4096);
  EXPECT_EQ(back.loss_scale, 1024);
  ASSERT_TRUE(back.best.has_value());
  EXPECT_EQ(back.best->step, 10);
  EXPECT_EQ(back.best->loss, 2.5);
  EXPECT_TRUE(std::isnan(back.best->exact_match));
}

// A state.json edited by hand or cut by a crash: every bad field is named, never run with.
TEST(TrainerState, BadFieldsAreNamed) {
  auto with = [](const std::function<void(nlohmann::json&)>& edit) {
    auto j = example().to_json();
    edit(j);
    return error_of([&] { TrainerState::from_json(j, "ckpt/state.json"); });
  };
  EXPECT_EQ(with([](auto& j) { j["step"] = -5; }), "ckpt/state.json: step (-5) must be >= 0");
  EXPECT_EQ(with([](auto& j) { j["step"] = "12"; }), "ckpt/state.json: step must be an integer, got \"12\"");
  EXPECT_EQ(with([](auto& j) { j.erase("step"); }), "ckpt/state.json: missing key 'step'");
  EXPECT_EQ(with([](auto& j) { j.erase("sampler"); }), "ckpt/state.json: missing key 'sampler' (the data position)");
  EXPECT_EQ(with([](auto& j) { j["sampler"]["index"] = -1; }), "ckpt/state.json: sampler: index (-1) must be >= 0");
  EXPECT_EQ(with([](auto& j) { j["world_size"] = 0; }), "ckpt/state.json: world_size (0) must be >= 1");
  EXPECT_EQ(with([](auto& j) { j["rng"] = "xyz1"; }), "ckpt/state.json: rng is not a hex string");
  EXPECT_EQ(with([](auto& j) { j["loss_scale"] = -1; }), "ckpt/state.json: loss_scale must be a positive number, got -1");
  EXPECT_EQ(with([](auto& j) { j["best"]["step"] = 99; }), "ckpt/state.json: best.step (99) is after step (12)");
  EXPECT_EQ(with([](auto& j) { j["best"]["loss"] = "low"; }), "ckpt/state.json: best: loss must be a number, got \"low\"");
  EXPECT_EQ(error_of([] { TrainerState::parse("{\"step\": 3,", "ckpt/state.json"); }).rfind("ckpt/state.json: corrupt (not JSON", 0),
            0u);
  EXPECT_EQ(error_of([] { TrainerState::parse("[]", "ckpt/state.json"); }),
            "ckpt/state.json: expected a JSON object of trainer state");
}

TEST(TrainerState, EvaluationsLeaveOutMissingMetrics) {
  EvalResult r;
  r.step = 3, r.loss = 1.5, r.targets = 10;
  const auto j = to_json(r);
  EXPECT_EQ(j.at("loss"), 1.5);
  EXPECT_FALSE(j.contains("accuracy"));
  EXPECT_EQ(j.at("split"), "val");
}

}  // namespace
}  // namespace zoo
