#pragma once
// zoo bench's workloads: each runs in the calling process and returns its result as one JSON
// object (unit, value, and what the command line derives its notes from). zoo bench runs each in
// a fresh process (`zoo bench --worker NAME`), so that a row's peak memory is its own.
//
// Workloads (fp32 unless named -bf16; bf16 is mixed precision under LibTorch's CPU autocast,
// as PyTorch's torch.autocast("cpu", torch.bfloat16)):
//   gemm, gemm-bf16      2048^3 matmul: the FLOP/s that MFU is measured against
//   bandwidth            512 MiB copies: the bytes/s that bounds batch-1 decoding
//   train-gpt2-small     forward + backward + AdamW, B=4, T=256 (on a GPU B=8, T=1024, the size
//                        that keeps a GPU busy; the LoRA rows likewise)
//   train-gpt-tiny       the same for gpt-tiny, B=16, T=128 (the demo's shape)
//   train-*-bf16         the same two in bf16 mixed precision
//   finetune-qwen2-0.5b-lora[-bf16], finetune-qwen2-0.5b-qlora-int8|int4   Qwen2-0.5B's shape,
//                        random weights, LoRA rank 8 on q and v at B=2, T=256; QLoRA's rows
//                        in bf16 on a base of int8 or int4 weights. Run when named.
//   finetune-gpt2-small-lora   train-gpt2-small's step with LoRA rank 8 on q and v, the base
//                        frozen (compared with train-gpt2-small, full fine-tuning); -bf16 the
//                        same in bf16 (the frozen projections held in bf16, as the trainer
//                        does); -recompute adds activation checkpointing
//   train-gpt2-small-1024, train-gpt2-small-1024-recompute   B=1, T=1024, plain and with
//                        activation checkpointing: what the first forward keeps for backward,
//                        and the step time
//   forward-bert-base    inference, B=8, T=128
//   generate-gpt2-small  batch 1, 16-token prompt, 128 new tokens, greedy, KV cache
//   generate-gpt2-small-bf16   the same with bf16 weights (PyTorch: the model .to(torch.bfloat16))
//   generate-gpt2-small-int8|int4   the same with weight-only int8 or int4 (groups of 32) in
//                        every product and the tied head (PyTorch: torchao's Int8WeightOnlyConfig;
//                        ATen's _weight_int4pack_mm_for_cpu, torchao's int4 running on GPUs only).
//                        Run when named.
//   prefill-gpt2-small[-bf16|-int8|-int4]   a 128-token prompt and its next token: prompt tokens/s.
//                        Run when named.
//   generate-llama-0.5b[-bf16|-int8|-int4], prefill-llama-0.5b[...]   the same of a 0.5B LLaMA:
//                        Qwen2-0.5B's sizes without its q, k, v biases, random weights. Run when
//                        named.
//                        Every generate-/prefill- row of these two models runs in llama.cpp too
//                        with --llama-cpp (F32, BF16, Q8_0, Q4_0: scripts/bench_llama_cpp.py).
//   train-qwen3-0.6b, generate-qwen3-0.6b   Qwen3-0.6B's shapes, random weights: a training step
//                        at B=1, T=256, and batch-1 decoding of 64 tokens after 16; PyTorch's
//                        side is transformers' Qwen3ForCausalLM (eager, sdpa). Run when named.
//   tokenize-zoo         encoding 4 MB of the default corpus, line by line, with a zoo
//                        SentencePiece unigram tokenizer of 8192 pieces (trained once, cached)
//   tokenize-gpt2        the same through GPT-2's byte-level BPE (vocab.json + merges.txt)
//   long-KIND-T          one training step of gpt-tiny's sizes (4 layers, 4 heads of 64; with
//                        -gpt2, gpt2-small's: 12 layers, 12 heads of 64), batch 1, T = 1024 ..
//                        16384 tokens, KIND the attention's terms: learned (plain causal), alibi,
//                        relative (T5's buckets), window (RoPE, w = 256); attention_backend auto;
//                        or linear (elu1) and gla, linear and gated linear attention in every
//                        layer (layers/linear_attention.h, learned positions; no PyTorch side).
//                        With -math last: the same on the (T, T) path. Run when named (--only):
//                        at 16k a step takes minutes here.
//   decode-KIND-C        batch-1 greedy decoding at a context of C = 512, 4096 or 32768 tokens,
//                        softmax attention against gated linear attention (gla) of gpt-tiny's
//                        sizes: the cache filled to C, then 64 steps. Run when named.
//   serve-gpt2-small-S   zoo serve (in this process, continuous batching, 16 rows) of gpt2-small
//                        with random weights under S = 1, 8 or 16 concurrent streaming clients
//                        (bench/serve_load.h): 16-token prompts, 64 tokens each, greedy; tokens/s
//                        of all streams together, and per-token latency p50/p99. PyTorch's side
//                        is transformers' GPT2LMHeadModel behind a server that answers one
//                        request at a time, measured by the same load generator. Run when named.
//   serve-gpt2-small-W-S the same with W = bf16 weights, int8 or int4 (quantized at load), or
//                        bf16-int8 or bf16-int4 (those under bf16 activations), for S = 8 or 16.
//                        Run when named.
//   serve-ttft-gpt2-small   time to first token of a 128-token prompt sent half a second into 8
//                        streams' decoding (64 tokens each), and on the idle server (a field);
//                        the median of 3 rounds. Run when named.
//   ring-KIND-T-N        long-KIND-T's step with the sequence split over N = 2 or 4 ranks
//                        (context parallelism, kernels/ring_attention.h), each rank a worker
//                        process of its own (zoo bench starts them, with the environment a
//                        multi-process launch sets) and gradients averaged as in training; its
//                        peak memory is the largest rank's. Run when named.
//
// On a GPU the model, matmul and copy workloads run there, each timing ending in a device
// synchronisation, and peak memory is the caching allocator's peak rather than resident memory.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <c10/core/Device.h>
#include <nlohmann/json.hpp>

#include "kernels/ring_attention.h"
#include "models/config.h"
#include "models/model.h"
#include "train/distributed.h"
#include "train/precision.h"
#include "train/run_config.h"

namespace zoo::bench {

// What run_workload passes on to the workload it runs.
struct WorkloadOptions {
  int64_t steps = 0;         // measured repetitions; 0 = the workload's own default
  int64_t profile_rows = 0;  // training: the ops to list from one more, profiled step; 0 = none
  // Training and generate-* rows: a folder where one more step (a training step, or the row's
  // whole generation) is written as a Kineto trace, zoo-ROW.json; empty: none.
  std::string trace_dir;
  std::string gpt2_tokenizer;  // tokenize-gpt2: the directory with vocab.json and merges.txt
  c10::Device device = c10::Device(c10::kCPU);
  // The serve rows: load the OpenAI-compatible server at HOST:PORT instead of starting zoo's
  // (PyTorch's baseline, scripts/bench_pytorch.py).
  std::string serve_target;
};

// Which family a workload belongs to: what its row reports and how its notes read.
enum class WorkloadFamily {
  kMachine,       // gemm, gemm-bf16, bandwidth: the rates later rows are measured against
  kTraining,      // train-*, finetune-*: a training step
  kInference,     // forward-bert-base
  kGeneration,    // generate-*: batch-1 decoding
  kTokenizer,     // tokenize-*: MB/s of text
  kLongSequence,  // long-KIND-T[-gpt2][-math]
  kDecode,        // decode-KIND-C
  kServe,         // serve-*: zoo serve under concurrent clients
  kRing,          // ring-KIND-T-N: context parallelism over N worker processes
};

// What a row is compared with, among the rows measured before it in the same run
// (Workload::baseline_rows names them; bench/report.h computes the ratios).
enum class Baseline {
  kNone,
  kFullFineTuning,  // LoRA against full fine-tuning in the same precision: tokens/s, peak memory
  kPlainTraining,   // activation checkpointing against plain training: activations, step time
  kMathPath,        // zoo's attention path against its own (T, T) path: tokens/s, peak memory
  kOneStream,       // continuous batching against one stream: tokens/s
  kOneProcess,      // N ranks against one process holding the sequence, then one holding T / N
  kZooTokenizer,    // GPT-2's BPE against zoo's SentencePiece, per byte
  kDenseSameActive, // a mixture of experts against the dense model of its active size: step time
};

// One row of zoo bench.
struct Workload {
  std::string name;
  WorkloadFamily family = WorkloadFamily::kMachine;
  std::function<nlohmann::json(const WorkloadOptions&)> run;  // returns the row's fields (run_workload)
  bool default_run = true;        // measured by a run without --only (else run when named)
  bool pytorch_twin = false;      // scripts/bench_pytorch.py runs it too (--compare)
  bool llama_cpp_twin = false;    // scripts/bench_llama_cpp.py runs it in llama.cpp too (--llama-cpp)
  bool cpu_only = false;          // refused with --device cuda
  bool bf16_products = false;     // left out of a default run where bf16 products are slow
  Baseline baseline = Baseline::kNone;
  std::vector<std::string> baseline_rows;  // the rows of `baseline`, measured before this one
  std::string matmul_row;         // the gemm row its MFU is measured against, if it reports FLOPs
  bool bandwidth_bound = false;   // decoding: measured against the bound the copy rate sets
};

// Every workload, in the order a full run measures them (a row after the rows it compares
// with); the families of many rows (long-*, decode-*, serve-*, ring-*) generated by code.
const std::vector<Workload>& workloads();

// The workload called `name`; std::invalid_argument listing the known ones when there is none.
const Workload& find_workload(const std::string& name);

// Runs the workload `name` and returns its row: the workload's own fields, its name, and
// peak_rss_mb (on a GPU the caching allocator's peak).
nlohmann::json run_workload(const std::string& name, const WorkloadOptions& options);

// `name`'s shipped config with dropout off, so both sides do the same work, and `overrides`
// ("key=value") applied.
ModelConfig bench_config(const std::string& name, const std::vector<std::string>& overrides = {});

// A Qwen3-0.6B whose feed-forwards are mixtures of 4 experts of half its width, each token
// routed to 2: the dense model's active parameters (and its attention) in a mixture of twice its
// feed-forward weights, so that its step compares with the dense step, and with transformers'
// Qwen3MoeForCausalLM of the same sizes. (8 experts would be 1.39 B parameters, whose AdamW
// training needs 22 GB: more than this project's 24 GB machines leave.)
const std::vector<std::string>& qwen3_moe_overrides();

// The parameters a token's forward multiplies by: all but the learned position table, which is
// looked up (nanoGPT's count), and the experts it is not routed to.
int64_t matmul_parameters(const Model& model);

// Training FLOPs per token at length `t`: 6N for the weights' forward and two backward matmuls
// (N = matmul_parameters), plus 12·L·T·d for attention's scores and weighted sums (PaLM,
// appendix B; nanoGPT's estimate_mfu). With `frozen_base` (LoRA) the frozen weights need no
// weight gradient: 4N.
double training_flops_per_token(int64_t matmul_parameters, const ModelConfig& config, int64_t t, bool frozen_base);

// One training step's shape: a (b, t) batch of random tokens, the causal LM loss, AdamW.
struct TrainWorkload {
  ModelConfig config;  // bench_config's, or any GPT config
  int64_t b = 0, t = 0;
  Precision precision = Precision::kFp32;
  int64_t lora_rank = 0;   // > 0: LoRA on q and v, the rest frozen
  // QLoRA: the frozen base's linear layers and token embedding in int8 or int4 (groups of 32).
  std::optional<WeightFormat> quantized;
  bool recompute = false;  // activation checkpointing
  int64_t warmup = 2;      // steps before the timed ones
  bool count_ops = false;  // one more step under LibTorch's profiler: its ATen ops and host synchronisations
  // What the step trains: a causal LM (GPT configs), or a masked LM (the long encoder rows: the
  // random batch's labels at every position).
  Objective objective = Objective::kCausalLM;
  // Context parallelism: this rank's ring and the group that averages the gradients (the batch
  // is then each rank's zigzag share of the sequence).
  std::shared_ptr<RingExchange> ring;
  DataParallel* parallel = nullptr;
};

// A long-KIND-T row's step: its config and length.
TrainWorkload long_sequence_workload(const std::string& name);

// The decode-KIND-C rows (KIND softmax or gla, C = 512, 4096, 32768): gpt-tiny's sizes, batch 1,
// 64 greedy steps after a cache filled to a context of C tokens; softmax attention's steps read
// every cached key, gated linear attention's one state per layer.
nlohmann::json decode_workload(const std::string& name, int64_t steps, const c10::Device& device);

// A ring-KIND-T-N row: the long-KIND-T row it splits and its number of ranks.
struct RingWorkload {
  std::string single;  // long-KIND-T: the same step in one process
  int64_t ranks = 2;
};
RingWorkload ring_workload(const std::string& name);

// The median of `steps` (0: 5) training steps after the warm-up steps: tokens/s, step_ms, the
// forward/backward/optimizer split, what the first forward keeps for backward (activation_mb),
// trainable_parameters, flops_per_token, and with `profile_rows` > 0 the ops with the most self
// time in one more step (the first entry the whole step). With `trace`, one more step is written
// there as a Kineto trace (core/op_profile.h: write_trace).
nlohmann::json train_workload(const TrainWorkload& workload, int64_t steps, int64_t profile_rows,
                              const c10::Device& device, const std::string& trace = {});

// Where a row's trace goes under WorkloadOptions::trace_dir: DIR/zoo-ROW.json, or empty without one.
std::string trace_path(const WorkloadOptions& options, const std::string& row);

}  // namespace zoo::bench
