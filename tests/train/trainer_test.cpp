#include "train/trainer.h"

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

namespace zoo {
namespace {

namespace fs = std::filesystem;
using testing::error_of;

// A 250 kB slice of the default corpus and a 512-piece tokenizer trained on it, made once per
// build tree (ctest runs each test in its own process).
struct Slice {
  std::string text, tokenizer;
};

const Slice& slice() {
  static const Slice s = [] {
    const fs::path dir(ZOO_TEST_BINARY_DIR);
    Slice out{(dir / "train-slice.txt").string(), (dir / "train-slice-512.model").string()};
    if (!fs::exists(out.text)) {
      const std::string corpus = read_file(testing::shared_corpus());
      const size_t cut = corpus.find("\n\n", 250000);
      write_file_atomically(out.text, corpus.substr(0, cut == std::string::npos ? corpus.size() : cut + 1));
    }
    if (!fs::exists(out.tokenizer)) {
      TokenizerTrainOptions t;
      t.inputs = {out.text};
      t.vocab_size = 512;
      Tokenizer::train(t, (dir / "train-slice-512").string());
    }
    return out;
  }();
  return s;
}

const char* kModels[] = {
    "{family: gpt, vocab_size: 512, d_model: 32, n_layers: 2, n_heads: 4, d_ff: 64, max_positions: 64}",
    "{family: bert, vocab_size: 512, d_model: 32, n_layers: 2, n_heads: 4, d_ff: 64, max_positions: 64, head: mlm}",
    "{family: t5, vocab_size: 512, d_model: 32, n_layers: 2, n_heads: 4, d_ff: 64}",
    // Linear attention (layers/linear_attention.h): gated, and a hybrid with performer features.
    "{family: gpt, vocab_size: 512, d_model: 32, n_layers: 2, n_heads: 4, d_ff: 64, max_positions: 64, "
    "attention: gated_linear}",
    "{family: gpt, vocab_size: 512, d_model: 32, n_layers: 2, n_heads: 4, d_ff: 64, max_positions: 64, "
    "attention_layers: [linear, softmax], feature_map: performer, performer_features: 16}"};

// A short run on the slice; `changes` ("key: value" lines) go through apply_run_override.
RunConfig tiny_run(const std::string& model, const std::string& changes = "") {
  auto config = parse_run_config("model: " + model + "\ndata: " + slice().text + "\ntokenizer: " + slice().tokenizer +
                                     "\nsteps: 12\nbatch_size: 4\nblock_size: 32\nwarmup_steps: 2\nlr: 0.003\n"
                                     "eval_every: 4\neval_batches: 2\nlog_every: 100\nval_fraction: 0.2\n"
                                     // fp32 unless a test asks: auto would follow the machine's bf16 speed.
                                     "precision: fp32\n",
                                 "test run");
  std::istringstream lines(changes);
  for (std::string line; std::getline(lines, line);) {
    const auto colon = line.find(": ");
    if (colon != std::string::npos) apply_run_override(config, line.substr(0, colon) + "=" + line.substr(colon + 2));
  }
  return config;
}

TrainerOptions quiet(const std::string& run_dir, std::ostream& log) {
  TrainerOptions o;
  o.run_dir = run_dir;
  o.log = &log;
  o.live = 0;
  return o;
}

std::map<std::string, torch::Tensor> weights(Model& model) {
  std::map<std::string, torch::Tensor> out;
  for (const auto& p : model.module()->named_parameters()) out[p.key()] = p.value().detach().clone();
  return out;
}

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
    if (step == 0) first = out.loss.item<double>();
    last = out.loss.item<double>();
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
                      OverfitCase{"gpt_performer_hybrid", kModels[4], Objective::kCausalLM}),
    [](const auto& info) { return info.param.name; });

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

// ---------------------------------------------------------------------------------------------
// Resume: 2N steps straight equal N steps, a stop, and N resumed steps, loss for loss and
// weight for weight. Dropout, accumulation, clipping and label smoothing are on, so the RNG
// state, the optimizer and the data position all have to come back.

// Runs `config` straight to its end, and again stopped after step 6 and resumed from its run
// directory; expects the same loss at every step and the same final weights.
struct ResumeRuns {
  TrainSummary full, part2;
  std::string split_dir;
};

ResumeRuns expect_resume_equals_straight_run(const RunConfig& config, const std::string& name) {
  std::ostringstream log;
  ResumeRuns runs;
  runs.split_dir = testing::scratch_path(name + "/split").string();
  Trainer straight(config, quiet(testing::scratch_path(name + "/straight").string(), log));
  runs.full = straight.run();
  EXPECT_EQ(runs.full.losses.size(), 12u);

  auto first_options = quiet(runs.split_dir, log);
  Trainer* first_trainer = nullptr;
  first_options.on_step = [&](int64_t step, double) {
    if (step == 6) first_trainer->request_stop();
  };
  Trainer first(config, first_options);
  first_trainer = &first;
  const auto part1 = first.run();
  EXPECT_TRUE(part1.interrupted);
  EXPECT_EQ(part1.losses.size(), 6u);
  EXPECT_TRUE(fs::exists(fs::path(runs.split_dir) / "checkpoints" / "step-6"));

  auto resume_options = quiet(runs.split_dir, log);
  resume_options.resume = true;
  Trainer second(load_run_config((fs::path(runs.split_dir) / "run.yaml").string()), resume_options);
  EXPECT_EQ(second.current_step(), 6);
  runs.part2 = second.run();
  if (runs.full.losses.size() != 12u || part1.losses.size() != 6u || runs.part2.losses.size() != 6u) {
    ADD_FAILURE() << "runs of the wrong length";
    return runs;
  }
  for (size_t i = 0; i < 12; ++i) {
    const double resumed = i < 6 ? part1.losses[i] : runs.part2.losses[i - 6];
    EXPECT_EQ(runs.full.losses[i], resumed) << "step " << i + 1;
  }
  auto a = weights(straight.model()), b = weights(second.model());
  for (const auto& [tensor, value] : a) EXPECT_TRUE(torch::equal(value, b.at(tensor))) << tensor;
  return runs;
}

class Resume : public ::testing::TestWithParam<int> {};

TEST_P(Resume, StopAndResumeEqualsStraightRun) {
  // 0, 1, 2: the families in fp32; 3: GPT in bf16 mixed precision (CPU autocast).
  const std::string model = kModels[GetParam() % 3];
  const std::string extra = std::string("grad_accum: 2\nlabel_smoothing: 0.1\ngrad_clip: 0.5\nseed: 3\n") +
                            (GetParam() == 3 ? "precision: bf16\n" : "");
  auto config = tiny_run(model, extra);
  config.model_config.dropout = 0.1;
  const auto runs = expect_resume_equals_straight_run(config, "resume/" + std::to_string(GetParam()));
  const auto& full = runs.full;
  const auto& part2 = runs.part2;
  const auto& split_dir = runs.split_dir;
  ASSERT_TRUE(full.final_eval && part2.final_eval);
  EXPECT_EQ(full.final_eval->loss, part2.final_eval->loss);
  // The resumed run's metrics hold each step once.
  int64_t train_records = 0;
  for (const auto& r : read_metrics((fs::path(split_dir) / "metrics.jsonl").string()))
    train_records += r["split"] == "train";
  EXPECT_EQ(train_records, 12);
}

INSTANTIATE_TEST_SUITE_P(Families, Resume, ::testing::Values(0, 1, 2, 3), [](const auto& info) {
  return std::string(info.param == 0 ? "gpt" : info.param == 1 ? "bert" : info.param == 2 ? "t5" : "gpt_bf16");
});

// The same for linear attention: a gated model in fp32 and bf16, and a hybrid whose performer
// features (a buffer) must come back with the checkpoint.
TEST(Trainer, LinearAttentionStopAndResumeEqualsStraightRun) {
  for (const auto& [model, precision] : std::vector<std::pair<const char*, const char*>>{
           {kModels[3], "fp32"}, {kModels[3], "bf16"}, {kModels[4], "fp32"}}) {
    SCOPED_TRACE(std::string(model) + " " + precision);
    auto config = tiny_run(model, std::string("grad_accum: 2\ngrad_clip: 0.5\nseed: 3\nprecision: ") + precision + "\n");
    config.model_config.dropout = 0.1;
    expect_resume_equals_straight_run(config, std::string("resume-linear/") + (model == kModels[3] ? "gla-" : "hybrid-") +
                                                  precision);
  }
}

// bf16 mixed precision on the CPU (LibTorch's autocast), for each family (BERT's masked-LM head
// runs a LayerNorm on a bf16 input): matrix products in bf16, the master weights and the
// optimizer in fp32. Over 8 steps its losses follow fp32's to within 2e-2 (the
// figure PyTorch's autocast gives nanoGPT in the performance issue is about 1e-2 over 6), and
// differ from them, so the autocast was at work; the weights stay fp32. Evaluation likewise.
TEST(Trainer, Bf16MixedPrecisionTracksFp32) {
  for (int family = 0; family < 5; ++family) {
    SCOPED_TRACE(kModels[family]);
    std::ostringstream log;
    auto fp32 = tiny_run(kModels[family], "steps: 8\neval_every: 0\nprecision: fp32\n");
    auto bf16 = tiny_run(kModels[family], "steps: 8\neval_every: 0\nprecision: bf16\n");
    for (auto* c : {&fp32, &bf16}) c->model_config.dropout = c->model_config.attention_dropout = 0.0;
    const std::string dir = "bf16/" + std::to_string(family);
    Trainer a(fp32, quiet(testing::scratch_path(dir + "/fp32").string(), log));
    Trainer b(bf16, quiet(testing::scratch_path(dir + "/bf16").string(), log));
    // Evaluation too runs under autocast: the same initial weights, a different validation loss.
    const double eval_fp32 = a.evaluate().loss, eval_bf16 = b.evaluate().loss;
    EXPECT_NEAR(eval_fp32, eval_bf16, 2e-2);
    EXPECT_NE(eval_fp32, eval_bf16) << "bf16 evaluation equals fp32's bit for bit: no autocast";
    const auto la = a.run().losses, lb = b.run().losses;
    ASSERT_EQ(la.size(), lb.size());
    bool differ = false;
    for (size_t i = 0; i < la.size(); ++i) {
      EXPECT_NEAR(la[i], lb[i], 2e-2) << "step " << i + 1;
      differ = differ || la[i] != lb[i];
    }
    EXPECT_TRUE(differ) << "bf16 losses equal fp32's bit for bit: no autocast";
    for (const auto& p : b.model().module()->parameters()) EXPECT_EQ(p.scalar_type(), torch::kFloat);
    EXPECT_NE(log.str().find("(bf16: as asked)"), std::string::npos) << log.str();
  }
}

// Accumulating two micro-batches of 4 is one batch of 8: the sampler hands out the same
// examples in the same order, and the loss, the gradient norm and the (clipped) gradients of
// the first update agree. (Weights after Adam do not: it turns float noise in near-zero
// gradients into full-size steps.)
TEST(Trainer, GradientAccumulationEqualsTheLargerBatch) {
  std::ostringstream log;
  auto big = tiny_run(kModels[0], "batch_size: 8\nsteps: 3\ngrad_clip: 0.5\n");
  auto accumulated = tiny_run(kModels[0], "batch_size: 4\ngrad_accum: 2\nsteps: 3\ngrad_clip: 0.5\n");
  for (auto* c : {&big, &accumulated}) c->model_config.dropout = c->model_config.attention_dropout = 0.0;
  Trainer a(big, quiet(testing::scratch_path("accum/big").string(), log));
  Trainer b(accumulated, quiet(testing::scratch_path("accum/acc").string(), log));
  const StepReport ra = a.step(), rb = b.step();
  EXPECT_NEAR(ra.loss, rb.loss, 1e-5);
  EXPECT_NEAR(ra.grad_norm, rb.grad_norm, 1e-4 * ra.grad_norm);
  EXPECT_GT(ra.grad_norm, 0.5);  // so clipping was at work
  EXPECT_EQ(ra.tokens, rb.tokens);
  auto gb = b.model().module()->named_parameters();
  for (const auto& p : a.model().module()->named_parameters()) {
    EXPECT_ALLCLOSE(p.value().grad(), gb[p.key()].grad(), 1e-6) << p.key();
  }
}

// A few hundred steps of a tiny GPT on a slice of the default corpus lower the validation loss
// from about ln(512) = 6.24 by more than 1.5 nats (measured: 1.8).
TEST(Trainer, ShortRunLowersValidationLoss) {
  std::ostringstream log;
  auto config = tiny_run("{family: gpt, vocab_size: 512, d_model: 64, n_layers: 2, n_heads: 4, d_ff: 256, "
                         "max_positions: 64, dropout: 0.0, attention_dropout: 0.0}",
                         "steps: 250\nbatch_size: 8\nblock_size: 64\nlr: 0.004\nwarmup_steps: 20\n"
                         "eval_every: 0\neval_batches: 10\n");
  Trainer trainer(config, quiet(testing::scratch_path("short").string(), log));
  const auto before = trainer.evaluate();
  const auto summary = trainer.run();
  ASSERT_TRUE(summary.final_eval);
  EXPECT_NEAR(before.loss, std::log(512.0), 0.5);
  EXPECT_LT(summary.final_eval->loss, before.loss - 1.5) << "before " << before.loss;
  EXPECT_NEAR(summary.final_eval->perplexity, std::exp(summary.final_eval->loss), 1e-6);
  // zoo eval on the run's validation tokens reproduces the trainer's evaluation.
  const auto data = (testing::scratch_path("short") / "data").string();
  const auto again = evaluate_checkpoint(testing::scratch_path("short").string(), {data}, 8, 10, "cpu", log);
  EXPECT_NEAR(again.loss, summary.final_eval->loss, 1e-5);
}

TEST(Trainer, NonFiniteLossStopsNamingTheStep) {
  std::ostringstream log;
  Trainer trainer(tiny_run(kModels[0]), quiet(testing::scratch_path("nan/stop").string(), log));
  {
    torch::NoGradGuard no_grad;
    trainer.model().gpt->final_norm->named_parameters()["weight"].fill_(NAN);
  }
  const auto message = error_of([&] { trainer.run(); });
  EXPECT_NE(message.find("non-finite loss (nan) at step 1"), std::string::npos) << message;
  EXPECT_FALSE(fs::exists(testing::scratch_path("nan/stop") / "checkpoints" / "step-1"));
}

TEST(Trainer, NonFiniteLossSkipsWhenAskedAndGivesUpAfterMaxSkipped) {
  std::ostringstream log;
  Trainer trainer(tiny_run(kModels[0], "on_nonfinite: skip\nmax_skipped: 2\n"),
                  quiet(testing::scratch_path("nan/skip").string(), log));
  auto weight = trainer.model().gpt->final_norm->named_parameters()["weight"];
  const auto good = weight.detach().clone();
  const auto before = weights(trainer.model());
  {
    torch::NoGradGuard no_grad;
    weight.fill_(NAN);
  }
  const StepReport skipped = trainer.step();
  EXPECT_FALSE(skipped.updated);  // skipped: nothing updated
  EXPECT_TRUE(std::isnan(skipped.loss));
  EXPECT_TRUE(std::isnan(skipped.grad_norm));
  {
    torch::NoGradGuard no_grad;
    weight.copy_(good);
  }
  auto after = weights(trainer.model());
  for (const auto& [name, value] : before) EXPECT_TRUE(torch::equal(value, after.at(name))) << name;
  EXPECT_TRUE(trainer.step().updated);
  {
    torch::NoGradGuard no_grad;
    weight.fill_(NAN);
  }
  EXPECT_FALSE(trainer.step().updated);
  EXPECT_FALSE(trainer.step().updated);
  const auto message = error_of([&] { trainer.step(); });
  EXPECT_NE(message.find("3 steps in a row skipped (max_skipped=2)"), std::string::npos) << message;
}

// Token files are reused only when made from the same files, split and tokenizer.
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

// The last K checkpoints and the best stay; `last` and `best` point at the right ones.
TEST(Trainer, KeepsTheLastCheckpointsAndTheBest) {
  std::ostringstream log;
  const auto dir = testing::scratch_path("keep");
  // A high rate, so the best evaluation may well be an early one.
  Trainer trainer(tiny_run(kModels[0], "steps: 12\neval_every: 2\nkeep_last: 2\nlr: 0.05\nwarmup_steps: 1\n"),
                  quiet(dir.string(), log));
  const auto summary = trainer.run();
  double best_loss = INFINITY;
  int64_t best_step = -1;
  for (const auto& r : read_metrics((dir / "metrics.jsonl").string())) {
    if (r["split"] == "val" && r["loss"].get<double>() < best_loss) best_loss = r["loss"], best_step = r["step"];
  }
  std::set<std::string> kept;
  for (const auto& e : fs::directory_iterator(dir / "checkpoints"))
    if (!e.is_symlink()) kept.insert(e.path().filename().string());
  std::set<std::string> expected = {"step-10", "step-12", "step-" + std::to_string(best_step)};
  EXPECT_EQ(kept, expected);
  EXPECT_EQ(fs::read_symlink(dir / "checkpoints" / "last").string(), "step-12");
  EXPECT_EQ(fs::read_symlink(dir / "checkpoints" / "best").string(), "step-" + std::to_string(best_step));
  EXPECT_EQ(resolve_checkpoint(dir.string()), fs::canonical(dir / "checkpoints" / ("step-" + std::to_string(best_step))).string());
  ASSERT_TRUE(summary.best_eval);
  EXPECT_EQ(summary.best_eval->step, best_step);
  // Every saved checkpoint is complete and loads.
  for (const auto& name : kept) EXPECT_NO_THROW(load_checkpoint((dir / "checkpoints" / name).string(), Family::kGpt));
}

TEST(Trainer, RefusesToOverwriteOrResumeWhatIsNotThere) {
  std::ostringstream log;
  const auto dir = testing::scratch_path("refuse").string();
  {
    Trainer t(tiny_run(kModels[0], "steps: 2\n"), quiet(dir, log));
    t.run();
  }
  auto message = error_of([&] { Trainer t(tiny_run(kModels[0]), quiet(dir, log)); });
  EXPECT_NE(message.find("already holds a run: --resume"), std::string::npos) << message;
  auto resume = quiet(testing::scratch_path("refuse-empty").string(), log);
  resume.resume = true;
  message = error_of([&] { Trainer t(tiny_run(kModels[0]), resume); });
  EXPECT_NE(message.find("nothing to resume"), std::string::npos) << message;
  // A checkpoint whose weights were cut short is refused by name.
  const auto model = fs::canonical(fs::path(dir) / "checkpoints" / "last") / "model.pt";
  fs::resize_file(model, fs::file_size(model) / 2);
  auto again = quiet(dir, log);
  again.resume = true;
  message = error_of([&] { Trainer t(load_run_config((fs::path(dir) / "run.yaml").string()), again); });
  EXPECT_NE(message.find("model.pt: cannot read weights"), std::string::npos) << message;
}

// A run that cannot be set up (bad data here) leaves nothing behind: the run directory it
// created goes again, and a directory that was there before stays as it was.
TEST(Trainer, FailedSetupRemovesTheRunDirectoryItCreated) {
  std::ostringstream log;
  const auto empty = testing::scratch_path("setup/empty.txt");
  fs::create_directories(empty.parent_path());
  write_file_atomically(empty.string(), "\n\n");
  auto config = tiny_run(kModels[0]);
  config.data = {empty.string()};
  config.val_data = {};
  const auto dir = testing::scratch_path("setup/runs/new");
  const auto message = error_of([&] { Trainer t(config, quiet(dir.string(), log)); });
  EXPECT_NE(message.find("the inputs contain no text: " + empty.string() + " is empty"), std::string::npos) << message;
  EXPECT_FALSE(fs::exists(testing::scratch_path("setup/runs"))) << "the folders the run created are removed";
  const auto existing = testing::scratch_path("setup/existing");
  fs::create_directories(existing);
  EXPECT_THROW(Trainer(config, quiet(existing.string(), log)), std::runtime_error);
  EXPECT_TRUE(fs::is_directory(existing));
}

// A directory of the user's is never taken for a run.
TEST(Trainer, RefusesADirectoryItDidNotWrite) {
  std::ostringstream log;
  const auto dir = testing::scratch_path("users-dir");
  fs::create_directories(dir);
  write_file_atomically((dir / "thesis.tex").string(), "years of work");
  for (bool overwrite : {false, true}) {
    auto options = quiet(dir.string(), log);
    options.overwrite = overwrite;
    const auto message = error_of([&] { Trainer t(tiny_run(kModels[0]), options); });
    EXPECT_NE(message.find("exists and is not a zoo run directory"), std::string::npos) << message;
  }
  EXPECT_EQ(read_file((dir / "thesis.tex").string()), "years of work");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);
}

// --overwrite replaces the run zoo wrote, never a file a user put in it (issue 31: a user's
// notes under RUN/checkpoints/ went with the old checkpoints).
TEST(Trainer, OverwriteKeepsTheUsersFilesInTheRun) {
  std::ostringstream log;
  const auto dir = testing::scratch_path("overwrite-keeps");
  {
    Trainer t(tiny_run(kModels[0], "steps: 2\n"), quiet(dir.string(), log));
    t.run();
  }
  write_file_atomically((dir / "checkpoints" / "notes.txt").string(), "what I saw at step 2");
  fs::create_directories(dir / "checkpoints" / "step-7");  // a folder of the user's, named like one of zoo's
  auto options = quiet(dir.string(), log);
  options.overwrite = true;
  {
    Trainer t(tiny_run(kModels[0], "steps: 1\n"), options);
    t.run();
  }
  EXPECT_EQ(read_file((dir / "checkpoints" / "notes.txt").string()), "what I saw at step 2");
  EXPECT_TRUE(fs::is_directory(dir / "checkpoints" / "step-7"));
  EXPECT_FALSE(fs::exists(dir / "checkpoints" / "step-2")) << "the old run's checkpoints go";
  EXPECT_TRUE(fs::exists(dir / "checkpoints" / "step-1" / "model.pt"));
  EXPECT_NE(log.str().find("kept what zoo did not write in " + (dir / "checkpoints").string() + ": notes.txt, step-7"),
            std::string::npos)
      << log.str();
}

// A run directory is locked while a run uses it (issue 31: two runs on one directory both exit
// 0, one's run.yaml beside the other's checkpoints): from the Trainer's construction until its
// run() returns, or it is destroyed.
TEST(Trainer, ASecondRunOnTheSameDirectoryIsRefused) {
  std::ostringstream log;
  const auto dir = testing::scratch_path("locked").string();
  {
    Trainer first(tiny_run(kModels[0], "steps: 1\n"), quiet(dir, log));
    for (bool overwrite : {false, true}) {
      auto options = quiet(dir, log);
      options.overwrite = overwrite;
      const auto message = error_of([&] { Trainer second(tiny_run(kModels[0], "steps: 1\n"), options); });
      EXPECT_EQ(message, dir + ": another zoo process (PID " + std::to_string(::getpid()) +
                             ") is training in this run directory; wait for it to end, or choose another --run-dir");
    }
    first.run();  // its end releases the directory
    auto resume = quiet(dir, log);
    resume.resume = true;
    Trainer again(load_run_config((fs::path(dir) / "run.yaml").string()), resume);
    const auto message = error_of([&] { Trainer third(tiny_run(kModels[0], "steps: 1\n"), quiet(dir, log)); });
    EXPECT_NE(message.find("is training in this run directory"), std::string::npos) << message;
  }
  // The PID a process that died left in the lock file is named, and the lock taken over.
  write_file_atomically((fs::path(dir) / RunDirectory::kLockFile).string(), "4194304\n");
  std::ostringstream took;
  auto after_crash = quiet(dir, took);
  after_crash.resume = true;
  Trainer again(load_run_config((fs::path(dir) / "run.yaml").string()), after_crash);
  EXPECT_NE(took.str().find("from zoo process 4194304 (no longer running)"), std::string::npos) << took.str();
}

// run.yaml holds absolute paths, so `--resume` works from any working directory.
TEST(Trainer, RunConfigPathsAreAbsolute) {
  std::ostringstream log;
  const auto dir = testing::scratch_path("absolute").string();
  const auto cwd = fs::current_path();
  fs::current_path(fs::path(slice().text).parent_path());
  auto config = tiny_run(kModels[0], "steps: 1\n");
  config.data = {fs::path(slice().text).filename().string()};
  config.tokenizer = fs::path(slice().tokenizer).filename().string();
  {
    Trainer t(config, quiet(dir, log));
    t.run();
  }
  fs::current_path(cwd);
  const auto saved = load_run_config((fs::path(dir) / "run.yaml").string());
  ASSERT_EQ(saved.data.size(), 1u);
  EXPECT_EQ(saved.data[0], fs::canonical(slice().text).string());
  EXPECT_EQ(saved.tokenizer, fs::canonical(slice().tokenizer).string());
}

// A checkpoint write that fails part-way (the file-size limit here; a full disk alike) names the
// cause and leaves the previous checkpoint and the `last` link as they were.
TEST(Trainer, AFailedCheckpointWriteKeepsThePreviousOne) {
  std::ostringstream log;
  const auto dir = testing::scratch_path("full-disk").string();
  Trainer trainer(tiny_run(kModels[0], "steps: 20\n"), quiet(dir, log));
  trainer.step();
  const std::string first = trainer.save(/*is_best=*/true);
  trainer.step();
  {
    testing::ScopedFileSizeLimit limit(8192);
    const auto message = error_of([&] { trainer.save(/*is_best=*/true); });
    EXPECT_EQ(message, (fs::path(dir) / "checkpoints" / "step-2" / "model.pt").string() +
                           ": cannot write: the file-size limit (ulimit -f) was reached");
  }
  const auto checkpoints = fs::path(dir) / "checkpoints";
  EXPECT_EQ(fs::canonical(checkpoints / "last"), fs::canonical(first));
  EXPECT_EQ(fs::canonical(checkpoints / "best"), fs::canonical(first));
  EXPECT_FALSE(fs::exists(checkpoints / "step-2"));
  for (const auto& entry : fs::directory_iterator(checkpoints)) {
    EXPECT_EQ(entry.path().filename().string().find(".tmp."), std::string::npos) << entry.path();
  }
  const Checkpoint c = load_checkpoint(first);
  EXPECT_EQ(c.state.at("step"), 1);
}

// A state.json that says something impossible is refused by name, not resumed from.
TEST(Trainer, ResumeRefusesAnImpossibleState) {
  std::ostringstream log;
  const auto dir = testing::scratch_path("bad-state").string();
  {
    Trainer t(tiny_run(kModels[0], "steps: 2\n"), quiet(dir, log));
    t.run();
  }
  const auto state_path = (fs::canonical(fs::path(dir) / "checkpoints" / "last") / "state.json").string();
  auto state = nlohmann::json::parse(read_file(state_path));
  state["step"] = -5;
  write_file_atomically(state_path, state.dump());
  auto options = quiet(dir, log);
  options.resume = true;
  EXPECT_EQ(error_of([&] { Trainer t(load_run_config((fs::path(dir) / "run.yaml").string()), options); }),
            state_path + ": step (-5) must be >= 0");
}

// Fine-tuning: a pretrained BERT gets a fresh classification head, keeps its encoder, and
// learns a task it can only solve by reading the text.
// A two-class task a tiny encoder learns in a few dozen steps: "<word> is good <word>" is yes,
// "... is bad ..." no; 96 training and 24 validation rows (DIR/train.csv, DIR/val.csv).
std::pair<fs::path, fs::path> yes_no_examples(const std::string& dir) {
  const auto train_csv = testing::scratch_path(dir + "/train.csv"), val_csv = testing::scratch_path(dir + "/val.csv");
  const char* words[] = {"module", "function", "class", "string", "list", "file"};
  std::ofstream train(train_csv), val(val_csv);
  train << "text,label\n";
  val << "text,label\n";
  for (int i = 0; i < 120; ++i) {
    const bool positive = i % 2 == 0;
    const std::string text = std::string(words[i % 6]) + (positive ? " is good" : " is bad") + " " + words[(i / 6) % 6];
    (i < 96 ? train : val) << "\"" << text << "\"," << (positive ? "yes" : "no") << "\n";
  }
  return {train_csv, val_csv};
}

// A classification fine-tune of a briefly pretrained tiny BERT on yes_no_examples(DIR), with
// `changes`; the run directory is DIR/run, the validation file second.
std::pair<RunConfig, std::string> classification_run(const std::string& dir, const std::string& changes) {
  std::ostringstream log;
  const auto pretrain_dir = testing::scratch_path(dir + "/pretrain");
  Trainer(tiny_run(kModels[1], "steps: 4\n"), quiet(pretrain_dir.string(), log)).run();
  const auto examples = yes_no_examples(dir);
  auto config = tiny_run(kModels[1], "steps: 80\neval_every: 0\nblock_size: 16\nbatch_size: 8\n" + changes);
  config.model_config = load_checkpoint(resolve_checkpoint(pretrain_dir.string()), Family::kBert).model.config;
  config.init_from = pretrain_dir.string();
  config.objective = Objective::kClassification;
  config.data = {examples.first.string()};
  config.val_data = {examples.second.string()};
  config.tokenizer = "";
  return {config, examples.second.string()};
}

// Trains `config` into DIR/run (`before` sees the trainer set up): at least 90% validation
// accuracy, which eval of the checkpoint gives again. Returns the start-up log.
std::string expect_classifier_learns(const RunConfig& config, const std::string& dir, const std::string& val_csv,
                                     const std::function<void(Trainer&)>& before = nullptr) {
  std::ostringstream log;
  const std::string run_dir = testing::scratch_path(dir + "/run").string();
  Trainer finetune(config, quiet(run_dir, log));
  if (before) before(finetune);
  EXPECT_EQ(finetune.model().config.head, BertHead::kSequenceClassification);
  EXPECT_EQ(finetune.model().config.num_labels, 2);
  const std::string setup = log.str();
  const auto summary = finetune.run();
  EXPECT_TRUE(summary.final_eval);
  if (!summary.final_eval) return setup;
  EXPECT_GE(summary.final_eval->accuracy, 0.9);
  EXPECT_TRUE(fs::exists(fs::path(run_dir) / "checkpoints" / "last" / "labels.json"));
  const auto evaluated = evaluate_checkpoint(run_dir, {val_csv}, 8, 0, "cpu", log);
  EXPECT_EQ(evaluated.accuracy, summary.final_eval->accuracy);
  return setup;
}

TEST(Trainer, FineTunesAClassifierFromAPretrainedEncoder) {
  const auto [config, val_csv] = classification_run("ft", "lr: 0.003\n");
  // The encoder starts from the checkpoint: its embedding is the pretrained one.
  Checkpoint source = load_checkpoint(resolve_checkpoint(config.init_from));
  const std::string setup = expect_classifier_learns(config, "ft", val_csv, [&](Trainer& t) {
    EXPECT_TRUE(torch::equal(t.model().bert->token_embedding->weight, source.model.bert->token_embedding->weight));
  });
  EXPECT_NE(setup.find("newly initialized: classifier.weight, classifier.bias"), std::string::npos) << setup;
}

// LoRA fine-tuning of a briefly pretrained GPT: the base's tensors never change, only the
// adapters train (the optimizer holds nothing else), and the checkpoint holds the adapters alone
// with the base named by path and hash; loaded back, it computes what the trainer's model does.
std::string lora_base(const std::string& name) {
  std::ostringstream log;
  const auto dir = testing::scratch_path("lora/" + name);
  if (!fs::exists(dir / "checkpoints" / "last")) {
    fs::remove_all(dir);
    Trainer pretrain(tiny_run(kModels[0], "steps: 4\n"), quiet(dir.string(), log));
    pretrain.run();
  }
  return dir.string();
}

RunConfig lora_run(const std::string& base, const std::string& changes) {
  auto config = tiny_run(kModels[0], changes);
  config.init_from = base;
  config.model_config = load_checkpoint(resolve_checkpoint(base)).model.config;
  return config;
}

TEST(TrainerLora, TrainsOnlyTheAdaptersAndSavesThemAlone) {
  const std::string base = lora_base("base-a");
  Checkpoint source = load_checkpoint(resolve_checkpoint(base));
  std::ostringstream log;
  const auto run_dir = testing::scratch_path("lora/run-a").string();
  Trainer trainer(lora_run(base, "steps: 6\nlora.rank: 4\nlora.alpha: 8\nlora.targets: q,v,down\n"),
                  quiet(run_dir, log));
  // 2 layers x (q, v, down): A (4, 32) and B (32, 4) for q and v; A (4, 64), B (32, 4) for down.
  const int64_t adapter_parameters = 2 * (2 * (4 * 32 + 32 * 4) + (4 * 64 + 32 * 4));
  EXPECT_NE(log.str().find("(trainable " + std::to_string(adapter_parameters) + ","), std::string::npos) << log.str();
  EXPECT_NE(log.str().find("lora: rank 4, alpha 8, dropout 0.05 on 6 projections (q, v, down)"), std::string::npos)
      << log.str();
  trainer.run();
  auto before = weights(source.model), after = weights(trainer.model());
  int64_t adapters = 0;
  for (const auto& [name, value] : after) {
    if (is_adapter_tensor(name)) {
      ++adapters;
      if (name.find(".B") != std::string::npos) EXPECT_GT(value.abs().max().item<double>(), 0.0) << name;
      continue;
    }
    EXPECT_TRUE(torch::equal(value, before.at(name))) << name;
  }
  EXPECT_EQ(adapters, 12);
  const fs::path last = fs::path(run_dir) / "checkpoints" / "last";
  torch::serialize::InputArchive weights_file;
  weights_file.load_from((last / "model.pt").string());
  EXPECT_EQ(weights_file.keys().size(), 12u);
  for (const auto& key : weights_file.keys()) EXPECT_TRUE(is_adapter_tensor(key)) << key;
  EXPECT_LT(fs::file_size(last / "model.pt") * 10, fs::file_size(fs::path(resolve_checkpoint(base)) / "model.pt"));
  torch::serialize::InputArchive optimizer_file;
  optimizer_file.load_from((last / "optimizer.pt").string());
  const auto state = LoraState::parse(read_file((last / "lora.json").string()), "lora.json");
  EXPECT_EQ(state.base, fs::canonical(resolve_checkpoint(base)).string());
  EXPECT_EQ(state.base_hash, file_hash(state.base + "/model.pt"));
  EXPECT_EQ(state.config.rank, 4);
  // Loaded back: the base, the adapters attached, the same outputs.
  Checkpoint loaded = load_checkpoint(last.string());
  ASSERT_TRUE(loaded.model.lora);
  auto reloaded = weights(loaded.model);
  for (const auto& [name, value] : after) EXPECT_TRUE(torch::equal(value, reloaded.at(name))) << name;
  const auto metrics = read_metrics((fs::path(run_dir) / "metrics.jsonl").string());
  EXPECT_EQ(metrics.front()["trainable_parameters"], adapter_parameters);
  EXPECT_EQ(metrics.front()["parameters"], count_parameters(*trainer.model().module()));
}

// Exact resume of a LoRA run (dropout on the adapters, accumulation, clipping): the frozen base
// comes from the base checkpoint again, the adapters and their AdamW state from the run's.
TEST(TrainerLora, ResumeEqualsStraightRun) {
  const std::string base = lora_base("base-b");
  auto config = lora_run(base, "grad_accum: 2\ngrad_clip: 0.5\nseed: 3\nlora.rank: 2\nlora.dropout: 0.1\n"
                               "lora.targets: all\n");
  expect_resume_equals_straight_run(config, "lora/resume");
}

TEST(TrainerLora, BadSettingsAndAChangedBaseAreNamed) {
  std::ostringstream log;
  // Not a fine-tune.
  EXPECT_EQ(error_of([&] { Trainer(tiny_run(kModels[0], "lora.rank: 4\n"), quiet(testing::scratch_path("lora/no").string(), log)); }),
            "lora.rank: LoRA adapts a pretrained model, and this run starts from fresh weights: use zoo finetune "
            "CHECKPOINT (or init_from=CHECKPOINT)");
  EXPECT_FALSE(fs::exists(testing::scratch_path("lora/no")));
  EXPECT_EQ(error_of([&] { tiny_run(kModels[0], "lora.rank: -1\n"); }),
            "override 'lora.rank=-1': lora.rank: must not be negative, got -1");
  EXPECT_EQ(error_of([&] { tiny_run(kModels[0], "lora.rank: 4\nlora.dropout: 1\n"); }),
            "override 'lora.dropout=1': lora.dropout: must be in [0, 1), got 1");
  // A base that changed after the adapters were trained, or is gone.
  const std::string base = lora_base("base-c");
  const auto run_dir = testing::scratch_path("lora/run-c").string();
  Trainer(lora_run(base, "steps: 2\nlora.rank: 2\n"), quiet(run_dir, log)).run();
  const std::string last = (fs::path(run_dir) / "checkpoints" / "last").string();
  const std::string base_dir = fs::canonical(resolve_checkpoint(base)).string();
  Checkpoint source = load_checkpoint(base_dir);
  {
    torch::NoGradGuard no_grad;
    source.model.gpt->token_embedding->weight[5][5] += 1;
  }
  save_weights(base_dir + "/model.pt", *source.model.module());
  const std::string message = error_of([&] { load_checkpoint(last); });
  EXPECT_EQ(message.rfind(last + "/lora.json: the base checkpoint " + base_dir +
                              " has changed since the adapters were trained (lora.json records xxh3-128:", 0),
            0u)
      << message;
  fs::remove(base_dir + "/model.pt");
  EXPECT_EQ(error_of([&] { load_checkpoint(last); }),
            last + "/lora.json: the base checkpoint " + base_dir + " is gone (no model.pt there); the adapters need it");
}

// A classifier fine-tuned with LoRA: adapters on every projection, the fresh head and pooler
// trained in full (as PEFT's modules_to_save), to the accuracy full fine-tuning reaches above.
TEST(TrainerLora, FineTunesAClassifier) {
  const auto [config, val_csv] = classification_run("lora-cls", "lr: 0.01\nlora.rank: 4\nlora.targets: all\n");
  const std::string setup = expect_classifier_learns(config, "lora-cls", val_csv);
  const auto trained = setup.find("trained in full: ");
  ASSERT_NE(trained, std::string::npos) << setup;
  EXPECT_NE(setup.find("classifier.weight, classifier.bias", trained), std::string::npos) << setup;
}

}  // namespace
}  // namespace zoo
