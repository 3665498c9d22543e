#include "layers/linear_attention.h"

#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace zoo {
namespace {

struct Case {
  std::string name;
  LinearAttentionOptions options;
};

std::vector<Case> cases() {
  const int64_t d = 32, h = 4;
  auto linear = [&](FeatureMap map, bool normalize) {
    return LinearAttentionOptions(d, h, AttentionKind::kLinear).feature_map(map).normalize(normalize).performer_features(24);
  };
  return {{"elu1", linear(FeatureMap::kElu1, true)},
          {"elu1 unnormalised", linear(FeatureMap::kElu1, false)},
          {"relu", linear(FeatureMap::kRelu, true)},
          {"performer", linear(FeatureMap::kPerformer, true)},
          {"gated_linear", LinearAttentionOptions(d, h, AttentionKind::kGatedLinear).key_dim(16).value_dim(32).gate_rank(4)}};
}

double max_diff(const torch::Tensor& a, const torch::Tensor& b) { return (a - b).abs().max().item<double>(); }

TEST(LinearAttentionLayer, DecodingStepByStepEqualsTheWholeSequence) {
  torch::NoGradGuard no_grad;
  for (const auto& c : cases()) {
    torch::manual_seed(0);
    LinearAttention layer(c.options);
    const auto x = torch::randn({2, 40, 32});
    const auto whole = layer->forward(x);
    // A prompt of 20 (the chunked form, from an empty state), then one token at a time.
    AttentionCache cache;
    std::vector<torch::Tensor> parts{layer->forward(x.narrow(1, 0, 20), {}, &cache)};
    for (int64_t i = 20; i < 40; ++i) parts.push_back(layer->forward(x.narrow(1, i, 1), {}, &cache));
    EXPECT_LT(max_diff(torch::cat(parts, 1), whole), 1e-5) << c.name;
    EXPECT_EQ(cache.seen(), 40) << c.name;
    EXPECT_FALSE(cache.keys().defined()) << c.name << ": no keys are kept";
  }
}

TEST(LinearAttentionLayer, LeftPaddingChangesNothingAtTheRealTokens) {
  torch::NoGradGuard no_grad;
  for (const auto& c : cases()) {
    torch::manual_seed(1);
    LinearAttention layer(c.options);
    const auto x = torch::randn({1, 12, 32});
    const auto alone = layer->forward(x);
    const auto padded = torch::cat({torch::randn({1, 5, 32}), x}, 1);
    const auto mask = torch::cat({torch::zeros({1, 5}), torch::ones({1, 12})}, 1).to(torch::kLong);
    const auto got = layer->forward(padded, mask).narrow(1, 5, 12);
    EXPECT_LT(max_diff(got, alone), 1e-5) << c.name;
  }
}

// The gated layer written out from its definition (Yang et al., 2024, and flash-linear-
// attention's GLA layer), token by token with the module's own weights.
TEST(LinearAttentionLayer, GatedLayerMatchesItsDefinition) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(2);
  const auto options = LinearAttentionOptions(32, 4, AttentionKind::kGatedLinear).key_dim(16).value_dim(32).gate_rank(4);
  LinearAttention layer(options);
  const auto x = torch::randn({1, 9, 32}, torch::kDouble);
  layer->to(torch::kDouble);
  const auto got = layer->forward(x);
  const auto W = [](const torch::nn::Linear& l) { return l->weight; };
  const int64_t h = 4, dk = 4, dv = 8;
  std::vector<torch::Tensor> rows;
  auto state = torch::zeros({h, dk, dv}, torch::kDouble);
  for (int64_t t = 0; t < 9; ++t) {
    const auto xt = x[0][t];
    const auto q = torch::mv(W(layer->q), xt).view({h, dk}), k = torch::mv(W(layer->k), xt).view({h, dk});
    const auto v = torch::mv(W(layer->v), xt).view({h, dv});
    const auto u = torch::mv(W(layer->decay_up), torch::mv(W(layer->decay_down), xt)) + layer->decay_up->bias;
    const auto alpha = torch::sigmoid(u).pow(1.0 / 16.0).view({h, dk});
    state = alpha.unsqueeze(-1) * state + k.unsqueeze(-1) * v.unsqueeze(-2);
    const auto o = (q.unsqueeze(-1) / std::sqrt(4.0) * state).sum(1);  // (h, dv)
    const auto normed = o / (o.pow(2).mean(-1, true) + 1e-5).sqrt() * layer->head_norm->weight;
    const auto gate = torch::mv(W(layer->gate), xt).view({h, dv});
    rows.push_back(torch::mv(W(layer->out), (normed * gate * torch::sigmoid(gate)).reshape({h * dv})));
  }
  EXPECT_LT(max_diff(got[0], torch::stack(rows)), 1e-10);
}

TEST(LinearAttentionLayer, LinearLayerWithEluFeaturesMatchesItsDefinition) {
  // Katharopoulos et al.: o_t = phi(q_t) sum_j<=t phi(k_j)^T v_j / (phi(q_t) . sum_j<=t phi(k_j)).
  torch::NoGradGuard no_grad;
  torch::manual_seed(3);
  LinearAttention layer(LinearAttentionOptions(16, 2, AttentionKind::kLinear));
  layer->to(torch::kDouble);
  const auto x = torch::randn({1, 7, 16}, torch::kDouble);
  const auto got = layer->forward(x);
  auto heads = [](const torch::Tensor& y) { return y.view({7, 2, 8}).transpose(0, 1); };  // (h, T, 8)
  auto phi = [](const torch::Tensor& y) { return torch::elu(y) + 1; };
  const auto q = phi(heads(layer->q->forward(x)[0])), k = phi(heads(layer->k->forward(x)[0]));
  const auto v = heads(layer->v->forward(x)[0]);
  const auto scores = torch::matmul(q, k.transpose(1, 2)).tril();  // (h, T, T)
  const auto o = torch::matmul(scores, v) / (scores.sum(-1, true) + 1e-6 * std::sqrt(8.0));
  const auto want = layer->out->forward(o.transpose(0, 1).reshape({7, 16}));
  EXPECT_LT(max_diff(got[0], want), 1e-8);
}

TEST(LinearAttentionLayer, PerformerFeaturesAreStoredWithTheLayer) {
  LinearAttention a(LinearAttentionOptions(16, 2, AttentionKind::kLinear).feature_map(FeatureMap::kPerformer).performer_features(10));
  ASSERT_TRUE(a->features.defined());
  EXPECT_EQ(a->features.sizes(), torch::IntArrayRef({10, 8}));
  bool found = false;
  for (const auto& b : a->named_buffers()) found = found || b.key() == "features";
  EXPECT_TRUE(found);
}

TEST(LinearAttentionLayer, GradientsReachEveryWeight) {
  for (const auto& c : cases()) {
    torch::manual_seed(4);
    LinearAttention layer(c.options);
    const auto x = torch::randn({2, 70, 32}, torch::requires_grad());
    layer->forward(x).pow(2).sum().backward();
    for (const auto& p : layer->named_parameters()) {
      ASSERT_TRUE(p.value().grad().defined()) << c.name << ": " << p.key();
      EXPECT_GT(p.value().grad().abs().sum().item<double>(), 0) << c.name << ": " << p.key();
    }
    EXPECT_TRUE(torch::isfinite(x.grad()).all().item<bool>()) << c.name;
  }
}

TEST(LinearAttentionLayer, BadOptionsAreNamed) {
  auto message = [](const LinearAttentionOptions& o) {
    try {
      o.validate();
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message(LinearAttentionOptions(30, 4, AttentionKind::kLinear)),
            "linear attention: d_model (30) must be divisible by n_heads (4) unless head_dim is set");
  EXPECT_EQ(message(LinearAttentionOptions(32, 4, AttentionKind::kGatedLinear).key_dim(10).value_dim(32)),
            "linear attention: key_dim (10) and value_dim (32) must be positive multiples of n_heads (4)");
  EXPECT_EQ(message(LinearAttentionOptions(32, 4, AttentionKind::kSoftmax)),
            "linear attention: kind softmax is layers/attention.h's");
  EXPECT_EQ(message(LinearAttentionOptions(32, 4, AttentionKind::kLinear).feature_map(FeatureMap::kPerformer).normalize(false)),
            "linear attention: performer needs performer_features >= 1 (got 256) and normalize");
}

}  // namespace
}  // namespace zoo
