#include "models/generation.h"

#include <cmath>
#include <functional>
#include <limits>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/op_profile.h"
#include "test_util.h"

namespace zoo {
namespace {

using testing::max_abs_diff;

GPT tiny_gpt() {
  auto config = parse_config(
      "family: gpt\nvocab_size: 30\nd_model: 16\nn_layers: 1\nn_heads: 2\nd_ff: 32\n"
      "max_positions: 64\ndropout: 0.0\nattention_dropout: 0.0\ninit_std: 0.3\n");
  GPT model(config);
  model->eval();
  return model;
}

TEST(ProcessLogits, RepetitionPenaltyByHand) {
  GenerationOptions o;
  o.repetition_penalty = 2.0;
  auto logits = torch::tensor({{2.0f, -2.0f, 1.0f, -1.0f}});
  // Tokens 0 and 1 were seen; token 3 sits in a padded slot and does not count.
  auto context = torch::tensor({{0, 1, 1, 3}}, torch::kLong);
  auto mask = torch::tensor({{1, 1, 1, 0}}, torch::kLong);
  auto out = process_logits(logits, context, mask, o);
  EXPECT_LE(max_abs_diff(out, torch::tensor({{1.0f, -4.0f, 1.0f, -1.0f}})), 1e-6);
}

TEST(ProcessLogits, TopKAndTopPKeepTheRightTokens) {
  GenerationOptions o;
  o.sample = true;
  // Probabilities 0.5, 0.25, 0.125, 0.125.
  auto logits = torch::log(torch::tensor({{0.5f, 0.25f, 0.125f, 0.125f}}));
  o.top_k = 2;
  auto k = process_logits(logits, {}, {}, o);
  EXPECT_TRUE(torch::isfinite(k).equal(torch::tensor({{true, true, false, false}})));
  o.top_k = 0;
  o.top_p = 0.7;  // 0.5 alone is short of 0.7; 0.5 + 0.25 reaches it
  auto p = process_logits(logits, {}, {}, o);
  EXPECT_TRUE(torch::isfinite(p).equal(torch::tensor({{true, true, false, false}})));
  o.top_p = 0.4;  // the most likely token always stays
  EXPECT_TRUE(torch::isfinite(process_logits(logits, {}, {}, o)).equal(torch::tensor({{true, false, false, false}})));
  o.top_p = 1.0;
  o.temperature = 0.5;
  EXPECT_LE(max_abs_diff(process_logits(logits, {}, {}, o), logits * 2), 1e-6);
}

TEST(Generate, GreedyPicksTheArgmaxAtEveryStep) {
  auto model = tiny_gpt();
  GenerationOptions o;
  o.max_new_tokens = 6;
  auto out = generate(model, {{1, 2, 3}}, o);
  std::vector<int64_t> seq{1, 2, 3};
  torch::NoGradGuard no_grad;
  for (int64_t token : out.tokens[0]) {
    auto logits = model->forward(torch::tensor(seq, torch::kLong).unsqueeze(0));
    EXPECT_EQ(logits[0][-1].argmax().item<int64_t>(), token);
    seq.push_back(token);
  }
  EXPECT_EQ(out.finish_reasons[0], FinishReason::kLength);
}

// Decoding without the host in the loop (#48): a step reads back one thing, the tokens chosen and
// whether each row's logits were finite (read_to_host, which the profile counts as a GPU's wait),
// and takes no other value back. Prompts of one length build no mask (no positions cumulated from
// one) and no step concatenates its tokens; a padded batch and beam search read once a step too.
TEST(Generate, EachStepReadsOneValueBack) {
  auto model = tiny_gpt();
  auto calls = [](const std::vector<OpTime>& ops, const std::string& name) {
    for (const auto& op : ops) {
      if (op.name == name) return op.calls;
    }
    return int64_t{0};
  };
  GenerationOptions o;
  o.max_new_tokens = 6;
  GenerationResult out;
  auto ops = profile_ops([&] { out = generate(model, {{1, 2, 3}, {4, 5, 6}}, o); });
  EXPECT_EQ(out.tokens[0].size(), 6u);
  EXPECT_EQ(synchronizing_calls(ops), 6) << describe_synchronizing(ops);
  EXPECT_EQ(calls(ops, kHostRead), 6);
  EXPECT_EQ(calls(ops, "aten::cumsum"), 0);
  EXPECT_EQ(calls(ops, "aten::cat"), calls(ops, "aten::stack"));  // the read's two rows, no tokens appended
  ops = profile_ops([&] { out = generate(model, {{1, 2, 3}, {4, 5}}, o); });
  EXPECT_EQ(synchronizing_calls(ops), 6) << describe_synchronizing(ops);
  EXPECT_EQ(calls(ops, "aten::cumsum"), 6);  // the padded rows' positions, from their mask: the count sees them
  // Rotary positions from a mask size their table by the mask's length, not by reading them back.
  GPT rope(parse_config("family: gpt\nvocab_size: 30\nd_model: 16\nn_layers: 2\nn_heads: 2\nd_ff: 32\n"
                        "max_positions: 64\nposition: rope\ndropout: 0.0\nattention_dropout: 0.0\n"));
  rope->eval();
  ops = profile_ops([&] { out = generate(rope, {{1, 2, 3}, {4, 5}}, o); });
  EXPECT_EQ(synchronizing_calls(ops), 6) << describe_synchronizing(ops);
  o.num_beams = 3;
  ops = profile_ops([&] { out = generate(model, {{1, 2, 3}, {4, 5}}, o); });
  EXPECT_EQ(synchronizing_calls(ops), 6) << describe_synchronizing(ops);
  EXPECT_EQ(out.tokens[1].size(), 6u);
}

TEST(Generate, SeededSamplingIsReproducible) {
  auto model = tiny_gpt();
  GenerationOptions o;
  o.sample = true;
  o.max_new_tokens = 16;
  o.temperature = 1.5;
  o.seed = 7;
  auto a = generate(model, {{1, 2}}, o), b = generate(model, {{1, 2}}, o);
  EXPECT_EQ(a.tokens, b.tokens);
  o.seed = 8;
  EXPECT_NE(generate(model, {{1, 2}}, o).tokens, a.tokens);
  // top_k = 1 is greedy whatever the seed.
  o.top_k = 1;
  GenerationOptions greedy;
  greedy.max_new_tokens = 16;
  EXPECT_EQ(generate(model, {{1, 2}}, o).tokens, generate(model, {{1, 2}}, greedy).tokens);
}

TEST(Generate, EosAndStopSequencesEndARow) {
  auto model = tiny_gpt();
  GenerationOptions o;
  o.max_new_tokens = 10;
  auto free_run = generate(model, {{4, 5}}, o).tokens[0];
  ASSERT_GE(free_run.size(), 4u);
  o.eos_ids = {free_run[2]};
  auto stopped = generate(model, {{4, 5}}, o);
  auto first = std::find(free_run.begin(), free_run.end(), free_run[2]) - free_run.begin();
  EXPECT_EQ(stopped.tokens[0], std::vector<int64_t>(free_run.begin(), free_run.begin() + first));
  EXPECT_EQ(stopped.finish_reasons[0], FinishReason::kEos);
  o.eos_ids.clear();
  o.stop_sequences = {{free_run[1], free_run[2]}};
  auto by_stop = generate(model, {{4, 5}}, o);
  EXPECT_EQ(by_stop.finish_reasons[0], FinishReason::kStop);
  EXPECT_LE(by_stop.tokens[0].size(), 1u);
  std::vector<int64_t> streamed;
  o.stop_sequences.clear();
  o.on_token = [&](int64_t row, int64_t token) { streamed.push_back(token); };
  EXPECT_EQ(generate(model, {{4, 5}}, o).tokens[0], streamed);
}

TEST(Generate, BadOptionsAndPromptsAreNamed) {
  auto model = tiny_gpt();
  GenerationOptions o;
  o.top_p = 0.0;
  EXPECT_THROW(generate(model, {{1}}, o), std::invalid_argument);
  o = GenerationOptions();
  try {
    generate(model, {{1, 99}}, o);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "generate: prompt 0 has token 99 outside the vocabulary (30)");
  }
  EXPECT_THROW(generate(model, {{}}, o), std::invalid_argument);
  o.max_new_tokens = 100;
  EXPECT_THROW(generate(model, {{1, 2}}, o), std::invalid_argument);
  // Options that were accepted without a word before: each is named with its value.
  auto error = [&](const std::function<void(GenerationOptions&)>& edit) {
    GenerationOptions bad;
    edit(bad);
    return testing::error_of([&] { generate(model, {{1, 2}}, bad); });
  };
  EXPECT_EQ(error([](auto& b) { b.eos_ids = {-7}; }),
            "generate: eos id -7 is not a token id (the vocabulary has 30 tokens: 0..29)");
  EXPECT_EQ(error([](auto& b) { b.eos_ids = {99999}; }),
            "generate: eos id 99999 is not a token id (the vocabulary has 30 tokens: 0..29)");
  EXPECT_EQ(error([](auto& b) { b.length_penalty = std::nan(""); }), "generate: length_penalty (nan) must be a finite number");
  EXPECT_EQ(error([](auto& b) { b.stop_sequences = {{}}; }),
            "generate: a stop sequence is empty (it would end generation at once)");
  EXPECT_EQ(error([](auto& b) { b.num_beams = 1000000; }), "generate: num_beams (1000000) must be at most 256");
}

// Issue 52: --max-new-tokens 999999999999 on a RoPE model of max_positions 10^9 was lowered to
// the context, and the cache reserved for it (2 TB) ended in the allocator's "out of memory
// mapping 256000000000 bytes". A cache no memory holds is refused before generation starts,
// naming the options that size it: here 128 bytes a position (keys and values, 2 x 16 floats)
// over 10^12.
TEST(Generate, ACacheNoMemoryHoldsIsRefusedByTheOptionsThatSizeIt) {
  auto config = parse_config(
      "family: gpt\nvocab_size: 30\nd_model: 16\nn_layers: 1\nn_heads: 2\nd_ff: 32\nposition: rope\n"
      "max_positions: 1000000000000\ndropout: 0.0\nattention_dropout: 0.0\n");
  GPT model(config);
  GenerationOptions o;
  o.max_new_tokens = 999999999990;
  const std::string error = testing::error_of([&] { generate(model, {{1, 2}}, o); });
  EXPECT_EQ(error.rfind("generate: max_new_tokens (999999999990) x num_beams (1): the key-value cache of 1 x "
                        "999999999992 tokens (sequences x positions) would hold at least 128.0 TB, more than this "
                        "machine's ",
                        0),
            0u)
      << error;
  EXPECT_NE(error.find(" of memory; lower max_new_tokens or num_beams"), std::string::npos) << error;
  o.max_new_tokens = 3;  // what fits is generated
  EXPECT_EQ(generate(model, {{1, 2}}, o).tokens[0].size(), 3u);
}

// Logits gone NaN (here a weight of one token's row: every step's logit for it) are
// named with the step, in sampling, greedy and beam search, instead of multinomial's "probability
// tensor contains either inf, nan or element < 0".
TEST(Generate, NonFiniteLogitsAreNamedWithTheStep) {
  const std::string expected =
      "generate: the model's logits hold NaN or infinity at step 1 (corrupt weights, or activations overflowing "
      "their type)";
  torch::NoGradGuard no_grad;
  auto gpt = tiny_gpt();
  gpt->token_embedding->weight[0][3] = std::numeric_limits<float>::quiet_NaN();
  GenerationOptions o;
  o.max_new_tokens = 3;
  EXPECT_EQ(testing::error_of([&] { generate(gpt, {{1, 2}}, o); }), expected);
  o.sample = true;
  EXPECT_EQ(testing::error_of([&] { generate(gpt, {{1, 2}}, o); }), expected);
  auto t5 = EncoderDecoder(parse_config("family: t5\nvocab_size: 20\nd_model: 16\nn_layers: 1\nn_heads: 2\nd_ff: 32\n"));
  t5->eval();
  t5->token_embedding->weight[5][0] = std::numeric_limits<float>::quiet_NaN();
  for (int64_t beams : {1, 3}) {
    GenerationOptions b;
    b.num_beams = beams;
    b.max_new_tokens = 3;
    EXPECT_EQ(testing::error_of([&] { generate(t5, {{2, 3}}, b); }), expected) << beams << " beams";
  }
}

// The best length-penalised continuation over a vocabulary of 5 with EOS 1 and at most
// `max_new` tokens, found by scoring every one with `logprob` (its tokens' log-probability).
std::vector<int64_t> brute_force_best(int64_t max_new, double length_penalty,
                                      const std::function<double(const std::vector<int64_t>&)>& logprob) {
  const int64_t eos = 1;
  double best = -std::numeric_limits<double>::infinity();
  std::vector<int64_t> best_tokens;
  std::function<void(std::vector<int64_t>)> visit = [&](std::vector<int64_t> prefix) {
    for (int64_t t = 0; t < 5; ++t) {
      auto seq = prefix;
      seq.push_back(t);
      if (t == eos || static_cast<int64_t>(seq.size()) == max_new) {
        // Finished by EOS (it counts in the length) or by running out of length.
        const double s = logprob(seq) / std::pow(static_cast<double>(seq.size()), length_penalty);
        if (s > best) best = s, best_tokens = t == eos ? prefix : seq;
      } else {
        visit(seq);
      }
    }
  };
  visit({});
  return best_tokens;
}

// Beam search with beams enough to keep every live hypothesis is exhaustive: it must return the
// best length-penalised sequence, which brute force finds by scoring every sequence.
TEST(BeamSearch, WideBeamFindsTheBruteForceOptimum) {
  auto config = parse_config(
      "family: t5\nvocab_size: 5\nd_model: 16\nn_layers: 1\nn_heads: 2\nd_ff: 32\n"
      "dropout: 0.0\nattention_dropout: 0.0\n");
  EncoderDecoder model(config);
  model->eval();
  const int64_t eos = 1, max_new = 3;
  for (double length_penalty : {1.0, 0.0, 2.0}) {
    GenerationOptions o;
    o.num_beams = 25;
    o.max_new_tokens = max_new;
    o.eos_ids = {eos};
    o.length_penalty = length_penalty;
    std::vector<int64_t> source{2, 3, 4};
    auto beam = generate(model, {source}, o);

    torch::NoGradGuard no_grad;
    auto src = torch::tensor(source, torch::kLong).unsqueeze(0);
    auto logprob = [&](const std::vector<int64_t>& tokens) {
      std::vector<int64_t> input{config.decoder_start_id};
      input.insert(input.end(), tokens.begin(), tokens.end() - 1);
      auto lp = torch::log_softmax(model->forward(src, {}, torch::tensor(input, torch::kLong).unsqueeze(0)), -1)[0];
      double total = 0;
      for (size_t i = 0; i < tokens.size(); ++i) total += lp[i][tokens[i]].item<double>();
      return total;
    };
    EXPECT_EQ(beam.tokens[0], brute_force_best(max_new, length_penalty, logprob)) << "length_penalty " << length_penalty;
  }
}

// The same for a decoder-only model whose layers keep a recurrent state (gated linear attention,
// then linear): beam search reorders those states with the beams, and must still find the
// brute-force optimum (scored by the model's whole forward, no cache).
TEST(BeamSearch, WideBeamFindsTheBruteForceOptimumForADecoderWithRecurrentLayers) {
  auto config = parse_config(
      "family: gpt\nvocab_size: 5\nd_model: 16\nn_layers: 2\nn_heads: 2\nd_ff: 32\nmax_positions: 16\n"
      "dropout: 0.0\nattention_dropout: 0.0\ninit_std: 0.5\nattention_layers: [gated_linear, linear]\n");
  torch::manual_seed(0);
  GPT model(config);
  model->eval();
  const int64_t eos = 1, max_new = 3;
  const std::vector<int64_t> prompt{2, 3, 4};
  for (double length_penalty : {1.0, 0.0}) {
    GenerationOptions o;
    o.num_beams = 25;
    o.max_new_tokens = max_new;
    o.eos_ids = {eos};
    o.length_penalty = length_penalty;
    auto beam = generate(model, {prompt}, o);
    torch::NoGradGuard no_grad;
    auto logprob = [&](const std::vector<int64_t>& tokens) {
      std::vector<int64_t> input = prompt;
      input.insert(input.end(), tokens.begin(), tokens.end() - 1);
      auto lp = torch::log_softmax(model->forward(torch::tensor(input, torch::kLong).unsqueeze(0)), -1)[0];
      double total = 0;
      for (size_t i = 0; i < tokens.size(); ++i) total += lp[prompt.size() - 1 + i][tokens[i]].item<double>();
      return total;
    };
    EXPECT_EQ(beam.tokens[0], brute_force_best(max_new, length_penalty, logprob)) << "length_penalty " << length_penalty;
  }
}

// Beam search over a padded batch gives each row what it gives the row alone.
template <typename Model>
void expect_beam_rows_independent(Model& model) {
  GenerationOptions o;
  o.num_beams = 3;
  o.max_new_tokens = 5;
  o.eos_ids = {1};
  auto batch = generate(model, {{2, 3, 4, 5}, {6, 7}}, o);
  EXPECT_EQ(batch.tokens[0], generate(model, {{2, 3, 4, 5}}, o).tokens[0]);
  EXPECT_EQ(batch.tokens[1], generate(model, {{6, 7}}, o).tokens[0]);
}

TEST(BeamSearch, BatchRowsAreIndependent) {
  EncoderDecoder t5(parse_config("family: t5\nvocab_size: 20\nd_model: 16\nn_layers: 1\nn_heads: 2\nd_ff: 32\n"));
  expect_beam_rows_independent(t5);
  // A decoder-only model's rows are left-padded prompts, its layers a linear and a softmax one.
  torch::manual_seed(1);
  GPT gpt(parse_config("family: gpt\nvocab_size: 20\nd_model: 16\nn_layers: 2\nn_heads: 2\nd_ff: 32\n"
                       "max_positions: 32\nattention_layers: [gated_linear, softmax]\n"));
  expect_beam_rows_independent(gpt);
}

}  // namespace
}  // namespace zoo
