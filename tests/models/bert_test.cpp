#include "models/bert.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "test_util.h"

namespace zoo {
namespace {

using testing::max_abs_diff;

Bert tiny_bert(const std::vector<std::string>& overrides = {}) {
  auto config = testing::tiny_config("bert", {"vocab_size=50", "max_positions=32"});
  for (const auto& o : overrides) apply_override(config, o);
  Bert model(config);
  model->eval();
  return model;
}

TEST(Bert, EncoderOutputDependsOnLaterTokens) {
  auto model = tiny_bert();
  torch::NoGradGuard no_grad;
  auto ids = torch::randint(1, 50, {1, 8}, torch::kLong);
  auto changed = ids.clone();
  changed[0][7] = (ids[0][7].item<int64_t>() % 49) + 1;
  EXPECT_GT(max_abs_diff(model->forward(ids).sequence_output.narrow(1, 0, 7),
                         model->forward(changed).sequence_output.narrow(1, 0, 7)),
            1e-4);
}

TEST(Bert, PaddedBatchEqualsEachSequenceAlone) {
  for (auto overrides : std::vector<std::vector<std::string>>{{}, {"position=relative"}, {"position=alibi"}, {"position=rope"}}) {
    auto model = tiny_bert(overrides);
    torch::NoGradGuard no_grad;
    auto a = torch::randint(1, 50, {1, 8}, torch::kLong);
    auto b = torch::randint(1, 50, {1, 5}, torch::kLong);
    auto ids = torch::zeros({2, 8}, torch::kLong);
    ids[0].copy_(a[0]);
    ids[1].narrow(0, 0, 5).copy_(b[0]);
    auto mask = torch::ones({2, 8}, torch::kLong);
    mask[1].narrow(0, 5, 3).fill_(0);
    auto batch = model->forward(ids, mask);
    auto alone_a = model->forward(a), alone_b = model->forward(b);
    EXPECT_LE(max_abs_diff(batch.sequence_output[0], alone_a.sequence_output[0]), 1e-5);
    EXPECT_LE(max_abs_diff(batch.sequence_output[1].narrow(0, 0, 5), alone_b.sequence_output[0]), 1e-5);
    EXPECT_LE(max_abs_diff(batch.pooled_output[1], alone_b.pooled_output[0]), 1e-5);
  }
}

TEST(Bert, PoolerIsTanhDenseOfTheFirstToken) {
  auto model = tiny_bert();
  torch::NoGradGuard no_grad;
  auto out = model->forward(torch::randint(50, {2, 6}, torch::kLong));
  EXPECT_LE(max_abs_diff(out.pooled_output, torch::tanh(model->pooler->forward(out.sequence_output.select(1, 0)))), 1e-6);
}

TEST(Bert, SegmentsChangeTheEmbedding) {
  auto model = tiny_bert();
  torch::NoGradGuard no_grad;
  auto ids = torch::randint(50, {1, 6}, torch::kLong);
  auto types = torch::tensor({{0, 0, 0, 1, 1, 1}}, torch::kLong);
  EXPECT_GT(max_abs_diff(model->forward(ids).sequence_output, model->forward(ids, {}, types).sequence_output), 1e-4);
}

TEST(Bert, HeadsProduceTheirShapes) {
  auto ids = torch::randint(50, {2, 6}, torch::kLong);
  torch::NoGradGuard no_grad;
  auto mlm = tiny_bert({"head=mlm"});
  auto out = mlm->forward(ids);
  EXPECT_EQ(out.logits.sizes(), (std::vector<int64_t>{2, 6, 50}));
  // The MLM decoder is tied to the word embeddings, with its own bias.
  auto h = mlm->mlm_head->norm->forward(torch::gelu(mlm->mlm_head->dense->forward(out.sequence_output)));
  EXPECT_LE(max_abs_diff(out.logits, torch::matmul(h, mlm->token_embedding->weight.t()) + mlm->mlm_head->bias), 1e-5);
  EXPECT_EQ(tiny_bert({"head=nsp"})->forward(ids).logits.sizes(), (std::vector<int64_t>{2, 2}));
  auto pre = tiny_bert({"head=pretraining"})->forward(ids);
  EXPECT_EQ(pre.logits.sizes(), (std::vector<int64_t>{2, 6, 50}));
  EXPECT_EQ(pre.nsp_logits.sizes(), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(tiny_bert({"head=sequence_classification", "num_labels=3"})->forward(ids).logits.sizes(),
            (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(tiny_bert({"head=token_classification", "num_labels=5"})->forward(ids).logits.sizes(),
            (std::vector<int64_t>{2, 6, 5}));
}

TEST(Bert, MismatchedMaskIsAnError) {
  auto model = tiny_bert();
  EXPECT_THROW(model->forward(torch::zeros({2, 6}, torch::kLong), torch::ones({2, 5})), c10::Error);
}

}  // namespace
}  // namespace zoo
