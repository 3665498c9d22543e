#include "train/evaluation.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/files.h"
#include "kernels/thread_ring.h"
#include "test_util.h"
#include "train/checkpoint.h"
#include "train/progress.h"
#include "train/train_test_util.h"
#include "train/trainer.h"

namespace zoo {
namespace {

namespace fs = std::filesystem;
using testing::error_of;
using namespace train_testing;

// Causal LM evaluation runs the head on blocks of 1024 rows (no (B T, V) logits): its loss and
// argmax hits are those of the whole logits of the model's forward, across a block's edge.
TEST(CausalLMEvaluation, TheHeadInBlocksScoresAsTheWholeLogits) {
  torch::manual_seed(4);
  auto config = parse_config(kModels[0]);
  config.dropout = config.attention_dropout = 0.0;
  Model model = build_model(config);
  model.module()->eval();
  torch::NoGradGuard no_grad;
  const int64_t B = 20, T = 64;  // 1280 rows: one block of 1024 and a partial one
  auto ids = torch::randint(SpecialTokens::kCount, config.vocab_size, {B, T}, torch::kLong);
  Batch batch;
  batch.input_ids = ids;
  batch.labels = torch::cat({ids.slice(1, 1), torch::full({B, 1}, kIgnoreIndex, torch::kLong)}, 1);
  batch.labels[3].narrow(0, 10, 20).fill_(kIgnoreIndex);  // some targets left out
  const auto out = compute_loss(model, batch, Objective::kCausalLM, torch::kCPU, {.with_accuracy = true});
  const auto logits = model.gpt->forward(ids).reshape({B * T, -1});
  const auto labels = batch.labels.reshape({-1});
  const auto valid = labels.ne(kIgnoreIndex);
  const double want = torch::nn::functional::cross_entropy(
                          logits, labels, torch::nn::functional::CrossEntropyFuncOptions().ignore_index(kIgnoreIndex))
                          .item<double>();
  EXPECT_EQ(out.targets, valid.sum().item<int64_t>());
  EXPECT_EQ(out.correct, (logits.argmax(-1).eq(labels) & valid).sum().item<int64_t>());
  EXPECT_NEAR(out.loss.item<double>(), want, 1e-6 * want);
}

// Evaluation under context parallelism: each of 2 and 4 ranks (threads around an in-process
// ring) scores its zigzag share of every sequence, the head in blocks of rows; the shares' sums
// are one process's loss, targets and argmax hits, and the sequences did travel the ring.
TEST(ContextParallelEvaluation, RanksSharesAddUpToOneProcesssScores) {
  torch::manual_seed(3);
  auto config = parse_config(kModels[0]);
  config.dropout = config.attention_dropout = 0.0;
  config.position = PositionKind::kAlibi;
  Model model = build_model(config);
  model.module()->eval();
  const int64_t B = 3, T = 48;
  auto ids = torch::randint(SpecialTokens::kCount, config.vocab_size, {B, T}, torch::kLong);
  Batch batch;
  batch.input_ids = ids;
  batch.labels = torch::cat({ids.slice(1, 1), torch::full({B, 1}, kIgnoreIndex, torch::kLong)}, 1);
  LossOutput whole;
  {
    torch::NoGradGuard no_grad;
    whole = compute_loss(model, batch, Objective::kCausalLM, torch::kCPU, {.with_accuracy = true});
  }
  ASSERT_EQ(whole.targets, B * (T - 1));
  for (const int64_t ranks : {int64_t{2}, int64_t{4}}) {
    testing::Mailboxes boxes(ranks);
    std::vector<LossOutput> shares(ranks);
    testing::on_every_rank(boxes, [&](int64_t rank, const std::shared_ptr<testing::ThreadRing>& ring) {
      torch::NoGradGuard no_grad;
      shares[rank] = compute_loss(model, batch, Objective::kCausalLM, torch::kCPU, {.with_accuracy = true, .ring = ring});
    });
    if (HasFailure()) return;
    double loss_sum = 0;
    int64_t targets = 0, correct = 0;
    for (int64_t rank = 0; rank < ranks; ++rank) {
      loss_sum += shares[rank].loss.item<double>() * static_cast<double>(shares[rank].targets);
      targets += shares[rank].targets;
      correct += shares[rank].correct;
    }
    EXPECT_EQ(targets, whole.targets) << ranks << " ranks";
    EXPECT_EQ(correct, whole.correct) << ranks << " ranks";
    EXPECT_NEAR(loss_sum / static_cast<double>(targets), whole.loss.item<double>(), 1e-5 * whole.loss.item<double>())
        << ranks << " ranks";
    EXPECT_GT(boxes.messages(), 0) << "nothing travelled the ring";
  }
}

}  // namespace
}  // namespace zoo
