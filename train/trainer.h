#pragma once
// The training loop behind `zoo train` and `zoo finetune`: AdamW with the run's schedule,
// gradient accumulation and global-norm clipping, periodic evaluation and checkpoints, exact
// resume, clean stops on SIGINT/SIGTERM and on non-finite losses. What is not the loop lives
// beside it: setting the run up (train/run_setup.h), the run directory and its checkpoints
// (train/run_directory.h), the saved state (train/trainer_state.h), the data (train/task.h),
// precision and loss scaling (train/precision.h, train/loss_scaler.h), the data-parallel group
// (train/distributed.h), evaluation (train/evaluation.h), the stop on a signal (core/stop_signals.h).

#include <chrono>
#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <torch/types.h>

#include "train/loss_scaler.h"
#include "train/loss_spikes.h"
#include "train/run_setup.h"

namespace zoo {

struct TrainSummary {
  int64_t start_step = 0, end_step = 0;
  std::vector<double> losses;  // per update of this session (NaN where skipped)
  std::optional<EvalResult> final_eval, best_eval;
  std::string last_checkpoint, best_checkpoint;
  int64_t skipped = 0;
  bool interrupted = false;
  std::vector<LossSpike> spikes;  // losses far above the curve just before (train/loss_spikes.h)
};

// What `zoo train` prints at the end: how the run ended, its spikes, the final and best
// evaluations, the last and best checkpoints; a line each.
std::string describe(const TrainSummary& summary);

// What one update did.
struct StepReport {
  bool updated = false;  // false: skipped (non-finite loss under on_nonfinite: skip, or an fp16 overflow)
  double loss = NAN;     // the global batch's mean loss; NaN when skipped for a non-finite loss
  double grad_norm = NAN;  // before clipping; NaN when skipped for a non-finite loss
  double lr = 0;
  int64_t tokens = 0;    // input tokens of the global batch
  double seconds = 0;
};

// One update as queued on the device, nothing of it read back yet (Trainer::queue_step).
struct QueuedStep {
  double lr = 0;
  torch::Tensor loss;       // float64 scalar: the global batch's mean loss
  torch::Tensor grad_norm;  // float32 scalar, before clipping; undefined when grad_clip <= 0
  torch::Tensor found_inf;  // float32 scalar: 1 when the update was skipped (non-finite loss, fp16 overflow)
  int64_t tokens = 0;       // input tokens of this rank's batch
  torch::Tensor global_tokens;  // float64 scalar: the global batch's, under data parallelism
  std::chrono::steady_clock::time_point started;
};

// Thrown when a non-finite loss stops the run (on_nonfinite: stop); names the step.
class NonFiniteLoss : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Trainer {
 public:
  // Sets the run up (train/run_setup.h): tokenizer, data, model (fresh, from init_from, or from
  // the last checkpoint when resuming), optimizer. Writes run.yaml and the tokenizer into the
  // run directory.
  Trainer(RunConfig config, TrainerOptions options);
  ~Trainer();

  TrainSummary run();
  // One update: queue_step, then read_step.
  StepReport step();
  // Queues one update (the micro-steps' forward and backward, unscaling, clipping, AdamW) with no
  // host synchronisation: the loss, the gradient norm and whether the update was skipped stay on
  // the device, and a skipped update (a non-finite loss, an fp16 overflow) changes nothing there.
  QueuedStep queue_step();
  // Reads a queued update's values back (waiting for the device), applies on_nonfinite and
  // max_skipped, and counts its tokens.
  StepReport read_step(const QueuedStep& queued);
  EvalResult evaluate();
  // Saves RUN_DIR/checkpoints/step-N, updates `last` (and `best` when is_best) and prunes.
  std::string save(bool is_best = false);
  void request_stop() { stop_requested_ = true; }

  Model& model() { return run_->model; }
  const Tokenizer& tokenizer() const { return *run_->tokenizer; }
  const RunConfig& config() const { return run_->config; }
  Objective objective() const { return run_->objective; }
  int64_t current_step() const { return step_; }
  torch::Device device() const { return run_->device; }

 private:
  [[noreturn]] void throw_step_out_of_memory(const std::string& cause) const;
  // The micro-steps' losses and gradients, accumulated into `queued`: the global mean loss
  // (non-finite when any micro-step's was) and the batch's tokens.
  void accumulate_gradients(QueuedStep& queued);
  Batch next_batch();
  bool better(const EvalResult& result) const;
  bool stop_agreed() const;  // a stop requested or signalled on any rank

  TrainerOptions options_;
  std::ostream& log_;
  std::unique_ptr<TrainingRun> run_;
  LossScaler scaler_{false};
  int64_t step_ = 0;
  int64_t skipped_ = 0, skipped_in_a_row_ = 0;
  int64_t tokens_seen_ = 0;
  std::optional<EvalResult> best_;
  std::string best_dir_;
  bool stop_requested_ = false;
};

}  // namespace zoo
