#pragma once
// Setting a training run up, apart from the loop that trains it (train/trainer.h): the run
// directory, the precision, the tokenizer (the run's own on resume, a given one, a checkpoint's,
// or one trained on the data), the objective and its data, the model (fresh, from init_from, or
// restored), LoRA, the optimizer, schedule and sampler, the data-parallel group's shared start
// and the context-parallel ring. set_up_run does it in that order and returns a TrainingRun the
// loop only reads (its model, optimizer and sampler change as it trains; which they are does not).

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <string>

#include <torch/optim/adamw.h>
#include <torch/types.h>

#include "models/model.h"
#include "tokenizers/tokenizer.h"
#include "train/optimizer.h"
#include "train/precision.h"
#include "train/run_config.h"
#include "train/run_directory.h"
#include "train/schedule.h"
#include "train/task.h"
#include "train/trainer_state.h"

namespace zoo {

class DataParallel;

struct TrainerOptions {
  std::string run_dir;
  bool resume = false;            // continue from RUN_DIR/checkpoints/last
  std::ostream* log = nullptr;    // progress and messages; nullptr = std::cerr
  int live = -1;                  // live progress line: 1 yes, 0 no, -1 when the log is a terminal
  bool overwrite = false;         // a fresh run may replace RUN_DIR's checkpoints and metrics
  bool handle_signals = false;    // SIGINT/SIGTERM: finish the step, save, stop; a second one exits
                                  // at once (the CLI sets it)
  // Called after every update with (step, loss); tests use it to stop a run part-way.
  std::function<void(int64_t, double)> on_step;
  // Data-parallel training: this process's place in the group (nullptr: a single process).
  // Every rank runs the same steps on its share of each global batch; only rank 0 logs and
  // writes the run directory.
  DataParallel* parallel = nullptr;
};

// Rank 0's log (TrainerOptions::log or std::cerr); the other ranks' is a stream that discards.
std::ostream& log_of(const TrainerOptions& options);

// Everything a run trains with, set up once.
struct TrainingRun {
  RunConfig config;  // resolved: absolute paths, the chosen precision and objective
  std::string run_dir;
  DataParallel* parallel = nullptr;
  std::unique_ptr<RunDirectory> directory;  // first in, last out: removed if setting up fails
  std::unique_ptr<Tokenizer> tokenizer;
  Objective objective = Objective::kAuto;
  std::unique_ptr<TaskData> data;
  Model model;
  std::unique_ptr<FusedAdamW> optimizer;
  ScheduleOptions schedule;
  std::unique_ptr<ShuffledSampler> sampler;  // at the resumed position on resume
  std::shared_ptr<RingExchange> ring;        // context parallelism: this rank's ring (nullptr: none)
  torch::Device device{torch::kCPU};
  Precision precision = Precision::kFp32;
  std::string precision_reason;  // why that precision (the start-up line says it)
  int64_t trainable_parameters = 0, total_parameters = 0;
  // On resume: the last checkpoint's state (its weights, optimizer, sampler and generator are
  // already restored); the loop takes its counters from it.
  std::optional<TrainerState> resumed;

  bool main_rank() const;
  int64_t world_size() const;
  // Groups of context_parallel ranks share each sequence: the data is split over the groups.
  int64_t data_parallel_size() const;
  int64_t data_parallel_rank() const;
};

// Sets the run up and writes RUN_DIR/run.yaml and the tokenizer; logs what it set up to `log`.
// Every error names the key, file or checkpoint at fault; a run directory this call created is
// removed again when it fails.
std::unique_ptr<TrainingRun> set_up_run(RunConfig config, const TrainerOptions& options, std::ostream& log);

}  // namespace zoo
