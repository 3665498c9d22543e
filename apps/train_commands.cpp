// zoo train, finetune, eval and generate.

#include <filesystem>
#include <iomanip>
#include <iostream>
#include <memory>

#include <torch/torch.h>

#include "apps/commands.h"
#include "core/outputs.h"
#include "core/runtime.h"
#include "inference/text_generation.h"
#include "models/generation.h"
#include "train/checkpoint.h"
#include "train/distributed.h"
#include "train/evaluation.h"
#include "train/trainer.h"

namespace zoo::cli {
namespace {
namespace fs = std::filesystem;

// Data-parallel settings; the rank, world size and rendezvous come from the environment
// (torchrun, or RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT set by hand).
struct DistributedArgs {
  double timeout_seconds = 300;
  double bucket_mb = 8;
};

void add_distributed_options(CLI::App* command, DistributedArgs& d) {
  command->add_option("--dist-timeout", d.timeout_seconds,
                      "multi-process runs: seconds to wait for the other ranks (rendezvous, each collective)")
      ->check(positive_number());
  command->add_option("--bucket-mb", d.bucket_mb, "multi-process runs: gradient megabytes all-reduced together")
      ->check(positive_number());
}

struct TrainArgs {
  DistributedArgs distributed;
  std::string config;
  std::vector<std::string> overrides;
  std::string run_dir, resume, device;
  std::vector<std::string> data;
  bool overwrite = false;
};

struct FinetuneArgs {
  DistributedArgs distributed;
  std::string checkpoint, config, task = "auto", run_dir, device;
  std::vector<std::string> train, val, overrides;
  bool overwrite = false;
};

struct EvalArgs {
  std::string checkpoint, device = "auto";
  std::vector<std::string> data;
  int64_t batch_size = 16, max_batches = 0;
  QuantizeArgs quantize;
};

struct GenerateArgs {
  std::string checkpoint, device = "auto", dtype = "auto";
  std::vector<std::string> prompts, stops;
  std::vector<int64_t> eos;
  int64_t max_new_tokens = 64, top_k = 200, num_beams = 1, seed = 0, show = 5;
  double temperature = 0.8, top_p = 1.0, repetition_penalty = 1.0, length_penalty = 1.0;
  bool greedy = false, no_cache = false, chat = false;
  QuantizeArgs quantize;
};

int run_trainer(RunConfig config, const std::string& run_dir, bool resume, bool overwrite,
                const DistributedArgs& d) {
  TrainerOptions options;
  options.run_dir = run_dir, options.resume = resume, options.overwrite = overwrite, options.handle_signals = true;
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(d.timeout_seconds * 1000));
  const std::unique_ptr<DataParallel> parallel = join_data_parallel(config, {timeout, d.bucket_mb});
  options.parallel = parallel.get();
  Trainer trainer(std::move(config), options);
  const auto summary = trainer.run();
  if (!parallel || parallel->rank() == 0) std::cout << describe(summary);
  if (parallel) parallel->barrier();  // rank 0 hosts the store: leave together
  return 0;
}

int train(const TrainArgs& a) {
  RunConfig config;
  std::vector<std::string> overrides = a.overrides;
  std::string run_dir = a.run_dir;
  if (a.resume.empty()) {
    if (a.config.empty()) throw ConfigError("zoo train: give a run or model config (or --resume RUN_DIR)");
    config = load_run_config(find_config(a.config));
  } else {
    // With --resume every positional argument is an override.
    if (!a.config.empty()) overrides.insert(overrides.begin(), a.config);
    const fs::path run_yaml = fs::path(a.resume) / "run.yaml";
    if (!fs::exists(run_yaml)) throw std::runtime_error(a.resume + ": nothing to resume (no run.yaml: not a zoo run directory)");
    config = load_run_config(run_yaml.string());
    if (!run_dir.empty() && fs::path(run_dir) != fs::path(a.resume)) {
      throw ConfigError("--run-dir and --resume name different directories");
    }
    run_dir = a.resume;
  }
  for (const auto& o : overrides) apply_run_override(config, o);
  if (!a.data.empty()) config.data = a.data;
  if (!a.device.empty()) config.device = a.device;
  if (run_dir.empty()) run_dir = default_run_dir(config);
  return run_trainer(std::move(config), run_dir, !a.resume.empty(), a.overwrite, a.distributed);
}

int finetune(const FinetuneArgs& a) {
  const std::string checkpoint = resolve_checkpoint(a.checkpoint);
  RunConfig config = fine_tuning_run_config(checkpoint, a.config, a.task);
  if (!a.train.empty()) config.data = a.train;
  if (!a.val.empty()) config.val_data = a.val;
  if (config.data.empty()) throw ConfigError("zoo finetune: --train FILE is required");
  for (const auto& o : a.overrides) apply_run_override(config, o);
  if (!a.device.empty()) config.device = a.device;
  std::string run_dir = a.run_dir;
  if (run_dir.empty()) run_dir = default_run_dir(config) + "-" + to_string(config.objective);
  return run_trainer(std::move(config), run_dir, false, a.overwrite, a.distributed);
}

int eval(const EvalArgs& a) {
  const auto r = evaluate_checkpoint(a.checkpoint, a.data, a.batch_size, a.max_batches, a.device, std::cerr,
                                     a.quantize.requested());
  if (r.targets == 0) throw std::runtime_error("nothing to evaluate in the data");
  std::cout << std::fixed << std::setprecision(4) << "loss " << r.loss << "\nperplexity " << std::setprecision(3)
            << r.perplexity << "\naccuracy " << std::setprecision(4) << r.accuracy << "\n";
  if (!std::isnan(r.exact_match)) std::cout << "exact_match " << r.exact_match << "\n";
  std::cout << "targets " << r.targets << "\n";
  return 0;
}

// BERT has nothing to generate: it fills [MASK] (mlm heads) or classifies (classification).
int bert_predict(Checkpoint& c, const Tokenizer& tokenizer, const GenerateArgs& a) {
  for (const auto& prompt : a.prompts) {
    if (c.model.config.head == BertHead::kSequenceClassification) {
      const auto probabilities = classify(c.model.bert, tokenizer, prompt);
      std::vector<std::string> labels;
      const fs::path labels_path = fs::path(c.dir) / "labels.json";
      if (fs::exists(labels_path)) labels = LabelSet::load(labels_path.string()).labels();
      std::cout << prompt << "\n";
      for (size_t k = 0; k < probabilities.size(); ++k) {
        std::cout << "  " << (k < labels.size() ? labels[k] : std::to_string(k)) << "\t" << std::fixed
                  << std::setprecision(4) << probabilities[k] << std::defaultfloat << "\n";
      }
      continue;
    }
    const auto predictions = fill_masks(c.model.bert, tokenizer, prompt, a.show);
    std::cout << prompt << "\n";
    for (const auto& p : predictions) {
      std::cout << "  [MASK] at token " << p.position << ":";
      for (const auto& [piece, probability] : p.top) {
        std::cout << "  " << piece << " (" << std::fixed << std::setprecision(3) << probability << std::defaultfloat
                  << ")";
      }
      std::cout << "\n";
    }
  }
  return 0;
}

int generate_command(const GenerateArgs& a) {
  const std::string dir = resolve_checkpoint(a.checkpoint);
  Checkpoint c = load_checkpoint(dir);
  if (!c.tokenizer) throw std::runtime_error(dir + ": the checkpoint has no tokenizer");
  const Tokenizer& tokenizer = *c.tokenizer;
  for (const auto& prompt : a.prompts) check_utf8(prompt, "--prompt");
  const torch::Device device = resolve_device(a.device);
  // bf16 weights: half the bytes read per generated token (sums stay float32, kernels/linear.cpp).
  place_weights(*c.model.module(), device, resolve_weights_dtype(from_string<WeightsDtype>(a.dtype), c.stored_dtype));
  quantize_at_load(c.model, a.quantize, std::cerr);
  place_in_huge_pages(*c.model.module());  // every weight is read once per token (core/runtime.h)
  c.model.module()->eval();
  if (c.model.config.family == Family::kBert) return bert_predict(c, tokenizer, a);

  GenerationOptions o;
  o.max_new_tokens = a.max_new_tokens;
  o.sample = !a.greedy && a.num_beams == 1;
  o.temperature = a.temperature, o.top_k = a.top_k, o.top_p = a.top_p;
  o.repetition_penalty = a.repetition_penalty;
  o.num_beams = a.num_beams, o.length_penalty = a.length_penalty;
  o.seed = static_cast<uint64_t>(a.seed);
  o.use_cache = !a.no_cache;
  o.eos_ids = a.eos;  // none given: the tokenizer's end-of-sequence token
  if (a.chat && c.model.config.family != Family::kGpt) throw std::runtime_error("--chat needs a decoder (gpt) model");
  torch::NoGradGuard no_grad;
  for (const auto& prompt : a.prompts) {
    // --chat: the prompt is one user message through the chat template, and the reply is printed.
    const std::string text = a.chat ? chat_prompt(tokenizer, prompt, dir) : prompt;
    // A decoder's text continues its prompt, echoed with the first text: a generation refused
    // before it starts prints nothing.
    bool echo = c.model.config.family == Family::kGpt && !a.chat;
    auto print = [&](const std::string& t) {
      if (echo) {
        std::cout << prompt;
        echo = false;
      }
      std::cout << t << std::flush;
    };
    const auto result = generate_text(c.model, tokenizer, text, o, a.stops, print, !a.chat);
    print("");
    std::cout << std::endl;
    if (!result.note.empty()) std::cerr << result.note << "\n";
    std::cerr << "[" << result.tokens.size() << " tokens, " << to_string(result.finish_reason) << "]\n";
  }
  return 0;
}

}  // namespace

std::vector<Command> add_training_commands(CLI::App& app) {
  std::vector<Command> commands;

  auto t = std::make_shared<TrainArgs>();
  auto* train_cmd = app.add_subcommand("train", "pretrain a model with its family's objective");
  train_cmd->add_option("config", t->config, "run config, or a model config (name or path) trained with run defaults");
  train_cmd->add_option("overrides", t->overrides, "key=value for run fields, model.key=value for model fields");
  train_cmd->add_option("--run-dir", t->run_dir, "where the run lives (default: runs/MODEL)");
  train_cmd->add_option("--resume", t->resume, "continue the run in this directory from its last checkpoint");
  train_cmd->add_option("--data", t->data, "text files/dirs or a token directory (default: the default corpus)")->allow_extra_args(false);
  add_device_option(train_cmd, t->device);
  add_overwrite_flag(train_cmd, t->overwrite, "a run (its checkpoints and metrics)");
  add_distributed_options(train_cmd, t->distributed);
  commands.push_back({train_cmd, [t] { return train(*t); }});

  auto f = std::make_shared<FinetuneArgs>();
  auto* finetune_cmd = app.add_subcommand("finetune", "fine-tune a checkpoint on your data");
  finetune_cmd->add_option("checkpoint", f->checkpoint, "checkpoint or run directory")->required();
  finetune_cmd->add_option("overrides", f->overrides, "key=value run fields, model.key=value model fields");
  finetune_cmd->add_option("--train", f->train, "training data: .csv/.tsv/.jsonl (classification, seq2seq) or text (lm)")
      ->required()->allow_extra_args(false);
  finetune_cmd->add_option("--val", f->val, "validation data (default: lm splits the text; others have none)")->allow_extra_args(false);
  finetune_cmd->add_option("--task", f->task, "auto (by family), classify, lm or seq2seq")
      ->check(CLI::IsMember({"auto", "classify", "classification", "lm", "causal_lm", "seq2seq"}));
  finetune_cmd->add_option("--config", f->config, "a run config for the fine-tuning hyperparameters");
  finetune_cmd->add_option("--run-dir", f->run_dir, "where the run lives (default: runs/MODEL-TASK)");
  add_device_option(finetune_cmd, f->device);
  add_overwrite_flag(finetune_cmd, f->overwrite, "a run (its checkpoints and metrics)");
  add_distributed_options(finetune_cmd, f->distributed);
  commands.push_back({finetune_cmd, [f] { return finetune(*f); }});

  auto e = std::make_shared<EvalArgs>();
  auto* eval_cmd = app.add_subcommand("eval", "loss, perplexity and accuracy of a checkpoint on data");
  eval_cmd->add_option("checkpoint", e->checkpoint, "checkpoint or run directory")->required();
  eval_cmd->add_option("--data", e->data, "text, a token directory (its val.tokens), or .csv/.tsv/.jsonl")->required()->allow_extra_args(false);
  eval_cmd->add_option("--batch-size", e->batch_size, "examples per batch")->check(positive_integer());
  eval_cmd->add_option("--max-batches", e->max_batches, "stop after this many batches (0 = all)")
      ->check(non_negative_integer());
  add_device_option(eval_cmd, e->device);
  add_quantize_options(eval_cmd, e->quantize);
  commands.push_back({eval_cmd, [e] { return eval(*e); }});

  auto g = std::make_shared<GenerateArgs>();
  auto* gen_cmd = app.add_subcommand("generate", "generate text from a checkpoint (bert: fill [MASK] or classify)");
  gen_cmd->add_option("checkpoint", g->checkpoint, "checkpoint or run directory")->required();
  gen_cmd->add_option("--prompt", g->prompts, "prompt text (repeatable)")->required()->allow_extra_args(false);
  gen_cmd->add_option("--max-new-tokens", g->max_new_tokens, "tokens to generate at most")->check(non_negative_integer());
  gen_cmd->add_flag("--greedy", g->greedy, "always take the most likely token (default: sample)");
  gen_cmd->add_option("--temperature", g->temperature, "sampling temperature (> 0)")->check(positive_number());
  gen_cmd->add_option("--top-k", g->top_k, "sample from the k most likely tokens (0 = all)")->check(non_negative_integer());
  gen_cmd->add_option("--top-p", g->top_p, "sample from the smallest set with this much probability, in (0, 1]")
      ->check(positive_number());
  gen_cmd->add_option("--repetition-penalty", g->repetition_penalty, "> 1 discourages repeating the context")
      ->check(positive_number());
  gen_cmd->add_option("--num-beams", g->num_beams,
                      "beam search width, at most " + std::to_string(GenerationOptions::kMaxBeams))
      ->check(integer_in(1, GenerationOptions::kMaxBeams));
  gen_cmd->add_option("--length-penalty", g->length_penalty, "beam score / length^penalty")->check(finite_number());
  gen_cmd->add_option("--eos", g->eos, "token ids that end generation (default: the tokenizer's end-of-sequence token)")
      ->allow_extra_args(false)
      ->check(non_negative_integer());
  gen_cmd->add_option("--stop", g->stops, "text that ends generation (repeatable; not empty)")->allow_extra_args(false);
  gen_cmd->add_option("--seed", g->seed, "sampling seed")->check(non_negative_integer());
  add_dtype_option(gen_cmd, g->dtype,
                   "weights' type: auto (default: the checkpoint's), fp32 or bf16 (half the memory read per token)");
  add_quantize_options(gen_cmd, g->quantize);
  gen_cmd->add_flag("--no-cache", g->no_cache, "recompute every step instead of using the KV cache");
  gen_cmd->add_option("--show", g->show, "bert: predictions shown per [MASK]")->check(positive_integer());
  gen_cmd->add_flag("--chat", g->chat, "each prompt is a user message through the model's chat template; prints the reply");
  add_device_option(gen_cmd, g->device);
  commands.push_back({gen_cmd, [g] { return generate_command(*g); }});

  return commands;
}

}  // namespace zoo::cli
