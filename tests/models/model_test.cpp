#include "models/model.h"

#include <filesystem>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "models/parameter_count.h"
#include "test_util.h"

namespace zoo {
namespace {

int64_t count_for(const std::string& name, const std::vector<std::string>& overrides = {}) {
  auto config = load_config(find_config(name));
  for (const auto& o : overrides) apply_override(config, o);
  return count_parameters(*build_model(config).module());
}

// The counts Hugging Face's reference implementations report for the same configurations
// (model.num_parameters(), tied weights once).
TEST(ParameterCount, Gpt2SmallMatchesGPT2LMHeadModel) { EXPECT_EQ(count_for("gpt2-small"), 124439808); }
TEST(ParameterCount, Gpt2MediumMatchesGPT2LMHeadModel) { EXPECT_EQ(count_for("gpt2-medium"), 354823168); }
TEST(ParameterCount, BertBaseMatchesBertModelWithPooler) { EXPECT_EQ(count_for("bert-base"), 109482240); }
TEST(ParameterCount, BertBaseMlmMatchesBertForMaskedLM) {
  // BertForMaskedLM has no pooler; its MLM head adds dense + LayerNorm + an output bias.
  EXPECT_EQ(count_for("bert-base", {"head=mlm", "pooler=false"}), 109514298);
}
TEST(ParameterCount, T5SmallMatchesT5ForConditionalGeneration) { EXPECT_EQ(count_for("t5-small"), 60506624); }
TEST(ParameterCount, T5V11SmallByHand) {
  // Embedding and untied head 2 x 32128 x 512; 8 encoder blocks of q, k, v, o (512 x 384 each
  // way), two 512 x 1024 gated inputs and a 1024 x 512 output, two norms; 8 decoder blocks
  // with one more attention and norm; a 32 x 6 relative bias per stack; two final norms.
  const int64_t attn = 4 * 512 * 384, ff = 3 * 512 * 1024;
  const int64_t enc = 8 * (attn + ff + 2 * 512), dec = 8 * (2 * attn + ff + 3 * 512);
  EXPECT_EQ(count_for("t5-v1_1-small"), 2 * 32128 * 512 + enc + dec + 2 * 32 * 6 + 2 * 512);
}
TEST(ParameterCount, TiedHeadSharesTheEmbedding) {
  EXPECT_EQ(count_for("gpt2-small", {"tie_embeddings=false"}) - count_for("gpt2-small"), 50257 * 768);
}

// Every shipped config builds and maps tokens to logits of the right shape; those of real models
// past 400 M parameters at test size.
TEST(ShippedConfigs, EveryConfigBuildsAndRuns) {
  const auto dir = std::filesystem::path(ZOO_SOURCE_DIR) / "configs";
  int seen = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".yaml") continue;
    ++seen;
    SCOPED_TRACE(entry.path().filename().string());
    auto config = load_config(entry.path().string());
    if (count_parameters(config) > 400'000'000) config = testing::at_test_size(config);
    auto model = build_model(config);
    model.module()->eval();
    torch::NoGradGuard no_grad;
    auto ids = torch::randint(config.vocab_size, {2, 7}, torch::kLong);
    const auto v = config.vocab_size;
    if (model.gpt) {
      EXPECT_EQ(model.gpt->forward(ids).sizes(), (std::vector<int64_t>{2, 7, v}));
    } else if (model.bert) {
      auto out = model.bert->forward(ids);
      EXPECT_EQ(out.sequence_output.sizes(), (std::vector<int64_t>{2, 7, config.d_model}));
      if (config.pooler) EXPECT_EQ(out.pooled_output.sizes(), (std::vector<int64_t>{2, config.d_model}));
      if (config.head == BertHead::kMaskedLM) EXPECT_EQ(out.logits.sizes(), (std::vector<int64_t>{2, 7, v}));
    } else {
      auto dec = torch::randint(config.vocab_size, {2, 3}, torch::kLong);
      EXPECT_EQ(model.seq2seq->forward(ids, {}, dec).sizes(), (std::vector<int64_t>{2, 3, v}));
    }
  }
  EXPECT_EQ(seen, 21);
}

TEST(ShippedConfigs, DescribeNamesTheVariants) {
  auto text = describe(load_config(find_config("mistral-tiny")));
  EXPECT_NE(text.find("GQA"), std::string::npos) << text;
  EXPECT_NE(text.find("sliding window 64"), std::string::npos) << text;
  EXPECT_NE(text.find("rmsnorm (pre-norm"), std::string::npos) << text;
  auto scaled = load_config(find_config("llama-tiny"));
  for (const char* o : {"rope_scaling=llama3", "rope_scaling_factor=32", "qkv_bias=true"}) apply_override(scaled, o);
  text = describe(scaled);
  EXPECT_NE(text.find("position: rope (llama3 scaling x32)"), std::string::npos) << text;
  EXPECT_NE(text.find("bias: q/k/v only, head: untied"), std::string::npos) << text;
}

TEST(Initialisation, FollowsEachFamilysRecipe) {
  torch::manual_seed(0);
  // GPT-2: N(0, 0.02), residual projections N(0, 0.02 / sqrt(2 * n_layers)).
  auto gpt = build_model(load_config(find_config("gpt2-small"))).gpt;
  auto std_of = [](const torch::Tensor& t) { return t.std().item<double>(); };
  EXPECT_NEAR(std_of(gpt->token_embedding->weight), 0.02, 0.001);
  auto params = gpt->named_parameters();
  EXPECT_NEAR(std_of(params["blocks.0.self_attn.qkv.weight"]), 0.02, 0.001);
  EXPECT_NEAR(std_of(params["blocks.3.self_attn.out.weight"]), 0.02 / std::sqrt(24.0), 0.0005);
  EXPECT_NEAR(std_of(params["blocks.3.ff.down.weight"]), 0.02 / std::sqrt(24.0), 0.0005);
  EXPECT_EQ(params["blocks.0.self_attn.qkv.bias"].abs().max().item<double>(), 0.0);
  EXPECT_EQ(params["final_norm.weight"].min().item<double>(), 1.0);
  // T5: q ~ (d_model * d_kv)^-0.5, k and v ~ d_model^-0.5, o ~ (heads * d_kv)^-0.5, embedding ~ 1.
  auto t5 = build_model(load_config(find_config("t5-small"))).seq2seq;
  auto t5p = t5->named_parameters();
  auto qkv = t5p["encoder_blocks.0.self_attn.qkv.weight"];
  EXPECT_NEAR(std_of(qkv.narrow(0, 0, 512)), 1.0 / std::sqrt(512.0 * 64), 0.001);
  EXPECT_NEAR(std_of(qkv.narrow(0, 512, 1024)), 1.0 / std::sqrt(512.0), 0.002);
  EXPECT_NEAR(std_of(t5p["encoder_blocks.0.self_attn.out.weight"]), 1.0 / std::sqrt(512.0), 0.002);
  EXPECT_NEAR(std_of(t5p["encoder_blocks.0.ff.down.weight"]), 1.0 / std::sqrt(2048.0), 0.001);
  EXPECT_NEAR(std_of(t5->token_embedding->weight), 1.0, 0.01);
  // BERT and the Transformer zero the padding row of the token embedding.
  auto bert = build_model(load_config(find_config("bert-tiny"))).bert;
  EXPECT_EQ(bert->token_embedding->weight[0].abs().sum().item<double>(), 0.0);
}

// Every family moves with .to(device, dtype) and computes the same function there.
class ModelDeviceTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ModelDeviceTest, EveryFamilyMovesAndAgrees) {
  ZOO_SKIP_IF_UNAVAILABLE(GetParam());
  const torch::Device device(GetParam());
  // On CPU, double precision stands in for "another place": every table and bias must follow.
  const auto dtype = device.is_cuda() ? torch::kFloat : torch::kDouble;
  for (const char* name : {"gpt-tiny", "llama-tiny", "mistral-tiny", "bert-tiny", "t5-tiny"}) {
    SCOPED_TRACE(name);
    auto config = load_config(find_config(name));
    config.dropout = config.attention_dropout = 0.0;
    auto model = build_model(config);
    model.module()->eval();
    torch::NoGradGuard no_grad;
    auto ids = torch::randint(config.vocab_size, {2, 9}, torch::kLong);
    auto mask = torch::ones({2, 9}, torch::kLong);
    mask[1].narrow(0, 0, 3).fill_(0);
    auto run = [&](const torch::Tensor& i, const torch::Tensor& m) {
      if (model.gpt) return model.gpt->forward(i, m);
      if (model.bert) return model.bert->forward(i, m).logits;
      return model.seq2seq->forward(i, m, i.narrow(1, 0, 4));
    };
    auto reference = run(ids, mask);
    model.module()->to(device, dtype);
    auto moved = run(ids.to(device), mask.to(device));
    EXPECT_EQ(moved.device().type(), device.type());
    EXPECT_EQ(moved.scalar_type(), dtype);
    // Every position a real token holds agrees. A causal model's padded positions attend to no
    // key at all: what they hold is undefined (as in transformers) and kernels may differ there (an
    // H200 run differed by 0.92), so they need only be finite.
    const bool causal = static_cast<bool>(model.gpt);
    auto real = [&](const torch::Tensor& y) { return causal ? y[1].narrow(0, 3, 6).cpu() : y.cpu(); };
    EXPECT_LE(testing::max_abs_diff(real(moved).to(torch::kDouble), real(reference)), 1e-3);
    if (causal) EXPECT_LE(testing::max_abs_diff(moved[0].cpu().to(torch::kDouble), reference[0]), 1e-3);
    EXPECT_TRUE(torch::isfinite(moved).all().item<bool>());
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, ModelDeviceTest, ::testing::ValuesIn(testing::test_devices()));

}  // namespace
}  // namespace zoo
