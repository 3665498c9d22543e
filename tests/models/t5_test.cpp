#include "models/t5.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/op_profile.h"
#include "models/generation.h"
#include "test_util.h"

namespace zoo {
namespace {

using testing::max_abs_diff;

EncoderDecoder tiny(const std::string& family, const std::vector<std::string>& overrides = {}) {
  auto config = testing::tiny_config(family, {"vocab_size=40"});
  for (const auto& o : overrides) apply_override(config, o);
  EncoderDecoder model(config);
  model->eval();
  return model;
}

class EncoderDecoderTest : public ::testing::TestWithParam<std::vector<std::string>> {};

EncoderDecoder model_for(const std::vector<std::string>& params) {
  std::vector<std::string> overrides(params.begin() + 1, params.end());
  return tiny(params[0], overrides);
}

TEST_P(EncoderDecoderTest, CachedDecodingEqualsFullPass) {
  auto model = model_for(GetParam());
  torch::NoGradGuard no_grad;
  auto src = torch::randint(1, 40, {2, 7}, torch::kLong);
  auto mask = torch::ones({2, 7}, torch::kLong);
  mask[1].narrow(0, 5, 2).fill_(0);
  auto tgt = torch::randint(1, 40, {2, 9}, torch::kLong);
  auto memory = model->encode(src, mask);
  auto full = model->decode(tgt, memory, mask);
  KVCache cache = model->make_cache();
  std::vector<torch::Tensor> steps;
  for (int64_t i = 0; i < 9; ++i) steps.push_back(model->decode(tgt.narrow(1, i, 1), memory, mask, &cache));
  EXPECT_LE(max_abs_diff(torch::cat(steps, 1), full), 1e-4);
  EXPECT_LE(max_abs_diff(model->forward(src, mask, tgt), full), 1e-5);
}

TEST_P(EncoderDecoderTest, CachedGreedyGenerationEqualsUncached) {
  auto model = model_for(GetParam());
  GenerationOptions o;
  o.max_new_tokens = 12;
  o.output_scores = true;
  std::vector<std::vector<int64_t>> sources{{3, 4, 5, 6, 7}, {8, 9}};
  auto cached = generate(model, sources, o);
  o.use_cache = false;
  auto uncached = generate(model, sources, o);
  EXPECT_EQ(cached.tokens, uncached.tokens);
  for (size_t i = 0; i < cached.scores.size(); ++i) {
    EXPECT_LE(max_abs_diff(cached.scores[i], uncached.scores[i]), 1e-4) << "step " << i;
  }
}

TEST_P(EncoderDecoderTest, PaddedSourcesEqualEachAlone) {
  auto model = model_for(GetParam());
  GenerationOptions o;
  o.max_new_tokens = 6;
  o.output_scores = true;
  std::vector<std::vector<int64_t>> sources{{3, 4, 5, 6, 7, 8}, {9, 10}};
  auto batch = generate(model, sources, o);
  for (size_t i = 0; i < sources.size(); ++i) {
    auto alone = generate(model, {sources[i]}, o);
    EXPECT_EQ(batch.tokens[i], alone.tokens[0]);
    EXPECT_LE(max_abs_diff(batch.scores[0][i], alone.scores[0][0]), 1e-4);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Families, EncoderDecoderTest,
    ::testing::Values(std::vector<std::string>{"t5"},
                      std::vector<std::string>{"t5", "activation=geglu_tanh", "tie_embeddings=false", "head_dim=16"},
                      std::vector<std::string>{"transformer"},
                      std::vector<std::string>{"transformer", "position=learned", "norm_position=pre"}),
    [](const auto& info) { return std::to_string(info.index) + info.param[0]; });

TEST(EncoderDecoder, T5TiedHeadIsScaledByInverseSqrtDModel) {
  auto model = tiny("t5");
  torch::NoGradGuard no_grad;
  auto src = torch::randint(40, {1, 4}, torch::kLong);
  auto tgt = torch::randint(40, {1, 3}, torch::kLong);
  auto logits = model->forward(src, {}, tgt);
  // Undo the head: the untied variant with lm_head = embedding gives logits * sqrt(d_model).
  auto untied = tiny("t5", {"tie_embeddings=false"});
  testing::copy_parameters(*untied, *model);  // copies every shared name; lm_head stays
  {
    torch::NoGradGuard g;
    untied->lm_head->weight.copy_(model->token_embedding->weight);
  }
  EXPECT_LE(max_abs_diff(untied->forward(src, {}, tgt) / std::sqrt(32.0), logits), 1e-5);
}

TEST(EncoderDecoder, T5SharesOneRelativeBiasPerStack) {
  auto model = tiny("t5");
  int tables = 0;
  for (const auto& p : model->named_parameters()) tables += p.key().find("relative_attention_bias") != std::string::npos;
  EXPECT_EQ(tables, 2);  // encoder (bidirectional) and decoder (causal)
  EXPECT_TRUE(model->encoder_positions->relative->options.bidirectional());
  EXPECT_FALSE(model->decoder_positions->relative->options.bidirectional());
}

TEST(EncoderDecoder, TransformerBaseSharesEmbeddingsAndScalesThem) {
  auto model = tiny("transformer");
  EXPECT_FALSE(model->lm_head);
  EXPECT_FALSE(model->encoder_final_norm);  // post-norm: no final norms
  EXPECT_TRUE(model->encoder_positions->sinusoidal);
  EXPECT_TRUE(model->config.scale_embeddings);
}

TEST(EncoderDecoder, DecoderIsCausalEncoderIsNot) {
  auto model = tiny("t5");
  torch::NoGradGuard no_grad;
  auto src = torch::randint(1, 40, {1, 6}, torch::kLong);
  auto tgt = torch::randint(1, 40, {1, 6}, torch::kLong);
  auto memory = model->encode(src);
  auto changed_tgt = tgt.clone();
  changed_tgt[0][5] = (tgt[0][5].item<int64_t>() % 39) + 1;
  EXPECT_LE(max_abs_diff(model->decode(tgt, memory).narrow(1, 0, 5),
                         model->decode(changed_tgt, memory).narrow(1, 0, 5)), 1e-6);
  auto changed_src = src.clone();
  changed_src[0][5] = (src[0][5].item<int64_t>() % 39) + 1;
  EXPECT_GT(max_abs_diff(model->encode(changed_src).narrow(1, 0, 5), memory.narrow(1, 0, 5)), 1e-4);
}

// Decoder positions counted from a mask (left-padded rows, as serve's batches have) are below the
// mask's length: the Transformer's sinusoidal table takes them without reading them back, and a
// mask whose positions run past max_positions is refused before any is computed.
TEST(EncoderDecoder, DecoderPositionsFromAMaskAreNotReadBack) {
  auto model = tiny("transformer", {"max_positions=16"});
  torch::NoGradGuard no_grad;
  const auto memory = model->encode(torch::randint(1, 40, {2, 5}, torch::kLong));
  const auto tgt = torch::randint(1, 40, {2, 4}, torch::kLong);
  const auto mask = torch::tensor({{0, 1, 1, 1}, {1, 1, 1, 1}}, torch::kLong);
  torch::Tensor padded;
  const auto ops = profile_ops([&] { padded = model->decode(tgt, memory, {}, nullptr, mask); });
  EXPECT_EQ(synchronizing_calls(ops), 0) << describe_synchronizing(ops);
  // The padded row's last three tokens sit at positions 0..2, as the same tokens alone.
  const auto alone = model->decode(tgt.narrow(0, 0, 1).narrow(1, 1, 3), memory.narrow(0, 0, 1));
  EXPECT_LE(max_abs_diff(padded.narrow(0, 0, 1).narrow(1, 1, 3), alone), 1e-5);
  EXPECT_NE(testing::error_of([&] {
              model->decode(torch::ones({1, 17}, torch::kLong), memory.narrow(0, 0, 1), {}, nullptr,
                            torch::ones({1, 17}, torch::kLong));
            }).find("max_positions is 16"),
            std::string::npos);
}

}  // namespace
}  // namespace zoo
