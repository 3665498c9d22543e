#pragma once
// zoo bench's load generator for OpenAI-compatible servers (zoo serve, and the PyTorch +
// transformers baseline scripts/bench_pytorch.py runs): concurrent streams, each sending its
// requests one after another to POST /v1/completions with stream: true, reading the server-sent
// events as they arrive. What it measures: tokens generated (the usage the server reports), the
// wall time, each request's time to first token and latency, and the gaps between a stream's
// tokens.

#include <cstdint>
#include <string>
#include <vector>

namespace zoo::bench {

struct LoadSpec {
  int64_t streams = 1;              // concurrent clients
  int64_t requests_per_stream = 1;  // sent one after another by each
  int64_t prompt_tokens = 16;       // token-id prompts, different per request
  int64_t max_tokens = 64;          // generated per request (ignore_eos: exactly this many)
  int64_t vocab_size = 50257;       // prompts' ids are below it
  int64_t seed = 0;                 // the prompts' ids
  int64_t shared_prefix_tokens = 0;  // every prompt begins with the first's this many (a conversation so far)
  // The requests' response_format (JSON), answers held to its grammar and ending when their value
  // does (no ignore_eos); empty: free text of exactly max_tokens.
  std::string response_format;
  std::string api_key;
  // The "model" stream s names: models[s % size] (a served LoRA adapter); empty: none.
  std::vector<std::string> models;
};

struct RequestTimes {
  double ttft = 0;     // seconds from sending to the first text
  double latency = 0;  // seconds from sending to [DONE]
  int64_t tokens = 0;  // the usage's completion_tokens
  std::string text;
};

struct LoadResult {
  double seconds = 0;                 // wall time of the whole load
  int64_t tokens = 0;                 // completion tokens of every request
  std::vector<RequestTimes> requests;  // stream-major: stream s's requests are s * requests_per_stream ...
  std::vector<double> token_gaps;     // seconds between consecutive text events of a request
};

// Runs `spec` against the server at host:port; throws std::runtime_error naming the request that
// failed (an HTTP error, a broken stream, no usage).
LoadResult run_load(const std::string& host, int port, const LoadSpec& spec);

// The q-quantile (0..1) of `values` by linear interpolation, as numpy.quantile's default; 0 when
// empty.
double quantile(std::vector<double> values, double q);

}  // namespace zoo::bench
