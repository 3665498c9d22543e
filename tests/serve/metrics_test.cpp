#include "serve/metrics.h"

#include <gtest/gtest.h>

namespace zoo {
namespace {

// Prometheus' histogram: buckets cumulative, le inclusive, +Inf the count.
TEST(Histogram, CumulativeBucketsSumAndCount) {
  Histogram h({0.1, 1.0});
  for (double v : {0.05, 0.1, 0.5, 3.0}) h.observe(v);
  EXPECT_EQ(h.render("x"),
            "x_bucket{le=\"0.1\"} 2\n"
            "x_bucket{le=\"1\"} 3\n"
            "x_bucket{le=\"+Inf\"} 4\n"
            "x_sum 3.65\n"
            "x_count 4\n");
}

TEST(ServerMetrics, RendersEveryFamily) {
  ServerMetrics m;
  m.request("/v1/completions", 200);
  m.request("/v1/completions", 200);
  m.request("/v1/completions", 400);
  m.tokens(10, 4);
  m.tokens(3, 2);
  m.batch(2, 5, 8);
  m.time_to_first_token(0.02);
  m.sequence_failed();
  m.connections({.open = 31, .refused = 2, .timed_out = 3, .idle_closed = 4});
  m.lora_adapters(3, 4096);
  EXPECT_EQ(m.sequences_failed(), 1);
  EXPECT_EQ(m.prompt_tokens(), 13);
  EXPECT_EQ(m.completion_tokens(), 6);
  const auto text = m.render();
  for (const auto* line : {"zoo_requests_total{endpoint=\"/v1/completions\",status=\"200\"} 2\n",
                           "zoo_requests_total{endpoint=\"/v1/completions\",status=\"400\"} 1\n",
                           "zoo_prompt_tokens_total 13\n", "zoo_completion_tokens_total 6\n", "zoo_queue_length 2\n",
                           "zoo_batch_running 5\n", "zoo_sequences_failed_total 1\n", "zoo_batch_slots 8\n",
                           "zoo_time_to_first_token_seconds_count 1\n",
                           "zoo_time_to_first_token_seconds_bucket{le=\"0.025\"} 1\n",
                           "zoo_batch_occupancy_bucket{le=\"4\"} 0\n", "zoo_batch_occupancy_bucket{le=\"8\"} 1\n",
                           "# TYPE zoo_time_per_output_token_seconds histogram\n",
                           "# TYPE zoo_connections_open gauge\nzoo_connections_open 31\n",
                           "# TYPE zoo_connections_refused_total counter\nzoo_connections_refused_total 2\n",
                           "zoo_requests_timed_out_total 3\n", "zoo_idle_connections_closed_total 4\n",
                           "# TYPE zoo_lora_adapters gauge\nzoo_lora_adapters 3\n", "zoo_lora_adapter_bytes 4096\n"}) {
    EXPECT_NE(text.find(line), std::string::npos) << line;
  }
}

}  // namespace
}  // namespace zoo
