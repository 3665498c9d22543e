#pragma once
// The training loop behind `zoo train` and `zoo finetune`: AdamW with the run's schedule,
// gradient accumulation and global-norm clipping, periodic evaluation and checkpoints, exact
// resume, clean stops on SIGINT/SIGTERM and on non-finite losses. What is not the loop lives
// beside it: the run directory and its checkpoints (train/run_directory.h), the saved state
// (train/trainer_state.h), the data (train/task.h), precision and loss scaling
// (train/precision.h, train/loss_scaler.h), the data-parallel group (train/distributed.h),
// evaluation (train/evaluation.h), the stop on a signal (core/stop_signals.h).

#include <cmath>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <c10/util/Optional.h>
#include <torch/optim/adamw.h>
#include <torch/types.h>

#include "models/model.h"
#include "tokenizers/tokenizer.h"
#include "train/loss_spikes.h"
#include "train/loss_scaler.h"
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

struct TrainSummary {
  int64_t start_step = 0, end_step = 0;
  std::vector<double> losses;  // per update of this session (NaN where skipped)
  std::optional<EvalResult> final_eval, best_eval;
  std::string last_checkpoint, best_checkpoint;
  int64_t skipped = 0;
  bool interrupted = false;
  std::vector<LossSpike> spikes;  // losses far above the curve just before (train/loss_spikes.h)
};

// Thrown when a non-finite loss stops the run (on_nonfinite: stop); names the step.
class NonFiniteLoss : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Trainer {
 public:
  // Prepares the run: tokenizer, data, model (fresh, from init_from, or from the last
  // checkpoint when resuming), optimizer. Writes run.yaml and tokenizer.model into the run
  // directory.
  Trainer(RunConfig config, TrainerOptions options);
  ~Trainer();

  TrainSummary run();
  // One update; false when it was skipped (non-finite loss under on_nonfinite: skip, or an
  // fp16 overflow).
  bool step();
  EvalResult evaluate();
  // Saves RUN_DIR/checkpoints/step-N, updates `last` (and `best` when is_best) and prunes.
  std::string save(bool is_best = false);
  void request_stop() { stop_requested_ = true; }

  Model& model() { return model_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  const RunConfig& config() const { return config_; }
  Objective objective() const { return objective_; }
  int64_t current_step() const { return step_; }
  double last_loss() const { return last_loss_; }
  double last_grad_norm() const { return last_grad_norm_; }  // before clipping
  torch::Device device() const { return device_; }

 private:
  void choose_precision();
  void prepare_tokenizer();
  void prepare_data();
  // Resolves the objective from the config and the purpose, prepares the data, and sets the
  // head the objective needs (a classifier's labels come from the data).
  void prepare_objective_and_data();
  // The model (fresh, from init_from, or restored on resume), its adapters, the optimizer, the
  // schedule and the sampler; shared from rank 0 in a data-parallel run.
  void build_model_and_optimizer();
  void log_setup(int64_t held_in_compute_dtype);
  [[noreturn]] void throw_step_out_of_memory(const std::string& cause) const;
  // Returns the names of the model's tensors the checkpoint did not provide (fresh heads).
  std::vector<std::string> initialize_from(const std::string& checkpoint);
  // Attaches the run's LoRA adapters and freezes everything else but `fresh` (tensors of the
  // model the base checkpoint lacks, trained fully); on resume, as the last checkpoint says.
  void setup_lora(const std::vector<std::string>& fresh);
  void restore(const std::string& checkpoint);
  Batch next_batch();
  bool better(const EvalResult& result) const;
  bool stop_pending() const;
  bool stop_agreed() const;  // stop_pending on any rank
  bool main_rank() const;
  int64_t world_size() const;
  // Groups of context_parallel ranks share each sequence: the data is split over the groups.
  int64_t data_parallel_size() const;
  int64_t data_parallel_rank() const;

  RunConfig config_;
  TrainerOptions options_;
  std::ostream& log_;
  std::unique_ptr<RunDirectory> run_;  // first in, last out: removed if setting up fails
  std::unique_ptr<Tokenizer> tokenizer_;
  Objective objective_ = Objective::kAuto;
  std::unique_ptr<TaskData> data_;
  Model model_;
  std::unique_ptr<torch::optim::AdamW> optimizer_;
  ScheduleOptions schedule_;
  std::unique_ptr<ShuffledSampler> sampler_;
  std::shared_ptr<RingExchange> ring_;  // context parallelism: this rank's ring (nullptr: none)
  torch::Device device_{torch::kCPU};
  Precision precision_ = Precision::kFp32;
  std::string precision_reason_;  // why that precision (the start-up line says it)
  LossScaler scaler_{false};
  int64_t step_ = 0;
  int64_t skipped_ = 0, skipped_in_a_row_ = 0;
  int64_t tokens_seen_ = 0;
  int64_t trainable_parameters_ = 0, total_parameters_ = 0;
  double last_lr_ = 0, last_loss_ = NAN, last_grad_norm_ = NAN, last_step_seconds_ = 0;
  int64_t last_step_tokens_ = 0;
  std::optional<EvalResult> best_;
  std::string best_dir_;
  bool stop_requested_ = false;
};


}  // namespace zoo
