#include "train/run_setup.h"

#include <cmath>
#include <filesystem>
#include <iostream>

#include <torch/torch.h>

#include "core/files.h"
#include "core/runtime.h"
#include "data/corpus.h"
#include "kernels/recompute.h"
#include "train/autocast.h"
#include "train/checkpoint.h"
#include "train/distributed.h"
#include "train/optimizer.h"

namespace zoo {
namespace {

namespace fs = std::filesystem;

void choose_precision(TrainingRun& run) {
  ComputeDevice compute{run.device.is_cuda()};
  // Only auto on the CPU needs the measurement (a few milliseconds); rank 0's decides for every
  // rank, so that all of them compute alike.
  if (!compute.cuda && run.config.precision == Precision::kAuto) {
    const double measured = run.main_rank() ? measure_cpu_bf16_speedup() : 0.0;
    compute.cpu_bf16_speedup =
        run.parallel ? std::stod(run.parallel->share("bf16_speedup", std::to_string(measured))) : measured;
  }
  run.precision = resolve_precision(run.config.precision, compute, &run.precision_reason);
  // run.yaml records the choice, so a resumed run keeps it rather than measuring again.
  run.config.precision = run.precision;
}

// The run's own on resume, else the configured one, the init_from checkpoint's, or one trained
// on the data; stored into the run directory.
std::unique_ptr<Tokenizer> prepare_tokenizer(const TrainingRun& run, bool resume, std::ostream& log) {
  const RunConfig& config = run.config;
  std::unique_ptr<Tokenizer> tokenizer;
  if (resume) tokenizer = stored_tokenizer(run.directory->path());
  if (tokenizer) {
    // the run's own, as it trained with it
  } else if (!config.tokenizer.empty()) {
    tokenizer = std::make_unique<Tokenizer>(Tokenizer::load(config.tokenizer));
  } else if (!config.init_from.empty()) {
    const std::string dir = resolve_checkpoint(config.init_from);
    tokenizer = stored_tokenizer(dir);
    if (!tokenizer) throw std::runtime_error(dir + ": the checkpoint has no tokenizer; set tokenizer=PATH");
  } else {
    for (const auto& d : config.data) {
      if (fs::is_directory(d) && fs::exists(fs::path(d) / "train.tokens")) {
        throw std::runtime_error("data " + d + " holds token files: set tokenizer= to the tokenizer that made them");
      }
    }
    TokenizerTrainOptions t;
    t.inputs = config.data.empty() ? std::vector<std::string>{ensure_default_corpus()} : config.data;
    t.vocab_size = config.model_config.vocab_size;
    t.kind = config.tokenizer_type;
    t.seed = config.seed;
    log << "training a " << to_string(config.tokenizer_type) << " tokenizer of " << t.vocab_size << " pieces...\n";
    tokenizer = std::make_unique<Tokenizer>(Tokenizer::train(t, run.directory->file("tokenizer")));
  }
  if (const auto mismatch = vocabulary_mismatch(*tokenizer, config.model_config.vocab_size); !mismatch.empty()) {
    throw ConfigError(mismatch + ": set model.vocab_size=" + std::to_string(tokenizer->vocab_size()));
  }
  store_tokenizer(*tokenizer, run.directory->path());
  return tokenizer;
}

// Rank 0 prepares the tokenizer; the others take its bytes through the store.
void share_tokenizer(TrainingRun& run, bool resume, std::ostream& log) {
  if (run.main_rank()) run.tokenizer = prepare_tokenizer(run, resume, log);
  if (!run.parallel) return;
  const std::string bytes = run.parallel->share("tokenizer", run.main_rank() ? run.tokenizer->model_bytes() : "");
  if (!run.main_rank()) run.tokenizer = std::make_unique<Tokenizer>(Tokenizer::from_serialized(bytes, "rank 0's tokenizer"));
}

void prepare_data(TrainingRun& run, std::ostream& log) {
  auto prepare = [&] { run.data = make_task_data(run.config, run.objective, *run.tokenizer, run.run_dir, log); };
  if (!run.parallel) return prepare();
  // Rank 0 tokenizes first; then the first rank of each other node (which finds rank 0's
  // token files when the run directory is shared); then the rest, who find theirs.
  const bool node_first = run.parallel->env().local_rank == 0;
  if (run.main_rank()) prepare();
  run.parallel->barrier();
  if (!run.main_rank() && node_first) prepare();
  run.parallel->barrier();
  if (!run.main_rank() && !node_first) prepare();
}

// The objective from the config and the purpose, its data, and the head it trains (a
// classifier's labels come from the data).
void prepare_objective_and_data(TrainingRun& run, std::ostream& log) {
  RunConfig& config = run.config;
  const Purpose purpose = config.init_from.empty() ? Purpose::kPretraining : Purpose::kFineTuning;
  if (config.lora.enabled() && purpose == Purpose::kPretraining) {
    throw ConfigError("lora.rank: LoRA adapts a pretrained model, and this run starts from fresh weights: "
                      "use zoo finetune CHECKPOINT (or init_from=CHECKPOINT)");
  }
  run.objective = resolve_objective(config.objective, config.model_config, purpose);
  prepare_data(run, log);
  const LabelSet* labels = run.data->labels();
  set_objective_head(run.objective, labels ? static_cast<int64_t>(labels->size()) : 0, config.model_config);
  config.objective = run.objective;
  config.validate("run config");
}

// The run's adapters: a resumed run's as its last checkpoint says, a new one's on init_from with
// the fresh tensors (and a classifier's whole head, as PEFT's modules_to_save for SEQ_CLS, with
// the head transform before it, which the base's masked LM only lent its start) trained in full.
void set_up_lora(TrainingRun& run, bool resume, const std::vector<std::string>& fresh, std::ostream& log) {
  LoraState state;
  if (resume) {
    const std::string path = (fs::path(run.directory->last_checkpoint()) / kLoraStateFile).string();
    if (!fs::exists(path)) throw std::runtime_error(path + ": missing, but the run config sets lora.rank");
    state = LoraState::parse(read_file(path), path);
    state.config = run.config.lora;
  } else {
    std::vector<std::string> trained = fresh;
    if (run.objective == Objective::kClassification) {
      for (const auto& p : run.model.module()->named_parameters()) {
        const bool head = p.key().rfind("classifier.", 0) == 0 || p.key().rfind("head_transform.", 0) == 0;
        if (head && std::find(fresh.begin(), fresh.end(), p.key()) == fresh.end()) trained.push_back(p.key());
      }
    }
    state = new_lora_state(resolve_checkpoint(run.config.init_from), run.config.lora, std::move(trained));
  }
  train_lora(run.model, std::move(state), log);
}

// The last checkpoint's weights, optimizer state, data position and generator; refused when
// the launch would change the global batch or the data order.
TrainerState restore(TrainingRun& run, const std::string& dir, std::ostream& log) {
  // The weights go straight into the run's model; load_weights names any mismatch.
  if (run.model.lora) {
    load_lora_weights(dir, run.model);
  } else {
    load_weights((fs::path(dir) / "model.pt").string(), *run.model.module());
  }
  load_optimizer_state(dir, *run.optimizer, run.device);
  const std::string state_path = (fs::path(dir) / "state.json").string();
  const TrainerState s = TrainerState::parse(read_file(state_path), state_path);
  auto refuse = [&](const std::string& trained, const std::string& launched, const std::string& resume_with) {
    throw std::runtime_error(run.run_dir + ": the run was trained with " + trained + " and this launch " + launched +
                             "; resuming would change the global batch and the data order. Resume with " +
                             resume_with + ", or start a new run with init_from=" + dir);
  };
  if (s.world_size != run.world_size()) {
    refuse(std::to_string(s.world_size) + " process(es)", "has " + std::to_string(run.world_size()),
           std::to_string(s.world_size) + " (torchrun --nproc_per_node=...)");
  }
  if (s.context_parallel != run.config.context_parallel) {
    refuse("context_parallel=" + std::to_string(s.context_parallel),
           "sets " + std::to_string(run.config.context_parallel), "context_parallel=" + std::to_string(s.context_parallel));
  }
  ShuffledSampler::State position;
  position.epoch = s.sampler_epoch;
  position.index = s.sampler_index;
  run.sampler->restore(position);
  restore_cpu_generator(s.rng, state_path);
  log << "resumed from " << dir << " at step " << s.step << "\n";
  return s;
}

// The model (fresh, from init_from, or restored on resume), its adapters, the optimizer, the
// schedule and the sampler; shared from rank 0 in a data-parallel run.
void build_model_and_optimizer(TrainingRun& run, bool resume, std::ostream& log) {
  const RunConfig& config = run.config;
  torch::manual_seed(config.seed);
  run.model = build_model(config.model_config);
  std::vector<std::string> fresh;
  if (!resume && !config.init_from.empty()) fresh = initialize_from_checkpoint(run.model, config.init_from, log, config.lora.enabled());
  if (config.lora.enabled()) set_up_lora(run, resume, fresh, log);
  run.model.set_activation_checkpointing(config.activation_checkpointing);
  run.model.module()->to(run.device);
  run.model.module()->train();

  run.total_parameters = count_parameters(*run.model.module());
  for (const auto& p : trainable_parameters(*run.model.module())) run.trainable_parameters += p.numel();
  OptimizerOptions o;
  o.lr = config.lr, o.weight_decay = config.weight_decay;
  o.beta1 = config.beta1, o.beta2 = config.beta2, o.eps = config.eps;
  run.optimizer = make_adamw(*run.model.module(), o);
  run.schedule.kind = config.schedule;
  run.schedule.lr = config.lr, run.schedule.min_lr = config.min_lr;
  run.schedule.warmup_steps = config.warmup_steps, run.schedule.total_steps = config.steps;
  run.schedule.d_model = config.model_config.d_model;
  run.sampler = std::make_unique<ShuffledSampler>(run.data->train_size(), config.seed);

  if (resume) run.resumed = restore(run, run.directory->last_checkpoint(), log);
  if (run.parallel) {
    // Everyone starts from rank 0's weights, and gradients are averaged from here on.
    std::vector<torch::Tensor> state;
    for (const auto& p : run.model.module()->parameters()) state.push_back(p);
    for (const auto& b : run.model.module()->buffers()) state.push_back(b);
    run.parallel->broadcast(state);
    run.parallel->attach(trainable_parameters(*run.model.module()));
  }
  if (config.context_parallel > 1) {  // a divisor of the processes (validate_world)
    if (!run.device.is_cpu()) {
      throw ConfigError("context_parallel: ring attention runs zoo's CPU kernel; this run is on " + run.device.str() +
                        " (set device: cpu)");
    }
    run.ring = run.parallel->ring(config.context_parallel);
  }
}

void log_setup(const TrainingRun& run, int64_t held_in_compute_dtype, std::ostream& log) {
  const RunConfig& config = run.config;
  const double trainable_share = static_cast<double>(run.trainable_parameters) /
                                 static_cast<double>(std::max<int64_t>(1, run.total_parameters));
  log << "run: " << run.run_dir << "\n"
      << describe(config.model_config) << "parameters: " << run.total_parameters << " (trainable "
      << run.trainable_parameters << ", " << c10::str(std::round(10000.0 * trainable_share) / 100.0) << "%)\n"
      << "data: " << run.data->describe() << "\n"
      << "device: " << run.device << " (" << to_string(run.precision) << ": " << run.precision_reason << "), "
      << at::get_num_threads() << " threads\n";
  if (held_in_compute_dtype > 0) {
    log << "frozen projections held in " << to_string(run.precision) << ": " << held_in_compute_dtype
        << " (what autocast computes them in)\n";
  }
  if (run.ring) {
    const int64_t tokens = config.resolved_block_size(), n = config.context_parallel;
    if (run.objective == Objective::kCausalLM) {
      log << "context parallel: each sequence of " << tokens << " tokens split over " << n
          << " ranks (ring attention; zigzag chunks of " << tokens / (2 * n) << " tokens, two per rank)\n";
    } else {
      // Encoders' and seq2seq batches are as long as their longest example.
      log << "context parallel: each sequence (up to " << tokens << " tokens) split over " << n
          << " ranks (ring attention; padded to a multiple of " << 2 * n << ", zigzag chunks, two per rank"
          << (run.objective == Objective::kMaskedLM ? "" : "; the decoder's sequence too") << ")\n";
    }
  }
  if (run.parallel) {
    const int64_t groups = run.data_parallel_size();
    const int64_t sequences = config.batch_size * groups * config.grad_accum;
    log << "data parallel: " << run.parallel->world_size() << " processes (" << run.parallel->backend()
        << "); global batch " << config.batch_size << " per rank x " << groups
        << (run.ring ? " groups of " + std::to_string(config.context_parallel) + " ranks" : std::string(" ranks"))
        << " x " << config.grad_accum << " accumulation = " << sequences << " sequences\n";
  }
}

}  // namespace

std::ostream& log_of(const TrainerOptions& o) {
  static std::ostream discard(nullptr);
  if (o.parallel != nullptr && o.parallel->rank() != 0) return discard;
  return o.log ? *o.log : std::cerr;
}

bool TrainingRun::main_rank() const { return parallel == nullptr || parallel->rank() == 0; }

int64_t TrainingRun::world_size() const { return parallel ? parallel->world_size() : 1; }

int64_t TrainingRun::data_parallel_size() const { return world_size() / std::max<int64_t>(1, config.context_parallel); }

int64_t TrainingRun::data_parallel_rank() const {
  return parallel ? parallel->rank() / std::max<int64_t>(1, config.context_parallel) : 0;
}

std::unique_ptr<TrainingRun> set_up_run(RunConfig config, const TrainerOptions& options, std::ostream& log) {
  auto run = std::make_unique<TrainingRun>();
  run->config = std::move(config);
  run->run_dir = options.run_dir;
  run->parallel = options.parallel;
  run->config.validate_world(run->world_size());
  run->directory = std::make_unique<RunDirectory>(
      options.run_dir, options.resume ? RunDirectory::Mode::kResume : RunDirectory::Mode::kFresh, options.overwrite,
      run->main_rank(), log);
  run->config.make_paths_absolute();
  run->device = resolve_device(run->config.device);
  if (run->parallel && run->device.is_cuda() && !run->device.has_index()) {
    run->device = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(run->parallel->env().local_rank));
  }
  // Sizes no machine of this kind holds are refused before a tokenizer or data is prepared.
  check_fits_in_memory(run->config, physical_memory_bytes(), run->device.is_cuda());
  choose_precision(*run);
  torch::manual_seed(run->config.seed);
  share_tokenizer(*run, options.resume, log);
  prepare_objective_and_data(*run, log);
  build_model_and_optimizer(*run, options.resume, log);
  // Once every weight is loaded and shared: a frozen base's projections in the compute dtype.
  const int64_t held_in_compute_dtype = hold_frozen_projections_in_compute_dtype(*run->model.module(), run->precision);
  // On resume too: overrides given then (more steps) hold for the next resume.
  if (run->main_rank()) write_file_atomically(run->directory->file("run.yaml"), to_yaml(run->config));
  log_setup(*run, held_in_compute_dtype, log);
  run->directory->keep();  // set up: from here on the run directory stays whatever happens
  return run;
}

}  // namespace zoo
