#include "train/task.h"

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
#include "train/evaluation.h"
#include "train/progress.h"
#include "train/train_test_util.h"
#include "train/trainer.h"

namespace zoo {
namespace {

namespace fs = std::filesystem;
using testing::error_of;
using namespace train_testing;

// ---------------------------------------------------------------------------------------------
// Each family, with its loss, drives a tiny model to near-zero loss on one fixed batch.

struct OverfitCase {
  std::string name, model;
  Objective objective;
};

void PrintTo(const OverfitCase& c, std::ostream* os) { *os << c.name; }

class Overfit : public ::testing::TestWithParam<OverfitCase> {};

TEST_P(Overfit, OneBatchToNearZeroLoss) {
  torch::manual_seed(0);
  const auto& c = GetParam();
  auto config = parse_config(c.model);
  config.dropout = config.attention_dropout = 0.0;
  Model model = build_model(config);
  const int64_t B = 4, T = 16, V = config.vocab_size;
  Batch batch;
  auto ids = torch::randint(SpecialTokens::kCount, V, {B, T}, torch::kLong);
  switch (c.objective) {
    case Objective::kCausalLM:
      batch.input_ids = ids;
      batch.labels = torch::cat({ids.slice(1, 1), torch::full({B, 1}, kIgnoreIndex, torch::kLong)}, 1);
      break;
    case Objective::kMaskedLM: {
      const auto masked = torch::rand({B, T}) < 0.3;
      batch.input_ids = torch::where(masked, torch::full_like(ids, SpecialTokens::kMask), ids);
      batch.labels = torch::where(masked, ids, torch::full_like(ids, kIgnoreIndex));
      batch.attention_mask = torch::ones_like(ids);
      break;
    }
    case Objective::kClassification:
      batch.input_ids = ids;
      batch.attention_mask = torch::ones_like(ids);
      batch.labels = torch::tensor({0, 1, 1, 0}, torch::kLong);
      break;
    default: {
      std::vector<std::vector<int64_t>> sources, targets;
      for (int64_t b = 0; b < B; ++b) {
        std::vector<int64_t> r;
        for (int64_t t = 0; t < T; ++t) r.push_back(ids[b][t].item<int64_t>());
        sources.emplace_back(r.begin(), r.end());
        targets.emplace_back(r.begin(), r.begin() + 8);
      }
      batch = seq2seq_batch(sources, targets, BatchTokens{});
    }
  }
  auto params = model.module()->parameters();
  torch::optim::Adam adam(params, torch::optim::AdamOptions(3e-3));
  double first = 0, last = 0;
  for (int step = 0; step < 300; ++step) {
    adam.zero_grad();
    auto out = compute_loss(model, batch, c.objective, torch::kCPU);
    // A mixture of experts' objective holds the router's load-balancing loss too (at least
    // experts_per_token times its coefficient): what must vanish is the cross-entropy.
    const double router = out.router_loss.defined() ? config.router_aux_loss_coef * out.router_loss.item<double>() : 0.0;
    if (step == 0) first = out.loss.item<double>() - router;
    last = out.loss.item<double>() - router;
    if (last < 0.01) break;
    out.loss.backward();
    adam.step();
  }
  EXPECT_GT(first, 0.5);
  EXPECT_LT(last, 0.05) << "started at " << first;
}

INSTANTIATE_TEST_SUITE_P(
    Families, Overfit,
    ::testing::Values(OverfitCase{"gpt", kModels[0], Objective::kCausalLM},
                      OverfitCase{"bert_mlm", kModels[1], Objective::kMaskedLM},
                      OverfitCase{"bert_classification",
                                  "{family: bert, vocab_size: 512, d_model: 32, n_layers: 2, n_heads: 4, d_ff: 64, "
                                  "max_positions: 64, head: sequence_classification}",
                                  Objective::kClassification},
                      OverfitCase{"t5", kModels[2], Objective::kSeq2Seq},
                      OverfitCase{"gpt_gated_linear", kModels[3], Objective::kCausalLM},
                      OverfitCase{"gpt_performer_hybrid", kModels[4], Objective::kCausalLM},
                      OverfitCase{"gpt_phi3_longrope", kModels[5], Objective::kCausalLM},
                      OverfitCase{"gpt_qwen3_moe", kModels[6], Objective::kCausalLM},
                      OverfitCase{"gpt_gemma", kModels[7], Objective::kCausalLM},
                      OverfitCase{"bert_linformer", kLinformerModel, Objective::kMaskedLM},
                      OverfitCase{"bert_longformer_classification",
                                  "{family: bert, vocab_size: 512, d_model: 32, n_layers: 2, n_heads: 4, d_ff: 64, "
                                  "max_positions: 64, head: sequence_classification, attention: longformer, "
                                  "attention_window: [4, 6], attention_dilation: [1, 1, 2, 3]}",
                                  Objective::kClassification}),
    [](const auto& info) { return info.param.name; });

// Training steps of encoders under context parallelism: BERT's masked LM and T5's seq2seq on
// batches of padded examples whose lengths are no multiple of 2N, each rank (a thread around an
// in-process ring, with its own copy of the model) computing its zigzag share and backward
// weighted by its targets, as the trainer does. The shares add up to one process's loss, and
// their gradients to its gradients, T5's relative table and the decoder's cross-attention
// included; ALiBi in the encoder and learned positions in BERT run at global positions.
struct EncoderCase {
  std::string name, model;
  Objective objective;
};

Batch padded_encoder_batch(const ModelConfig& config, Objective objective) {
  torch::manual_seed(11);
  const int64_t B = 3, S = 27, T = 13;  // neither a multiple of 4 or 8
  Batch batch;
  batch.input_ids = torch::randint(SpecialTokens::kCount, config.vocab_size, {B, S}, torch::kLong);
  batch.attention_mask = torch::ones({B, S}, torch::kLong);
  batch.attention_mask[1].narrow(0, 9, S - 9).zero_();  // row 1: 9 real tokens
  batch.attention_mask[2].narrow(0, 20, S - 20).zero_();
  batch.input_ids.masked_fill_(batch.attention_mask.eq(0), 0);
  if (objective == Objective::kMaskedLM) {
    batch.labels = torch::full({B, S}, kIgnoreIndex, torch::kLong);
    const auto chosen = torch::rand({B, S}).lt(0.3) & batch.attention_mask.eq(1);
    batch.labels = torch::where(chosen, batch.input_ids, batch.labels);
    batch.input_ids.masked_fill_(chosen, 3);
    batch.token_type_ids = torch::zeros({B, S}, torch::kLong);
    batch.token_type_ids[0].narrow(0, 15, S - 15).fill_(1);
  } else {
    batch.decoder_input_ids = torch::randint(SpecialTokens::kCount, config.vocab_size, {B, T}, torch::kLong);
    batch.labels = torch::randint(SpecialTokens::kCount, config.vocab_size, {B, T}, torch::kLong);
    batch.labels[1].narrow(0, 5, T - 5).fill_(kIgnoreIndex);
  }
  return batch;
}

void PrintTo(const EncoderCase& c, std::ostream* os) { *os << c.name; }

class ContextParallelEncoders : public ::testing::TestWithParam<EncoderCase> {};

TEST_P(ContextParallelEncoders, SharesAndGradientsAddUpToOneProcess) {
  const auto& c = GetParam();
  torch::manual_seed(5);
  auto config = parse_config(c.model);
  config.dropout = config.attention_dropout = 0.0;
  Model model = build_model(config);
  const Batch batch = padded_encoder_batch(config, c.objective);
  const auto whole = compute_loss(model, batch, c.objective, torch::kCPU);
  whole.loss.backward();
  ASSERT_GT(whole.targets, 0);
  const auto reference = model.module()->named_parameters();
  for (const int64_t ranks : {int64_t{2}, int64_t{4}}) {
    SCOPED_TRACE(c10::str(ranks, " ranks"));
    testing::Mailboxes boxes(ranks);
    std::vector<Model> copies;
    for (int64_t rank = 0; rank < ranks; ++rank) {
      copies.push_back(build_model(config));
      torch::NoGradGuard no_grad;
      auto params = copies.back().module()->named_parameters();
      for (const auto& p : reference) params[p.key()].copy_(p.value());
    }
    std::vector<LossOutput> shares(ranks);
    testing::on_every_rank(boxes, [&](int64_t rank, const std::shared_ptr<testing::ThreadRing>& ring) {
      auto& share = shares[rank];
      share = compute_loss(copies[rank], batch, c.objective, torch::kCPU, {.ring = ring});
      (share.loss * (static_cast<double>(share.targets) / static_cast<double>(whole.targets))).backward();
    });
    if (HasFailure()) return;
    double loss_sum = 0;
    int64_t targets = 0;
    for (int64_t rank = 0; rank < ranks; ++rank) {
      loss_sum += shares[rank].loss.item<double>() * static_cast<double>(shares[rank].targets);
      targets += shares[rank].targets;
    }
    EXPECT_EQ(targets, whole.targets);
    EXPECT_NEAR(loss_sum / static_cast<double>(targets), whole.loss.item<double>(), 1e-5 * whole.loss.item<double>());
    for (const auto& p : reference) {
      auto sum = torch::zeros_like(p.value());
      for (auto& copy : copies) {
        const auto g = copy.module()->named_parameters()[p.key()].grad();
        if (g.defined()) sum += g;
      }
      const auto want = p.value().grad();
      if (!want.defined()) {  // a head the loss does not read (BERT's pooler)
        EXPECT_EQ(sum.abs().max().item<double>(), 0.0) << p.key();
        continue;
      }
      const double error = (sum - want).abs().max().item<double>() / std::max(want.abs().max().item<double>(), 1e-3);
      EXPECT_LE(error, 1e-4) << p.key();
    }
    EXPECT_GT(boxes.messages(), 0) << "nothing travelled the ring";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Families, ContextParallelEncoders,
    ::testing::Values(EncoderCase{"bert_mlm", kModels[1], Objective::kMaskedLM},
                      EncoderCase{"bert_mlm_alibi",
                                  "{family: bert, vocab_size: 512, d_model: 32, n_layers: 2, n_heads: 4, d_ff: 64, "
                                  "max_positions: 64, head: mlm, position: alibi}",
                                  Objective::kMaskedLM},
                      EncoderCase{"t5", kModels[2], Objective::kSeq2Seq},
                      EncoderCase{"transformer",
                                  "{family: transformer, vocab_size: 512, d_model: 32, n_layers: 2, n_heads: 4, "
                                  "d_ff: 64, max_positions: 64}",
                                  Objective::kSeq2Seq}),
    [](const auto& info) { return info.param.name; });

// Token files are reused only when made from the same files, split and tokenizer.
// A mixture of experts' objective is the cross-entropy plus router_aux_loss_coef times the
// routers' load-balancing loss (the loss itself against transformers': hugging_face_test). Its
// gradient reaches the router also when the blocks are recomputed in backward: loss and
// gradients equal the plain step's, and the router's differs from its gradient without the term.
TEST(MixtureOfExpertsObjective, RouterLossTrainsTheRouterThroughRecomputation) {
  auto config = parse_config(kModels[6]);
  config.dropout = config.attention_dropout = 0.0;
  torch::manual_seed(5);
  const auto ids = torch::randint(SpecialTokens::kCount, config.vocab_size, {2, 16}, torch::kLong);
  Batch batch;
  batch.input_ids = ids;
  batch.labels = torch::cat({ids.slice(1, 1), torch::full({2, 1}, kIgnoreIndex, torch::kLong)}, 1);
  std::vector<double> losses;
  std::vector<std::map<std::string, torch::Tensor>> grads;
  for (const auto& [recompute, coef] : {std::pair{false, 0.01}, std::pair{true, 0.01}, std::pair{false, 0.0}}) {
    config.router_aux_loss_coef = coef;
    torch::manual_seed(0);
    Model model = build_model(config);
    model.set_activation_checkpointing(recompute);
    model.module()->train();
    const auto out = compute_loss(model, batch, Objective::kCausalLM, torch::kCPU);
    ASSERT_EQ(out.router_loss.defined(), coef > 0);
    out.loss.backward();
    losses.push_back(out.loss.item<double>());
    grads.emplace_back();
    for (const auto& p : model.module()->named_parameters()) grads.back()[p.key()] = p.value().grad().clone();
  }
  EXPECT_NEAR(losses[0], losses[1], 1e-6);
  for (const auto& [name, g] : grads[0]) {
    EXPECT_LE(testing::max_abs_diff(g, grads[1].at(name)), 1e-6 * std::max(1.0, g.abs().max().item<double>())) << name;
  }
  const std::string router = "blocks.1.moe.router";
  EXPECT_GT(testing::max_abs_diff(grads[0].at(router), grads[2].at(router)), 1e-6);
  // The term: near experts_per_token (2, balanced routing's value) times its coefficient.
  EXPECT_NEAR(losses[0] - losses[2], 0.02, 0.01);
}

TEST(Trainer, TokenFilesAreReusedOnlyForTheSameSources) {
  std::ostringstream log;
  const auto dir = testing::scratch_path("reuse").string();
  const auto tokenizer = Tokenizer::load(slice().tokenizer);
  const auto text = testing::scratch_path("reuse.txt").string();
  write_file_atomically(text, read_file(slice().text).substr(0, 20000));
  auto prepare = [&](double val_fraction) {
    log.str("");
    prepare_token_files({text}, {}, val_fraction, 0, tokenizer, dir, log);
    return log.str().find("reusing") != std::string::npos;
  };
  EXPECT_FALSE(prepare(0.01));
  EXPECT_TRUE(prepare(0.01));
  EXPECT_FALSE(prepare(0.02));  // another split
  write_file_atomically(text, read_file(slice().text).substr(0, 30000));
  EXPECT_FALSE(prepare(0.02));  // the text changed
  EXPECT_TRUE(prepare(0.02));
}

}  // namespace
}  // namespace zoo
