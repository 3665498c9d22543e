// zoo bench: throughput, model FLOPs utilisation, memory bandwidth and peak memory on this
// machine, and with --compare the same workloads in PyTorch (scripts/bench_pytorch.py) in the
// same session, interleaved. Every workload runs in a fresh process (this binary with --worker,
// or python3), so its peak resident memory is its own and no allocator state carries over. The
// workloads, how they are measured, their worker processes and their rows' comparisons are the
// library's (bench/workloads.h, bench/measure.h, bench/workers.h, bench/report.h); this file
// chooses them, launches the workers and prints the table or the JSON rows.
//
// --profile N lists, under each training row, the N ops with the most self time in one extra
// step run under LibTorch's profiler (core/op_profile.h), after the timed steps.
//
// --trace DIR writes one more step of each training and generate-* row as a Kineto trace, zoo's
// as DIR/zoo-ROW.json and (with --compare) PyTorch's as DIR/pytorch-ROW.json, for
// scripts/trace_summary.py (scripts/gpu_check.sh --profile).
//
// --llama-cpp runs the generate-* and prefill-* rows of gpt2-small and llama-0.5b in llama.cpp too
// (scripts/bench_llama_cpp.py, on the same threads; scripts/install_llama_cpp.sh installs it).
//
// --device cuda runs the model, matmul and copy rows on the GPU (both sides; bf16 under CUDA
// autocast); peak memory is then the GPU's (the caching allocator's peak) rather than resident
// memory, and the tokenizer rows are left out.

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>
#include <torch/cuda.h>
#include <torch/torch.h>

#include "apps/commands.h"
#include "bench/report.h"
#include "bench/workers.h"
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
  bool llama_cpp = false;  // the rows with a llama.cpp twin run in llama.cpp too
  std::vector<std::string> only;
  std::string worker;
  int64_t steps = 0;  // measured repetitions; 0 = each workload's default
  int64_t profile = 0;  // ops to list from a profiled step of each training workload; 0 = none
  bool torch_compile = false;  // the PyTorch side through torch.compile
  std::string python;           // default: setup_python()
  std::string gpt2_tokenizer;   // default: the reference files' GPT-2 (setup_cache())
  std::string device = "cpu";  // cpu or cuda: where the model, matmul and copy rows run
  std::string serve_target;    // --worker of a serve row: the server to load (PyTorch's)
  std::string trace_dir;       // where each row's Kineto traces go; empty: none
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
  options.trace_dir = a.trace_dir;
  std::cout << bench::run_workload(a.worker, options).dump() << std::endl;
  return 0;
}

// The profiled step's ops under their workload's row: self time, its share of the step, calls.
void print_profile(const json& profile) {
  const double step_ms = profile[0]["self_ms"].get<double>();
  std::cout << "    profiled step " << bench::fixed(step_ms, 0) << " ms; ops by self time:\n";
  for (size_t i = 1; i < profile.size(); ++i) {
    const double ms = profile[i]["self_ms"].get<double>();
    std::cout << "    " << std::right << std::setw(9) << bench::fixed(ms, 1) << " ms " << std::setw(5)
              << bench::fixed(100.0 * ms / step_ms, 1) << "% " << std::setw(6) << profile[i]["calls"].get<int64_t>() << "x  "
              << profile[i]["name"].get<std::string>() << "\n";
  }
}

// The workloads this run measures, in order: --only's, else every one of the default run this
// machine can run well, naming those left out.
std::vector<const bench::Workload*> chosen_workloads(const BenchArgs& a, bool on_gpu) {
  std::vector<const bench::Workload*> chosen;
  for (const auto& name : a.only) {
    const auto& w = bench::find_workload(name);
    if (on_gpu && w.cpu_only) {
      throw std::invalid_argument("zoo bench: " + name + " runs on the CPU only (leave out --device cuda)");
    }
    chosen.push_back(&w);
  }
  if (!a.only.empty()) return chosen;
  for (const auto& w : bench::workloads())
    if (w.default_run && !(on_gpu && w.cpu_only)) chosen.push_back(&w);  // a GPU run leaves the tokenizers out
  // Without GPT-2's files the default run leaves its row out, saying so; asked for, it fails.
  if (!on_gpu && !fs::exists(fs::path(a.gpt2_tokenizer) / "vocab.json")) {
    std::erase_if(chosen, [](const bench::Workload* w) { return w->name == "tokenize-gpt2"; });
    std::cerr << "zoo bench: no GPT-2 tokenizer in " << a.gpt2_tokenizer << ": tokenize-gpt2 left out\n";
  }
  // A CPU without bf16 arithmetic (AVX2 alone) multiplies bf16 ~100x slower than fp32 under
  // LibTorch 2.15, on one thread: gemm-bf16 alone took over 9 minutes on an AVX2 Zen 3. The
  // default run leaves the bf16 matmul and training rows out there, saying so; asked for, they run.
  if (!on_gpu) {
    const double speedup = measure_cpu_bf16_speedup();
    if (speedup < 0.5) {
      std::vector<std::string> left_out;
      std::erase_if(chosen, [&](const bench::Workload* w) {
        if (w->bf16_products) left_out.push_back(w->name);
        return w->bf16_products;
      });
      std::cerr << "zoo bench: bf16 matrix products run at " << bench::fixed(speedup, 2) << "x fp32's on this CPU: "
                << join(left_out, ", ") << " left out (--only runs them)\n";
    }
  }
  return chosen;
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
  if (!a.trace_dir.empty()) env.push_back("ZOO_BENCH_TRACE_DIR=" + a.trace_dir);
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

void print_row(const bench::Row& row, const json& zoo) {
  const json& r = row.fields;
  std::cout << std::left << std::setw(35) << r["name"].get<std::string>() << std::setw(10) << r["unit"].get<std::string>()
            << std::right << std::setw(10) << bench::fixed(zoo["value"].get<double>(), 1) << std::setw(10)
            << (r.contains("pytorch") ? bench::fixed(r["pytorch"].get<double>(), 1) : "") << std::setw(8)
            << (r.contains("ratio") ? bench::fixed(r["ratio"].get<double>(), 2) + "x" : "") << "  " << row.notes << std::endl;
  if (r.contains("profile")) print_profile(r["profile"]);
}

int run_bench(const BenchArgs& a) {
  const torch::Device device(a.device);
  const bool on_gpu = device.is_cuda();
  if (on_gpu && torch::cuda::device_count() == 0) {
    throw std::runtime_error("zoo bench --device cuda: no CUDA device (" + torch_description() + ")");
  }
  const auto chosen = chosen_workloads(a, on_gpu);
  if (!a.trace_dir.empty()) fs::create_directories(a.trace_dir);
  const std::string self = fs::read_symlink("/proc/self/exe").string();
  const int64_t threads = at::get_num_threads();
  const fs::path script = fs::path(ZOO_SOURCE_DIR) / "scripts" / "bench_pytorch.py";
  if (a.compare && !fs::exists(script)) throw std::runtime_error("zoo bench --compare: " + script.string() + " not found");
  // ZOO_MALLOC_DEFAULTS=1 keeps glibc's defaults, for zoo (configure_allocator) and PyTorch alike.
  const char* keep = std::getenv("ZOO_MALLOC_DEFAULTS");
  const bool tuned = keep == nullptr || std::string(keep) != "1";
  const std::vector<std::string> torch_env = pytorch_environment(a, device, threads, tuned);
  const fs::path llama_script = fs::path(ZOO_SOURCE_DIR) / "scripts" / "bench_llama_cpp.py";
  const fs::path llama_home = setup_cache() / "llama-cpp";
  if (a.llama_cpp && on_gpu) throw std::invalid_argument("zoo bench --llama-cpp: llama.cpp's rows run on the CPU");
  if (a.llama_cpp && !fs::exists(llama_home / ".version")) {
    throw std::runtime_error("zoo bench --llama-cpp: llama.cpp is not installed in " + llama_home.string() +
                             ": run scripts/install_llama_cpp.sh");
  }
  const std::vector<std::string> llama_env = {"ZOO_BENCH_THREADS=" + std::to_string(threads),
                                              "ZOO_LLAMA_CPP=" + llama_home.string(),
                                              "ZOO_GPT2_TOKENIZER=" + a.gpt2_tokenizer};
  const std::string steps = std::to_string(a.steps);
  if (!a.json_lines) print_header(a, device, threads, tuned);
  bench::MeasuredRows earlier;
  for (const auto* workload : chosen) {
    const std::string& name = workload->name;
    const json zoo =
        workload->family == bench::WorkloadFamily::kRing
            ? bench::run_ranks(self, name, bench::ring_workload(name).ranks, threads, steps)
            : bench::run_child({self, "--threads", std::to_string(threads), "bench", "--worker", name, "--steps", steps,
                                "--profile", std::to_string(a.profile), "--gpt2-tokenizer", a.gpt2_tokenizer,
                                "--device", device.str(), "--trace", a.trace_dir},
                               {});
    const json torch_result =
        a.compare && workload->pytorch_twin ? bench::run_child({a.python, script.string(), name, steps}, torch_env) : json();
    const json llama_result = a.llama_cpp && workload->llama_cpp_twin
                                  ? bench::run_child({a.python, llama_script.string(), name, steps}, llama_env)
                                  : json();
    const bench::Row row = bench::make_row(*workload, zoo, torch_result, earlier, on_gpu, llama_result);
    earlier[name] = zoo;
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
  cmd->add_flag("--llama-cpp", a->llama_cpp,
                "run the generate-* and prefill-* rows of gpt2-small and llama-0.5b in llama.cpp too, on the same "
                "threads (F32, BF16, Q8_0, Q4_0; scripts/install_llama_cpp.sh installs it)");
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
  cmd->add_option("--trace", a->trace_dir,
                  "write one more step of each training and generate-* row as a Kineto trace into this folder "
                  "(zoo-ROW.json, and pytorch-ROW.json with --compare) for scripts/trace_summary.py");
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
