#pragma once
// Data-parallel training on PyTorch's distributed engine (c10d). Ranks meet through a TCPStore
// at MASTER_ADDR:MASTER_PORT (the env:// rendezvous torchrun sets up), talk through
// ProcessGroupGloo on CPU (ProcessGroupNCCL on CUDA where LibTorch was built with it), start
// from rank 0's parameters, and all-reduce gradients in buckets while backward is still running:
// a hook on each parameter's gradient accumulator marks it ready, and a bucket whose parameters
// are all ready is reduced asynchronously, buckets always in the same order on every rank.
//
// Failures name the rank: each rank bumps a counter in the store every second, and when a
// collective fails or times out, the ranks whose counter stopped moving are reported.

#include <chrono>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <torch/types.h>

#include "train/trainer_state.h"

namespace zoo {

struct RunConfig;

class RingExchange;  // kernels/ring_attention.h

struct DistributedEnv {
  int64_t rank = 0, world_size = 1;
  int64_t local_rank = 0, local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int64_t master_port = 29500;
  bool agent_store = false;  // torchrun's agent hosts the store; every rank is a client
  std::string store_prefix = "zoo/0";  // one namespace per torchrun restart
  bool enabled() const { return world_size > 1; }
};

// Reads RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT and torchrun's
// TORCHELASTIC_USE_AGENT_STORE / TORCHELASTIC_RESTART_COUNT. No WORLD_SIZE (or 1) is a single
// process. A malformed, out-of-range (WORLD_SIZE above 65536, LOCAL_WORLD_SIZE above WORLD_SIZE,
// LOCAL_RANK not below LOCAL_WORLD_SIZE) or inconsistent value is an error naming the variable,
// before any connection is tried. LOCAL_RANK, when unset, is RANK % LOCAL_WORLD_SIZE.
DistributedEnv distributed_env();

// A collective or the rendezvous failed; the message names the ranks that stopped responding.
class DistributedError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct DataParallelOptions {
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};  // rendezvous and each collective
  double bucket_mb = 8.0;  // gradient bytes reduced together
};

class DataParallel {
 public:
  // Joins the process group: waits for every rank up to the timeout.
  DataParallel(const DistributedEnv& env, const torch::Device& device, DataParallelOptions options = {});
  ~DataParallel();
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  const DistributedEnv& env() const { return env_; }
  int64_t rank() const { return env_.rank; }
  int64_t world_size() const { return env_.world_size; }
  std::string backend() const;

  // Rank 0's values into `tensors` on every rank (in place).
  void broadcast(const std::vector<torch::Tensor>& tensors);
  // Element-wise sum over ranks of a small tensor, in place; returns it.
  torch::Tensor all_reduce_sum(torch::Tensor values);
  void barrier();
  // Rank 0's `value` on every rank (through the store: text, tokenizers).
  std::string share(const std::string& key, const std::string& value);

  // Gradient averaging for `params` (hooks on their gradient accumulators).
  void attach(const std::vector<torch::Tensor>& params);
  // Context parallelism: the ranks in groups of `size` consecutive ranks (group rank / size, place
  // in its ring rank % size), each group a ring for kernels/ring_attention.h on a process group
  // of its own, so that its transfers never queue behind the gradient all-reduces. Every rank
  // calls it once, together. A transfer that fails or times out names the ranks that stopped.
  std::shared_ptr<RingExchange> ring(int64_t size);

  // Off for accumulation micro-steps: their backward passes communicate nothing.
  void set_sync(bool on) { sync_ = on; }
  // After the syncing backward: reduces what is left, waits, and writes the averages into the
  // gradients. A parameter no rank produced a gradient for keeps an undefined gradient.
  void finish_gradients();
  // Forgets a syncing backward that did not happen (a skipped step).
  void discard_gradients();

  // Throws DistributedError: `what` failed with `error`, and which ranks stopped responding.
  [[noreturn]] void fail(const std::string& what, const std::exception& error);

 private:
  struct Impl;
  void on_gradient_ready(size_t index);
  void launch_ready_buckets();

  DistributedEnv env_;
  DataParallelOptions options_;
  std::unique_ptr<Impl> impl_;
  bool sync_ = false;
};

// This process's place in the data-parallel group the environment (torchrun) starts, joined
// with `options` on the run's device (a CUDA run: its local rank's GPU); nullptr when the
// environment starts none. The run config's parallel sizes are checked against the world first,
// before the processes wait for each other.
std::unique_ptr<DataParallel> join_data_parallel(const RunConfig& config, DataParallelOptions options);

// One micro-step's loss as the whole group computes it: the global batch's mean over its
// targets, as one process with the global batch would. Ranks with more targets (MLM masks vary)
// weigh more: `share` is this rank's weight in that mean (backward scales its loss by it). One
// small all-reduce per micro-step, which also makes a non-finite loss on any rank everyone's
// (value is then NaN). Without a group (nullptr) the local loss is returned as it is. Nothing is
// read back to the host: the values stay tensors on the loss's device.
struct GlobalLoss {
  torch::Tensor value;   // float64 scalar: the global mean loss (non-finite when any rank's was)
  torch::Tensor share;   // float64 scalar: this rank's weight (undefined without a group: 1)
  torch::Tensor tokens;  // float64 scalar: input tokens of the global micro-batch (undefined without a group)
};
GlobalLoss reduce_loss(DataParallel* parallel, const torch::Tensor& loss, int64_t targets, int64_t tokens);

// A context-parallel evaluation as one process would score it: each rank scored its chunks of
// every sequence, so the sums run over the whole world, in which each data-parallel group (of
// `groups`), having scored the same sequences, counts once.
EvalResult reduce_ring_evaluation(DataParallel& parallel, EvalResult local, int64_t groups);

}  // namespace zoo
