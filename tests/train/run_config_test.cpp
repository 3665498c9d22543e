#include "train/run_config.h"

#include <fstream>

#include <gtest/gtest.h>

#include "test_util.h"

namespace zoo {
namespace {

using testing::error_of;

const std::string kGpt = "{family: gpt, vocab_size: 512, d_model: 32, n_layers: 2, n_heads: 4, d_ff: 64, max_positions: 64}";

TEST(RunConfig, ReadsEveryKindOfField) {
  const auto c = parse_run_config("model: " + kGpt +
                                  "\ndata: [a.txt, b.txt]\nsteps: 50\nlr: 1e-3\nschedule: inverse_sqrt\n"
                                  "objective: causal_lm\non_nonfinite: skip\nwhole_word_masking: true\nseed: 7\n");
  EXPECT_EQ(c.model_config.d_model, 32);
  EXPECT_EQ(c.data, (std::vector<std::string>{"a.txt", "b.txt"}));
  EXPECT_EQ(c.steps, 50);
  EXPECT_DOUBLE_EQ(c.lr, 1e-3);
  EXPECT_EQ(c.schedule, ScheduleKind::kInverseSqrt);
  EXPECT_EQ(c.objective, Objective::kCausalLM);
  EXPECT_EQ(c.on_nonfinite, NonFinitePolicy::kSkip);
  EXPECT_TRUE(c.whole_word_masking);
  EXPECT_EQ(c.seed, 7u);
  EXPECT_EQ(c.batch_size, RunConfig{}.batch_size);  // defaults where the file is silent
}

TEST(RunConfig, AModelConfigIsARunWithDefaults) {
  const auto c = load_run_config(find_config("gpt-tiny"));
  EXPECT_EQ(c.model_config.name, "gpt-tiny");
  EXPECT_EQ(c.steps, RunConfig{}.steps);
  const auto named = parse_run_config("model: gpt-tiny\nsteps: 5\n");
  EXPECT_EQ(named.model_config.d_model, c.model_config.d_model);
}

TEST(RunConfig, OverridesRunAndModelFieldsWithTheSameChecks) {
  auto c = parse_run_config("model: " + kGpt);
  apply_run_override(c, "steps=20");
  apply_run_override(c, "model.dropout=0.2");
  apply_run_override(c, "data=[x.txt]");
  EXPECT_EQ(c.steps, 20);
  EXPECT_DOUBLE_EQ(c.model_config.dropout, 0.2);
  EXPECT_EQ(c.data, std::vector<std::string>{"x.txt"});
  EXPECT_NE(error_of([&] { apply_run_override(c, "stpes=3"); }).find("unknown key 'stpes' (did you mean 'steps'?)"),
            std::string::npos);
  EXPECT_NE(error_of([&] { apply_run_override(c, "steps=many"); }).find("steps: expected an integer, got 'many'"),
            std::string::npos);
  EXPECT_NE(error_of([&] { apply_run_override(c, "model.n_heads=5"); }).find("n_heads (5) must divide d_model (32)"),
            std::string::npos);
  EXPECT_NE(error_of([&] { apply_run_override(c, "steps"); }).find("expected key=value"), std::string::npos);
  EXPECT_NE(error_of([&] { apply_run_override(c, "block_size=65"); })
                .find("block_size: 65 exceeds the model's max_positions (64)"),
            std::string::npos);
  EXPECT_NE(error_of([&] { apply_run_override(c, "objective=mlm"); }).find("mlm needs a bert model"), std::string::npos);
  EXPECT_NE(error_of([&] { apply_run_override(c, "schedule=step"); }).find("one of: cosine, linear"), std::string::npos);
}

// Sizes a machine cannot hold are refused before any work, naming what makes them large: the
// model's weights with their gradients and AdamW's moments, then a micro-batch's activations.
TEST(RunConfig, ARunLargerThanMemoryIsRefusedNamingTheKey) {
  constexpr int64_t k24GiB = int64_t{24} << 30;
  auto c = load_run_config(find_config("gpt2-small"));
  check_fits_in_memory(c, k24GiB, false);  // 124M parameters and a batch of 16 x 128 fit
  apply_run_override(c, "batch_size=65536");
  apply_run_override(c, "block_size=1024");
  EXPECT_EQ(error_of([&] { check_fits_in_memory(c, k24GiB, false); }),
            "batch_size (65536) x block_size (1024): a training step would hold at least 1.2 TB of activations (each "
            "block's input kept for the backward) besides 2.0 GB of weights and optimizer state, more than this "
            "machine's 25.8 GB of memory");
  check_fits_in_memory(c, k24GiB, true);  // on a GPU, whose memory is not asked
  check_fits_in_memory(c, 0, false);      // memory unknown
  apply_run_override(c, "batch_size=8");
  apply_run_override(c, "model.vocab_size=1099511627776");
  EXPECT_EQ(error_of([&] { check_fits_in_memory(c, k24GiB, false); }),
            "model.vocab_size (1099511627776): the model would hold 8.4e+14 parameters (13.5 PB with gradients and "
            "AdamW's state), more than this machine's 25.8 GB of memory");
  EXPECT_EQ(error_of([&] { check_fits_in_memory(c, k24GiB, true); }),
            "model.vocab_size (1099511627776): the model would hold 8.4e+14 parameters (3.4 PB of float32 weights), "
            "more than this machine's 25.8 GB of memory");
  // Weights that fit, whose optimizer state would not: LoRA trains none of them.
  apply_run_override(c, "model.vocab_size=3000000");
  EXPECT_NE(error_of([&] { check_fits_in_memory(c, k24GiB, false); }).find("with gradients and AdamW's state"),
            std::string::npos);
  apply_run_override(c, "lora.rank=8");
  check_fits_in_memory(c, k24GiB, false);
}

// Issue 31: steps=2^63-1 was taken, and the run's 64-bit count of tokens would wrap long before
// its end; the bound follows from the tokens a step takes.
TEST(RunConfig, StepsPastA64BitCountOfTokensAreRefused) {
  auto c = load_run_config(find_config("gpt2-small"));
  apply_run_override(c, "block_size=128");
  apply_run_override(c, "batch_size=16");
  apply_run_override(c, "steps=4503599627370495");  // 2^63 / 2048, rounded down
  EXPECT_EQ(error_of([&] { apply_run_override(c, "steps=9223372036854775807"); }),
            "override 'steps=9223372036854775807': steps: must be at most 4503599627370495 (2048 tokens a step; a "
            "64-bit count of tokens holds no more), got 9223372036854775807");
  EXPECT_EQ(c.steps, 4503599627370495);
}

// Issue 52: what needs the number of processes was checked after they connected: WORLD_SIZE=2
// with context_parallel=4 waited for a rendezvous that never came, and one process with
// context_parallel=2 was refused only once its tokenizer and data were prepared. Every
// data-parallel group's tokens add to the run's count, so the steps bound shrinks with them.
TEST(RunConfig, WhatNeedsTheWorldSizeIsCheckedAgainstIt) {
  auto c = load_run_config(find_config("gpt2-small"));
  apply_run_override(c, "block_size=128");
  apply_run_override(c, "batch_size=16");
  apply_run_override(c, "context_parallel=4");
  EXPECT_EQ(error_of([&] { c.validate_world(2); }),
            "context_parallel (4) must divide the number of processes (2): launch a multiple of it, e.g. torchrun "
            "--nproc_per_node=4");
  EXPECT_NE(error_of([&] { c.validate_world(1); }).find("must divide the number of processes (1)"), std::string::npos);
  c.validate_world(8);
  apply_run_override(c, "context_parallel=1");
  apply_run_override(c, "steps=4503599627370495");  // one process: 2048 tokens a step
  c.validate_world(1);
  EXPECT_EQ(error_of([&] { c.validate_world(4); }),
            "run config: steps: must be at most 1125899906842623 (8192 tokens a step over 4 data-parallel groups; a "
            "64-bit count of tokens holds no more), got 4503599627370495");
  apply_run_override(c, "context_parallel=2");  // 4 processes in 2 groups
  EXPECT_NE(error_of([&] { c.validate_world(4); }).find("at most 2251799813685247 (4096 tokens a step over 2 "),
            std::string::npos);
}

TEST(RunConfig, FileErrorsNameTheFileLineAndKey) {
  const auto path = testing::scratch_path("run-bad.yaml").string();
  std::ofstream(path) << "model: gpt-tiny\nsteps: 10\nlearning_rate: 0.1\n";
  auto message = error_of([&] { load_run_config(path); });
  EXPECT_NE(message.find(path + ":3: unknown key 'learning_rate'"), std::string::npos) << message;
  std::ofstream(path) << "model: gpt-tiny\nsteps: [1\n";
  message = error_of([&] { load_run_config(path); });
  EXPECT_NE(message.find(path + ":"), std::string::npos) << message;
  EXPECT_NE(message.find("malformed YAML"), std::string::npos) << message;
  std::ofstream(path) << "steps: 10\n";
  EXPECT_NE(error_of([&] { load_run_config(path); }).find("missing required key 'model'"), std::string::npos);
  std::ofstream(path) << "model: gpt-nine\n";
  EXPECT_NE(error_of([&] { load_run_config(path); }).find(path + ":1: model: no config 'gpt-nine'"), std::string::npos);
  std::ofstream(path) << "model: gpt-tiny\nbatch_size: 0\n";
  EXPECT_NE(error_of([&] { load_run_config(path); }).find("batch_size: must be positive, got 0"), std::string::npos);
  std::ofstream(path) << "\n";
  EXPECT_NE(error_of([&] { load_run_config(path); }).find("run config is empty"), std::string::npos);
  EXPECT_NE(error_of([&] { load_run_config(path + ".missing"); }).find("cannot open run config"), std::string::npos);
}

TEST(RunConfig, YamlRoundTrips) {
  auto c = parse_run_config("model: " + kGpt + "\nsteps: 9\nval_data: v.txt\nsentence_pairs: none\n");
  apply_run_override(c, "model.window=16");
  const auto again = parse_run_config(to_yaml(c), "round trip");
  EXPECT_EQ(to_yaml(again), to_yaml(c));
  EXPECT_EQ(again.val_data, std::vector<std::string>{"v.txt"});
  ASSERT_TRUE(again.model_config.window.has_value());
  EXPECT_EQ(*again.model_config.window, 16);
}

TEST(RunConfig, SchemaListsEveryField) {
  const auto doc = run_schema_documentation();
  for (const char* key : {"model", "steps", "grad_accum", "label_smoothing", "eval_every", "keep_last", "on_nonfinite"})
    EXPECT_NE(doc.find(std::string("  ") + key + " ("), std::string::npos) << key;
}

}  // namespace
}  // namespace zoo
