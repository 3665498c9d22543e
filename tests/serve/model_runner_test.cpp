#include "serve/model_runner.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/op_profile.h"
#include "models/decoding.h"
#include "test_util.h"

namespace zoo {
namespace {

Model tiny(const std::string& family) {
  auto config = testing::tiny_config(family, {"init_std=0.2"});
  torch::manual_seed(5);
  Model model = build_model(config);
  model.module()->to(torch::kDouble);
  model.module()->eval();
  return model;
}

// A sequence alone through the decoding loop's model (models/decoding.h): what its row of the
// batch must give, whatever the other rows, their padding and the width of the shared axis.
std::unique_ptr<DecodingModel> alone(Model& model, const std::vector<int64_t>& prompt) {
  return model.gpt ? gpt_decoding(model.gpt, {prompt}, 1, true, 64)
                   : encoder_decoder_decoding(model.seq2seq, {prompt}, 1, true, 64);
}

torch::Tensor one(int64_t token) { return torch::tensor({token}, torch::kLong).view({1, 1}); }

// The prompt's log-probabilities (echo) are the log-softmax of one forward over it, each token
// scored by the positions before it, over more than one block of 256 positions of the head; the
// first token has none, the alternatives are the top ones. token_logprobs on a worked example.
TEST(ModelRunner, PromptLogprobsAreTheForwardsLogSoftmax) {
  c10::InferenceMode inference;
  torch::manual_seed(5);
  Model model = build_model(testing::tiny_config("gpt", {"init_std=0.2", "max_positions=320"}));
  model.module()->eval();
  ModelRunner runner(model, 2, 8);
  std::vector<int64_t> prompt;
  for (int64_t i = 0; i < 300; ++i) prompt.push_back(3 + (i * 7) % 29);
  const auto entries = runner.prompt_logprobs(prompt, 3);
  ASSERT_EQ(entries.size(), prompt.size());
  EXPECT_FALSE(entries[0].logprob.has_value());
  EXPECT_TRUE(entries[0].top.empty());
  const auto want = torch::log_softmax(model.gpt->forward(torch::tensor(prompt).unsqueeze(0))[0].to(torch::kDouble), -1);
  for (size_t k = 1; k < prompt.size(); ++k) {
    const auto row = want[static_cast<int64_t>(k) - 1];
    ASSERT_TRUE(entries[k].logprob.has_value());
    EXPECT_NEAR(*entries[k].logprob, row[prompt[k]].item<double>(), 1e-5) << k;
    ASSERT_EQ(entries[k].top.size(), 3u);
    const auto top = row.topk(3);
    for (int64_t j = 0; j < 3; ++j) {
      EXPECT_EQ(entries[k].top[j].first, std::get<1>(top)[j].item<int64_t>()) << k;
      EXPECT_NEAR(entries[k].top[j].second, std::get<0>(top)[j].item<double>(), 1e-5) << k;
    }
  }
  // log-softmax of (0, ln 3): ln(1/4) and ln(3/4).
  const auto worked = token_logprobs(torch::tensor({{0.0, std::log(3.0)}}), {0}, 1);
  EXPECT_NEAR(*worked[0].logprob, std::log(0.25), 1e-7);
  ASSERT_EQ(worked[0].top.size(), 1u);
  EXPECT_EQ(worked[0].top[0].first, 1);
  EXPECT_NEAR(worked[0].top[0].second, std::log(0.75), 1e-7);
}

void expect_rows(const torch::Tensor& batch, const std::vector<torch::Tensor>& reference) {
  ASSERT_EQ(batch.size(0), static_cast<int64_t>(reference.size()));
  EXPECT_EQ(batch.scalar_type(), torch::kFloat);
  for (size_t i = 0; i < reference.size(); ++i) {
    const auto expected = reference[i].squeeze(0).to(torch::kFloat);
    EXPECT_TRUE(torch::allclose(batch[static_cast<int64_t>(i)], expected, 1e-5, 1e-5))
        << "row " << i << ": " << (batch[static_cast<int64_t>(i)] - expected).abs().max().item<float>();
  }
}

class ModelRunnerRows : public ::testing::TestWithParam<std::string> {};

// Two prompts of different lengths prefilled together and placed; a step; the first leaves (the
// last row moves into its place) and a third joins; steps past the 8 positions reserved, so the
// shared axis grows and is trimmed. Every row's logits are its sequence's alone.
TEST_P(ModelRunnerRows, EachRowIsItsSequenceAlone) {
  c10::InferenceMode inference;
  Model model = tiny(GetParam());
  ModelRunner runner(model, 3, 8);
  const std::vector<std::vector<int64_t>> prompts = {{5, 6, 7}, {8, 9, 10, 11, 12}, {13, 14}};
  std::vector<std::unique_ptr<DecodingModel>> sequences;
  for (const auto& p : prompts) sequences.push_back(alone(model, p));

  auto first = runner.prefill({&prompts[0], &prompts[1]});
  expect_rows(first.logits, {sequences[0]->start(), sequences[1]->start()});
  const bool decoder = GetParam() == "gpt";
  EXPECT_EQ(first.positions, (decoder ? std::vector<int64_t>{3, 5} : std::vector<int64_t>{1, 1}));
  EXPECT_EQ(first.memory_lengths, (decoder ? std::vector<int64_t>{0, 0} : std::vector<int64_t>{3, 5}));
  for (int64_t i = 0; i < 2; ++i) runner.place(first.cache, i, first.positions[i], first.memory_lengths[i]);
  EXPECT_EQ(runner.rows(), 2);
  expect_rows(runner.step({20, 21}), {sequences[0]->step(one(20)), sequences[1]->step(one(21))});

  runner.remove_row(0);  // sequence 1 now in row 0
  auto third = runner.prefill({&prompts[2]});
  expect_rows(third.logits, {sequences[2]->start()});
  runner.place(third.cache, 0, third.positions[0], third.memory_lengths[0]);
  for (int64_t t = 0; t < 8; ++t) {
    expect_rows(runner.step({30 + t, 40 + t}), {sequences[1]->step(one(30 + t)), sequences[2]->step(one(40 + t))});
  }
  runner.remove_row(1), runner.remove_row(0);
  EXPECT_EQ(runner.rows(), 0);
  EXPECT_THROW(runner.remove_row(0), std::logic_error);
}

INSTANTIATE_TEST_SUITE_P(Families, ModelRunnerRows, ::testing::Values("gpt", "t5"));

// A decoder's prompt read in chunks into its own cache gives what it gives read whole.
TEST(ModelRunner, ChunksReadAsTheWholePrompt) {
  c10::InferenceMode inference;
  Model model = tiny("gpt");
  ModelRunner runner(model, 2, 0);
  const std::vector<int64_t> prompt = {3, 4, 5, 6, 7, 8, 9};
  auto cache = runner.chunk_cache();
  runner.read_chunk({3, 4, 5}, cache);
  const auto logits = runner.read_chunk({6, 7, 8, 9}, cache);
  expect_rows(logits, {alone(model, prompt)->start()});
  runner.place(cache, 0, static_cast<int64_t>(prompt.size()), 0);
  EXPECT_EQ(runner.rows(), 1);
}

// Rows that all begin at the shared axis's first position step without a mask (no positions
// cumulated from one), and their tokens come back in one read (#48); a padded row brings the mask
// back. The tokens are each sequence's alone.
TEST(ModelRunner, UnpaddedRowsStepWithoutAMaskAndTheirTokensComeBackInOneRead) {
  c10::InferenceMode inference;
  Model model = tiny("gpt");
  ModelRunner runner(model, 3, 8);
  const std::vector<std::vector<int64_t>> prompts = {{5, 6, 7}, {8, 9, 10}, {11, 12}};
  auto read = runner.prefill({&prompts[0], &prompts[1]});
  for (int64_t i = 0; i < 2; ++i) runner.place(read.cache, i, read.positions[i], read.memory_lengths[i]);
  GenerationOptions greedy;
  std::vector<DecodingRow> rows(2);
  for (int64_t i = 0; i < 2; ++i) rows[i].options = &greedy, rows[i].context = &prompts[i];
  auto cumsums = [](const std::vector<OpTime>& ops) {
    int64_t n = 0;
    for (const auto& op : ops) n += op.name == "aten::cumsum" ? op.calls : 0;
    return n;
  };
  std::vector<RowToken> chosen;
  auto ops = profile_ops([&] { chosen = choose_row_tokens(runner.step({20, 21}), rows); });
  EXPECT_EQ(synchronizing_calls(ops), 1) << describe_synchronizing(ops);
  EXPECT_EQ(cumsums(ops), 0);
  for (int64_t i = 0; i < 2; ++i) {
    auto sequence = alone(model, prompts[i]);
    sequence->start();
    EXPECT_EQ(chosen[i].token, sequence->step(one(20 + i)).argmax(-1).item<int64_t>()) << "row " << i;
  }
  auto shorter = runner.prefill({&prompts[2]});
  runner.place(shorter.cache, 0, shorter.positions[0], 0);
  rows.push_back(rows[0]);
  ops = profile_ops([&] { chosen = choose_row_tokens(runner.step({22, 23, 24}), rows); });
  EXPECT_EQ(synchronizing_calls(ops), 1) << describe_synchronizing(ops);
  EXPECT_GT(cumsums(ops), 0);
}

TEST(ModelRunner, RefusesWhatMakesNoText) {
  try {
    ModelRunner runner(tiny("bert"), 2, 0);
    FAIL() << "a bert model was taken";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "zoo serve: a bert model makes embeddings, not text");
  }
  ModelRunner t5(tiny("t5"), 1, 0);
  auto cache = t5.chunk_cache();
  EXPECT_THROW(t5.read_chunk({3, 4}, cache), std::logic_error);
}

}  // namespace
}  // namespace zoo
