#include "models/gpt.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "models/generation.h"
#include "test_util.h"

namespace zoo {
namespace {

using testing::max_abs_diff;

// A tiny GPT with spread-out logits (init_std 0.2), so greedy choices are not near-ties.
GPT tiny_gpt(const std::vector<std::string>& overrides = {}) {
  auto config = testing::tiny_config("gpt", {"init_std=0.2"});
  apply_overrides(config, overrides);
  GPT model(config);
  model->eval();
  return model;
}

struct Variant {
  const char* name;
  std::vector<std::string> overrides;
};

void PrintTo(const Variant& v, std::ostream* os) { *os << v.name; }

class GPTVariantTest : public ::testing::TestWithParam<Variant> {};

TEST_P(GPTVariantTest, CachedDecodingEqualsFullPass) {
  auto model = tiny_gpt(GetParam().overrides);
  torch::NoGradGuard no_grad;
  auto ids = torch::randint(97, {2, 12}, torch::kLong);
  auto full = model->forward(ids);
  KVCache cache = model->make_cache();
  std::vector<torch::Tensor> steps{model->forward(ids.narrow(1, 0, 5), {}, &cache)};
  for (int64_t i = 5; i < 12; ++i) steps.push_back(model->forward(ids.narrow(1, i, 1), {}, &cache));
  EXPECT_LE(max_abs_diff(torch::cat(steps, 1), full), 1e-4);
}

// The last position's logits alone (what decoding samples from), for a padded batch and a cached
// step: the full pass's last column.
TEST_P(GPTVariantTest, NextTokenLogitsAreTheLastColumnOfTheFullPass) {
  auto model = tiny_gpt(GetParam().overrides);
  torch::NoGradGuard no_grad;
  auto ids = torch::randint(97, {3, 9}, torch::kLong);
  auto mask = torch::ones({3, 9}, torch::kLong);
  mask[1].narrow(0, 0, 4).fill_(0);
  const auto full = model->forward(ids, mask);
  const auto last = model->next_token_logits(ids, mask);
  ASSERT_EQ(last.sizes(), (std::vector<int64_t>{3, 97}));
  EXPECT_LE(max_abs_diff(last, full.select(1, -1)), 1e-5);
  KVCache cache = model->make_cache();
  model->next_token_logits(ids.narrow(1, 0, 8), mask.narrow(1, 0, 8), &cache);
  EXPECT_LE(max_abs_diff(model->next_token_logits(ids.narrow(1, 8, 1), mask, &cache), full.select(1, -1)), 1e-4);
}

TEST_P(GPTVariantTest, CachedGreedyGenerationEqualsUncached) {
  auto model = tiny_gpt(GetParam().overrides);
  GenerationOptions o;
  o.max_new_tokens = 20;
  o.output_scores = true;
  std::vector<std::vector<int64_t>> prompts{{5, 6, 7, 8}, {9, 10}};
  auto cached = generate(model, prompts, o);
  o.use_cache = false;
  auto uncached = generate(model, prompts, o);
  EXPECT_EQ(cached.tokens, uncached.tokens);
  ASSERT_EQ(cached.scores.size(), uncached.scores.size());
  for (size_t i = 0; i < cached.scores.size(); ++i) {
    EXPECT_LE(max_abs_diff(cached.scores[i], uncached.scores[i]), 1e-4) << "step " << i;
  }
  EXPECT_EQ(cached.tokens[0].size(), 20u);
}

TEST_P(GPTVariantTest, PaddedBatchEqualsEachPromptAlone) {
  auto model = tiny_gpt(GetParam().overrides);
  GenerationOptions o;
  o.max_new_tokens = 8;
  o.output_scores = true;
  std::vector<std::vector<int64_t>> prompts{{1, 2, 3, 4, 5, 6}, {7, 8}, {9, 10, 11}};
  auto batch = generate(model, prompts, o);
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto alone = generate(model, {prompts[i]}, o);
    EXPECT_EQ(batch.tokens[i], alone.tokens[0]) << "prompt " << i;
    EXPECT_LE(max_abs_diff(batch.scores[0][i], alone.scores[0][0]), 1e-4) << "prompt " << i;
  }
}

TEST_P(GPTVariantTest, OutputAtAPositionIgnoresLaterTokens) {
  auto model = tiny_gpt(GetParam().overrides);
  torch::NoGradGuard no_grad;
  auto ids = torch::randint(97, {1, 10}, torch::kLong);
  auto changed = ids.clone();
  changed.narrow(1, 6, 4).random_(97);
  auto a = model->forward(ids), b = model->forward(changed);
  // Equal up to rounding: a mixture of experts multiplies each expert's tokens as one matrix,
  // whose blocking depends on how many were routed to it.
  EXPECT_LE(max_abs_diff(a.narrow(1, 0, 6), b.narrow(1, 0, 6)), 1e-5);
  EXPECT_GT(max_abs_diff(a.narrow(1, 6, 4), b.narrow(1, 6, 4)), 1e-3);
}

INSTANTIATE_TEST_SUITE_P(
    Positions, GPTVariantTest,
    ::testing::Values(Variant{"Learned", {}}, Variant{"Sinusoidal", {"position=sinusoidal"}},
                      Variant{"Rope", {"position=rope", "rope_layout=interleaved"}},
                      Variant{"Alibi", {"position=alibi"}},
                      Variant{"Relative", {"position=relative"}},
                      Variant{"LlamaGqa", {"position=rope", "norm=rmsnorm", "activation=swiglu",
                                           "n_kv_heads=2", "bias=false", "tie_embeddings=false"}},
                      Variant{"MistralWindow", {"position=rope", "norm=rmsnorm", "n_kv_heads=1",
                                                "window=3", "bias=false"}},
                      Variant{"Qwen3HeadNorms", {"position=rope", "norm=rmsnorm", "activation=swiglu", "n_kv_heads=2",
                                                 "head_dim=24", "qk_norm=true", "bias=false"}},
                      // Phi-3: half of each head rotated, LongRoPE past a trained context of 12, which
                      // generation crosses (each row at its own step in a padded batch); the raw
                      // cached passes stay within it, where a cache is the same as a full pass.
                      Variant{"Phi3LongRope", {"position=rope", "norm=rmsnorm", "activation=swiglu", "n_kv_heads=1",
                                               "bias=false", "rotary_dim=4", "rope_scaling=longrope",
                                               "rope_original_max_positions=12", "rope_short_factor=[1, 1.5]",
                                               "rope_long_factor=[3, 9]"}},
                      // Mixtures of experts: Mixtral's top 2 in every layer; Qwen3-MoE's raw top 1
                      // with a dense layer.
                      Variant{"MixtralExperts", {"position=rope", "norm=rmsnorm", "activation=swiglu", "n_kv_heads=2",
                                                 "bias=false", "experts=4", "experts_per_token=2"}},
                      Variant{"Qwen3MoeExperts", {"position=rope", "norm=rmsnorm", "activation=swiglu", "qk_norm=true",
                                                  "bias=false", "experts=8", "experts_per_token=1", "expert_d_ff=16",
                                                  "normalize_expert_weights=false", "dense_layers=[0]"}},
                      // Gemma: sandwich (1 + weight) norms, scaled embeddings, scores over 12 soft-capped
                      // at 2, logits at 3, a window of 3 in layer 0 with its own RoPE base, q/k norms.
                      Variant{"GemmaCapsAndWindows", {"position=rope", "norm=rmsnorm_plus_one", "norm_position=sandwich",
                                                      "activation=geglu_tanh", "n_kv_heads=2", "bias=false",
                                                      "scale_embeddings=true", "qk_norm=true", "attention_scale_dim=12",
                                                      "attention_softcap=2", "logit_softcap=3", "window=3",
                                                      "window_layers=[0]", "window_rope_base=1000"}},
                      Variant{"PostNorm", {"norm_position=post"}},
                      Variant{"LinearElu", {"attention=linear"}},
                      Variant{"LinearPerformer", {"attention=linear", "feature_map=performer", "performer_features=32"}},
                      Variant{"GatedLinear", {"attention=gated_linear"}},
                      Variant{"LlamaGatedLinear", {"position=none", "norm=rmsnorm", "activation=swiglu", "bias=false",
                                                   "tie_embeddings=false", "attention=gated_linear"}},
                      Variant{"HybridRope", {"position=rope", "attention_layers=[gated_linear, softmax]"}}),
    [](const auto& info) { return std::string(info.param.name); });

// Linear and gated linear layers decode as a recurrence: every position's logits, one token at a
// time from an empty state, equal the parallel (chunkwise) forward's over 70 tokens (two chunks).
TEST(GPT, RecurrentDecodingEqualsTheParallelForwardAtEveryPosition) {
  for (const auto& overrides : std::vector<std::vector<std::string>>{
           {"attention=gated_linear", "max_positions=128"},
           {"attention=linear", "max_positions=128"},
           {"attention_layers=[softmax, gated_linear]", "max_positions=128"}}) {
    auto model = tiny_gpt(overrides);
    torch::NoGradGuard no_grad;
    auto ids = torch::randint(97, {2, 70}, torch::kLong);
    auto full = model->forward(ids);
    KVCache cache = model->make_cache();
    std::vector<torch::Tensor> steps;
    for (int64_t i = 0; i < 70; ++i) steps.push_back(model->forward(ids.narrow(1, i, 1), {}, &cache));
    const double scale = full.abs().max().item<double>();
    EXPECT_LE(max_abs_diff(torch::cat(steps, 1), full) / scale, 1e-5) << overrides[0];
    EXPECT_EQ(cache.seen(), 70);
  }
}

TEST(GPT, LinearLayersKeepAStateNotKeys) {
  auto model = tiny_gpt({"attention_layers=[gated_linear, softmax]"});
  torch::NoGradGuard no_grad;
  KVCache cache = model->make_cache();
  model->forward(torch::randint(97, {1, 30}, torch::kLong), {}, &cache);
  EXPECT_FALSE(cache.self_attention(0).keys().defined());
  ASSERT_TRUE(cache.self_attention(0).state().defined());
  // (B, H, Dk, Dv): 4 heads, key width d_model / 2 = 16, value width 32.
  EXPECT_EQ(cache.self_attention(0).state().sizes(), torch::IntArrayRef({1, 4, 4, 8}));
  EXPECT_EQ(cache.self_attention(1).keys().size(2), 30);
  EXPECT_EQ(cache.seen(), 30);
}

TEST(GPT, LlamaLayoutHasNoBiasesAndAnUntiedHead) {
  auto model = tiny_gpt({"position=rope", "norm=rmsnorm", "activation=swiglu", "bias=false",
                         "tie_embeddings=false", "n_kv_heads=2"});
  for (const auto& p : model->named_parameters()) {
    EXPECT_EQ(p.key().find("bias"), std::string::npos) << p.key();
  }
  ASSERT_TRUE(model->lm_head);
  EXPECT_FALSE(model->positions->learned);
  // q: 4 heads of 8, k and v: 2 heads of 8.
  EXPECT_EQ(model->named_parameters()["blocks.0.self_attn.qkv.weight"].size(0), 32 + 2 * 16);
}

TEST(GPT, TiedHeadIsTheEmbeddingMatrix) {
  auto model = tiny_gpt();
  EXPECT_FALSE(model->lm_head);
  torch::NoGradGuard no_grad;
  auto ids = torch::randint(97, {1, 4}, torch::kLong);
  auto hidden = model->hidden_states(ids);
  EXPECT_LE(max_abs_diff(model->forward(ids), torch::matmul(hidden, model->token_embedding->weight.t())), 1e-5);
}

TEST(GPT, TooLongInputNamesTheLimit) {
  auto model = tiny_gpt();
  try {
    model->forward(torch::zeros({1, 65}, torch::kLong));
    FAIL();
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot forward 65 tokens, max_positions is 64"), std::string::npos);
  }
}

TEST(GPT, BackwardReachesEveryParameter) {
  auto model = tiny_gpt({"position=relative", "tie_embeddings=false"});
  model->train();
  auto ids = torch::randint(97, {2, 6}, torch::kLong);
  torch::nn::functional::cross_entropy(model->forward(ids).view({-1, 97}), ids.view(-1)).backward();
  for (const auto& p : model->named_parameters()) {
    ASSERT_TRUE(p.value().grad().defined()) << p.key();
    EXPECT_GT(p.value().grad().abs().sum().item<double>(), 0.0) << p.key();
  }
}

}  // namespace
}  // namespace zoo
