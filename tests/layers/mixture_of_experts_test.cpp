#include "layers/mixture_of_experts.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "test_util.h"

namespace zoo {
namespace {

using testing::max_abs_diff;

// The grouped computation (one group per expert) equals the token-by-token reference, forward and
// backward, renormalised top 2 of 6 and the raw top 1 of 4.
TEST(MixtureOfExperts, GroupedByExpertEqualsTokenByToken) {
  for (const auto& [experts, top_k, normalize] : {std::tuple{6, 2, true}, std::tuple{4, 1, false}}) {
    SCOPED_TRACE(c10::str(experts, " experts, top ", top_k));
    torch::manual_seed(3);
    MixtureOfExperts moe(MixtureOfExpertsOptions(8, 12, experts, top_k).normalize_top_k(normalize));
    for (auto& p : moe->parameters()) p.data().mul_(20.0);  // past init's scale: clear routing choices
    auto x = torch::randn({3, 7, 8}, torch::kDouble).requires_grad_(true);
    moe->to(torch::kDouble);
    const auto fast = moe->forward(x);
    EXPECT_EQ(fast.out.sizes(), x.sizes());
    EXPECT_EQ(fast.router_logits.sizes(), (std::vector<int64_t>{21, experts}));
    const auto slow = mixture_of_experts_reference(*moe, x);
    EXPECT_LE(max_abs_diff(fast.out, slow), 1e-9);
    const auto probe = torch::randn_like(slow);
    const auto params = std::vector<torch::Tensor>{x, moe->router, moe->gate_up, moe->down};
    const auto fast_grads = torch::autograd::grad({(fast.out * probe).sum()}, params);
    const auto slow_grads = torch::autograd::grad({(slow * probe).sum()}, params);
    for (size_t i = 0; i < params.size(); ++i) EXPECT_LE(max_abs_diff(fast_grads[i], slow_grads[i]), 1e-9) << i;
  }
}

// Quantized experts (#49): gate_up and down quantize with the model's weights as the 2-D weights of
// all their rows, and the layer computes what the same layer computes over those weights
// dequantized (the float layer equals the reference, above): forward, and with LoRA adapters on
// every expert (QLoRA) their gradients and the input's, the packed base taking none.
TEST(MixtureOfExperts, QuantizedExpertsComputeTheirDequantizedWeights) {
  for (const auto format : {WeightFormat::kInt8, WeightFormat::kInt4}) {
    SCOPED_TRACE(to_string(format));
    const auto make = [] {  // the same layer each time
      torch::manual_seed(5);
      MixtureOfExperts layer(MixtureOfExpertsOptions(32, 64, 4, 2));
      for (auto& p : layer->parameters()) p.data().mul_(20.0);  // clear routing choices
      layer->add_lora("gate_up", 4, 8.0);
      layer->add_lora("down", 4, 8.0);
      for (auto& p : layer->named_parameters()) {
        if (p.key().ends_with(".B")) p.value().data().normal_(0, 0.5);  // B != 0: the adapters count
      }
      return layer;
    };
    auto moe = make(), plain = make();
    const auto summary = quantize_model_weights(*moe, WeightQuantization::every_weight(format));
    EXPECT_EQ(summary.stacks, 2);
    EXPECT_EQ(summary.linears, 0);
    EXPECT_EQ(moe->gate_up.numel(), 0);
    EXPECT_EQ(moe->down.numel(), 0);
    {
      torch::NoGradGuard no_grad;
      const auto gate_up = quantized_weight_of(*moe, moe->gate_up), down = quantized_weight_of(*moe, moe->down);
      ASSERT_TRUE(gate_up && down);
      EXPECT_EQ(gate_up->out_features(), 4 * 128);
      EXPECT_EQ(down->in_features(), 64);
      plain->gate_up.copy_(dequantize_weight(*gate_up).view({4, 128, 32}));
      plain->down.copy_(dequantize_weight(*down).view({4, 32, 64}));
    }
    const auto x = torch::randn({3, 5, 32});
    const auto xq = x.clone().requires_grad_(true), xf = x.clone().requires_grad_(true);
    // The two sides sum the same float32 products (at most 2 d_ff = 128 a value) in different
    // orders: each is off the exact sum by up to 128 epsilons (7.6e-6) of the largest terms.
    const auto close = [](const torch::Tensor& got, const torch::Tensor& want) {
      return max_abs_diff(got, want) <= 1e-5 * want.abs().max().item<double>();
    };
    const auto quantized = moe->forward(xq).out, reference = plain->forward(xf).out;
    EXPECT_TRUE(close(quantized, reference)) << max_abs_diff(quantized, reference);
    const auto probe = torch::randn_like(reference);
    (quantized * probe).sum().backward();
    (reference * probe).sum().backward();
    EXPECT_TRUE(close(xq.grad(), xf.grad())) << max_abs_diff(xq.grad(), xf.grad());
    const auto adapters = moe->named_parameters(), float_adapters = plain->named_parameters();
    for (const auto& p : adapters) {
      if (p.key().rfind("lora_", 0) != 0) continue;
      const auto& want = float_adapters[p.key()].grad();
      EXPECT_TRUE(close(p.value().grad(), want)) << p.key() << ": " << max_abs_diff(p.value().grad(), want);
    }
    EXPECT_FALSE(moe->gate_up.grad().defined());
  }
}

// transformers' MixtralSparseMoeBlock (8 experts, top 2 renormalised) and Qwen3MoeSparseMoeBlock
// (4 experts, top 1 raw) on the same weights: outputs, router logits, gradients, and
// load_balancing_loss_func over two layers' logits with and without a padding mask.
TEST(MixtureOfExperts, MatchesTransformersBlocksAndTheirAuxiliaryLoss) {
  const auto ref = testing::python_reference("moe_reference.py");
  for (const auto& [kind, experts, top_k, normalize] :
       {std::tuple{"mixtral", 8, 2, true}, std::tuple{"qwen3", 4, 1, false}}) {
    SCOPED_TRACE(kind);
    const std::string k = kind;
    MixtureOfExperts moe(MixtureOfExpertsOptions(16, 24, experts, top_k).normalize_top_k(normalize));
    {
      torch::NoGradGuard no_grad;
      moe->router.copy_(ref.at(k + "_router"));
      moe->gate_up.copy_(ref.at(k + "_gate_up"));
      moe->down.copy_(ref.at(k + "_down"));
    }
    auto x = ref.at(k + "_x").clone().requires_grad_(true);
    const auto result = moe->forward(x);
    EXPECT_LE(max_abs_diff(result.out, ref.at(k + "_out")), 1e-5);
    EXPECT_LE(max_abs_diff(result.router_logits, ref.at(k + "_router_logits")), 1e-5);
    (result.out * ref.at(k + "_probe")).sum().backward();
    EXPECT_LE(max_abs_diff(x.grad(), ref.at(k + "_dx")), 1e-4);
    EXPECT_LE(max_abs_diff(moe->gate_up.grad(), ref.at(k + "_dgate_up")), 1e-4);
    EXPECT_LE(max_abs_diff(moe->router.grad(), ref.at(k + "_drouter")), 1e-4);
    const auto twice = moe->forward(2 * x.detach()).router_logits;
    const std::vector<torch::Tensor> layers = {result.router_logits.detach(), twice.detach()};
    EXPECT_NEAR(load_balancing_loss(layers, top_k).item<double>(), ref.at(k + "_aux").item<double>(), 1e-6);
    EXPECT_NEAR(load_balancing_loss(layers, top_k, ref.at(k + "_mask")).item<double>(),
                ref.at(k + "_aux_masked").item<double>(), 1e-6);
  }
}

// Perfectly balanced routing gives the loss its floor: with every expert equally probable and
// chosen equally often, E * sum_e (k / E) (1 / E) = k.
TEST(MixtureOfExperts, BalancedRoutingGivesTheLossItsFloor) {
  // 4 tokens over 4 experts, top 1: token t prefers expert t by a hair, probabilities all ~1/4.
  const auto logits = torch::eye(4) * 1e-6;
  EXPECT_NEAR(load_balancing_loss({logits}, 1).item<double>(), 1.0, 1e-5);
  // All routed to expert 0 with probability ~1: E * 1 * 1 = 4.
  const auto collapsed = torch::zeros({4, 4}).index_fill_(1, torch::tensor({0}), 30.0);
  EXPECT_NEAR(load_balancing_loss({collapsed}, 1).item<double>(), 4.0, 1e-5);
}

TEST(MixtureOfExperts, RefusesImpossibleOptions) {
  EXPECT_EQ(testing::error_of([] { MixtureOfExperts(MixtureOfExpertsOptions(8, 12, 4, 5)); }),
            "mixture of experts: 4 experts with top_k 5 (needs at least 2 experts and 1 <= top_k <= experts)");
  EXPECT_EQ(testing::error_of([] { MixtureOfExperts(MixtureOfExpertsOptions(8, 12, 4, 2).activation(Activation::kReLU)); }),
            "mixture of experts: each expert is a gated feed-forward (swiglu, geglu, geglu_tanh), not relu");
  MixtureOfExperts moe(MixtureOfExpertsOptions(8, 12, 4, 2));
  EXPECT_NE(testing::error_of([&] { moe->forward(torch::randn({2, 7})); }).find("expected (..., 8), got [2, 7]"),
            std::string::npos);
}

}  // namespace
}  // namespace zoo
