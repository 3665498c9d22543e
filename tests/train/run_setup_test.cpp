#include "train/run_setup.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/files.h"
#include "core/op_profile.h"
#include "kernels/thread_ring.h"
#include "models/bert.h"
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

// A classification fine-tune of a briefly pretrained tiny BERT (`model`, a masked LM) on
// yes_no_examples(DIR), with `changes`; the run directory is DIR/run, the validation file second.
std::pair<RunConfig, std::string> classification_run(const std::string& dir, const std::string& changes,
                                                      const std::string& model = kModels[1]) {
  std::ostringstream log;
  const auto pretrain_dir = testing::scratch_path(dir + "/pretrain");
  Trainer(tiny_run(model, "steps: 4\n"), quiet(pretrain_dir.string(), log)).run();
  const auto examples = yes_no_examples(dir);
  auto config = tiny_run(model, "steps: 80\neval_every: 0\nblock_size: 16\nbatch_size: 8\n" + changes);
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

// A Longformer encoder (windows of 3 to each side, two heads dilated) fine-tuned as a classifier:
// its first token global (transformers' rule), it learns the labels as BERT's full attention does.
TEST(Trainer, FineTunesALongformerClassifier) {
  const auto [config, val_csv] = classification_run("ft-longformer", "lr: 0.003\n", kLongformerModel);
  expect_classifier_learns(config, "ft-longformer", val_csv, [&](Trainer& t) {
    EXPECT_EQ(t.model().config.attention, AttentionKind::kLongformer);
    EXPECT_EQ(default_global_tokens(t.model().config), 1);
  });
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

// ---------------------------------------------------------------------------------------------
// A training step queued with nothing read back to the host: LibTorch's profiler sees no op that
// would make the host wait for a GPU (core/op_profile.h) in Trainer::queue_step, for every
// family and objective (pretraining each family, classification in full and with LoRA, LoRA on
// a GPT, bf16 autocast with accumulation and smoothing, no clipping), while reading the step
// back does. Not yet: a mixture of experts (its layers size their expert groups on the host).

TEST(HostSync, QueuedTrainingStepReadsNothingBack) {
  std::vector<std::pair<std::string, RunConfig>> runs;
  for (int i : {0, 1, 2, 3, 4, 5, 7}) runs.emplace_back(kModels[i], tiny_run(kModels[i], "steps: 3\neval_every: 0\n"));
  runs.emplace_back("gpt bf16, 2 micro-steps, smoothing, no clipping",
                    tiny_run(kModels[0], "steps: 3\neval_every: 0\nprecision: bf16\ngrad_accum: 2\n"
                                         "label_smoothing: 0.1\ngrad_clip: 0\n"));
  runs.emplace_back("gpt lora", lora_run(lora_base("base-sync"), "steps: 3\neval_every: 0\nlora.rank: 4\n"));
  runs.emplace_back("bert classification", classification_run("sync-cls", "steps: 3\n").first);
  runs.emplace_back("bert classification lora", classification_run("sync-cls-lora", "steps: 3\nlora.rank: 4\n").first);
  int index = 0;
  for (auto& [name, config] : runs) {
    SCOPED_TRACE(name);
    std::ostringstream log;
    Trainer trainer(config, quiet(testing::scratch_path("sync/" + std::to_string(index++)).string(), log));
    trainer.step();  // the optimizer's state and the tables are made in the first
    QueuedStep queued;
    const auto ops = profile_ops([&] { queued = trainer.queue_step(); });
    EXPECT_GT(aten_calls(ops), 100);  // the profiler saw the step
    EXPECT_EQ(synchronizing_calls(ops), 0) << describe_synchronizing(ops);
    StepReport report;
    const auto reading = profile_ops([&] { report = trainer.read_step(queued); });
    EXPECT_GT(synchronizing_calls(reading), 0);  // the reading does wait, and the count sees it
    EXPECT_TRUE(report.updated);
    EXPECT_TRUE(std::isfinite(report.loss));
  }
}

}  // namespace
}  // namespace zoo
