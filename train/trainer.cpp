#include "train/trainer.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <iostream>
#include <regex>
#include <set>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/autocast_mode.h>
#include <torch/torch.h>
#include <torch/version.h>

#include "core/files.h"
#include "models/generation.h"
#include "text/corpus.h"
#include "train/checkpoint.h"
#include "train/distributed.h"
#include "train/optimizer.h"
#include "train/progress.h"
#include "train/schedule.h"

namespace zoo {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// Set by SIGINT/SIGTERM while a trainer handles signals; the loop stops at the next step
// boundary. A second signal is not waited on: the default action (exit) runs at once.
std::atomic<int> g_stop_signal{0};
extern "C" void on_stop_signal(int signal) {
  if (g_stop_signal.exchange(signal) != 0) {
    std::signal(signal, SIG_DFL);
    std::raise(signal);
  }
}

class SignalScope {
 public:
  explicit SignalScope(bool enabled) : enabled_(enabled) {
    if (!enabled_) return;
    g_stop_signal = 0;
    struct sigaction action {};
    action.sa_handler = on_stop_signal;
    sigemptyset(&action.sa_mask);
    sigaction(SIGINT, &action, &old_int_);
    sigaction(SIGTERM, &action, &old_term_);
  }
  ~SignalScope() {
    if (!enabled_) return;
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
  }

 private:
  bool enabled_;
  struct sigaction old_int_ {}, old_term_ {};
};

// Mixed precision on CUDA for the forward pass and the loss (Micikevicius et al., 2018).
class AutocastScope {
 public:
  AutocastScope(bool enabled, at::ScalarType dtype) : enabled_(enabled) {
    if (!enabled_) return;
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
    at::autocast::set_autocast_enabled(at::kCUDA, true);
    at::autocast::set_autocast_dtype(at::kCUDA, dtype);
#else
    at::autocast::set_enabled(true);
    at::autocast::set_autocast_gpu_dtype(dtype);
#endif
  }
  ~AutocastScope() {
    if (!enabled_) return;
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
    at::autocast::set_autocast_enabled(at::kCUDA, false);
#else
    at::autocast::set_enabled(false);
#endif
    at::autocast::clear_cache();
  }

 private:
  bool enabled_;
};

// The CPU generator's state (dropout) as hex, so state.json stays readable.
std::string generator_state() {
  auto generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  const auto state = generator.get_state().contiguous();
  const auto* bytes = state.data_ptr<uint8_t>();
  static const char* kDigits = "0123456789abcdef";
  std::string hex;
  for (int64_t i = 0; i < state.numel(); ++i) hex += {kDigits[bytes[i] >> 4], kDigits[bytes[i] & 15]};
  return hex;
}

void restore_generator(const nlohmann::json& state, const std::string& where) {
  const std::string hex = state.is_string() ? state.get<std::string>() : "";
  auto nibble = [&](char c) -> uint8_t {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    throw std::runtime_error(where + ": rng is not a hex string");
  };
  if (hex.empty() || hex.size() % 2 != 0) throw std::runtime_error(where + ": rng is not a hex string");
  std::vector<uint8_t> v;
  for (size_t i = 0; i < hex.size(); i += 2) v.push_back(static_cast<uint8_t>(nibble(hex[i]) << 4 | nibble(hex[i + 1])));
  auto generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  try {
    generator.set_state(torch::tensor(v, torch::kUInt8));
  } catch (const c10::Error& e) {
    throw std::runtime_error(where + ": rng state does not fit this LibTorch's generator");
  }
}

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

// Replaces `link` by a symbolic link to `target` (a sibling name) atomically.
void point_link(const fs::path& link, const std::string& target) {
  const fs::path tmp = temporary_path_for(link.string());
  fs::create_symlink(target, tmp);
  fs::rename(tmp, link);
}

int64_t step_of(const fs::path& dir) {
  static const std::regex pattern("step-([0-9]+)");
  std::smatch m;
  const std::string name = dir.filename().string();
  return std::regex_match(name, m, pattern) ? std::stoll(m[1]) : -1;
}

bool maximizes(Objective objective) { return objective == Objective::kClassification; }

double metric(const EvalResult& r, Objective objective) { return maximizes(objective) ? r.accuracy : r.loss; }

nlohmann::json to_json(const EvalResult& r) {
  nlohmann::json j = {{"step", r.step}, {"split", "val"}, {"loss", r.loss}, {"perplexity", r.perplexity},
                      {"accuracy", r.accuracy}, {"targets", r.targets}};
  if (!std::isnan(r.exact_match)) j["exact_match"] = r.exact_match;
  return j;
}

EvalResult eval_from_json(const nlohmann::json& j) {
  EvalResult r;
  auto number = [&](const char* key) {
    return j.contains(key) && j[key].is_number() ? j[key].get<double>() : NAN;
  };
  r.step = j.value("step", int64_t{0});
  r.loss = number("loss"), r.perplexity = number("perplexity"), r.accuracy = number("accuracy");
  r.exact_match = number("exact_match");
  r.targets = j.value("targets", int64_t{0});
  return r;
}

std::string describe(const EvalResult& r) {
  char line[200];
  std::snprintf(line, sizeof line, "eval step %ld | val loss %.4f | perplexity %.2f | accuracy %.4f",
                static_cast<long>(r.step), r.loss, r.perplexity, r.accuracy);
  std::string s = line;
  if (!std::isnan(r.exact_match)) s += " | exact match " + std::to_string(r.exact_match);
  return s;
}

// Rows of a padded batch without their padding.
std::vector<std::vector<int64_t>> unpadded_rows(const torch::Tensor& ids, const torch::Tensor& mask) {
  std::vector<std::vector<int64_t>> rows;
  const auto i = ids.to(torch::kCPU).contiguous();
  const auto m = mask.to(torch::kCPU).to(torch::kLong).contiguous();
  for (int64_t b = 0; b < i.size(0); ++b) {
    std::vector<int64_t> row;
    for (int64_t t = 0; t < i.size(1); ++t)
      if (m[b][t].item<int64_t>() != 0) row.push_back(i[b][t].item<int64_t>());
    rows.push_back(row);
  }
  return rows;
}

}  // namespace

torch::Device resolve_device(const std::string& name) {
  if (name == "auto") return torch::cuda::is_available() ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
  if (name == "cpu") return torch::kCPU;
  if (name.rfind("cuda", 0) == 0) {
    if (!torch::cuda::is_available()) {
      throw std::runtime_error("device " + name + ": CUDA is not available (" +
                               std::string(TORCH_VERSION) + " here; build against a CUDA LibTorch, or use --device cpu)");
    }
    try {
      return torch::Device(name);
    } catch (const c10::Error&) {
      throw std::runtime_error("device '" + name + "': expected cuda or cuda:N");
    }
  }
  throw std::runtime_error("device '" + name + "': expected cpu, cuda, cuda:N or auto");
}

std::string resolve_checkpoint(const std::string& path) {
  const fs::path p(path);
  if (fs::exists(p / "config.yaml") && fs::exists(p / "model.pt")) return path;
  for (const char* link : {"best", "last"}) {
    const fs::path candidate = p / "checkpoints" / link;
    if (fs::exists(candidate)) return fs::canonical(candidate).string();
  }
  if (!fs::exists(p)) throw std::runtime_error(path + ": no such checkpoint or run directory");
  throw std::runtime_error(path + ": not a checkpoint (no config.yaml and model.pt) nor a run directory "
                                  "(no checkpoints/best or checkpoints/last)");
}

EvalResult evaluate(Model& model, const TaskData& data, int64_t batch_size, int64_t max_batches,
                    const torch::Device& device, int64_t max_target_length) {
  EvalResult result;
  const int64_t n = data.val_size();
  if (n == 0) return result;
  const int64_t limit = max_batches > 0 ? std::min(n, max_batches * batch_size) : n;
  auto module = model.module();
  const bool was_training = module->is_training();
  module->eval();
  torch::NoGradGuard no_grad;
  double loss_sum = 0;
  int64_t correct = 0, exact = 0, examples = 0;
  for (int64_t start = 0; start < limit; start += batch_size) {
    std::vector<int64_t> indices;
    for (int64_t i = start; i < std::min(limit, start + batch_size); ++i) indices.push_back(i);
    const Batch batch = data.val_batch(indices);
    const auto out = compute_loss(model, batch, data.objective(), 0.0, device, /*with_accuracy=*/true);
    if (out.targets == 0) continue;
    loss_sum += out.loss.item<double>() * static_cast<double>(out.targets);
    result.targets += out.targets;
    correct += out.correct;
    if (data.objective() == Objective::kSeq2Seq) {
      GenerationOptions options;
      options.max_new_tokens = max_target_length;
      options.eos_ids = {SpecialTokens::kEos};
      const auto generated = generate(model.seq2seq, unpadded_rows(batch.input_ids, batch.attention_mask), options);
      const auto labels = batch.labels.to(torch::kCPU);
      for (size_t b = 0; b < generated.tokens.size(); ++b) {
        std::vector<int64_t> target;
        for (int64_t t = 0; t < labels.size(1); ++t) {
          const int64_t id = labels[b][t].item<int64_t>();
          if (id == kIgnoreIndex || id == SpecialTokens::kEos) break;
          target.push_back(id);
        }
        exact += generated.tokens[b] == target;
        ++examples;
      }
    }
  }
  if (was_training) module->train();
  if (result.targets == 0) return result;
  result.loss = loss_sum / static_cast<double>(result.targets);
  result.perplexity = std::exp(result.loss);
  result.accuracy = static_cast<double>(correct) / static_cast<double>(result.targets);
  if (examples > 0) result.exact_match = static_cast<double>(exact) / static_cast<double>(examples);
  return result;
}

// Rank 0 logs; the other ranks of a data-parallel run stay quiet.
std::ostream& log_of(const TrainerOptions& o) {
  static std::ostream discard(nullptr);
  if (o.parallel != nullptr && o.parallel->rank() != 0) return discard;
  return o.log ? *o.log : std::cerr;
}

Trainer::Trainer(RunConfig config, TrainerOptions options)
    : config_(std::move(config)), options_(std::move(options)), log_(log_of(options_)) {
  if (options_.run_dir.empty()) throw std::runtime_error("the trainer needs a run directory");
  DataParallel* parallel = options_.parallel;
  const fs::path run(options_.run_dir);
  if (main_rank() && !options_.resume && fs::exists(run / "checkpoints")) {
    if (!options_.overwrite) {
      throw std::runtime_error(options_.run_dir + " already holds a run: --resume to continue it, --overwrite to "
                               "start again there, or another --run-dir");
    }
    fs::remove_all(run / "checkpoints");
    fs::remove(run / "metrics.jsonl");
  }
  fs::create_directories(run);
  device_ = resolve_device(config_.device);
  if (parallel && device_.is_cuda() && !device_.has_index()) {
    device_ = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(parallel->env().local_rank));
  }
  const bool cuda = device_.is_cuda();
  const std::string precision = config_.precision == "auto" ? (cuda ? "bf16" : "fp32") : config_.precision;
  if (precision != "fp32" && !cuda) {
    throw ConfigError("precision " + precision + " needs a CUDA device (CPU training runs in fp32)");
  }
  autocast_ = precision != "fp32";
  autocast_dtype_ = precision == "fp16" ? at::kHalf : at::kBFloat16;
  loss_scale_ = precision == "fp16" ? 65536.0 : 1.0;
  torch::manual_seed(config_.seed);

  if (main_rank()) prepare_tokenizer();
  if (parallel) {
    // Rank 0's tokenizer (maybe just trained) for everyone, through the store.
    const std::string bytes = parallel->share("tokenizer", main_rank() ? tokenizer_->model_bytes() : "");
    if (!main_rank()) tokenizer_ = std::make_unique<Tokenizer>(Tokenizer::from_serialized(bytes, "rank 0's tokenizer"));
  }
  objective_ = resolve_objective(config_.objective, config_.model_config.family, !config_.init_from.empty());
  auto prepare_data = [&] { data_ = std::make_unique<TaskData>(config_, objective_, *tokenizer_, options_.run_dir, log_); };
  if (!parallel) {
    prepare_data();
  } else {
    // Rank 0 tokenizes first; then the first rank of each other node (which finds rank 0's
    // token files when the run directory is shared); then the rest, who find theirs.
    const bool node_first = parallel->env().local_rank == 0;
    if (main_rank()) prepare_data();
    parallel->barrier();
    if (!main_rank() && node_first) prepare_data();
    parallel->barrier();
    if (!main_rank() && !node_first) prepare_data();
  }
  auto& model_config = config_.model_config;
  if (objective_ == Objective::kClassification) {
    model_config.head = BertHead::kSequenceClassification;
    model_config.num_labels = data_->labels().size();
  } else if (objective_ == Objective::kMaskedLM && model_config.head != BertHead::kPretraining) {
    model_config.head = BertHead::kMaskedLM;
  }
  config_.objective = objective_;
  config_.validate("run config");

  torch::manual_seed(config_.seed);
  model_ = build_model(model_config);
  if (!options_.resume && !config_.init_from.empty()) initialize_from(config_.init_from);
  model_.module()->to(device_);
  model_.module()->train();

  OptimizerOptions o;
  o.lr = config_.lr, o.weight_decay = config_.weight_decay;
  o.beta1 = config_.beta1, o.beta2 = config_.beta2, o.eps = config_.eps;
  optimizer_ = make_adamw(*model_.module(), o);
  schedule_.kind = schedule_from_string(config_.schedule);
  schedule_.lr = config_.lr, schedule_.min_lr = config_.min_lr;
  schedule_.warmup_steps = config_.warmup_steps, schedule_.total_steps = config_.steps;
  schedule_.d_model = config_.model_config.d_model;
  sampler_ = std::make_unique<ShuffledSampler>(data_->train_size(), config_.seed);

  if (options_.resume) {
    const fs::path last = run / "checkpoints" / "last";
    if (!fs::exists(last)) throw std::runtime_error(options_.run_dir + ": nothing to resume (no checkpoints/last)");
    restore(fs::canonical(last).string());
  }
  if (parallel) {
    // Everyone starts from rank 0's weights, and gradients are averaged from here on.
    std::vector<torch::Tensor> state;
    for (const auto& p : model_.module()->parameters()) state.push_back(p);
    for (const auto& b : model_.module()->buffers()) state.push_back(b);
    parallel->broadcast(state);
    parallel->attach(trainable(*model_.module()));
  }
  // On resume too: overrides given then (more steps) hold for the next resume.
  if (main_rank()) write_file_atomically((run / "run.yaml").string(), to_yaml(config_));
  log_ << "run: " << options_.run_dir << "\n"
       << describe(model_config) << "parameters: " << count_parameters(*model_.module()) << "\n"
       << "data: " << data_->describe() << "\n"
       << "device: " << device_ << " (" << precision << "), " << at::get_num_threads() << " threads\n";
  if (parallel) {
    const int64_t sequences = config_.batch_size * parallel->world_size() * config_.grad_accum;
    log_ << "data parallel: " << parallel->world_size() << " processes (" << parallel->backend()
         << "); global batch " << config_.batch_size << " per rank x " << parallel->world_size() << " ranks x "
         << config_.grad_accum << " accumulation = " << sequences << " sequences\n";
  }
}

bool Trainer::main_rank() const { return options_.parallel == nullptr || options_.parallel->rank() == 0; }

int64_t Trainer::world_size() const { return options_.parallel ? options_.parallel->world_size() : 1; }

Trainer::~Trainer() = default;

void Trainer::prepare_tokenizer() {
  const fs::path saved = fs::path(options_.run_dir) / "tokenizer.model";
  if (options_.resume && fs::exists(saved)) {
    tokenizer_ = std::make_unique<Tokenizer>(Tokenizer::load(saved.string()));
  } else if (!config_.tokenizer.empty()) {
    tokenizer_ = std::make_unique<Tokenizer>(Tokenizer::load(config_.tokenizer));
  } else if (!config_.init_from.empty()) {
    const std::string dir = resolve_checkpoint(config_.init_from);
    const fs::path path = fs::path(dir) / "tokenizer.model";
    if (!fs::exists(path)) throw std::runtime_error(dir + ": the checkpoint has no tokenizer; set tokenizer=PATH");
    tokenizer_ = std::make_unique<Tokenizer>(Tokenizer::load(path.string()));
  } else {
    for (const auto& d : config_.data) {
      if (fs::is_directory(d) && fs::exists(fs::path(d) / "train.tokens")) {
        throw std::runtime_error("data " + d + " holds token files: set tokenizer= to the tokenizer that made them");
      }
    }
    TokenizerTrainOptions t;
    t.inputs = config_.data.empty() ? std::vector<std::string>{ensure_default_corpus()} : config_.data;
    t.vocab_size = config_.model_config.vocab_size;
    t.kind = config_.tokenizer_type == "bpe" ? TokenizerKind::kBpe : TokenizerKind::kUnigram;
    t.seed = config_.seed;
    log_ << "training a " << config_.tokenizer_type << " tokenizer of " << t.vocab_size << " pieces...\n";
    const std::string prefix = (fs::path(options_.run_dir) / "tokenizer").string();
    tokenizer_ = std::make_unique<Tokenizer>(Tokenizer::train(t, prefix));
  }
  if (tokenizer_->vocab_size() > config_.model_config.vocab_size) {
    throw ConfigError("the tokenizer has " + std::to_string(tokenizer_->vocab_size()) +
                      " pieces but the model's vocab_size is " + std::to_string(config_.model_config.vocab_size) +
                      ": set model.vocab_size=" + std::to_string(tokenizer_->vocab_size()));
  }
  if (!fs::exists(saved) || read_file(saved.string()) != tokenizer_->model_bytes()) {
    write_file_atomically(saved.string(), tokenizer_->model_bytes());
  }
}

// Copies every tensor the checkpoint and the model share; head tensors whose shape changed
// (another number of labels) and tensors the checkpoint lacks start from the fresh init.
void Trainer::initialize_from(const std::string& path) {
  const std::string dir = resolve_checkpoint(path);
  Checkpoint source = load_checkpoint(dir);
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
  auto list = [](const std::vector<std::string>& names) {
    std::string s;
    for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
    return s;
  };
  if (!fresh.empty()) log_ << "  newly initialized: " << list(fresh) << "\n";
  if (!dropped.empty()) log_ << "  not used: " << list(dropped) << "\n";
}

void Trainer::restore(const std::string& dir) {
  // The weights go straight into the run's model; load_weights names any mismatch.
  load_weights((fs::path(dir) / "model.pt").string(), *model_.module());
  load_optimizer_state(dir, *optimizer_, device_);
  const std::string state_path = (fs::path(dir) / "state.json").string();
  nlohmann::json s;
  try {
    s = nlohmann::json::parse(read_file(state_path));
    step_ = s.at("step").get<int64_t>();
    const int64_t trained_with = s.value("world_size", int64_t{1});
    if (trained_with != world_size()) {
      throw std::runtime_error(
          options_.run_dir + ": the run was trained with " + std::to_string(trained_with) + " process(es) and this launch has " +
          std::to_string(world_size()) + "; resuming would change the global batch and the data order. Resume with " +
          std::to_string(trained_with) + " (torchrun --nproc_per_node=...), or start a new run with init_from=" + dir);
    }
    ShuffledSampler::State position;
    position.epoch = s.at("sampler").at("epoch").get<int64_t>();
    position.index = s.at("sampler").at("index").get<int64_t>();
    sampler_->restore(position);
    restore_generator(s.at("rng"), state_path);
    skipped_ = s.value("skipped", int64_t{0});
    tokens_seen_ = s.value("tokens_seen", int64_t{0});
    loss_scale_ = s.value("loss_scale", loss_scale_);
    if (s.contains("best") && !s["best"].is_null()) {
      best_ = eval_from_json(s["best"]);
      best_dir_ = (fs::path(options_.run_dir) / "checkpoints" / ("step-" + std::to_string(best_->step))).string();
    }
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(state_path + ": corrupt or incomplete trainer state (" + std::string(e.what()) + ")");
  }
  log_ << "resumed from " << dir << " at step " << step_ << "\n";
}

bool Trainer::stop_pending() const { return stop_requested_ || g_stop_signal != 0; }

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

bool Trainer::step() {
  const auto started = Clock::now();
  const double lr = learning_rate(schedule_, step_);
  set_learning_rate(*optimizer_, lr);
  last_lr_ = lr;
  clear_gradients(*optimizer_);

  double loss = 0;
  int64_t tokens = 0;
  bool finite = true;
  DataParallel* parallel = options_.parallel;
  const int64_t world = world_size();
  for (int64_t micro = 0; micro < config_.grad_accum; ++micro) {
    const int64_t epoch = sampler_->state().epoch;
    // Every rank draws the whole global batch in the same order and keeps its own slice.
    std::vector<int64_t> indices = sampler_->next(config_.batch_size * world);
    if (parallel) {
      const int64_t first = parallel->rank() * config_.batch_size;
      indices = std::vector<int64_t>(indices.begin() + first, indices.begin() + first + config_.batch_size);
    }
    const Batch batch = data_->train_batch(indices, epoch);
    LossOutput out;
    {
      AutocastScope autocast(autocast_, autocast_dtype_);
      out = compute_loss(model_, batch, objective_, config_.label_smoothing, device_);
    }
    double value = out.loss.item<double>();
    double share = 1.0;  // this rank's weight in the global mean
    int64_t micro_tokens = out.tokens;
    if (parallel) {
      // The global batch's mean over its targets, as one process would compute it: ranks with
      // more targets (MLM masks vary) weigh more. One small all-reduce per micro-step, which
      // also makes a non-finite loss on any rank everyone's.
      const bool ok = std::isfinite(value);
      auto sums = torch::tensor({ok ? value * static_cast<double>(out.targets) : 0.0, static_cast<double>(out.targets),
                                 ok ? 0.0 : 1.0, static_cast<double>(out.tokens)},
                                torch::kDouble);
      parallel->all_reduce_sum(sums);
      const double targets = sums[1].item<double>();
      micro_tokens = static_cast<int64_t>(sums[3].item<double>());
      if (sums[2].item<double>() > 0) {
        value = ok ? NAN : value;
      } else if (targets > 0) {
        value = sums[0].item<double>() / targets;
        share = static_cast<double>(out.targets) * static_cast<double>(world) / targets;
      }
    }
    if (!std::isfinite(value)) {
      finite = false;
      loss = value;
      break;
    }
    if (parallel) parallel->set_sync(micro + 1 == config_.grad_accum);
    (out.loss * (share * loss_scale_ / static_cast<double>(config_.grad_accum))).backward();
    loss += value / static_cast<double>(config_.grad_accum);
    tokens += micro_tokens;
  }
  if (parallel) {
    if (finite) parallel->finish_gradients();
    else parallel->discard_gradients();
  }
  ++step_;
  last_loss_ = loss;
  if (!finite) {
    clear_gradients(*optimizer_);
    if (config_.on_nonfinite == NonFinitePolicy::kStop) {
      throw NonFiniteLoss("non-finite loss (" + std::to_string(loss) + ") at step " + std::to_string(step_) +
                          "; the run stops without saving this state (on_nonfinite=skip skips such steps)");
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
  auto params = trainable(*model_.module());
  if (loss_scale_ != 1.0) {
    torch::NoGradGuard no_grad;
    for (auto& p : params)
      if (p.grad().defined()) p.grad().div_(loss_scale_);
  }
  const double max_norm = config_.grad_clip > 0 ? config_.grad_clip : std::numeric_limits<double>::infinity();
  last_grad_norm_ = torch::nn::utils::clip_grad_norm_(params, max_norm);
  bool updated = true;
  if (autocast_dtype_ == at::kHalf && autocast_) {
    // Dynamic loss scaling: an overflow halves the scale and skips the update.
    if (!std::isfinite(last_grad_norm_)) {
      loss_scale_ /= 2, clean_steps_ = 0, updated = false;
    } else if (++clean_steps_ >= 2000) {
      loss_scale_ *= 2, clean_steps_ = 0;
    }
  }
  if (updated) optimizer_->step();
  tokens_seen_ += tokens;
  last_step_tokens_ = tokens;
  last_step_seconds_ = std::chrono::duration<double>(Clock::now() - started).count();
  return updated;
}

EvalResult Trainer::evaluate() {
  EvalResult r = zoo::evaluate(model_, *data_, config_.batch_size, config_.eval_batches, device_,
                               config_.target_length);
  r.step = step_;
  return r;
}

std::string Trainer::save(bool is_best) {
  const fs::path checkpoints = fs::path(options_.run_dir) / "checkpoints";
  const std::string name = "step-" + std::to_string(step_);
  const std::string dir = (checkpoints / name).string();
  if (!main_rank()) {
    if (is_best) best_dir_ = dir;
    return dir;
  }
  nlohmann::json state = {{"step", step_},
                          {"world_size", world_size()},
                          {"sampler", {{"epoch", sampler_->state().epoch}, {"index", sampler_->state().index}}},
                          {"rng", generator_state()},
                          {"skipped", skipped_},
                          {"tokens_seen", tokens_seen_},
                          {"loss_scale", loss_scale_},
                          {"objective", to_string(objective_)},
                          {"best", best_ ? to_json(*best_) : nlohmann::json()}};
  std::map<std::string, std::string> extra = {{"run.yaml", to_yaml(config_)}};
  if (objective_ == Objective::kClassification) {
    extra["labels.json"] = nlohmann::json{{"labels", data_->labels().labels()}}.dump(2) + "\n";
  }
  save_checkpoint(dir, model_, optimizer_.get(), tokenizer_.get(), state, extra);
  point_link(checkpoints / "last", name);
  if (is_best) {
    point_link(checkpoints / "best", name);
    best_dir_ = dir;
  }
  // Keep the last K and the best.
  std::vector<fs::path> saved;
  for (const auto& entry : fs::directory_iterator(checkpoints))
    if (entry.is_directory() && !entry.is_symlink() && step_of(entry.path()) >= 0) saved.push_back(entry.path());
  std::sort(saved.begin(), saved.end(), [](const fs::path& a, const fs::path& b) { return step_of(a) > step_of(b); });
  const int64_t keep = std::max<int64_t>(1, config_.keep_last);
  for (size_t i = static_cast<size_t>(keep); i < saved.size(); ++i) {
    if (!best_dir_.empty() && saved[i].filename() == fs::path(best_dir_).filename()) continue;
    fs::remove_all(saved[i]);
  }
  return dir;
}

TrainSummary Trainer::run() {
  SignalScope signals(options_.handle_signals);
  TrainSummary summary;
  summary.start_step = step_;
  MetricsLog metrics = main_rank() ? MetricsLog((fs::path(options_.run_dir) / "metrics.jsonl").string(), step_)
                                    : MetricsLog();
  const bool live = options_.live >= 0 ? options_.live == 1 : is_terminal(log_);
  ProgressLine progress(log_, live, config_.log_every);
  if (data_->val_size() == 0) progress.message("no validation data: evaluation is off");
  const auto started = Clock::now();
  const int64_t first = step_;
  double smoothed_seconds = 0;
  std::string last_saved;
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
                             {"tokens", tokens_seen_}, {"elapsed", elapsed}};
    if (!updated) record["skipped"] = true;
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
    progress.message("stopped at step " + std::to_string(step_) + (g_stop_signal ? " by a signal" : "") +
                     "; saved " + last_saved + "; continue with --resume " + options_.run_dir);
  } else if (last_saved.empty() || step_of(last_saved) != step_) {
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

EvalResult evaluate_checkpoint(const std::string& checkpoint, const std::vector<std::string>& data,
                               int64_t batch_size, int64_t max_batches, const std::string& device_name,
                               std::ostream& log) {
  const std::string dir = resolve_checkpoint(checkpoint);
  Checkpoint c = load_checkpoint(dir);
  if (c.tokenizer_bytes.empty()) throw std::runtime_error(dir + ": the checkpoint has no tokenizer.model");
  const Tokenizer tokenizer = Tokenizer::from_serialized(c.tokenizer_bytes, dir + "/tokenizer.model");
  RunConfig config;
  const fs::path run_yaml = fs::path(dir) / "run.yaml";
  if (fs::exists(run_yaml)) config = load_run_config(run_yaml.string());
  config.model_config = c.model.config;
  config.data = data;
  config.val_data = data;
  Objective objective = Objective::kCausalLM;
  switch (c.model.config.family) {
    case Family::kGpt: objective = Objective::kCausalLM; break;
    case Family::kBert:
      objective = c.model.config.head == BertHead::kSequenceClassification ? Objective::kClassification
                                                                            : Objective::kMaskedLM;
      break;
    case Family::kT5:
    case Family::kTransformer: {
      bool pairs = false;
      if (data.size() == 1 && !fs::is_directory(data[0])) {
        try {
          format_of(data[0]);
          pairs = true;
        } catch (const std::exception&) {
        }
      }
      objective = pairs ? Objective::kSeq2Seq : Objective::kSpanCorruption;
      break;
    }
  }
  // Token objectives tokenize into a scratch directory removed afterwards.
  const fs::path scratch = temporary_path_for((fs::temp_directory_path() / "zoo-eval").string());
  fs::create_directories(scratch);
  try {
    std::unique_ptr<LabelSet> labels;
    const fs::path labels_path = fs::path(dir) / "labels.json";
    if (objective == Objective::kClassification && fs::exists(labels_path)) {
      labels = std::make_unique<LabelSet>(LabelSet::load(labels_path.string()));
    }
    TaskData task(config, objective, tokenizer, scratch.string(), log, labels.get());
    const torch::Device device = resolve_device(device_name);
    c.model.module()->to(device);
    EvalResult r = evaluate(c.model, task, batch_size, max_batches, device, config.target_length);
    r.step = c.state.value("step", int64_t{0});
    fs::remove_all(scratch);
    return r;
  } catch (...) {
    fs::remove_all(scratch);
    throw;
  }
}

}  // namespace zoo
