#include "train/trainer.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <iomanip>
#include <iostream>
#include <sstream>

#include <torch/torch.h>

#include "core/stop_signals.h"
#include "kernels/recompute.h"
#include "train/autocast.h"
#include "train/checkpoint.h"
#include "train/distributed.h"
#include "train/evaluation.h"
#include "train/optimizer.h"
#include "train/progress.h"

namespace zoo {
namespace {

using Clock = std::chrono::steady_clock;

bool is_terminal(std::ostream& out) {
  if (&out == &std::cerr) return isatty(STDERR_FILENO);
  if (&out == &std::cout) return isatty(STDOUT_FILENO);
  return false;
}

bool maximizes(Objective objective) { return objective == Objective::kClassification; }

double metric(const EvalResult& r, Objective objective) { return maximizes(objective) ? r.accuracy : r.loss; }

std::string describe(const EvalResult& r) {
  char line[200];
  std::snprintf(line, sizeof line, "eval step %ld | val loss %.4f | perplexity %.2f | accuracy %.4f",
                static_cast<long>(r.step), r.loss, r.perplexity, r.accuracy);
  std::string s = line;
  if (!std::isnan(r.exact_match)) s += " | exact match " + std::to_string(r.exact_match);
  return s;
}

}  // namespace

std::string describe(const TrainSummary& s) {
  std::ostringstream out;
  out << (s.interrupted ? "stopped" : "finished") << " at step " << s.end_step;
  if (s.skipped > 0) out << " (" << s.skipped << " steps skipped for non-finite losses)";
  out << "\n";
  auto line = [&](const char* what, const EvalResult& r) {
    out << what << ": step " << r.step << std::fixed << std::setprecision(4) << ", val loss " << r.loss
        << ", perplexity " << std::setprecision(2) << r.perplexity << ", accuracy " << std::setprecision(4) << r.accuracy;
    if (!std::isnan(r.exact_match)) out << ", exact match " << r.exact_match;
    out << std::defaultfloat << "\n";
  };
  for (const auto& spike : s.spikes) out << "loss spike: " << describe(spike) << "\n";
  if (s.final_eval) line("final", *s.final_eval);
  if (s.best_eval) line("best", *s.best_eval);
  if (!s.last_checkpoint.empty()) out << "last checkpoint: " << s.last_checkpoint << "\n";
  if (!s.best_checkpoint.empty()) out << "best checkpoint: " << s.best_checkpoint << "\n";
  return out.str();
}

Trainer::Trainer(RunConfig config, TrainerOptions options)
    : options_(std::move(options)), log_(log_of(options_)), run_(set_up_run(std::move(config), options_, log_)) {
  scaler_ = LossScaler(run_->precision == Precision::kFp16);
  if (const auto& s = run_->resumed) {
    step_ = s->step;
    skipped_ = s->skipped;
    tokens_seen_ = s->tokens_seen;
    scaler_.restore(s->loss_scale);
    if (s->best) {
      best_ = *s->best;
      best_dir_ = run_->directory->checkpoint(best_->step);
    }
  }
}

Trainer::~Trainer() = default;

bool Trainer::stop_agreed() const {
  const bool pending = stop_requested_ || stop_signal_received() != 0;
  if (!run_->parallel) return pending;
  // Every rank must stop after the same step, or the others would wait on it forever.
  auto votes = torch::tensor({pending ? 1.0 : 0.0}, torch::kDouble);
  return run_->parallel->all_reduce_sum(votes).item<double>() > 0;
}

bool Trainer::better(const EvalResult& r) const {
  const Objective objective = run_->objective;
  if (std::isnan(metric(r, objective))) return false;
  if (!best_) return true;
  return maximizes(objective) ? metric(r, objective) > metric(*best_, objective)
                              : metric(r, objective) < metric(*best_, objective);
}

Batch Trainer::next_batch() {
  const int64_t epoch = run_->sampler->state().epoch;
  const int64_t batch_size = run_->config.batch_size;
  // Every rank draws the whole global batch in the same order and keeps its group's slice: the
  // ranks of a context-parallel group take the same sequences (each computes its share of them).
  std::vector<int64_t> indices = run_->sampler->next(batch_size * run_->data_parallel_size());
  if (run_->parallel) {
    const auto first = indices.begin() + run_->data_parallel_rank() * batch_size;
    indices = std::vector<int64_t>(first, first + batch_size);
  }
  return run_->data->train_batch(indices, epoch);
}

void Trainer::throw_step_out_of_memory(const std::string& cause) const {
  // The estimate before the run (check_fits_in_memory) is a lower bound; what a step really
  // holds is known only when it runs. The message names the options that size it.
  std::string first_line = cause.substr(0, cause.find('\n'));
  if (first_line.size() > 300) first_line = first_line.substr(0, 300) + "...";
  throw ConfigError("batch_size (" + std::to_string(run_->config.batch_size) + ") x block_size (" +
                    std::to_string(run_->config.resolved_block_size()) + "): a training step does not fit in the memory of " +
                    run_->device.str() + " (" + first_line + "); lower batch_size or block_size (a larger grad_accum keeps " +
                    "the tokens per step), or set activation_checkpointing=true");
}

void Trainer::accumulate_gradients(QueuedStep& queued) {
  const RunConfig& config = run_->config;
  const double micro_steps = static_cast<double>(config.grad_accum);
  const LossOptions loss_options{.label_smoothing = config.label_smoothing, .ring = run_->ring};
  try {
    for (int64_t micro = 0; micro < config.grad_accum; ++micro) {
      LossOutput out;
      {
        AutocastScope autocast(run_->precision, run_->device);
        out = compute_loss(run_->model, next_batch(), run_->objective, run_->device, loss_options);
      }
      // A non-finite loss still runs its backward: the update it spoils is skipped on the device.
      const GlobalLoss global = reduce_loss(run_->parallel, out.loss, out.targets, out.tokens);
      if (run_->parallel) run_->parallel->set_sync(micro + 1 == config.grad_accum);
      auto scaled = out.loss / micro_steps;
      if (global.share.defined()) scaled = scaled * global.share.to(scaled.scalar_type());
      if (scaler_.enabled()) scaled = scaled * scaler_.scale(run_->device).view({});
      scaled.backward();
      const auto part = global.value / micro_steps;
      queued.loss = queued.loss.defined() ? queued.loss + part : part;
      queued.tokens += out.tokens;
      if (global.tokens.defined()) {
        queued.global_tokens = queued.global_tokens.defined() ? queued.global_tokens + global.tokens : global.tokens;
      }
    }
  } catch (const c10::OutOfMemoryError& e) {
    throw_step_out_of_memory(e.what_without_backtrace());
  } catch (const std::bad_alloc&) {
    throw_step_out_of_memory("std::bad_alloc");
  } catch (const c10::Error& e) {
    // LibTorch's own CPU allocator (ZOO_MALLOC_DEFAULTS=1) reports a failed allocation as a
    // plain c10::Error; its words are the only sign.
    const std::string what = e.what_without_backtrace();
    if (what.find("DefaultCPUAllocator: can't allocate memory") == std::string::npos) throw;
    throw_step_out_of_memory(what.substr(what.find("DefaultCPUAllocator")));
  }
}

QueuedStep Trainer::queue_step() {
  QueuedStep queued;
  queued.started = Clock::now();
  const RunConfig& config = run_->config;
  queued.lr = learning_rate(run_->schedule, step_);
  set_learning_rate(*run_->optimizer, queued.lr);
  clear_gradients(*run_->optimizer);
  accumulate_gradients(queued);
  if (run_->parallel) run_->parallel->finish_gradients();
  ++step_;
  torch::NoGradGuard no_grad;
  const auto params = trainable_parameters(*run_->model.module());
  // The update is skipped on the device when the loss is not finite or fp16 gradients overflowed.
  auto found_inf = torch::isfinite(queued.loss).logical_not().to(torch::kFloat);
  scaler_.unscale(params, found_inf);
  if (config.grad_clip > 0) queued.grad_norm = clip_gradients(params, config.grad_clip);
  run_->optimizer->update(found_inf);
  scaler_.update(found_inf);
  queued.found_inf = found_inf;
  return queued;
}

StepReport Trainer::step() { return read_step(queue_step()); }

StepReport Trainer::read_step(const QueuedStep& queued) {
  const RunConfig& config = run_->config;
  StepReport report;
  report.lr = queued.lr;
  const double loss = queued.loss.item<double>();
  report.tokens = queued.global_tokens.defined() ? static_cast<int64_t>(queued.global_tokens.item<double>()) : queued.tokens;
  if (!std::isfinite(loss)) {
    switch (config.on_nonfinite) {
      case NonFinitePolicy::kStop:
        throw NonFiniteLoss("non-finite loss (" + std::to_string(loss) + ") at step " + std::to_string(step_) +
                            "; the run stops without saving this state (on_nonfinite=skip skips such steps)");
      case NonFinitePolicy::kSkip: break;
    }
    ++skipped_;
    if (++skipped_in_a_row_ > config.max_skipped) {
      throw NonFiniteLoss("non-finite loss at step " + std::to_string(step_) + ": " +
                          std::to_string(skipped_in_a_row_) + " steps in a row skipped (max_skipped=" +
                          std::to_string(config.max_skipped) + ")");
    }
    report.tokens = 0;
    report.seconds = std::chrono::duration<double>(Clock::now() - queued.started).count();
    return report;
  }
  skipped_in_a_row_ = 0;
  report.loss = loss;
  report.grad_norm = queued.grad_norm.defined() ? queued.grad_norm.item<double>() : NAN;
  report.updated = queued.found_inf.item<float>() == 0.0f;  // false: an fp16 overflow skipped it
  tokens_seen_ += report.tokens;
  report.seconds = std::chrono::duration<double>(Clock::now() - queued.started).count();
  return report;
}

EvalResult Trainer::evaluate() {
  const RunConfig& config = run_->config;
  EvalResult r = zoo::evaluate(run_->model, *run_->data, config.batch_size, config.eval_batches, run_->device,
                               config.target_length, run_->precision, run_->ring);
  if (run_->ring) r = reduce_ring_evaluation(*run_->parallel, r, run_->data_parallel_size());
  r.step = step_;
  return r;
}

std::string Trainer::save(bool is_best) {
  const std::string dir = run_->directory->checkpoint(step_);
  if (!run_->main_rank()) {
    if (is_best) best_dir_ = dir;
    return dir;
  }
  TrainerState state;
  state.step = step_;
  state.world_size = run_->world_size();
  state.context_parallel = run_->config.context_parallel;
  state.sampler_epoch = run_->sampler->state().epoch;
  state.sampler_index = run_->sampler->state().index;
  state.rng = cpu_generator_state();
  state.skipped = skipped_;
  state.tokens_seen = tokens_seen_;
  state.loss_scale = scaler_.value();
  state.objective = to_string(run_->objective);
  state.best = best_;
  std::map<std::string, std::string> extra = {{"run.yaml", to_yaml(run_->config)}};
  if (const LabelSet* labels = run_->data->labels()) {
    extra["labels.json"] = nlohmann::json{{"labels", labels->labels()}}.dump(2) + "\n";
  }
  save_checkpoint(dir, run_->model, run_->optimizer.get(), run_->tokenizer.get(), state.to_json(), extra);
  if (is_best) best_dir_ = dir;
  run_->directory->commit_checkpoint(step_, is_best, run_->config.keep_last,
                                     best_dir_.empty() ? std::nullopt : std::optional<int64_t>(checkpoint_step(best_dir_)));
  return dir;
}

TrainSummary Trainer::run() {
  const RunConfig& config = run_->config;
  StopSignals signals(options_.handle_signals);
  // The run directory is this run's until run() returns (or throws): then another may use it.
  struct Release {
    RunDirectory& directory;
    ~Release() { directory.release(); }
  } release{*run_->directory};
  TrainSummary summary;
  summary.start_step = step_;
  MetricsLog metrics = run_->main_rank() ? MetricsLog(run_->directory->file("metrics.jsonl"), step_) : MetricsLog();
  ProgressLine progress(log_, options_.live >= 0 ? options_.live == 1 : is_terminal(log_), config.log_every);
  if (run_->data->val_size() == 0) progress.message("no validation data: evaluation is off");
  const auto started = Clock::now();
  double smoothed_seconds = 0;
  std::string last_saved;
  LossSpikes spikes;
  auto evaluate_and_save = [&](bool evaluate_now) {
    bool is_best = false;
    if (evaluate_now && run_->data->val_size() > 0) {
      const EvalResult r = evaluate();
      if (r.targets == 0) {
        progress.message("eval step " + std::to_string(step_) + ": the validation data gave nothing to predict");
        last_saved = save(false);
        return;
      }
      metrics.write(to_json(r));
      progress.message(describe(r));
      summary.final_eval = r;
      if (better(r)) best_ = r, is_best = true;
    }
    last_saved = save(is_best);
    progress.message("saved " + last_saved + (is_best ? " (best)" : ""));
  };
  while (step_ < config.steps) {
    if (stop_agreed()) {
      summary.interrupted = true;
      break;
    }
    const StepReport step_report = step();
    summary.losses.push_back(step_report.loss);
    smoothed_seconds = step_ - summary.start_step == 1 ? step_report.seconds
                                                        : 0.9 * smoothed_seconds + 0.1 * step_report.seconds;
    ProgressReport report;
    report.step = step_, report.total = config.steps, report.loss = step_report.loss, report.lr = step_report.lr;
    report.tokens_per_second =
        step_report.seconds > 0 ? static_cast<double>(step_report.tokens) / step_report.seconds : 0;
    report.eta_seconds = smoothed_seconds * static_cast<double>(config.steps - step_);
    nlohmann::json record = {{"step", step_},
                             {"split", "train"},
                             {"loss", step_report.loss},
                             {"lr", report.lr},
                             {"grad_norm", step_report.grad_norm},
                             {"tokens_per_second", report.tokens_per_second},
                             {"trainable_parameters", run_->trainable_parameters},
                             {"parameters", run_->total_parameters},
                             {"tokens", tokens_seen_},
                             {"elapsed", std::chrono::duration<double>(Clock::now() - started).count()}};
    if (!step_report.updated) record["skipped"] = true;
    if (const auto spike = spikes.add(step_, step_report.loss, step_report.grad_norm)) {
      record["spike"] = true;
      summary.spikes.push_back(*spike);
      progress.message("loss spike at " + describe(*spike));
    }
    if (std::isnan(step_report.loss)) record["loss"] = nullptr;
    metrics.write(record);
    progress.update(report);
    if (options_.on_step) options_.on_step(step_, step_report.loss);
    const bool eval_now = config.eval_every > 0 && step_ % config.eval_every == 0;
    const bool save_now = eval_now || (config.save_every > 0 && step_ % config.save_every == 0);
    if (step_ < config.steps && save_now) evaluate_and_save(eval_now);
  }
  if (summary.interrupted) {
    last_saved = save(false);
    progress.message("stopped at step " + std::to_string(step_) + (stop_signal_received() != 0 ? " by a signal" : "") +
                     "; saved " + last_saved + "; continue with --resume " + options_.run_dir);
  } else if (last_saved.empty() || checkpoint_step(last_saved) != step_) {
    evaluate_and_save(true);
  }
  progress.finish();
  summary.end_step = step_;
  summary.skipped = skipped_;
  summary.last_checkpoint = last_saved;
  summary.best_eval = best_;
  summary.best_checkpoint = best_dir_;
  return summary;
}

}  // namespace zoo
