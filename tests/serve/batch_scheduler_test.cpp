#include "serve/batch_scheduler.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "inference/text_generation.h"
#include "test_util.h"

namespace zoo {
namespace {

const Tokenizer& tokenizer() { return testing::shared_tokenizer(); }

// A decoder, or an encoder-decoder (family t5 or transformer), from a tiny config.
Model tiny_model(const std::string& family, const std::vector<std::string>& overrides) {
  auto config = parse_config("family: " + family + R"(
vocab_size: 97
d_model: 32
n_layers: 2
n_heads: 4
d_ff: 64
max_positions: 64
dropout: 0.0
attention_dropout: 0.0
init_std: 0.2
)");
  for (const auto& o : overrides) apply_override(config, o);
  torch::manual_seed(5);
  Model model = build_model(config);
  model.module()->to(torch::kDouble);
  model.module()->eval();
  return model;
}

// A tiny GPT in float64, so that batching (other rows, other padding, another width of the
// shared axis) cannot turn a float rounding into a different token: every comparison is exact.
Model tiny_gpt(const std::vector<std::string>& overrides) { return tiny_model("gpt", overrides); }

struct Outcome {
  std::string text;
  std::string finish_reason;
  int64_t completion_tokens = 0;
};

// What one sequence alone gives through generate() (models/generation.h), as the scheduler
// reports it: the streamed text, why it ended, the tokens generated (an EOS counts). An
// encoder-decoder's text is its decoder's alone.
Outcome reference(Model& model, const SequenceRequest& r) {
  const auto result = model.gpt ? generate(model.gpt, {r.prompt}, r.options) : generate(model.seq2seq, {r.prompt}, r.options);
  StreamDecoder decoder(tokenizer(), model.gpt ? r.prompt : std::vector<int64_t>{});
  Outcome o;
  for (int64_t t : result.tokens[0]) o.text += decoder.add(t);
  o.finish_reason = result.finish_reasons[0] == "eos" ? "stop" : result.finish_reasons[0];
  o.completion_tokens = static_cast<int64_t>(result.tokens[0].size()) + (result.finish_reasons[0] == "eos" ? 1 : 0);
  return o;
}

// Reads a channel until `count` sequences have ended.
std::map<int64_t, Outcome> collect(ResponseChannel& channel, int64_t count) {
  std::map<int64_t, Outcome> out;
  int64_t ended = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (ended < count && std::chrono::steady_clock::now() < deadline) {
    for (auto& e : channel.wait(std::chrono::milliseconds(50))) {
      auto& o = out[e.index];
      o.text += e.text;
      if (e.finish_reason.empty()) continue;
      o.finish_reason = e.finish_reason;
      o.completion_tokens = e.completion_tokens;
      ++ended;
    }
  }
  EXPECT_EQ(ended, count) << "sequences still running after 120 s";
  return out;
}

SequenceRequest request(int64_t index, std::vector<int64_t> prompt, int64_t max_new_tokens,
                        const std::shared_ptr<ResponseChannel>& channel) {
  SequenceRequest r;
  r.index = index;
  r.prompt = std::move(prompt);
  r.options.max_new_tokens = max_new_tokens;
  r.options.eos_ids = {3};
  r.channel = channel;
  return r;
}

std::vector<int64_t> random_prompt(int64_t length, int64_t seed) {
  auto g = make_generator(static_cast<uint64_t>(seed));
  auto ids = torch::randint(4, 97, {length}, g, torch::kLong);
  return std::vector<int64_t>(ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + length);
}

struct Variant {
  const char* name;
  std::vector<std::string> overrides;
  std::string family = "gpt";
};

void PrintTo(const Variant& v, std::ostream* os) { *os << v.name; }

class BatchSchedulerTest : public ::testing::TestWithParam<Variant> {};

void expect_each_alone_under_concurrency(const Variant& variant, int64_t prefill_chunk);

// Continuous batching changes nothing a user sees: sequences that arrive while others run (more of
// them than rows, of different lengths, ending at different steps, rows reused) each give what
// they give alone, token for token; with prompts prefilled whole, and with a decoder's prompts of
// more than 7 tokens prefilled 7 a turn between the others' steps.
TEST_P(BatchSchedulerTest, GreedyUnderConcurrencyEqualsEachAlone) {
  for (const int64_t chunk : {int64_t{0}, int64_t{7}}) {
    SCOPED_TRACE(chunk == 0 ? "prompts whole" : "prompts in chunks of 7");
    expect_each_alone_under_concurrency(GetParam(), chunk);
  }
}

void expect_each_alone_under_concurrency(const Variant& variant, int64_t prefill_chunk) {
  auto model = tiny_model(variant.family, variant.overrides);
  SchedulerOptions options;
  options.max_batch = 3;
  options.prefill_chunk = prefill_chunk;
  auto scheduler = std::make_unique<BatchScheduler>(model, tokenizer(), options);
  auto channel = std::make_shared<ResponseChannel>();
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{5, 20}, {1, 30}, {17, 9}, {9, 25},
                                                          {30, 12}, {2, 1}, {12, 40}, {24, 16}};
  std::vector<SequenceRequest> requests;
  for (size_t i = 0; i < shapes.size(); ++i) {
    requests.push_back(request(static_cast<int64_t>(i), random_prompt(shapes[i].first, 100 + i), shapes[i].second, channel));
  }
  // Three at once, then the rest in two waves while they run.
  ASSERT_TRUE(scheduler->submit({requests[0], requests[1], requests[2]}));
  while (scheduler->steps() < 4) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_TRUE(scheduler->submit({requests[3], requests[4]}));
  while (scheduler->steps() < 9) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_TRUE(scheduler->submit({requests[5], requests[6], requests[7]}));
  const auto got = collect(*channel, static_cast<int64_t>(requests.size()));
  scheduler.reset();  // the model is the test's again
  for (const auto& r : requests) {
    const auto want = reference(model, r);
    const auto& have = got.at(r.index);
    EXPECT_EQ(have.text, want.text) << "sequence " << r.index;
    EXPECT_EQ(have.finish_reason, want.finish_reason) << "sequence " << r.index;
    EXPECT_EQ(have.completion_tokens, want.completion_tokens) << "sequence " << r.index;
  }
}

// Seeded sampling draws from each sequence's own generator: the same tokens as generate() with that
// seed, whatever else runs in the batch.
TEST_P(BatchSchedulerTest, SeededSamplingEqualsGenerate) {
  auto model = tiny_model(GetParam().family, GetParam().overrides);
  SchedulerOptions options;
  options.max_batch = 4;
  BatchScheduler scheduler(model, tokenizer(), options);
  auto channel = std::make_shared<ResponseChannel>();
  std::vector<SequenceRequest> requests;
  for (int64_t i = 0; i < 4; ++i) {
    auto r = request(i, random_prompt(3 + 5 * i, 200 + i), 24, channel);
    r.options.sample = true;
    r.options.temperature = 0.8 + 0.2 * i;
    r.options.top_k = i == 1 ? 20 : 0;
    r.options.top_p = i == 2 ? 0.9 : 1.0;
    r.options.repetition_penalty = i == 3 ? 1.3 : 1.0;
    r.options.seed = 17 + i;
    requests.push_back(r);
  }
  ASSERT_TRUE(scheduler.submit(requests));
  const auto got = collect(*channel, 4);
  for (const auto& r : requests) {
    const auto want = reference(model, r);
    EXPECT_EQ(got.at(r.index).text, want.text) << "sequence " << r.index;
    EXPECT_EQ(got.at(r.index).completion_tokens, want.completion_tokens) << "sequence " << r.index;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, BatchSchedulerTest,
    ::testing::Values(Variant{"Gpt2", {}}, Variant{"Alibi", {"position=alibi"}},
                      Variant{"LlamaGqa", {"position=rope", "norm=rmsnorm", "activation=swiglu", "n_kv_heads=2",
                                           "bias=false", "tie_embeddings=false"}},
                      Variant{"MistralWindow", {"position=rope", "norm=rmsnorm", "n_kv_heads=1", "window=5", "bias=false"}},
                      Variant{"GatedLinear", {"attention=gated_linear"}},
                      Variant{"HybridRope", {"position=rope", "attention_layers=[gated_linear, softmax]"}},
                      // Encoder-decoders: the prompt is the source; rows hold their memories too.
                      Variant{"T5", {}, "t5"},
                      Variant{"TransformerSinusoidal", {}, "transformer"}),
    [](const auto& info) { return std::string(info.param.name); });

// A long prompt is prefilled a chunk a turn while the running sequence goes on decoding: with
// chunks of one token, a 50-token prompt's single token comes after the running sequence's 40 (a
// whole prefill would answer it at the next turn), and it is the token it gets alone.
TEST(BatchScheduler, RunningSequencesDecodeWhileALongPromptIsPrefilled) {
  auto model = tiny_gpt({});
  SchedulerOptions options;
  options.max_batch = 2;
  options.prefill_chunk = 1;
  auto scheduler = std::make_unique<BatchScheduler>(model, tokenizer(), options);
  auto channel = std::make_shared<ResponseChannel>();
  auto running = request(0, random_prompt(1, 700), 40, channel);
  auto long_prompt = request(1, random_prompt(50, 701), 1, channel);
  running.options.eos_ids.clear(), long_prompt.options.eos_ids.clear();  // each runs to its length
  ASSERT_TRUE(scheduler->submit({running}));
  while (scheduler->steps() < 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_TRUE(scheduler->submit({long_prompt}));
  std::vector<int64_t> finished;  // indices, in the order they ended
  std::map<int64_t, Outcome> got;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (finished.size() < 2 && std::chrono::steady_clock::now() < deadline) {
    for (const auto& e : channel->wait(std::chrono::milliseconds(50))) {
      got[e.index].text += e.text;
      if (e.finish_reason.empty()) continue;
      got[e.index].finish_reason = e.finish_reason;
      got[e.index].completion_tokens = e.completion_tokens;
      finished.push_back(e.index);
    }
  }
  ASSERT_EQ(finished, (std::vector<int64_t>{0, 1}));
  scheduler.reset();  // the model is the test's again
  for (const auto& r : {running, long_prompt}) {
    const auto want = reference(model, r);
    EXPECT_EQ(got[r.index].text, want.text) << "sequence " << r.index;
    EXPECT_EQ(got[r.index].finish_reason, "length") << "sequence " << r.index;
    EXPECT_EQ(got[r.index].completion_tokens, want.completion_tokens) << "sequence " << r.index;
  }
}

// A stop text ends the sequence where it begins: the text before it is all that is sent, even when
// the stop text arrives split over tokens.
TEST(BatchScheduler, StopTextCutsTheCompletion) {
  auto model = tiny_gpt({});
  BatchScheduler scheduler(model, tokenizer(), {});
  auto channel = std::make_shared<ResponseChannel>();
  auto r = request(0, random_prompt(6, 300), 40, channel);
  r.options.eos_ids = {};
  const auto whole = reference(model, r).text;
  ASSERT_GE(whole.size(), 12u) << whole;
  // A stop text from the middle of the completion, of several characters.
  const std::string stop = whole.substr(whole.size() / 2, 3);
  r.stop_texts = {stop};
  ASSERT_TRUE(scheduler.submit({r}));
  const auto got = collect(*channel, 1).at(0);
  EXPECT_EQ(got.text, whole.substr(0, whole.find(stop)));
  EXPECT_EQ(got.finish_reason, "stop");
}

// A client that goes away frees its row at the next step, and the sequence waiting for that row
// then runs (and gives what it gives alone).
TEST(BatchScheduler, CancelledSequenceFreesItsRow) {
  auto model = tiny_gpt({});
  SchedulerOptions options;
  options.max_batch = 1;
  BatchScheduler scheduler(model, tokenizer(), options);
  auto first = std::make_shared<ResponseChannel>(), second = std::make_shared<ResponseChannel>();
  auto long_one = request(0, random_prompt(4, 400), 60, first);
  long_one.options.eos_ids = {};
  auto waiting = request(0, random_prompt(7, 401), 10, second);
  ASSERT_TRUE(scheduler.submit({long_one}));
  ASSERT_TRUE(scheduler.submit({waiting}));
  while (scheduler.steps() < 3) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(scheduler.queued(), 1);
  first->cancel();
  const auto got = collect(*second, 1).at(0);
  EXPECT_EQ(got.text, reference(model, waiting).text);
  const auto cancelled = collect(*first, 1).at(0);
  EXPECT_EQ(cancelled.finish_reason, "cancelled");
  EXPECT_LT(cancelled.completion_tokens, 60);
}

// The queue is bounded: beyond the rows and the queue, submit refuses (the server's 503).
TEST(BatchScheduler, FullQueueRefuses) {
  auto model = tiny_gpt({});
  SchedulerOptions options;
  options.max_batch = 1;
  options.max_queue = 1;
  BatchScheduler scheduler(model, tokenizer(), options);
  auto channel = std::make_shared<ResponseChannel>();
  auto long_one = request(0, random_prompt(4, 500), 60, channel);
  long_one.options.eos_ids = {};
  EXPECT_TRUE(scheduler.submit({long_one}));
  EXPECT_TRUE(scheduler.submit({request(1, random_prompt(4, 501), 5, channel)}));
  EXPECT_FALSE(scheduler.submit({request(2, random_prompt(4, 502), 5, channel)}));
  // A waiting sequence whose client went away holds no place: the next one is taken.
  auto gone = std::make_shared<ResponseChannel>();
  scheduler.cancel_all();
  const auto first = collect(*channel, 2);
  EXPECT_EQ(first.at(0).finish_reason, "cancelled");
  EXPECT_EQ(first.at(1).finish_reason, "cancelled");
  EXPECT_TRUE(scheduler.submit({long_one}));
  EXPECT_TRUE(scheduler.submit({request(1, random_prompt(4, 501), 5, gone)}));
  gone->cancel();
  EXPECT_TRUE(scheduler.submit({request(2, random_prompt(4, 502), 5, channel)}));
  scheduler.cancel_all();
  const auto got = collect(*channel, 2);
  EXPECT_EQ(got.at(0).finish_reason, "cancelled");
  EXPECT_EQ(got.at(2).finish_reason, "cancelled");
}

// A prompt too long for the context is refused with a message, and the scheduler goes on.
TEST(BatchScheduler, PromptBeyondTheContextIsAnError) {
  auto model = tiny_gpt({});
  SchedulerOptions options;
  options.max_context = 16;
  BatchScheduler scheduler(model, tokenizer(), options);
  auto channel = std::make_shared<ResponseChannel>();
  ASSERT_TRUE(scheduler.submit({request(0, random_prompt(20, 600), 4, channel)}));
  const auto bad = collect(*channel, 1).at(0);
  EXPECT_NE(bad.finish_reason.find("does not fit the context of 16"), std::string::npos) << bad.finish_reason;
  auto good = request(1, random_prompt(5, 601), 6, channel);
  ASSERT_TRUE(scheduler.submit({good}));
  EXPECT_EQ(collect(*channel, 1).at(1).text, reference(model, good).text);
}

}  // namespace
}  // namespace zoo
