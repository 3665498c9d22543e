#pragma once
// What zoo serve counts, in Prometheus' text exposition format (GET /metrics): requests by
// endpoint and status, prompt and completion tokens, the queue and the running batch, the HTTP
// front's connections, and histograms of time to first token, time per output token and
// whole-request latency. Thread-safe: HTTP threads and the scheduler record into it.

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "serve/http_server.h"

namespace zoo {

// A Prometheus histogram: cumulative bucket counts, their sum and count.
class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double value);
  // "NAME_bucket{le=...} N" lines, NAME_sum and NAME_count.
  std::string render(const std::string& name) const;
  int64_t count() const { return count_; }
  double sum() const { return sum_; }

 private:
  std::vector<double> bounds_;
  std::vector<int64_t> counts_;  // per bucket, not cumulative
  int64_t count_ = 0;
  double sum_ = 0;
};

class ServerMetrics {
 public:
  ServerMetrics();

  void request(const std::string& endpoint, int status);
  void tokens(int64_t prompt, int64_t completion);
  void time_to_first_token(double seconds);
  void time_per_output_token(double seconds);
  void request_latency(double seconds);
  // A sequence ended with an error (non-finite logits, a failed prefill, sampling that threw).
  void sequence_failed();
  // The scheduler's state after each step.
  void batch(int64_t queued, int64_t running, int64_t slots);
  // The prefix cache's totals (serve/prefix_cache.h): prompt tokens looked up and found cached,
  // blocks evicted, and the bytes and blocks it holds.
  void prefix_cache(int64_t lookup_tokens, int64_t hit_tokens, int64_t evicted_blocks, int64_t bytes, int64_t blocks);
  // Served LoRA adapters (serve/adapter_bank.h): how many, and the bytes of their stacks.
  void lora_adapters(int64_t count, int64_t bytes);
  // The HTTP front's connections, as it counts them (taken when /metrics is rendered).
  void connections(const ConnectionCounts& counts);

  int64_t prompt_tokens() const;
  int64_t completion_tokens() const;
  int64_t sequences_failed() const;
  std::string render() const;

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, int64_t> requests_;
  int64_t prompt_tokens_ = 0, completion_tokens_ = 0, sequences_failed_ = 0;
  int64_t queued_ = 0, running_ = 0, slots_ = 0;
  int64_t prefix_lookup_tokens_ = 0, prefix_hit_tokens_ = 0, prefix_evicted_blocks_ = 0, prefix_bytes_ = 0,
          prefix_blocks_ = 0;
  int64_t lora_adapters_ = 0, lora_bytes_ = 0;
  ConnectionCounts connections_;
  Histogram ttft_, tpot_, latency_, occupancy_;
};

}  // namespace zoo
