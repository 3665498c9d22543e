#pragma once
// The run config: everything a training or fine-tuning run needs besides the model's
// architecture: which model, which data and tokenizer, the objective, batch and block sizes,
// steps, optimizer, schedule, evaluation and checkpointing. Read from YAML like the model config
// (one field table drives parsing, errors, overrides and `zoo schema --run`); `key=value`
// overrides any run field, and `model.KEY=value` any field of the model config.
//
// A run config names its model with `model:` (a config name or path). A model config can stand
// in for a run config: `zoo train gpt-tiny` trains gpt-tiny with the run defaults.

#include <cstdint>
#include <string>
#include <vector>

#include "data/sentence_pairs.h"
#include "models/config.h"
#include "models/lora_config.h"
#include "tokenizers/tokenizer.h"
#include "train/precision.h"
#include "train/schedule.h"

namespace zoo {

// What the model learns. kAuto picks by family when pretraining (gpt: causal_lm, bert: mlm,
// t5/transformer: span_corruption) and when fine-tuning (gpt: causal_lm on the text, bert:
// classification, t5/transformer: seq2seq).
enum class Objective { kAuto, kCausalLM, kMaskedLM, kSpanCorruption, kClassification, kSeq2Seq };
enum class NonFinitePolicy { kStop, kSkip };

ZOO_ENUM_NAMES(Objective, "objective",
               {"auto", Objective::kAuto}, {"causal_lm", Objective::kCausalLM}, {"mlm", Objective::kMaskedLM},
               {"span_corruption", Objective::kSpanCorruption}, {"classification", Objective::kClassification},
               {"seq2seq", Objective::kSeq2Seq});
ZOO_ENUM_NAMES(NonFinitePolicy, "on_nonfinite", {"stop", NonFinitePolicy::kStop}, {"skip", NonFinitePolicy::kSkip});

// Pretraining learns a family's own objective from text; fine-tuning learns a task from the
// user's examples (or, for gpt, their text).
enum class Purpose { kPretraining, kFineTuning };

// The objective a run of `model` learns: `requested` unless it is kAuto, else by family and
// purpose (gpt: causal_lm; bert: mlm, or classification when fine-tuning or when the model
// already has a classification head; t5/transformer: span_corruption, or seq2seq when
// fine-tuning). The one place this is decided.
Objective resolve_objective(Objective requested, const ModelConfig& model, Purpose purpose);

// The head `objective` trains, set on `model`: classification's over `num_labels` classes (the
// data's) on the pooled [CLS], masked LM's unless the model has BERT's pretraining heads.
void set_objective_head(Objective objective, int64_t num_labels, ModelConfig& model);

struct RunConfig {
  // Model.
  std::string model;       // config name or path (resolved: the file's path)
  ModelConfig model_config;  // resolved, with model.KEY overrides applied
  std::string init_from;   // a checkpoint to start from (fine-tuning); "" = fresh weights

  // Data and tokenizer.
  std::vector<std::string> data;      // text files/dirs, a token dir, or fine-tuning files; [] = default corpus
  std::vector<std::string> val_data;  // held-out data; [] = split off val_fraction of `data`
  double val_fraction = 0.05;
  std::string tokenizer;              // a .model file; "" = train one into RUN_DIR (or the checkpoint's)
  TokenizerKind tokenizer_type = TokenizerKind::kUnigram;
  Objective objective = Objective::kAuto;

  // Batches.
  int64_t steps = 1000;         // optimizer updates
  int64_t batch_size = 16;      // examples per micro-batch
  int64_t grad_accum = 1;       // micro-batches per update
  // Ranks that share each sequence (ring attention, kernels/ring_attention.h); the launch's
  // processes are groups of this many, the data split over the groups. 1 = off.
  int64_t context_parallel = 1;
  int64_t block_size = 0;       // tokens per example (inputs for encoder-decoders); 0 = auto
  int64_t target_length = 64;   // seq2seq fine-tuning: longest target

  // Optimizer and schedule.
  double lr = 3e-4;
  double min_lr = 0.0;
  ScheduleKind schedule = ScheduleKind::kCosine;
  int64_t warmup_steps = 100;
  double weight_decay = 0.1;
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double grad_clip = 1.0;        // global-norm clipping; 0 = off
  double label_smoothing = 0.0;

  // Objectives.
  double mask_probability = 0.15;
  bool whole_word_masking = false;
  SentencePairs sentence_pairs = SentencePairs::kNone;
  double noise_density = 0.15;
  double mean_span_length = 3.0;

  // Evaluation, logging, checkpoints.
  int64_t eval_every = 100;   // 0 = only at the end
  int64_t eval_batches = 20;  // validation batches per evaluation (0 = all)
  int64_t log_every = 10;     // plain progress lines when output is not a terminal
  int64_t save_every = 0;     // 0 = at every evaluation
  int64_t keep_last = 2;      // checkpoints kept besides the best
  NonFinitePolicy on_nonfinite = NonFinitePolicy::kStop;
  int64_t max_skipped = 10;   // skip policy: stop after this many skipped steps in a row

  // Parameter-efficient fine-tuning: LoRA adapters on the chosen projections, the rest frozen.
  LoraConfig lora;
  // Recompute each block's activations in backward instead of storing them: less memory for a
  // second forward of every block.
  bool activation_checkpointing = false;

  // Runtime.
  uint64_t seed = 0;
  std::string device = "auto";     // cpu, cuda, cuda:N or auto
  Precision precision = Precision::kAuto;

  // block_size, or when 0: 128, or less when the model's length limit is shorter.
  int64_t resolved_block_size() const;

  // Relative paths (data, val_data, tokenizer, init_from) made absolute against the current
  // directory, so a run.yaml written with them resumes from anywhere.
  void make_paths_absolute();

  // Throws ConfigError naming `source` and the field.
  void validate(const std::string& source = "run config") const;
  // What needs the number of processes (WORLD_SIZE; 1 for one process), checked before they
  // connect: context_parallel divides it, and the tokens every data-parallel group trains, which
  // the run counts together, fit steps in a 64-bit count (validate checks one group's).
  void validate_world(int64_t world_size, const std::string& source = "run config") const;
};

// Throws ConfigError, before any work, when training `config` cannot fit `memory` bytes (this
// machine's physical memory; 0 = unknown, nothing checked): its float32 weights, their gradients
// and AdamW's moments (training_bytes_lower_bound, models/parameter_count.h), naming the model
// key that makes them large; then those with the activations of one micro-batch, naming
// batch_size and block_size. Both are lower bounds, so no run that fits is refused. `on_cuda`:
// the training state and the activations live on the GPU, whose memory is not asked; only the
// weights, which are built on the CPU first, are checked.
void check_fits_in_memory(const RunConfig& config, int64_t memory, bool on_cuda);

// Reads a run config (or a model config, wrapped in run defaults) from `path`. Unknown keys,
// wrong types and invalid values are ConfigErrors naming the file, line and key.
RunConfig load_run_config(const std::string& path);

// runs/NAME: the model config's name, else its file's stem.
std::string default_run_dir(const RunConfig& config);

// `zoo finetune`'s run: `run_config` (a path; empty: fine-tuning's defaults, Hugging Face
// Trainer's linear decay and light weight decay) starting from `checkpoint_dir`'s model and
// weights, learning `task` (an objective's name, or lm / classify).
RunConfig fine_tuning_run_config(const std::string& checkpoint_dir, const std::string& run_config,
                                 const std::string& task);
RunConfig parse_run_config(const std::string& yaml, const std::string& source = "<string>");

// `key=value` for a run field or `model.key=value` for a model field, checked like the file.
// A refused override leaves `config` unchanged.
void apply_run_override(RunConfig& config, const std::string& assignment);

// The resolved run config as YAML (the model config inline), loadable by parse_run_config.
std::string to_yaml(const RunConfig& config);

// One line per run field: name, type, default, meaning.
std::string run_schema_documentation();

}  // namespace zoo
