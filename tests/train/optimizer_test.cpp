#include "train/optimizer.h"

#include <algorithm>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "models/model.h"
#include "test_util.h"

namespace zoo {
namespace {

bool contains(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

TEST(ParameterGroups, DecayExactlyTheMatrices) {
  for (const char* name : {"gpt-tiny", "llama-tiny", "bert-tiny", "t5-tiny"}) {
    SCOPED_TRACE(name);
    auto model = build_model(load_config(find_config(name)));
    auto groups = parameter_groups(*model.module());
    // Every parameter lands in exactly one group; the tied head is not counted twice.
    int64_t grouped = 0;
    for (const auto& p : groups.decay) grouped += p.numel();
    for (const auto& p : groups.no_decay) grouped += p.numel();
    EXPECT_EQ(grouped, count_parameters(*model.module()));
    // Decayed: linear weights, and only them.
    for (const auto& n : groups.decay_names) {
      EXPECT_EQ(n.find("embedding"), std::string::npos) << n;
      EXPECT_EQ(n.find("norm"), std::string::npos) << n;
      EXPECT_EQ(n.compare(n.size() - 7, 7, ".weight"), 0) << n;
    }
    for (const auto& p : groups.decay) EXPECT_EQ(p.dim(), 2);
    // Not decayed: biases, norms, embeddings.
    for (const auto& n : groups.no_decay_names) {
      const bool ok = n.find("bias") != std::string::npos || n.find("norm") != std::string::npos ||
                      n.find("embedding") != std::string::npos || n.find("relative") != std::string::npos ||
                      n.find("positions") != std::string::npos;
      EXPECT_TRUE(ok) << n;
    }
  }
  auto gpt = build_model(load_config(find_config("gpt-tiny"))).gpt;
  auto groups = parameter_groups(*gpt);
  EXPECT_TRUE(contains(groups.decay_names, "blocks.0.self_attn.qkv.weight"));
  EXPECT_TRUE(contains(groups.decay_names, "blocks.3.ff.down.weight"));
  EXPECT_TRUE(contains(groups.no_decay_names, "token_embedding.weight"));
  EXPECT_TRUE(contains(groups.no_decay_names, "blocks.0.self_attn.qkv.bias"));
  EXPECT_TRUE(contains(groups.no_decay_names, "final_norm.weight"));
  // 4 blocks x (qkv, out, up, down).
  EXPECT_EQ(groups.decay.size(), 16u);
}

TEST(AdamW, DecaysOnlyTheDecayGroupAndFollowsTheRate) {
  // With zero gradients AdamW's update is the decoupled decay alone: w <- w * (1 - lr * wd).
  torch::nn::Sequential net(torch::nn::Linear(4, 4), torch::nn::LayerNorm(torch::nn::LayerNormOptions({4})));
  OptimizerOptions o;
  o.lr = 0.1;
  o.weight_decay = 0.5;
  auto opt = make_adamw(*net, o);
  auto weight = net->named_parameters()["0.weight"].detach().clone();
  auto bias = net->named_parameters()["0.bias"].detach().clone();
  for (auto& p : net->parameters()) p.mutable_grad() = torch::zeros_like(p);
  opt->step();
  EXPECT_LE(testing::max_abs_diff(net->named_parameters()["0.weight"], weight * (1 - 0.1 * 0.5)), 1e-7);
  EXPECT_LE(testing::max_abs_diff(net->named_parameters()["0.bias"], bias), 0.0);
  set_learning_rate(*opt, 0.01);
  for (const auto& g : opt->param_groups()) EXPECT_DOUBLE_EQ(static_cast<const torch::optim::AdamWOptions&>(g.options()).lr(), 0.01);
}

}  // namespace
}  // namespace zoo
