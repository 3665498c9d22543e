#include "serve/metrics.h"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace zoo {
namespace {

std::string number(double x) {
  if (std::isinf(x)) return x > 0 ? "+Inf" : "-Inf";
  std::ostringstream out;
  out.precision(9);
  out << x;
  return out.str();
}

}  // namespace

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double value) {
  const auto it = std::lower_bound(bounds_.begin(), bounds_.end(), value);  // first bound >= value: le
  ++counts_[it - bounds_.begin()];
  ++count_;
  sum_ += value;
}

std::string Histogram::render(const std::string& name) const {
  std::ostringstream out;
  int64_t cumulative = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cumulative += counts_[i];
    const std::string le = i < bounds_.size() ? number(bounds_[i]) : "+Inf";
    out << name << "_bucket{le=\"" << le << "\"} " << cumulative << "\n";
  }
  out << name << "_sum " << number(sum_) << "\n" << name << "_count " << count_ << "\n";
  return out.str();
}

ServerMetrics::ServerMetrics()
    : ttft_({0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}),
      tpot_({0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}),
      latency_({0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120}),
      occupancy_({1, 2, 4, 8, 16, 32, 64, 128}) {}

void ServerMetrics::request(const std::string& endpoint, int status) {
  std::lock_guard lock(mutex_);
  ++requests_[{endpoint, status}];
}

void ServerMetrics::tokens(int64_t prompt, int64_t completion) {
  std::lock_guard lock(mutex_);
  prompt_tokens_ += prompt;
  completion_tokens_ += completion;
}

void ServerMetrics::time_to_first_token(double seconds) {
  std::lock_guard lock(mutex_);
  ttft_.observe(seconds);
}

void ServerMetrics::time_per_output_token(double seconds) {
  std::lock_guard lock(mutex_);
  tpot_.observe(seconds);
}

void ServerMetrics::request_latency(double seconds) {
  std::lock_guard lock(mutex_);
  latency_.observe(seconds);
}

void ServerMetrics::sequence_failed() {
  std::lock_guard lock(mutex_);
  ++sequences_failed_;
}

void ServerMetrics::batch(int64_t queued, int64_t running, int64_t slots) {
  std::lock_guard lock(mutex_);
  queued_ = queued, running_ = running, slots_ = slots;
  if (running > 0) occupancy_.observe(static_cast<double>(running));
}

void ServerMetrics::prefix_cache(int64_t lookup_tokens, int64_t hit_tokens, int64_t evicted_blocks, int64_t bytes,
                                 int64_t blocks) {
  std::lock_guard lock(mutex_);
  prefix_lookup_tokens_ = lookup_tokens, prefix_hit_tokens_ = hit_tokens, prefix_evicted_blocks_ = evicted_blocks;
  prefix_bytes_ = bytes, prefix_blocks_ = blocks;
}

void ServerMetrics::connections(const ConnectionCounts& counts) {
  std::lock_guard lock(mutex_);
  connections_ = counts;
}

int64_t ServerMetrics::prompt_tokens() const {
  std::lock_guard lock(mutex_);
  return prompt_tokens_;
}

int64_t ServerMetrics::completion_tokens() const {
  std::lock_guard lock(mutex_);
  return completion_tokens_;
}

int64_t ServerMetrics::sequences_failed() const {
  std::lock_guard lock(mutex_);
  return sequences_failed_;
}

void ServerMetrics::lora_adapters(int64_t count, int64_t bytes) {
  std::lock_guard lock(mutex_);
  lora_adapters_ = count, lora_bytes_ = bytes;
}

std::string ServerMetrics::render() const {
  std::lock_guard lock(mutex_);
  std::ostringstream out;
  out << "# HELP zoo_requests_total HTTP requests answered, by endpoint and status.\n"
      << "# TYPE zoo_requests_total counter\n";
  for (const auto& [key, count] : requests_) {
    out << "zoo_requests_total{endpoint=\"" << key.first << "\",status=\"" << key.second << "\"} " << count << "\n";
  }
  out << "# HELP zoo_prompt_tokens_total Prompt tokens of completed and cancelled requests.\n"
      << "# TYPE zoo_prompt_tokens_total counter\nzoo_prompt_tokens_total " << prompt_tokens_ << "\n"
      << "# HELP zoo_completion_tokens_total Tokens generated (the sum of the responses' usage.completion_tokens).\n"
      << "# TYPE zoo_completion_tokens_total counter\nzoo_completion_tokens_total " << completion_tokens_ << "\n"
      << "# HELP zoo_sequences_failed_total Sequences ended by an error (their request's others go on).\n"
      << "# TYPE zoo_sequences_failed_total counter\nzoo_sequences_failed_total " << sequences_failed_ << "\n"
      << "# HELP zoo_queue_length Sequences waiting for a slot.\n"
      << "# TYPE zoo_queue_length gauge\nzoo_queue_length " << queued_ << "\n"
      << "# HELP zoo_batch_running Sequences in the running batch.\n"
      << "# TYPE zoo_batch_running gauge\nzoo_batch_running " << running_ << "\n"
      << "# HELP zoo_batch_slots Slots of the running batch (--max-batch).\n"
      << "# TYPE zoo_batch_slots gauge\nzoo_batch_slots " << slots_ << "\n"
      << "# HELP zoo_prefix_cache_lookup_tokens_total Prompt tokens looked up in the prefix cache.\n"
      << "# TYPE zoo_prefix_cache_lookup_tokens_total counter\nzoo_prefix_cache_lookup_tokens_total "
      << prefix_lookup_tokens_ << "\n"
      << "# HELP zoo_prefix_cache_hit_tokens_total Prompt tokens found in the prefix cache, not read again.\n"
      << "# TYPE zoo_prefix_cache_hit_tokens_total counter\nzoo_prefix_cache_hit_tokens_total " << prefix_hit_tokens_
      << "\n"
      << "# HELP zoo_prefix_cache_evicted_blocks_total Blocks evicted from the prefix cache (least recently used).\n"
      << "# TYPE zoo_prefix_cache_evicted_blocks_total counter\nzoo_prefix_cache_evicted_blocks_total "
      << prefix_evicted_blocks_ << "\n"
      << "# HELP zoo_prefix_cache_bytes Bytes of keys and values the prefix cache holds (within --prefix-cache-mb).\n"
      << "# TYPE zoo_prefix_cache_bytes gauge\nzoo_prefix_cache_bytes " << prefix_bytes_ << "\n"
      << "# HELP zoo_prefix_cache_blocks Blocks of 32 prompt tokens the prefix cache holds.\n"
      << "# TYPE zoo_prefix_cache_blocks gauge\nzoo_prefix_cache_blocks " << prefix_blocks_ << "\n"
      << "# HELP zoo_lora_adapters LoRA adapters served beside the base (--lora, /v1/load_lora_adapter).\n"
      << "# TYPE zoo_lora_adapters gauge\nzoo_lora_adapters " << lora_adapters_ << "\n"
      << "# HELP zoo_lora_adapter_bytes Bytes of the served adapters' stacked weights.\n"
      << "# TYPE zoo_lora_adapter_bytes gauge\nzoo_lora_adapter_bytes " << lora_bytes_ << "\n"
      << "# HELP zoo_connections_open HTTP connections open.\n"
      << "# TYPE zoo_connections_open gauge\nzoo_connections_open " << connections_.open << "\n"
      << "# HELP zoo_connections_refused_total Connections refused with 503 at --max-connections, none being idle.\n"
      << "# TYPE zoo_connections_refused_total counter\nzoo_connections_refused_total " << connections_.refused << "\n"
      << "# HELP zoo_idle_connections_closed_total Idle keep-alive connections closed to make room for a new one.\n"
      << "# TYPE zoo_idle_connections_closed_total counter\nzoo_idle_connections_closed_total "
      << connections_.idle_closed << "\n"
      << "# HELP zoo_requests_timed_out_total Requests answered 408: not whole within --request-timeout.\n"
      << "# TYPE zoo_requests_timed_out_total counter\nzoo_requests_timed_out_total " << connections_.timed_out << "\n"
      << "# HELP zoo_batch_occupancy Sequences per decoding step.\n# TYPE zoo_batch_occupancy histogram\n"
      << occupancy_.render("zoo_batch_occupancy")
      << "# HELP zoo_time_to_first_token_seconds From a request's arrival to its first token.\n"
      << "# TYPE zoo_time_to_first_token_seconds histogram\n"
      << ttft_.render("zoo_time_to_first_token_seconds")
      << "# HELP zoo_time_per_output_token_seconds Between consecutive tokens of a sequence.\n"
      << "# TYPE zoo_time_per_output_token_seconds histogram\n"
      << tpot_.render("zoo_time_per_output_token_seconds")
      << "# HELP zoo_request_latency_seconds From a request's arrival to its last token.\n"
      << "# TYPE zoo_request_latency_seconds histogram\n"
      << latency_.render("zoo_request_latency_seconds");
  return out.str();
}

}  // namespace zoo
