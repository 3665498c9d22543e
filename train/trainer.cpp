#include "train/trainer.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <iostream>
#include <regex>
#include <set>

#include <ATen/autocast_mode.h>
#include <torch/torch.h>
#include <torch/version.h>

#include "core/files.h"
#include "core/runtime.h"
#include "core/stop_signals.h"
#include "core/strings.h"
#include "data/corpus.h"
#include "models/generation.h"
#include "train/autocast.h"
#include "train/checkpoint.h"
#include "train/distributed.h"
#include "train/evaluation.h"
#include "train/optimizer.h"
#include "train/progress.h"
#include "train/schedule.h"

namespace zoo {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

bool is_terminal(std::ostream& out) {
  if (&out == &std::cerr) return isatty(STDERR_FILENO);
  if (&out == &std::cout) return isatty(STDOUT_FILENO);
  return false;
}

std::vector<torch::Tensor> trainable(const torch::nn::Module& module) {
  std::vector<torch::Tensor> out;
  for (const auto& p : module.parameters())
    if (p.requires_grad()) out.push_back(p);
  return out;
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

// Rank 0 logs; the other ranks of a data-parallel run stay quiet.
std::ostream& log_of(const TrainerOptions& o) {
  static std::ostream discard(nullptr);
  if (o.parallel != nullptr && o.parallel->rank() != 0) return discard;
  return o.log ? *o.log : std::cerr;
}

Trainer::Trainer(RunConfig config, TrainerOptions options)
    : config_(std::move(config)), options_(std::move(options)), log_(log_of(options_)) {
  DataParallel* parallel = options_.parallel;
  config_.validate_world(world_size());
  run_ = std::make_unique<RunDirectory>(options_.run_dir,
                                        options_.resume ? RunDirectory::Mode::kResume : RunDirectory::Mode::kFresh,
                                        options_.overwrite, main_rank(), log_);
  config_.make_paths_absolute();
  device_ = resolve_device(config_.device);
  if (parallel && device_.is_cuda() && !device_.has_index()) {
    device_ = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(parallel->env().local_rank));
  }
  // Sizes no machine of this kind holds are refused before a tokenizer or data is prepared.
  check_fits_in_memory(config_, physical_memory_bytes(), device_.is_cuda());
  choose_precision();
  torch::manual_seed(config_.seed);

  if (main_rank()) prepare_tokenizer();
  if (parallel) {
    // Rank 0's tokenizer (maybe just trained) for everyone, through the store.
    const std::string bytes = parallel->share("tokenizer", main_rank() ? tokenizer_->model_bytes() : "");
    if (!main_rank()) tokenizer_ = std::make_unique<Tokenizer>(Tokenizer::from_serialized(bytes, "rank 0's tokenizer"));
  }
  prepare_objective_and_data();

  build_model_and_optimizer();
  // Once every weight is loaded and shared: a frozen base's projections in the compute dtype.
  const int64_t held_in_compute_dtype = hold_frozen_projections_in_compute_dtype(*model_.module(), precision_);
  // On resume too: overrides given then (more steps) hold for the next resume.
  if (main_rank()) write_file_atomically(run_->file("run.yaml"), to_yaml(config_));
  log_setup(held_in_compute_dtype);
  run_->keep();  // set up: from here on the run directory stays whatever happens
}

void Trainer::choose_precision() {
  DataParallel* parallel = options_.parallel;
  ComputeDevice compute{device_.is_cuda()};
  // Only auto on the CPU needs the measurement (a few milliseconds); rank 0's decides for every
  // rank, so that all of them compute alike.
  if (!compute.cuda && config_.precision == Precision::kAuto) {
    const double measured = main_rank() ? measure_cpu_bf16_speedup() : 0.0;
    compute.cpu_bf16_speedup = parallel ? std::stod(parallel->share("bf16_speedup", std::to_string(measured))) : measured;
  }
  precision_ = resolve_precision(config_.precision, compute, &precision_reason_);
  // run.yaml records the choice, so a resumed run keeps it rather than measuring again.
  config_.precision = precision_;
  scaler_ = LossScaler(precision_ == Precision::kFp16);
}

void Trainer::prepare_objective_and_data() {
  const Purpose purpose = config_.init_from.empty() ? Purpose::kPretraining : Purpose::kFineTuning;
  if (config_.lora.enabled() && purpose == Purpose::kPretraining) {
    throw ConfigError("lora.rank: LoRA adapts a pretrained model, and this run starts from fresh weights: "
                      "use zoo finetune CHECKPOINT (or init_from=CHECKPOINT)");
  }
  objective_ = resolve_objective(config_.objective, config_.model_config, purpose);
  prepare_data();
  auto& model_config = config_.model_config;
  switch (objective_) {
    case Objective::kClassification:
      model_config.head = BertHead::kSequenceClassification;
      model_config.num_labels = data_->labels()->size();
      // It classifies the pooled [CLS]: a masked-LM checkpoint has no pooler, which starts fresh
      // (as Hugging Face's BertForSequenceClassification from BertForMaskedLM weights).
      model_config.pooler = true;
      break;
    case Objective::kMaskedLM:
      if (model_config.head != BertHead::kPretraining) model_config.head = BertHead::kMaskedLM;
      break;
    case Objective::kAuto:
    case Objective::kCausalLM:
    case Objective::kSpanCorruption:
    case Objective::kSeq2Seq: break;
  }
  config_.objective = objective_;
  config_.validate("run config");
}

void Trainer::build_model_and_optimizer() {
  DataParallel* parallel = options_.parallel;
  torch::manual_seed(config_.seed);
  model_ = build_model(config_.model_config);
  std::vector<std::string> fresh;
  if (!options_.resume && !config_.init_from.empty()) fresh = initialize_from(config_.init_from);
  if (config_.lora.enabled()) setup_lora(fresh);
  model_.set_activation_checkpointing(config_.activation_checkpointing);
  model_.module()->to(device_);
  model_.module()->train();

  total_parameters_ = count_parameters(*model_.module());
  trainable_parameters_ = 0;
  for (const auto& p : trainable(*model_.module())) trainable_parameters_ += p.numel();
  OptimizerOptions o;
  o.lr = config_.lr, o.weight_decay = config_.weight_decay;
  o.beta1 = config_.beta1, o.beta2 = config_.beta2, o.eps = config_.eps;
  optimizer_ = make_adamw(*model_.module(), o);
  schedule_.kind = config_.schedule;
  schedule_.lr = config_.lr, schedule_.min_lr = config_.min_lr;
  schedule_.warmup_steps = config_.warmup_steps, schedule_.total_steps = config_.steps;
  schedule_.d_model = config_.model_config.d_model;
  sampler_ = std::make_unique<ShuffledSampler>(data_->train_size(), config_.seed);

  if (options_.resume) restore(run_->last_checkpoint());
  if (parallel) {
    // Everyone starts from rank 0's weights, and gradients are averaged from here on.
    std::vector<torch::Tensor> state;
    for (const auto& p : model_.module()->parameters()) state.push_back(p);
    for (const auto& b : model_.module()->buffers()) state.push_back(b);
    parallel->broadcast(state);
    parallel->attach(trainable(*model_.module()));
  }
  if (config_.context_parallel > 1) {  // a divisor of the processes (validate_world)
    if (!device_.is_cpu()) {
      throw ConfigError("context_parallel: ring attention runs zoo's CPU kernel; this run is on " + device_.str() +
                        " (set device: cpu)");
    }
    ring_ = parallel->ring(config_.context_parallel);
  }
}

void Trainer::log_setup(int64_t held_in_compute_dtype) {
  DataParallel* parallel = options_.parallel;
  log_ << "run: " << options_.run_dir << "\n"
       << describe(config_.model_config) << "parameters: " << total_parameters_ << " (trainable " << trainable_parameters_
       << ", " << c10::str(std::round(10000.0 * static_cast<double>(trainable_parameters_) /
                                      static_cast<double>(std::max<int64_t>(1, total_parameters_))) / 100.0)
       << "%)\n"
       << "data: " << data_->describe() << "\n"
       << "device: " << device_ << " (" << to_string(precision_) << ": " << precision_reason_ << "), "
       << at::get_num_threads() << " threads\n";
  if (held_in_compute_dtype > 0) {
    log_ << "frozen projections held in " << to_string(precision_) << ": " << held_in_compute_dtype
         << " (what autocast computes them in)\n";
  }
  if (ring_) {
    const int64_t tokens = config_.resolved_block_size(), n = config_.context_parallel;
    if (objective_ == Objective::kCausalLM) {
      log_ << "context parallel: each sequence of " << tokens << " tokens split over " << n
           << " ranks (ring attention; zigzag chunks of " << tokens / (2 * n) << " tokens, two per rank)\n";
    } else {
      // Encoders' and seq2seq batches are as long as their longest example.
      log_ << "context parallel: each sequence (up to " << tokens << " tokens) split over " << n
           << " ranks (ring attention; padded to a multiple of " << 2 * n << ", zigzag chunks, two per rank"
           << (objective_ == Objective::kMaskedLM ? "" : "; the decoder's sequence too") << ")\n";
    }
  }
  if (parallel) {
    const int64_t groups = data_parallel_size();
    const int64_t sequences = config_.batch_size * groups * config_.grad_accum;
    log_ << "data parallel: " << parallel->world_size() << " processes (" << parallel->backend()
         << "); global batch " << config_.batch_size << " per rank x " << groups
         << (ring_ ? " groups of " + std::to_string(config_.context_parallel) + " ranks" : std::string(" ranks")) << " x "
         << config_.grad_accum << " accumulation = " << sequences << " sequences\n";
  }
}

void Trainer::prepare_data() {
  auto prepare = [&] { data_ = make_task_data(config_, objective_, *tokenizer_, options_.run_dir, log_); };
  DataParallel* parallel = options_.parallel;
  if (!parallel) return prepare();
  // Rank 0 tokenizes first; then the first rank of each other node (which finds rank 0's
  // token files when the run directory is shared); then the rest, who find theirs.
  const bool node_first = parallel->env().local_rank == 0;
  if (main_rank()) prepare();
  parallel->barrier();
  if (!main_rank() && node_first) prepare();
  parallel->barrier();
  if (!main_rank() && !node_first) prepare();
}

bool Trainer::main_rank() const { return options_.parallel == nullptr || options_.parallel->rank() == 0; }

int64_t Trainer::world_size() const { return options_.parallel ? options_.parallel->world_size() : 1; }

int64_t Trainer::data_parallel_size() const { return world_size() / std::max<int64_t>(1, config_.context_parallel); }

int64_t Trainer::data_parallel_rank() const {
  return options_.parallel ? options_.parallel->rank() / std::max<int64_t>(1, config_.context_parallel) : 0;
}

Trainer::~Trainer() = default;

void Trainer::prepare_tokenizer() {
  if (options_.resume) tokenizer_ = stored_tokenizer(run_->path());
  if (tokenizer_) {
    // the run's own, as it trained with it
  } else if (!config_.tokenizer.empty()) {
    tokenizer_ = std::make_unique<Tokenizer>(Tokenizer::load(config_.tokenizer));
  } else if (!config_.init_from.empty()) {
    const std::string dir = resolve_checkpoint(config_.init_from);
    tokenizer_ = stored_tokenizer(dir);
    if (!tokenizer_) throw std::runtime_error(dir + ": the checkpoint has no tokenizer; set tokenizer=PATH");
  } else {
    for (const auto& d : config_.data) {
      if (fs::is_directory(d) && fs::exists(fs::path(d) / "train.tokens")) {
        throw std::runtime_error("data " + d + " holds token files: set tokenizer= to the tokenizer that made them");
      }
    }
    TokenizerTrainOptions t;
    t.inputs = config_.data.empty() ? std::vector<std::string>{ensure_default_corpus()} : config_.data;
    t.vocab_size = config_.model_config.vocab_size;
    t.kind = config_.tokenizer_type;
    t.seed = config_.seed;
    log_ << "training a " << to_string(config_.tokenizer_type) << " tokenizer of " << t.vocab_size << " pieces...\n";
    const std::string prefix = run_->file("tokenizer");
    tokenizer_ = std::make_unique<Tokenizer>(Tokenizer::train(t, prefix));
  }
  if (const auto mismatch = vocabulary_mismatch(*tokenizer_, config_.model_config.vocab_size); !mismatch.empty()) {
    throw ConfigError(mismatch + ": set model.vocab_size=" + std::to_string(tokenizer_->vocab_size()));
  }
  store_tokenizer(*tokenizer_, run_->path());
}

// Copies every tensor the checkpoint and the model share; head tensors whose shape changed
// (another number of labels) and tensors the checkpoint lacks start from the fresh init.
std::vector<std::string> Trainer::initialize_from(const std::string& path) {
  const std::string dir = resolve_checkpoint(path);
  Checkpoint source = load_checkpoint(dir);
  // A LoRA checkpoint's model is its base with the adapters' updates in the weights.
  if (source.model.lora) merge_lora(source.model);
  if (source.model.config.family != config_.model_config.family) {
    throw std::runtime_error(dir + ": a checkpoint of another family than the run's model");
  }
  auto from = source.model.module();
  auto to = model_.module();
  std::map<std::string, torch::Tensor> available;
  for (const auto& p : from->named_parameters()) available[p.key()] = p.value();
  for (const auto& b : from->named_buffers()) available[b.key()] = b.value();
  std::vector<std::string> fresh;
  std::set<std::string> used;
  auto is_head = [](const std::string& name) {
    return name.rfind("classifier.", 0) == 0 || name.rfind("nsp_head.", 0) == 0 || name.rfind("mlm_head.", 0) == 0;
  };
  torch::NoGradGuard no_grad;
  auto copy = [&](const std::string& name, torch::Tensor& target) {
    auto it = available.find(name);
    if (it == available.end()) return fresh.push_back(name);
    used.insert(name);
    if (it->second.sizes() != target.sizes()) {
      if (is_head(name)) return fresh.push_back(name);
      throw std::runtime_error(dir + ": tensor '" + name + "' has shape " + c10::str(it->second.sizes()) +
                               " but the run's model needs " + c10::str(target.sizes()));
    }
    target.copy_(it->second);
  };
  for (auto& p : to->named_parameters()) copy(p.key(), p.value());
  for (auto& b : to->named_buffers()) copy(b.key(), b.value());
  std::vector<std::string> dropped;
  for (const auto& [name, value] : available)
    if (!used.count(name)) dropped.push_back(name);
  log_ << "initialized from " << dir << "\n";
  if (!fresh.empty()) log_ << "  newly initialized: " << join(fresh) << "\n";
  if (!dropped.empty()) log_ << "  not used: " << join(dropped) << "\n";
  return fresh;
}

void Trainer::setup_lora(const std::vector<std::string>& fresh) {
  LoraState state;
  if (options_.resume) {
    const std::string path = (fs::path(run_->last_checkpoint()) / kLoraStateFile).string();
    if (!fs::exists(path)) throw std::runtime_error(path + ": missing, but the run config sets lora.rank");
    state = LoraState::parse(read_file(path), path);
  } else {
    const std::string base = resolve_checkpoint(config_.init_from);
    if (fs::exists(fs::path(base) / kLoraStateFile)) {
      throw std::runtime_error(base + ": holds LoRA adapters itself; adapters are trained on a plain checkpoint "
                               "(zoo export-hf or a full fine-tune merges them into one)");
    }
    state.base = fs::canonical(base).string();  // the step directory itself, not a moving `last` link
    state.base_hash = file_hash((fs::path(base) / "model.pt").string());
    state.trained = fresh;
    // A classifier's head trains in full, fresh or not (PEFT's modules_to_save for SEQ_CLS).
    if (objective_ == Objective::kClassification) {
      for (const auto& p : model_.module()->named_parameters()) {
        const bool head = p.key().rfind("classifier.", 0) == 0;
        if (head && std::find(fresh.begin(), fresh.end(), p.key()) == fresh.end()) state.trained.push_back(p.key());
      }
    }
  }
  state.config = config_.lora;
  const auto adapted = attach_lora(model_, state.config);
  const std::set<std::string> trained(state.trained.begin(), state.trained.end());
  for (auto& p : model_.module()->named_parameters()) {
    p.value().set_requires_grad(is_adapter_tensor(p.key()) || trained.count(p.key()) > 0);
  }
  model_.lora = state;
  log_ << "lora: rank " << state.config.rank << ", alpha " << state.config.alpha << ", dropout "
       << state.config.dropout << " on " << adapted.size() << " projections (" << join(state.config.targets)
       << "); the base stays frozen" << (trained.empty() ? "" : "; trained in full: " + join(state.trained)) << "\n";
}

void Trainer::restore(const std::string& dir) {
  // The weights go straight into the run's model; load_weights names any mismatch.
  if (model_.lora) {
    load_lora_weights(dir, model_);
  } else {
    load_weights((fs::path(dir) / "model.pt").string(), *model_.module());
  }
  load_optimizer_state(dir, *optimizer_, device_);
  const std::string state_path = (fs::path(dir) / "state.json").string();
  const TrainerState s = TrainerState::parse(read_file(state_path), state_path);
  if (s.world_size != world_size()) {
    throw std::runtime_error(
        options_.run_dir + ": the run was trained with " + std::to_string(s.world_size) + " process(es) and this launch has " +
        std::to_string(world_size()) + "; resuming would change the global batch and the data order. Resume with " +
        std::to_string(s.world_size) + " (torchrun --nproc_per_node=...), or start a new run with init_from=" + dir);
  }
  if (s.context_parallel != config_.context_parallel) {
    throw std::runtime_error(options_.run_dir + ": the run was trained with context_parallel=" +
                             std::to_string(s.context_parallel) + " and this launch sets " +
                             std::to_string(config_.context_parallel) +
                             "; resuming would change the global batch and the data order. Resume with context_parallel=" +
                             std::to_string(s.context_parallel) + ", or start a new run with init_from=" + dir);
  }
  step_ = s.step;
  ShuffledSampler::State position;
  position.epoch = s.sampler_epoch;
  position.index = s.sampler_index;
  sampler_->restore(position);
  restore_cpu_generator(s.rng, state_path);
  skipped_ = s.skipped;
  tokens_seen_ = s.tokens_seen;
  scaler_.restore(s.loss_scale);
  if (s.best) {
    best_ = *s.best;
    best_dir_ = run_->checkpoint(best_->step);
  }
  log_ << "resumed from " << dir << " at step " << step_ << "\n";
}

bool Trainer::stop_pending() const { return stop_requested_ || stop_signal_received() != 0; }

bool Trainer::stop_agreed() const {
  if (!options_.parallel) return stop_pending();
  // Every rank must stop after the same step, or the others would wait on it forever.
  auto votes = torch::tensor({stop_pending() ? 1.0 : 0.0}, torch::kDouble);
  return options_.parallel->all_reduce_sum(votes).item<double>() > 0;
}

bool Trainer::better(const EvalResult& r) const {
  if (std::isnan(metric(r, objective_))) return false;
  if (!best_) return true;
  return maximizes(objective_) ? metric(r, objective_) > metric(*best_, objective_)
                               : metric(r, objective_) < metric(*best_, objective_);
}

Batch Trainer::next_batch() {
  const int64_t epoch = sampler_->state().epoch;
  // Every rank draws the whole global batch in the same order and keeps its group's slice: the
  // ranks of a context-parallel group take the same sequences (each computes its share of them).
  std::vector<int64_t> indices = sampler_->next(config_.batch_size * data_parallel_size());
  if (options_.parallel) {
    const auto first = indices.begin() + data_parallel_rank() * config_.batch_size;
    indices = std::vector<int64_t>(first, first + config_.batch_size);
  }
  return data_->train_batch(indices, epoch);
}

void Trainer::throw_step_out_of_memory(const std::string& cause) const {
  // The estimate before the run (check_fits_in_memory) is a lower bound; what a step really
  // holds is known only when it runs. The message names the options that size it.
  std::string first_line = cause.substr(0, cause.find('\n'));
  if (first_line.size() > 300) first_line = first_line.substr(0, 300) + "...";
  throw ConfigError("batch_size (" + std::to_string(config_.batch_size) + ") x block_size (" +
                    std::to_string(config_.resolved_block_size()) + "): a training step does not fit in the memory of " +
                    device_.str() + " (" + first_line + "); lower batch_size or block_size (a larger grad_accum keeps " +
                    "the tokens per step), or set activation_checkpointing=true");
}

bool Trainer::step() {
  const auto started = Clock::now();
  last_lr_ = learning_rate(schedule_, step_);
  set_learning_rate(*optimizer_, last_lr_);
  clear_gradients(*optimizer_);

  DataParallel* parallel = options_.parallel;
  const double micro_steps = static_cast<double>(config_.grad_accum);
  double loss = 0;
  int64_t tokens = 0;
  try {
    for (int64_t micro = 0; micro < config_.grad_accum && std::isfinite(loss); ++micro) {
      LossOutput out;
      {
        AutocastScope autocast(precision_, device_);
        out = compute_loss(model_, next_batch(), objective_, config_.label_smoothing, device_, false, ring_);
      }
      const GlobalLoss global = reduce_loss(parallel, out.loss.item<double>(), out.targets, out.tokens);
      if (!std::isfinite(global.value)) {
        loss = global.value;
        break;
      }
      if (parallel) parallel->set_sync(micro + 1 == config_.grad_accum);
      (out.loss * (global.share * scaler_.scale() / micro_steps)).backward();
      loss += global.value / micro_steps;
      tokens += global.tokens;
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
  const bool finite = std::isfinite(loss);
  if (parallel) {
    if (finite) parallel->finish_gradients();
    else parallel->discard_gradients();
  }
  ++step_;
  last_loss_ = loss;
  if (!finite) {
    clear_gradients(*optimizer_);
    switch (config_.on_nonfinite) {
      case NonFinitePolicy::kStop:
        throw NonFiniteLoss("non-finite loss (" + std::to_string(loss) + ") at step " + std::to_string(step_) +
                            "; the run stops without saving this state (on_nonfinite=skip skips such steps)");
      case NonFinitePolicy::kSkip: break;
    }
    ++skipped_;
    if (++skipped_in_a_row_ > config_.max_skipped) {
      throw NonFiniteLoss("non-finite loss at step " + std::to_string(step_) + ": " +
                          std::to_string(skipped_in_a_row_) + " steps in a row skipped (max_skipped=" +
                          std::to_string(config_.max_skipped) + ")");
    }
    last_loss_ = NAN;
    return false;
  }
  skipped_in_a_row_ = 0;
  const auto params = trainable(*model_.module());
  scaler_.unscale(params);
  const double max_norm = config_.grad_clip > 0 ? config_.grad_clip : std::numeric_limits<double>::infinity();
  last_grad_norm_ = torch::nn::utils::clip_grad_norm_(params, max_norm);
  const bool updated = scaler_.update(last_grad_norm_);  // an fp16 overflow skips the update
  if (updated) optimizer_->step();
  tokens_seen_ += tokens;
  last_step_tokens_ = tokens;
  last_step_seconds_ = std::chrono::duration<double>(Clock::now() - started).count();
  return updated;
}

EvalResult Trainer::evaluate() {
  EvalResult r = zoo::evaluate(model_, *data_, config_.batch_size, config_.eval_batches, device_,
                               config_.target_length, precision_, ring_);
  if (ring_) {
    // Each rank scored its chunks of every sequence: the sums over the whole world, in which each
    // data-parallel group, having scored the same sequences, counts once per group.
    const bool scored = r.targets > 0;
    const double targets = static_cast<double>(r.targets);
    auto sums = torch::tensor({scored ? r.loss * targets : 0.0, targets, scored ? r.accuracy * targets : 0.0},
                              torch::kDouble);
    options_.parallel->all_reduce_sum(sums);
    const double groups = static_cast<double>(data_parallel_size());
    r.targets = std::llround(sums[1].item<double>() / groups);
    if (r.targets > 0) {
      r.loss = sums[0].item<double>() / sums[1].item<double>();
      r.perplexity = std::exp(r.loss);
      r.accuracy = sums[2].item<double>() / sums[1].item<double>();
    }
  }
  r.step = step_;
  return r;
}

std::string Trainer::save(bool is_best) {
  const std::string dir = run_->checkpoint(step_);
  if (!main_rank()) {
    if (is_best) best_dir_ = dir;
    return dir;
  }
  TrainerState state;
  state.step = step_;
  state.world_size = world_size();
  state.context_parallel = config_.context_parallel;
  state.sampler_epoch = sampler_->state().epoch;
  state.sampler_index = sampler_->state().index;
  state.rng = cpu_generator_state();
  state.skipped = skipped_;
  state.tokens_seen = tokens_seen_;
  state.loss_scale = scaler_.scale();
  state.objective = to_string(objective_);
  state.best = best_ ? std::optional<EvalResult>(*best_) : std::nullopt;
  std::map<std::string, std::string> extra = {{"run.yaml", to_yaml(config_)}};
  if (const LabelSet* labels = data_->labels()) {
    extra["labels.json"] = nlohmann::json{{"labels", labels->labels()}}.dump(2) + "\n";
  }
  save_checkpoint(dir, model_, optimizer_.get(), tokenizer_.get(), state.to_json(), extra);
  if (is_best) best_dir_ = dir;
  run_->commit_checkpoint(step_, is_best, config_.keep_last,
                          best_dir_.empty() ? std::nullopt : std::optional<int64_t>(checkpoint_step(best_dir_)));
  return dir;
}

TrainSummary Trainer::run() {
  StopSignals signals(options_.handle_signals);
  // The run directory is this run's until run() returns (or throws): then another may use it.
  struct Release {
    RunDirectory& run;
    ~Release() { run.release(); }
  } release{*run_};
  TrainSummary summary;
  summary.start_step = step_;
  MetricsLog metrics = main_rank() ? MetricsLog(run_->file("metrics.jsonl"), step_) : MetricsLog();
  const bool live = options_.live >= 0 ? options_.live == 1 : is_terminal(log_);
  ProgressLine progress(log_, live, config_.log_every);
  if (data_->val_size() == 0) progress.message("no validation data: evaluation is off");
  const auto started = Clock::now();
  const int64_t first = step_;
  double smoothed_seconds = 0;
  std::string last_saved;
  LossSpikes spikes;
  auto evaluate_and_save = [&](bool evaluate_now) {
    bool is_best = false;
    if (evaluate_now && data_->val_size() > 0) {
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
  while (step_ < config_.steps) {
    if (stop_agreed()) {
      summary.interrupted = true;
      break;
    }
    const bool updated = step();
    summary.losses.push_back(last_loss_);
    const double elapsed = std::chrono::duration<double>(Clock::now() - started).count();
    smoothed_seconds = step_ - first == 1 ? last_step_seconds_ : 0.9 * smoothed_seconds + 0.1 * last_step_seconds_;
    StepReport report;
    report.step = step_, report.total = config_.steps, report.loss = last_loss_;
    report.lr = last_lr_;
    report.tokens_per_second = last_step_seconds_ > 0 ? static_cast<double>(last_step_tokens_) / last_step_seconds_ : 0;
    report.eta_seconds = smoothed_seconds * static_cast<double>(config_.steps - step_);
    nlohmann::json record = {{"step", step_},          {"split", "train"},
                             {"loss", last_loss_},     {"lr", report.lr},
                             {"grad_norm", last_grad_norm_}, {"tokens_per_second", report.tokens_per_second},
                             {"trainable_parameters", trainable_parameters_}, {"parameters", total_parameters_},
                             {"tokens", tokens_seen_}, {"elapsed", elapsed}};
    if (!updated) record["skipped"] = true;
    if (const auto spike = spikes.add(step_, last_loss_, last_grad_norm_)) {
      record["spike"] = true;
      summary.spikes.push_back(*spike);
      progress.message("loss spike at " + describe(*spike));
    }
    if (std::isnan(last_loss_)) record["loss"] = nullptr;
    metrics.write(record);
    progress.update(report);
    if (options_.on_step) options_.on_step(step_, last_loss_);
    const bool eval_now = config_.eval_every > 0 && step_ % config_.eval_every == 0;
    const bool save_now = eval_now || (config_.save_every > 0 && step_ % config_.save_every == 0);
    if (step_ < config_.steps && save_now) evaluate_and_save(eval_now);
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
