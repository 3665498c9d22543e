#include "models/bert.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "test_util.h"

namespace zoo {
namespace {

using testing::max_abs_diff;

Bert tiny_bert(const std::vector<std::string>& overrides = {}) {
  auto config = testing::tiny_config("bert", {"vocab_size=50", "max_positions=32"});
  apply_overrides(config, overrides);
  Bert model(config);
  model->eval();
  return model;
}

TEST(Bert, EncoderOutputDependsOnLaterTokens) {
  auto model = tiny_bert();
  torch::NoGradGuard no_grad;
  auto ids = torch::randint(1, 50, {1, 8}, torch::kLong);
  auto changed = ids.clone();
  changed[0][7] = (ids[0][7].item<int64_t>() % 49) + 1;
  EXPECT_GT(max_abs_diff(model->forward(ids).sequence_output.narrow(1, 0, 7),
                         model->forward(changed).sequence_output.narrow(1, 0, 7)),
            1e-4);
}

TEST(Bert, PaddedBatchEqualsEachSequenceAlone) {
  for (auto overrides : std::vector<std::vector<std::string>>{{}, {"position=relative"}, {"position=alibi"}, {"position=rope"}}) {
    auto model = tiny_bert(overrides);
    torch::NoGradGuard no_grad;
    auto a = torch::randint(1, 50, {1, 8}, torch::kLong);
    auto b = torch::randint(1, 50, {1, 5}, torch::kLong);
    auto ids = torch::zeros({2, 8}, torch::kLong);
    ids[0].copy_(a[0]);
    ids[1].narrow(0, 0, 5).copy_(b[0]);
    auto mask = torch::ones({2, 8}, torch::kLong);
    mask[1].narrow(0, 5, 3).fill_(0);
    auto batch = model->forward(ids, mask);
    auto alone_a = model->forward(a), alone_b = model->forward(b);
    EXPECT_LE(max_abs_diff(batch.sequence_output[0], alone_a.sequence_output[0]), 1e-5);
    EXPECT_LE(max_abs_diff(batch.sequence_output[1].narrow(0, 0, 5), alone_b.sequence_output[0]), 1e-5);
    EXPECT_LE(max_abs_diff(batch.pooled_output[1], alone_b.pooled_output[0]), 1e-5);
  }
}

// ModernBERT's layout (a config of the same layers): no segments, no norm before layer 0's
// attention, a two-sided window in layer 1, mean pooling through a head transform. Its parity
// with transformers is tests/interop/hugging_face_test.cpp's; here each piece is its plain maths.
TEST(Bert, ModernBertLayoutIsItsPlainMaths) {
  auto model = tiny_bert({"norm_position=pre", "first_attention_norm=false", "type_vocab_size=0", "position=rope",
                          "activation=geglu", "bias=false", "window=3", "window_layers=[1]", "window_rope_base=100",
                          "pooler=false", "head=sequence_classification", "head_transform=true", "pooling=mean",
                          "num_labels=3", "max_positions=300"});
  EXPECT_FALSE(model->blocks[0]->as<TransformerBlockImpl>()->self_attn_norm);
  EXPECT_TRUE(model->blocks[1]->as<TransformerBlockImpl>()->self_attn_norm);
  EXPECT_FALSE(model->token_type_embedding);
  EXPECT_EQ(model->blocks[0]->as<TransformerBlockImpl>()->self_attn->options.window(), std::nullopt);
  EXPECT_EQ(model->blocks[1]->as<TransformerBlockImpl>()->self_attn->options.window(), 3);
  torch::NoGradGuard no_grad;
  auto ids = torch::randint(1, 50, {2, 9}, torch::kLong);
  auto mask = torch::ones({2, 9}, torch::kLong);
  mask[1].narrow(0, 6, 3).fill_(0);
  const auto out = model->forward(ids, mask, torch::ones_like(ids));  // segments are ignored
  EXPECT_FALSE(out.pooled_output.defined());
  const auto& x = out.sequence_output;
  const auto mean = torch::stack({x[0].mean(0), x[1].narrow(0, 0, 6).mean(0)});
  auto h = model->head_transform->norm->forward(torch::gelu(model->head_transform->dense->forward(mean)));
  EXPECT_LE(max_abs_diff(out.logits, model->classifier->forward(h)), 1e-5);

  // Layer 0's attention reads the embeddings' output as it is: the first block is x + attn(x) + ff.
  auto& first = *model->blocks[0]->as<TransformerBlockImpl>();
  const auto e = model->embedding_norm->forward(model->token_embedding->forward(ids.narrow(0, 0, 1)));
  const auto bias = build_attention_bias(AttentionCall{}, AttentionMasks{.queries = 9, .keys = 9}, e);
  const auto after_attention = e + first.self_attn->forward(e, bias);
  const auto expected = after_attention + first.ff->forward(first.ff_norm->forward(after_attention));
  EXPECT_LE(max_abs_diff(first.forward(e, bias), expected), 1e-5);

  // On a long input the tiled kernel's two-sided window agrees with the math path's band mask.
  auto long_ids = torch::randint(1, 50, {1, 260}, torch::kLong);
  model->config.attention_backend = AttentionBackend::kTiled;
  const auto tiled = model->forward(long_ids).sequence_output;
  model->config.attention_backend = AttentionBackend::kMath;
  const auto math = model->forward(long_ids).sequence_output;
  EXPECT_LE(max_abs_diff(tiled, math), 1e-4);
}

TEST(Bert, PoolerIsTanhDenseOfTheFirstToken) {
  auto model = tiny_bert();
  torch::NoGradGuard no_grad;
  auto out = model->forward(torch::randint(50, {2, 6}, torch::kLong));
  EXPECT_LE(max_abs_diff(out.pooled_output, torch::tanh(model->pooler->forward(out.sequence_output.select(1, 0)))), 1e-6);
}

TEST(Bert, SegmentsChangeTheEmbedding) {
  auto model = tiny_bert();
  torch::NoGradGuard no_grad;
  auto ids = torch::randint(50, {1, 6}, torch::kLong);
  auto types = torch::tensor({{0, 0, 0, 1, 1, 1}}, torch::kLong);
  EXPECT_GT(max_abs_diff(model->forward(ids).sequence_output, model->forward(ids, {}, types).sequence_output), 1e-4);
}

TEST(Bert, HeadsProduceTheirShapes) {
  auto ids = torch::randint(50, {2, 6}, torch::kLong);
  torch::NoGradGuard no_grad;
  auto mlm = tiny_bert({"head=mlm"});
  auto out = mlm->forward(ids);
  EXPECT_EQ(out.logits.sizes(), (std::vector<int64_t>{2, 6, 50}));
  // The MLM decoder is tied to the word embeddings, with its own bias.
  auto h = mlm->mlm_head->norm->forward(torch::gelu(mlm->mlm_head->dense->forward(out.sequence_output)));
  EXPECT_LE(max_abs_diff(out.logits, torch::matmul(h, mlm->token_embedding->weight.t()) + mlm->mlm_head->bias), 1e-5);
  EXPECT_EQ(tiny_bert({"head=nsp"})->forward(ids).logits.sizes(), (std::vector<int64_t>{2, 2}));
  auto pre = tiny_bert({"head=pretraining"})->forward(ids);
  EXPECT_EQ(pre.logits.sizes(), (std::vector<int64_t>{2, 6, 50}));
  EXPECT_EQ(pre.nsp_logits.sizes(), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(tiny_bert({"head=sequence_classification", "num_labels=3"})->forward(ids).logits.sizes(),
            (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(tiny_bert({"head=token_classification", "num_labels=5"})->forward(ids).logits.sizes(),
            (std::vector<int64_t>{2, 6, 5}));
}

TEST(Bert, MismatchedMaskIsAnError) {
  auto model = tiny_bert();
  EXPECT_THROW(model->forward(torch::zeros({2, 6}, torch::kLong), torch::ones({2, 5})), c10::Error);
}

}  // namespace
}  // namespace zoo
