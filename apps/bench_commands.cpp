// zoo bench: throughput, model FLOPs utilisation, memory bandwidth and peak memory on this
// machine, and with --compare the same workloads in PyTorch (scripts/bench_pytorch.py) in the
// same session, interleaved. Every workload runs in a fresh process (this binary with --worker,
// or python3), so its peak resident memory is its own and no allocator state carries over. The
// workloads and how they are measured are the library's (bench/workloads.h, bench/measure.h);
// this file chooses them, launches the workers and prints the table or the JSON rows.
//
// --profile N lists, under each training row, the N ops with the most self time in one extra
// step run under LibTorch's profiler (core/op_profile.h), after the timed steps.
//
// --device cuda runs the model, matmul and copy rows on the GPU (both sides; bf16 under CUDA
// autocast); peak memory is then the GPU's (the caching allocator's peak) rather than resident
// memory, and the tokenizer rows are left out.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>

#include <nlohmann/json.hpp>
#include <torch/cuda.h>
#include <torch/torch.h>

#include "apps/commands.h"
#include "bench/workloads.h"
#include "core/runtime.h"
#include "core/strings.h"
#include "data/corpus.h"
#include "train/autocast.h"

namespace zoo::cli {
namespace {

namespace fs = std::filesystem;
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
  std::string serve_target;    // --worker of a serve row: the server to load (PyTorch's)
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

// One workload in this process (--worker): its row on the last line of standard output.
int run_worker(const BenchArgs& a) {
  bench::WorkloadOptions options;
  options.steps = a.steps, options.profile_rows = a.profile, options.gpt2_tokenizer = a.gpt2_tokenizer;
  options.device = torch::Device(a.device);
  options.serve_target = a.serve_target;
  std::cout << bench::run_workload(a.worker, options).dump() << std::endl;
  return 0;
}

// Starts `argv` with `env` added, its standard output on the returned pipe.
FILE* start_child(const std::vector<std::string>& argv, const std::vector<std::string>& env, std::string& command) {
  command.clear();
  for (const auto& e : env) command += e + " ";
  for (const auto& arg : argv) command += "'" + arg + "' ";
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) throw std::runtime_error("zoo bench: cannot run " + command);
  return pipe;
}

// Waits for a child start_child started and returns the JSON object on the last line of its
// standard output.
json finish_child(FILE* pipe, const std::string& command) {
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

// Runs `argv` and returns the JSON object on the last line of its standard output.
json run_child(const std::vector<std::string>& argv, const std::vector<std::string>& env) {
  std::string command;
  FILE* pipe = start_child(argv, env, command);
  return finish_child(pipe, command);
}

// A TCP port free on loopback now: the ring rows' rendezvous.
int free_port() {
  const int s = ::socket(AF_INET, SOCK_STREAM, 0);
  if (s < 0) throw std::runtime_error("zoo bench: cannot open a socket for the ranks' rendezvous");
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  const bool ok = ::bind(s, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0 &&
                  ::getsockname(s, reinterpret_cast<sockaddr*>(&address), &length) == 0;
  ::close(s);
  if (!ok) throw std::runtime_error("zoo bench: no free port on loopback for the ranks' rendezvous");
  return ntohs(address.sin_port);
}

// A ring row: its ranks as worker processes started together (the environment torchrun would
// set), the machine's threads shared among them. The row is rank 0's, with every rank's peak
// memory and the largest as the row's.
json run_ranks(const std::string& self, const std::string& name, int64_t ranks, int64_t threads,
               const std::string& steps) {
  const std::string port = std::to_string(free_port());
  const std::string per_rank = std::to_string(std::max<int64_t>(1, threads / ranks));
  std::vector<std::pair<FILE*, std::string>> children;
  for (int64_t r = 0; r < ranks; ++r) {
    std::string command;
    FILE* pipe = start_child({self, "--threads", per_rank, "bench", "--worker", name, "--steps", steps},
                             {"WORLD_SIZE=" + std::to_string(ranks), "RANK=" + std::to_string(r),
                              "LOCAL_WORLD_SIZE=" + std::to_string(ranks), "LOCAL_RANK=" + std::to_string(r),
                              "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + port},
                             command);
    children.emplace_back(pipe, command);
  }
  std::vector<json> rows;
  for (const auto& [pipe, command] : children) rows.push_back(finish_child(pipe, command));
  json row = rows.front();
  json memory = json::array();
  double largest = 0;
  for (const auto& r : rows) {
    memory.push_back(r["peak_rss_mb"]);
    largest = std::max(largest, r["peak_rss_mb"].get<double>());
  }
  row["rank_peak_rss_mb"] = memory;
  row["peak_rss_mb"] = largest;
  return row;
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

// The workloads this run measures, in order: --only's, else every one this machine can run well,
// naming those left out.
std::vector<std::string> chosen_workloads(const BenchArgs& a, bool on_gpu) {
  const auto& known = bench::workload_names();
  std::vector<std::string> names = a.only.empty() ? known : a.only;
  for (const auto& n : names) {
    if (std::find(known.begin(), known.end(), n) == known.end() && !bench::is_long_sequence_workload(n) &&
        !bench::is_ring_workload(n) && !bench::is_decode_workload(n) && !bench::is_serve_workload(n)) {
      throw std::invalid_argument("zoo bench: unknown workload '" + n + "' (known: " + join(known, ", ") +
                                  ", long-KIND-T[-gpt2][-math] for KIND learned, alibi, relative, window and "
                                  "T 1024, 2048, 4096, 8192, 16384 (and long-linear-T, long-gla-T without -math), "
                                  "ring-KIND-T-N for N 2 or 4, and decode-KIND-C for KIND softmax or gla and C 512, "
                                  "4096, 32768, and " + join(bench::serve_workload_names(), ", ") + ")");
    }
    if (on_gpu && bench::is_ring_workload(n)) {
      throw std::invalid_argument("zoo bench: " + n + " runs on the CPU only (leave out --device cuda)");
    }
    if (on_gpu && n.starts_with("tokenize-")) {
      throw std::invalid_argument("zoo bench: " + n + " runs on the CPU only (leave out --device cuda)");
    }
  }
  if (!a.only.empty()) return names;
  // Tokenizers run on the CPU: a GPU run leaves their rows out.
  if (on_gpu) std::erase_if(names, [](const std::string& n) { return n.starts_with("tokenize-"); });
  // Without GPT-2's files the default run leaves its row out, saying so; asked for, it fails.
  if (!on_gpu && !fs::exists(fs::path(a.gpt2_tokenizer) / "vocab.json")) {
    names.erase(std::find(names.begin(), names.end(), "tokenize-gpt2"));
    std::cerr << "zoo bench: no GPT-2 tokenizer in " << a.gpt2_tokenizer << ": tokenize-gpt2 left out\n";
  }
  // A CPU without bf16 arithmetic (AVX2 alone) multiplies bf16 ~100x slower than fp32 under
  // LibTorch 2.15, on one thread: gemm-bf16 alone took over 9 minutes on an AVX2 Zen 3. The
  // default run leaves the bf16 matmul and training rows out there, saying so; asked for, they run.
  if (!on_gpu) {
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
  return names;
}

// The PyTorch side runs under the settings zoo chooses for itself: its thread count and device,
// and when `tuned`, glibc's allocator tuned as configure_allocator tunes it (through glibc's own
// variables). zoo decodes with its weights in 2 MiB pages (place_in_huge_pages) and trains with
// its large blocks in them (core/large_blocks.h); glibc gives PyTorch's heap and its mapped
// blocks the same advice through its tunable (it keeps no freed block for reuse).
std::vector<std::string> pytorch_environment(const BenchArgs& a, const torch::Device& device, int64_t threads,
                                             bool tuned) {
  std::vector<std::string> env = {"ZOO_BENCH_THREADS=" + std::to_string(threads), "ZOO_BENCH_DEVICE=" + device.str()};
  if (tuned) {
    env.insert(env.end(), {"MALLOC_MMAP_THRESHOLD_=33554432", "MALLOC_TRIM_THRESHOLD_=2147483647",
                           "MALLOC_TOP_PAD_=67108864", "GLIBC_TUNABLES=glibc.malloc.hugetlb=1"});
  }
  if (a.torch_compile) env.push_back("ZOO_BENCH_COMPILE=1");
  // The serve rows' PyTorch side is measured by zoo's own load generator (this program).
  env.push_back("ZOO_BENCH_ZOO=" + fs::read_symlink("/proc/self/exe").string());
  env.push_back("ZOO_BENCH_GPT2_TOKENIZER=" + a.gpt2_tokenizer);
  return env;
}

void print_header(const BenchArgs& a, const torch::Device& device, int64_t threads, bool tuned) {
  std::cout << "zoo bench: " << torch_description()
            << (device.is_cuda() ? ", on " + device.str() + " (peak memory: the GPU's)" : "") << ", " << threads
            << " intra-op threads, " << available_cpus() << " CPUs, allocator " << (tuned ? "tuned" : "glibc defaults")
            << ", " << cpu_kernels_description()
            << (a.compare ? std::string(", PyTorch ") + (a.torch_compile ? "through torch.compile" : "eager") : "")
            << "\n";
  std::cout << std::left << std::setw(35) << "workload" << std::setw(10) << "unit" << std::right << std::setw(10)
            << "zoo" << std::setw(10) << (a.compare ? "pytorch" : "") << std::setw(8) << (a.compare ? "ratio" : "")
            << "  notes\n";
}

// What earlier rows measured that later rows are compared with: the matmul rates (MFU), the
// copy rate (the decoding bound), full and plain training (the LoRA and recompute rows), zoo's
// SentencePiece (GPT-2's BPE).
using Measured = std::map<std::string, double>;

void remember(const std::string& name, const json& zoo, Measured& machine) {
  if (name == "gemm" || name == "gemm-bf16" || name == "bandwidth" || name == "tokenize-zoo" ||
      name == "serve-gpt2-small-1") {
    machine[name] = zoo["value"].get<double>();
  }
  if (bench::is_long_sequence_workload(name)) {
    machine[name] = zoo["value"].get<double>();
    machine[name + ":rss"] = zoo["peak_rss_mb"].get<double>();
  }
  if (name == "train-gpt2-small" || name == "train-gpt2-small-bf16" || name == "train-gpt2-small-1024") {
    machine[name] = zoo["value"].get<double>();
    machine[name + ":rss"] = zoo["peak_rss_mb"].get<double>();
    machine[name + ":activations"] = zoo["activation_mb"].get<double>();
  }
}

// LoRA against full fine-tuning in the same precision, recomputation against plain training:
// the ratios into `row`, and the notes that say them.
std::string own_comparison_notes(const std::string& name, const json& zoo, Measured& machine, json& row,
                                 const std::string& memory) {
  std::string notes;
  const std::string full = name.ends_with("-bf16") ? "train-gpt2-small-bf16" : "train-gpt2-small";
  if (name.starts_with("finetune-gpt2-small-lora") && machine.count(full)) {
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
  // N ranks sharing a sequence against one process holding all of it, and one holding a rank's
  // share (T / N tokens), where this run measured them before.
  if (bench::is_ring_workload(name)) {
    const auto ring = bench::ring_workload(name);
    const int64_t t = std::stoll(ring.single.substr(ring.single.rfind('-') + 1));
    const std::string share = ring.single.substr(0, ring.single.rfind('-') + 1) + std::to_string(t / ring.ranks);
    notes = std::to_string(ring.ranks) + " ranks of " + std::to_string(t / ring.ranks) + " tokens, largest " + memory +
            " " + fixed(zoo["peak_rss_mb"].get<double>(), 0) + " MB";
    if (machine.count(share)) {
      row["peak_rss_vs_one_rank_share"] = zoo["peak_rss_mb"].get<double>() / machine[share + ":rss"];
      notes += " = " + fixed(100.0 * row["peak_rss_vs_one_rank_share"].get<double>(), 0) + "% of one process's at " +
               std::to_string(t / ring.ranks) + " tokens";
    }
    if (machine.count(ring.single)) {
      row["peak_rss_vs_one_rank"] = zoo["peak_rss_mb"].get<double>() / machine[ring.single + ":rss"];
      row["speed_vs_one_rank"] = zoo["value"].get<double>() / machine[ring.single];
      notes += ", " + fixed(100.0 * row["peak_rss_vs_one_rank"].get<double>(), 0) + "% of one process's at " +
               std::to_string(t) + "; " + fixed(row["speed_vs_one_rank"].get<double>(), 2) + "x its tokens/s";
    }
    return notes;
  }
  // Continuous batching: the streams together against one stream; latencies beside PyTorch's.
  if (bench::is_serve_workload(name)) {
    if (name == "serve-ttft-gpt2-small") {
      return "128-token prompt under 8 streams; idle " + fixed(zoo["idle_ms"].get<double>(), 0) + " ms (" +
             fixed(zoo["vs_idle"].get<double>(), 2) + "x under load)";
    }
    if (name != "serve-gpt2-small-1" && machine.count("serve-gpt2-small-1")) {
      row["vs_one_stream"] = zoo["value"].get<double>() / machine["serve-gpt2-small-1"];
      notes = fixed(row["vs_one_stream"].get<double>(), 2) + "x one stream's tokens/s; ";
    }
    return notes + "per token p50 " + fixed(zoo["token_p50_ms"].get<double>(), 0) + " ms, p99 " +
           fixed(zoo["token_p99_ms"].get<double>(), 0) + " ms";
  }
  // zoo's attention path against its own (T, T) path, measured just before.
  if (bench::is_long_sequence_workload(name) && machine.count(name + "-math")) {
    row["speed_vs_math"] = zoo["value"].get<double>() / machine[name + "-math"];
    row["peak_rss_vs_math"] = zoo["peak_rss_mb"].get<double>() / machine[name + "-math:rss"];
    notes = fixed(row["speed_vs_math"].get<double>(), 2) + "x the (T, T) path's tokens/s at " +
            fixed(100.0 * row["peak_rss_vs_math"].get<double>(), 0) + "% of its " + memory + " (" +
            fixed(machine[name + "-math:rss"], 0) + " MB)";
  }
  return notes;
}

// MFU against the matmul rate of the row's own precision (and PyTorch's, where it ran), and
// decoding against the bound the copy rate sets.
std::string rate_notes(const std::string& name, const json& zoo, const json& torch_result, Measured& machine,
                       json& row) {
  std::string notes;
  const std::string peak_row = name.ends_with("-bf16") ? "gemm-bf16" : "gemm";
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
  return notes;
}

// A printed row: its JSON (--json) and the table's notes.
struct Row {
  json fields;
  std::string notes;
};

// The row of workload `name` from zoo's result and PyTorch's (null when PyTorch did not run it),
// compared with what earlier rows measured; remembers what later rows compare with.
Row make_row(const std::string& name, const json& zoo, const json& torch_result, Measured& machine,
             const std::string& memory) {
  json row = {{"name", name}, {"unit", zoo["unit"]}, {"zoo", zoo["value"]}, {"zoo_peak_rss_mb", zoo["peak_rss_mb"]}};
  if (zoo.contains("ranks")) {  // a ring row: its ranks' own peaks besides the largest
    row["ranks"] = zoo["ranks"];
    row["rank_peak_rss_mb"] = zoo["rank_peak_rss_mb"];
  }
  if (!torch_result.is_null()) {
    row["pytorch"] = torch_result["value"];
    row["pytorch_compiled"] = torch_result.value("compiled", false);
    row["ratio"] = zoo["value"].get<double>() / torch_result["value"].get<double>();
    row["pytorch_peak_rss_mb"] = torch_result["peak_rss_mb"];
  }
  remember(name, zoo, machine);
  std::string notes = own_comparison_notes(name, zoo, machine, row, memory);
  // PyTorch has no tokenizer: the tokenizer rows compare with each other (bytes per second).
  if (name.starts_with("tokenize-")) {
    notes = fixed(zoo["text_bytes_per_token"].get<double>(), 2) + " bytes of text per token";
    if (name == "tokenize-gpt2" && machine.count("tokenize-zoo")) {
      row["per_byte_vs_zoo"] = zoo["value"].get<double>() / machine["tokenize-zoo"];
      notes += "; " + fixed(row["per_byte_vs_zoo"].get<double>(), 2) + "x zoo's SentencePiece per byte";
    }
  }
  notes += rate_notes(name, zoo, torch_result, machine, row);
  if (bench::is_serve_workload(name)) {
    for (const char* key : {"token_p50_ms", "token_p99_ms", "request_p50_s", "request_p99_s", "idle_ms"}) {
      if (zoo.contains(key)) row[std::string("zoo_") + key] = zoo[key];
      if (torch_result.contains(key)) row[std::string("pytorch_") + key] = torch_result[key];
    }
    if (torch_result.contains("token_p50_ms")) {
      notes += " (pytorch " + fixed(torch_result["token_p50_ms"].get<double>(), 0) + " ms, " +
               fixed(torch_result["token_p99_ms"].get<double>(), 0) + " ms)";
    }
    if (torch_result.contains("idle_ms")) notes += "; pytorch idle " + fixed(torch_result["idle_ms"].get<double>(), 0) + " ms";
  }
  if (zoo.contains("split_ms")) {
    row["zoo_split_ms"] = zoo["split_ms"];
    if (torch_result.contains("split_ms")) row["pytorch_split_ms"] = torch_result["split_ms"];
  }
  if (name.starts_with("train") || name.starts_with("long-")) {  // the ring rows' notes say theirs
    notes += std::string(notes.empty() ? "" : "; ") + memory + " " + fixed(zoo["peak_rss_mb"].get<double>(), 0) +
             " MB" + (!torch_result.is_null() ? " (pytorch " + fixed(torch_result["peak_rss_mb"].get<double>(), 0) + ")" : "");
  }
  if (zoo.contains("profile") && !zoo["profile"].empty()) row["profile"] = zoo["profile"];
  return {row, notes};
}

void print_row(const Row& row, const json& zoo) {
  const json& r = row.fields;
  std::cout << std::left << std::setw(35) << r["name"].get<std::string>() << std::setw(10) << r["unit"].get<std::string>()
            << std::right << std::setw(10) << fixed(zoo["value"].get<double>(), 1) << std::setw(10)
            << (r.contains("pytorch") ? fixed(r["pytorch"].get<double>(), 1) : "") << std::setw(8)
            << (r.contains("ratio") ? fixed(r["ratio"].get<double>(), 2) + "x" : "") << "  " << row.notes << std::endl;
  if (r.contains("profile")) print_profile(r["profile"]);
}

int run_bench(const BenchArgs& a) {
  const torch::Device device(a.device);
  const bool on_gpu = device.is_cuda();
  if (on_gpu && torch::cuda::device_count() == 0) {
    throw std::runtime_error("zoo bench --device cuda: no CUDA device (" + torch_description() + ")");
  }
  const std::vector<std::string> names = chosen_workloads(a, on_gpu);
  const std::string self = fs::read_symlink("/proc/self/exe").string();
  const int64_t threads = at::get_num_threads();
  const fs::path script = fs::path(ZOO_SOURCE_DIR) / "scripts" / "bench_pytorch.py";
  if (a.compare && !fs::exists(script)) throw std::runtime_error("zoo bench --compare: " + script.string() + " not found");
  // ZOO_MALLOC_DEFAULTS=1 keeps glibc's defaults, for zoo (configure_allocator) and PyTorch alike.
  const char* keep = std::getenv("ZOO_MALLOC_DEFAULTS");
  const bool tuned = keep == nullptr || std::string(keep) != "1";
  const std::vector<std::string> torch_env = pytorch_environment(a, device, threads, tuned);
  const std::string steps = std::to_string(a.steps);
  if (!a.json_lines) print_header(a, device, threads, tuned);
  Measured machine;
  const std::string memory = on_gpu ? "peak GPU memory" : "peak RSS";
  for (const auto& name : names) {
    const json zoo =
        bench::is_ring_workload(name)
            ? run_ranks(self, name, bench::ring_workload(name).ranks, threads, steps)
            : run_child({self, "--threads", std::to_string(threads), "bench", "--worker", name, "--steps", steps,
                         "--profile", std::to_string(a.profile), "--gpt2-tokenizer", a.gpt2_tokenizer, "--device",
                         device.str()},
                        {});
    const json torch_result =
        a.compare && bench::compares_with_pytorch(name) ? run_child({a.python, script.string(), name, steps}, torch_env) : json();
    const Row row = make_row(name, zoo, torch_result, machine, memory);
    if (a.json_lines) {
      std::cout << row.fields.dump() << std::endl;
    } else {
      print_row(row, zoo);
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
  cmd->add_option("--serve-target", a->serve_target,
                  "with --worker and a serve row: load the server at HOST:PORT instead of zoo's (internal)");
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
