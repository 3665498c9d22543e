#include "bench/serve_load.h"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <random>
#include <stdexcept>
#include <thread>

#include <httplib.h>
#include <nlohmann/json.hpp>

namespace zoo::bench {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

double since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// One streamed request: its events parsed as they arrive.
RequestTimes send(httplib::Client& client, const LoadSpec& spec, const std::string& model,
                  const std::vector<int64_t>& prompt, std::vector<double>& gaps, const std::string& what) {
  json body = {{"prompt", prompt}, {"max_tokens", spec.max_tokens}, {"temperature", 0}, {"stream", true},
               {"stream_options", {{"include_usage", true}}}};
  if (!model.empty()) body["model"] = model;
  if (spec.response_format.empty()) body["ignore_eos"] = true;
  else body["response_format"] = json::parse(spec.response_format);
  RequestTimes times;
  std::string pending;
  bool done = false;
  const auto start = Clock::now();
  double last = -1;
  httplib::Request request;
  request.method = "POST";
  request.path = "/v1/completions";
  request.body = body.dump();
  request.set_header("Content-Type", "application/json");
  if (!spec.api_key.empty()) request.set_header("Authorization", "Bearer " + spec.api_key);
  request.content_receiver = [&](const char* data, size_t size, uint64_t, uint64_t) {
    pending.append(data, size);
    for (size_t end; (end = pending.find("\n\n")) != std::string::npos;) {
      const std::string event = pending.substr(0, end);
      pending.erase(0, end + 2);
      if (event.rfind("data: ", 0) != 0) continue;
      if (event == "data: [DONE]") {
        done = true;
        continue;
      }
      const json chunk = json::parse(event.substr(6));
      if (chunk.contains("usage") && chunk["usage"].is_object()) times.tokens = chunk["usage"]["completion_tokens"];
      if (!chunk.contains("choices") || chunk["choices"].empty()) continue;
      const std::string text = chunk["choices"][0].value("text", "");
      if (text.empty()) continue;
      const double now = since(start);
      if (last < 0) times.ttft = now;
      else gaps.push_back(now - last);
      last = now;
      times.text += text;
    }
    return true;
  };
  const auto result = client.send(request);
  times.latency = since(start);
  if (!result) throw std::runtime_error(what + ": " + httplib::to_string(result.error()));
  if (result->status != 200) throw std::runtime_error(what + ": HTTP " + std::to_string(result->status) + " " + result->body);
  if (!done || times.tokens == 0) throw std::runtime_error(what + ": the stream ended without [DONE] and its usage");
  return times;
}

}  // namespace

LoadResult run_load(const std::string& host, int port, const LoadSpec& spec) {
  LoadResult out;
  out.requests.resize(static_cast<size_t>(spec.streams * spec.requests_per_stream));
  std::vector<std::vector<double>> gaps(spec.streams);
  std::vector<std::string> errors(spec.streams);
  std::mt19937_64 rng(static_cast<uint64_t>(spec.seed));
  std::vector<std::vector<int64_t>> prompts(out.requests.size());
  for (auto& p : prompts) {
    for (int64_t i = 0; i < spec.prompt_tokens; ++i) p.push_back(static_cast<int64_t>(rng() % spec.vocab_size));
    std::copy_n(prompts[0].begin(), std::min(spec.shared_prefix_tokens, spec.prompt_tokens), p.begin());
  }
  const auto start = Clock::now();
  std::vector<std::thread> threads;
  for (int64_t s = 0; s < spec.streams; ++s) {
    threads.emplace_back([&, s] {
      try {
        httplib::Client client(host, port);
        client.set_read_timeout(600);
        for (int64_t r = 0; r < spec.requests_per_stream; ++r) {
          const size_t i = static_cast<size_t>(s * spec.requests_per_stream + r);
          const std::string model = spec.models.empty() ? "" : spec.models[static_cast<size_t>(s) % spec.models.size()];
          out.requests[i] = send(client, spec, model, prompts[i], gaps[s],
                                 "stream " + std::to_string(s) + " request " + std::to_string(r));
        }
      } catch (const std::exception& e) {
        errors[s] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  out.seconds = since(start);
  for (const auto& e : errors) {
    if (!e.empty()) throw std::runtime_error("load generator: " + e);
  }
  for (const auto& r : out.requests) out.tokens += r.tokens;
  for (const auto& g : gaps) out.token_gaps.insert(out.token_gaps.end(), g.begin(), g.end());
  return out;
}

double quantile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const double at = q * static_cast<double>(values.size() - 1);
  const size_t below = static_cast<size_t>(at);
  const size_t above = std::min(below + 1, values.size() - 1);
  return values[below] + (at - static_cast<double>(below)) * (values[above] - values[below]);
}

}  // namespace zoo::bench
