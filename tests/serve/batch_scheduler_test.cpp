#include "serve/batch_scheduler.h"

#include <algorithm>
#include <limits>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "inference/text_generation.h"
#include "test_util.h"

namespace zoo {
namespace {

const Tokenizer& tokenizer() { return testing::shared_tokenizer(); }

// A decoder, or an encoder-decoder (family t5 or transformer), from a tiny config.
Model tiny_model(const std::string& family, const std::vector<std::string>& overrides) {
  auto config = testing::tiny_config(family, {"init_std=0.2"});
  apply_overrides(config, overrides);
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
  std::optional<FinishReason> finish;
  std::string error;  // kError's message
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
  o.finish = result.finish_reasons[0];
  o.completion_tokens =
      static_cast<int64_t>(result.tokens[0].size()) + (result.finish_reasons[0] == FinishReason::kEos ? 1 : 0);
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
      if (!e.finish) continue;
      o.finish = e.finish;
      o.error = e.error;
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

// With a prefix cache, prompts that begin as earlier ones did read only the rest, their first
// tokens' keys taken from the cache, and give what they give alone, token for token: a chat's
// second turn (its first turn and more), the same prompt again, a prompt ending where a block
// does (its last token is read again), another after a block's worth of the same tokens. Blocks
// are found (the metrics count hits) for every layout whose rows keep every key or a recurrent
// state (kept at a block's end, where the prompt's read is cut), and none for encoder-decoders
// (no cache at all).
TEST_P(BatchSchedulerTest, PrefixCacheReadsOnlyWhatFollowsAndChangesNoToken) {
  const auto& variant = GetParam();
  auto model = tiny_model(variant.family, variant.overrides);
  for (const int64_t chunk : {int64_t{0}, int64_t{7}}) {
    SCOPED_TRACE(chunk == 0 ? "prompts whole" : "prompts in chunks of 7");
    SchedulerOptions options;
    options.max_batch = 3;
    options.prefill_chunk = chunk;
    options.prefix_cache_bytes = int64_t{64} << 20;
    ServerMetrics metrics;
    auto scheduler = std::make_unique<BatchScheduler>(model, tokenizer(), options, &metrics);
    auto channel = std::make_shared<ResponseChannel>();
    // Within the tiny models' 64 positions: 6 new tokens after prompts of at most 52.
    const auto first = random_prompt(40, 7), other = random_prompt(20, 8);
    auto turn = first;
    for (int64_t t : random_prompt(10, 9)) turn.push_back(t);
    auto block = std::vector<int64_t>(turn.begin(), turn.begin() + PrefixCache::kBlockTokens);
    auto branch = block;
    for (int64_t t : other) branch.push_back(t);
    const std::vector<std::vector<int64_t>> waves[] = {{first, other}, {turn, first, block}, {branch, turn}};
    std::vector<SequenceRequest> requests;
    std::map<int64_t, Outcome> got;
    for (const auto& wave : waves) {
      std::vector<SequenceRequest> these;
      for (const auto& p : wave) these.push_back(request(static_cast<int64_t>(requests.size() + these.size()), p, 6, channel));
      for (const auto& r : these) requests.push_back(r);
      ASSERT_TRUE(scheduler->submit(these));
      got.merge(collect(*channel, static_cast<int64_t>(these.size())));  // each wave ends before the next
    }
    const auto render = metrics.render();
    scheduler.reset();  // the model is the test's again
    for (const auto& r : requests) {
      const auto want = reference(model, r);
      EXPECT_EQ(got.at(r.index).text, want.text) << "sequence " << r.index;
      EXPECT_EQ(got.at(r.index).completion_tokens, want.completion_tokens) << "sequence " << r.index;
    }
    // Every decoder's prompts are found but with longrope (prompts past its trained context are
    // read whole, never from a cache). A window keeps a whole
    // prompt's keys while it is read (the next query drops them); read in chunks, it drops the
    // oldest as it goes, and such a prompt is not cached.
    const bool keeps_keys =
        variant.family == "gpt" && std::none_of(variant.overrides.begin(), variant.overrides.end(), [&](const std::string& o) {
          return o.find("longrope") != std::string::npos ||
                 (chunk > 0 && o.find("window") != std::string::npos);
        });
    const bool hits = render.find("zoo_prefix_cache_hit_tokens_total 0\n") == std::string::npos;
    EXPECT_EQ(hits, keeps_keys) << render;
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
    EXPECT_EQ(have.finish, want.finish) << "sequence " << r.index;
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

// Every prompt length that fits the context is served, at each boundary the scheduler has: each
// multiple of the prefill chunk (8) and its neighbours, the batch cache's first capacity (16
// positions) and each doubling, and the context's last position (64: every sequence here runs
// to it). Each sequence alone, then all of them together through 3 rows, gives what generate()
// gives it alone.
TEST_P(BatchSchedulerTest, EveryPromptLengthAtTheBoundaries) {
  auto model = tiny_model(GetParam().family, GetParam().overrides);
  SchedulerOptions options;
  options.max_batch = 3;
  options.max_context = 64;
  options.prefill_chunk = 8;
  options.cache_positions = 16;
  auto scheduler = std::make_unique<BatchScheduler>(model, tokenizer(), options);
  std::vector<SequenceRequest> requests;
  const std::vector<int64_t> lengths = {1, 7, 8, 9, 15, 16, 17, 31, 32, 33, 48, 63};
  auto channel = std::make_shared<ResponseChannel>();
  for (size_t i = 0; i < lengths.size(); ++i) {
    auto r = request(static_cast<int64_t>(i), random_prompt(lengths[i], 800 + i), 64 - lengths[i], channel);
    r.options.eos_ids.clear();  // to the context's last position
    requests.push_back(r);
  }
  std::map<int64_t, Outcome> alone;
  for (const auto& r : requests) {
    ASSERT_TRUE(scheduler->submit({r}));
    alone[r.index] = collect(*channel, 1).at(r.index);
  }
  ASSERT_TRUE(scheduler->submit(requests));
  const auto together = collect(*channel, static_cast<int64_t>(requests.size()));
  scheduler.reset();  // the model is the test's again
  for (const auto& r : requests) {
    const auto want = reference(model, r);
    const std::pair<const char*, const Outcome*> runs[] = {{"alone", &alone.at(r.index)},
                                                          {"together", &together.at(r.index)}};
    for (const auto& [how, got] : runs) {
      EXPECT_EQ(got->text, want.text) << "prompt of " << r.prompt.size() << ", " << how;
      EXPECT_EQ(got->finish, FinishReason::kLength) << "prompt of " << r.prompt.size() << ", " << how;
      EXPECT_EQ(got->completion_tokens, r.options.max_new_tokens) << "prompt of " << r.prompt.size() << ", " << how;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, BatchSchedulerTest,
    ::testing::Values(Variant{"Gpt2", {}}, Variant{"Alibi", {"position=alibi"}},
                      Variant{"LlamaGqa", {"position=rope", "norm=rmsnorm", "activation=swiglu", "n_kv_heads=2",
                                           "bias=false", "tie_embeddings=false"}},
                      Variant{"MistralWindow", {"position=rope", "norm=rmsnorm", "n_kv_heads=1", "window=5", "bias=false"}},
                      Variant{"Linear", {"attention=linear"}}, Variant{"GatedLinear", {"attention=gated_linear"}},
                      Variant{"HybridRope", {"position=rope", "attention_layers=[gated_linear, softmax]"}},
                      // Phi-3: LongRoPE past a trained context of 12. A row crossing it is read
                      // again whole, as generate() does; a prompt past it is never chunked.
                      Variant{"Phi3LongRope", {"position=rope", "norm=rmsnorm", "activation=swiglu", "n_kv_heads=1",
                                               "bias=false", "rotary_dim=4", "rope_scaling=longrope",
                                               "rope_original_max_positions=12", "rope_short_factor=[1, 1.5]",
                                               "rope_long_factor=[3, 9]"}},
                      // A mixture of experts: a token's experts do not depend on its batch mates.
                      Variant{"MixtralExperts", {"position=rope", "norm=rmsnorm", "activation=swiglu", "n_kv_heads=2",
                                                 "bias=false", "experts=4", "experts_per_token=2"}},
                      // Gemma: sandwich (1 + weight) norms, scaled embeddings, scores over 12 soft-capped
                      // at 2, logits at 3, a window of 3 in layer 0 with its own RoPE base, q/k norms.
                      Variant{"GemmaCapsAndWindows", {"position=rope", "norm=rmsnorm_plus_one", "norm_position=sandwich",
                                                      "activation=geglu_tanh", "n_kv_heads=2", "bias=false",
                                                      "scale_embeddings=true", "qk_norm=true", "attention_scale_dim=12",
                                                      "attention_softcap=2", "logit_softcap=3", "window=5",
                                                      "window_layers=[0]", "window_rope_base=1000"}},
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
      if (!e.finish) continue;
      got[e.index].finish = e.finish;
      got[e.index].completion_tokens = e.completion_tokens;
      finished.push_back(e.index);
    }
  }
  ASSERT_EQ(finished, (std::vector<int64_t>{0, 1}));
  scheduler.reset();  // the model is the test's again
  for (const auto& r : {running, long_prompt}) {
    const auto want = reference(model, r);
    EXPECT_EQ(got[r.index].text, want.text) << "sequence " << r.index;
    EXPECT_EQ(got[r.index].finish, FinishReason::kLength) << "sequence " << r.index;
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
  EXPECT_EQ(got.finish, FinishReason::kStop);
}

// Rows held to a grammar (response_format) decode in the same batch as free ones: each of theirs
// is one of the schema's values, ended by the stop token once complete (or by max_new_tokens
// before), greedy or sampled; the free rows give what they give alone.
TEST(BatchScheduler, StructuredRowsDecodeBesideFreeOnes) {
  auto model = tiny_gpt({"vocab_size=512"});  // the tokenizer's byte tokens ('"' among them) included
  TokenGrammars grammars(tokenizer(), model.config.vocab_size, {3});
  const auto grammar = grammars.compile({ResponseFormatKind::kJsonSchema, R"({"enum": ["ab", "cd", 12]})"});
  BatchScheduler scheduler(model, tokenizer(), {.max_batch = 4});
  auto channel = std::make_shared<ResponseChannel>();
  std::vector<SequenceRequest> requests;
  for (int64_t i = 0; i < 8; ++i) {
    auto r = request(i, random_prompt(3 + i, 400 + i), 20, channel);
    if (i % 2 == 1) {
      r.grammar = grammar;
      r.options.sample = i > 4;  // two greedy rows, two sampled
      r.options.seed = static_cast<uint64_t>(i);
    }
    requests.push_back(r);
  }
  requests[7].options.max_new_tokens = 1;  // too few for any value
  std::vector<Outcome> alone;
  for (const auto& r : requests) alone.push_back(r.grammar ? Outcome{} : reference(model, r));
  ASSERT_TRUE(scheduler.submit(requests));
  const auto got = collect(*channel, 8);
  for (int64_t i = 0; i < 8; ++i) {
    const auto& o = got.at(i);
    SCOPED_TRACE("row " + std::to_string(i) + ": " + o.text + " " + o.error);
    if (i % 2 == 0) {
      EXPECT_EQ(o.text, alone[i].text);
      EXPECT_EQ(o.finish, alone[i].finish);
      continue;
    }
    if (i == 7) {
      EXPECT_EQ(o.finish, FinishReason::kLength);
      continue;
    }
    EXPECT_EQ(o.finish, FinishReason::kEos);
    const auto value = nlohmann::json::parse(o.text, nullptr, false);
    EXPECT_TRUE(value == "ab" || value == "cd" || value == 12);
  }
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
  EXPECT_EQ(cancelled.finish, FinishReason::kCancelled);
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
  EXPECT_EQ(first.at(0).finish, FinishReason::kCancelled);
  EXPECT_EQ(first.at(1).finish, FinishReason::kCancelled);
  EXPECT_TRUE(scheduler.submit({long_one}));
  EXPECT_TRUE(scheduler.submit({request(1, random_prompt(4, 501), 5, gone)}));
  gone->cancel();
  EXPECT_TRUE(scheduler.submit({request(2, random_prompt(4, 502), 5, channel)}));
  scheduler.cancel_all();
  const auto got = collect(*channel, 2);
  EXPECT_EQ(got.at(0).finish, FinishReason::kCancelled);
  EXPECT_EQ(got.at(2).finish, FinishReason::kCancelled);
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
  EXPECT_EQ(bad.finish, FinishReason::kError);
  EXPECT_NE(bad.error.find("does not fit the context of 16"), std::string::npos) << bad.error;
  auto good = request(1, random_prompt(5, 601), 6, channel);
  ASSERT_TRUE(scheduler.submit({good}));
  EXPECT_EQ(collect(*channel, 1).at(1).text, reference(model, good).text);
}

// A sequence whose logits turn non-finite (here: the embedding of a token it generates is NaN)
// ends with an error naming why, counted in the metrics; the sequences beside it go on and give
// what they give alone, and one placed later in the failed sequence's row (its stale NaN keys to
// the left of the new prompt) too.
TEST(BatchScheduler, NonFiniteLogitsEndOnlyTheirSequence) {
  auto model = tiny_gpt({"tie_embeddings=false"});
  auto channel = std::make_shared<ResponseChannel>();
  auto doomed = request(2, random_prompt(5, 900), 30, channel);
  doomed.options.eos_ids.clear();
  const auto clean = generate(model.gpt, {doomed.prompt}, doomed.options).tokens[0];
  // A token it generates (the k-th, k >= 3) that neither its prompt nor its earlier tokens hold:
  // its logits are fine until that token is fed back.
  int64_t k = 2;
  const auto seen_before = [&](int64_t t, int64_t end) {
    return std::count(clean.begin(), clean.begin() + end, t) + std::count(doomed.prompt.begin(), doomed.prompt.end(), t);
  };
  while (k < 20 && seen_before(clean[k], k) > 0) ++k;
  ASSERT_LT(k, 20);
  const int64_t poisoned = clean[k];
  {
    torch::NoGradGuard no_grad;
    model.gpt->token_embedding->weight[poisoned].fill_(std::numeric_limits<double>::quiet_NaN());
  }
  // Others that never feed the poisoned token (generate() would throw for them otherwise).
  std::vector<SequenceRequest> others;
  for (int64_t seed = 901; others.size() < 3 && seed < 960; ++seed) {
    auto r = request(static_cast<int64_t>(others.size() == 2 ? 3 : others.size()), random_prompt(4 + seed % 5, seed),
                     others.size() == 2 ? 10 : 40, channel);
    r.options.eos_ids.clear();
    if (std::count(r.prompt.begin(), r.prompt.end(), poisoned) > 0) continue;
    try {
      reference(model, r);
    } catch (const std::exception&) {
      continue;
    }
    others.push_back(r);
  }
  ASSERT_EQ(others.size(), 3u);
  ServerMetrics metrics;
  SchedulerOptions options;
  options.max_batch = 3;
  auto scheduler = std::make_unique<BatchScheduler>(model, tokenizer(), options, &metrics);
  // The doomed sequence in the last row, so that its row is not overwritten when it leaves.
  ASSERT_TRUE(scheduler->submit({others[0], others[1], doomed}));
  while (scheduler->steps() < k + 14) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  // Its prompt (at most 8) is placed in the failed row, right of where the NaN keys were.
  ASSERT_TRUE(scheduler->submit({others[2]}));  // takes the failed sequence's row
  const auto got = collect(*channel, 4);
  scheduler.reset();
  const std::string reason = "the model's logits for token " + std::to_string(k + 2) + " of this sequence hold NaN";
  EXPECT_EQ(got.at(2).finish, FinishReason::kError);
  EXPECT_EQ(got.at(2).error.rfind(reason, 0), 0u) << got.at(2).error;
  EXPECT_EQ(got.at(2).completion_tokens, k + 1);
  EXPECT_EQ(metrics.sequences_failed(), 1);
  for (const auto& r : others) {
    const auto want = reference(model, r);
    EXPECT_EQ(got.at(r.index).text, want.text) << "sequence " << r.index;
    EXPECT_EQ(got.at(r.index).finish, FinishReason::kLength) << "sequence " << r.index;
  }
}

// Sampling that throws for one sequence (a temperature so small that logits / temperature
// overflows: LibTorch's multinomial refuses the NaN probabilities) ends that sequence alone; a
// prompt whose prefill fails (an id past the embedding, prefilled together with others) fails
// alone too, the others prefilled again without it.
TEST(BatchScheduler, SamplingOrPrefillThatThrowsEndsOnlyItsSequence) {
  auto model = tiny_gpt({});
  ServerMetrics metrics;
  SchedulerOptions options;
  options.max_batch = 4;
  options.prefill_chunk = 0;
  BatchScheduler scheduler(model, tokenizer(), options, &metrics);
  auto channel = std::make_shared<ResponseChannel>();
  auto first = request(0, random_prompt(6, 950), 20, channel);
  auto cold = request(1, random_prompt(3, 951), 20, channel);
  cold.options.sample = true;
  cold.options.temperature = 1e-300;
  auto bad_id = request(2, {5, 6, 500, 7}, 20, channel);
  auto last = request(3, random_prompt(9, 952), 20, channel);
  for (auto* r : {&first, &last}) r->options.eos_ids.clear();
  ASSERT_TRUE(scheduler.submit({first, cold, bad_id, last}));
  const auto got = collect(*channel, 4);
  for (int64_t failed : {1, 2}) {
    EXPECT_EQ(got.at(failed).finish, FinishReason::kError) << "sequence " << failed;
    EXPECT_FALSE(got.at(failed).error.empty()) << "sequence " << failed;
  }
  EXPECT_EQ(metrics.sequences_failed(), 2);
  for (const auto& r : {first, last}) {
    EXPECT_EQ(got.at(r.index).text, reference(model, r).text) << "sequence " << r.index;
    EXPECT_EQ(got.at(r.index).finish, FinishReason::kLength) << "sequence " << r.index;
  }
}

}  // namespace
}  // namespace zoo
