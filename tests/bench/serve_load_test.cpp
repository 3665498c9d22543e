#include "bench/serve_load.h"

#include <atomic>
#include <future>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "serve/server.h"
#include "test_util.h"

namespace zoo::bench {
namespace {

// numpy.quantile's default (linear interpolation between the closest ranks), worked by hand.
TEST(ServeLoad, QuantileInterpolatesBetweenRanks) {
  EXPECT_DOUBLE_EQ(quantile({}, 0.5), 0.0);
  EXPECT_DOUBLE_EQ(quantile({7}, 0.99), 7.0);
  EXPECT_DOUBLE_EQ(quantile({4, 1, 3, 2}, 0.5), 2.5);
  EXPECT_DOUBLE_EQ(quantile({1, 2, 3, 4, 5}, 0.99), 4.96);  // 4 + 0.96 * (5 - 4)
  EXPECT_DOUBLE_EQ(quantile({10, 20}, 0.0), 10.0);
}

// The load generator against zoo serve in this process: every request's tokens come back (with
// ignore_eos, exactly max_tokens each), each stream's requests in turn, and the times are
// ordered (first text before the end).
TEST(ServeLoad, CountsEveryStreamsTokensAndTimes) {
  torch::manual_seed(1);
  Model model = build_model(parse_config(
      "family: gpt\nvocab_size: 97\nd_model: 32\nn_layers: 1\nn_heads: 2\nd_ff: 64\nmax_positions: 64\n"));
  model.module()->eval();
  ServeOptions options;
  options.port = 0;
  options.max_batch = 2;
  options.model_name = "tiny";
  std::promise<int> bound;
  std::atomic<bool> stop{false};
  std::thread server([&] {
    ServeHooks hooks;
    hooks.listening = [&](int port) { bound.set_value(port); };
    hooks.stop = [&] { return stop.load(); };
    std::ostringstream log;
    serve(model, testing::shared_tokenizer(), options, log, hooks);
  });
  const int port = bound.get_future().get();
  LoadSpec spec;
  spec.streams = 3;  // one more than the batch: a stream waits in the queue
  spec.requests_per_stream = 2;
  spec.prompt_tokens = 5;
  spec.max_tokens = 6;
  spec.vocab_size = 97;
  const auto result = run_load("127.0.0.1", port, spec);
  stop = true;
  server.join();
  EXPECT_EQ(result.tokens, 3 * 2 * 6);
  ASSERT_EQ(result.requests.size(), 6u);
  for (const auto& r : result.requests) {
    EXPECT_EQ(r.tokens, 6);
    EXPECT_GT(r.ttft, 0);
    EXPECT_LE(r.ttft, r.latency);
  }
  EXPECT_GT(result.seconds, 0);
  EXPECT_FALSE(result.token_gaps.empty());
  // A server that is not there: an error naming the request.
  EXPECT_THROW(run_load("127.0.0.1", port, spec), std::runtime_error);
}

}  // namespace
}  // namespace zoo::bench
