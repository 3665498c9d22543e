#include "train/optimizer.h"

#include <algorithm>
#include <sstream>

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

TEST(AdamW, ClearGradientsLeavesThemUndefined) {
  torch::nn::Linear net(3, 2);
  auto opt = make_adamw(*net, OptimizerOptions());
  net->forward(torch::ones({1, 3})).sum().backward();
  ASSERT_TRUE(net->weight.grad().defined());
  clear_gradients(*opt);
  EXPECT_FALSE(net->weight.grad().defined());
  EXPECT_FALSE(net->bias.grad().defined());
  // The next backward writes fresh gradients: the same as from zero.
  net->forward(torch::ones({1, 3})).sum().backward();
  EXPECT_TRUE(net->weight.grad().equal(torch::ones({2, 3})));
}

TEST(AdamW, FusedUpdateEqualsLibTorchsAdamW) {
  // make_adamw's update (ATen's fused kernel) against torch::optim::AdamW with the same groups, fed the
  // same gradients (Adam divides by the gradient's scale, so gradients recomputed from weights
  // that differ by rounding would not compare), over steps that include the first steps' bias
  // corrections, tiny and large gradients, and odd sizes (the vector loop's scalar tail).
  torch::manual_seed(0);
  torch::nn::Sequential fused_net(torch::nn::Linear(37, 29), torch::nn::LayerNorm(torch::nn::LayerNormOptions({29})));
  torch::nn::Sequential plain_net(torch::nn::Linear(37, 29), torch::nn::LayerNorm(torch::nn::LayerNormOptions({29})));
  auto fused_params = fused_net->parameters();
  auto plain_params = plain_net->parameters();
  {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < fused_params.size(); ++i) plain_params[i].copy_(fused_params[i]);
  }
  OptimizerOptions o;
  o.lr = 0.01, o.weight_decay = 0.1, o.beta1 = 0.9, o.beta2 = 0.95, o.eps = 1e-8;
  auto fused = make_adamw(*fused_net, o);
  auto groups = parameter_groups(*plain_net);
  std::vector<torch::optim::OptimizerParamGroup> plain_groups;
  auto options = [&](double decay) {
    return std::make_unique<torch::optim::AdamWOptions>(
        torch::optim::AdamWOptions(o.lr).betas({o.beta1, o.beta2}).eps(o.eps).weight_decay(decay));
  };
  plain_groups.emplace_back(groups.decay, options(o.weight_decay));
  plain_groups.emplace_back(groups.no_decay, options(0.0));
  torch::optim::AdamW plain(plain_groups, torch::optim::AdamWOptions(o.lr));
  for (int step = 0; step < 6; ++step) {
    for (size_t i = 0; i < fused_params.size(); ++i) {
      auto g = torch::randn_like(fused_params[i]) * std::pow(10.0, -(step % 3) * 3);  // 1, 1e-3, 1e-6
      fused_params[i].mutable_grad() = g.clone();
      plain_params[i].mutable_grad() = g.clone();
    }
    fused->step();
    plain.step();
    for (size_t i = 0; i < fused_params.size(); ++i) {
      EXPECT_LE(testing::max_abs_diff(fused_params[i], plain_params[i]), 1e-6) << "step " << step << " tensor " << i;
    }
  }
  // Same state layout: the fused optimizer's state loads into LibTorch's AdamW.
  std::stringstream buffer;
  torch::serialize::OutputArchive out;
  fused->save(out);
  out.save_to(buffer);
  torch::optim::AdamW reloaded(plain_groups, torch::optim::AdamWOptions(o.lr));
  torch::serialize::InputArchive in;
  in.load_from(buffer);
  reloaded.load(in);
  EXPECT_EQ(reloaded.state().size(), fused->state().size());
}

// Four parameters of odd sizes, decayed by their rank as parameter_groups decides (matrices and a
// 3-d tensor decay, vectors do not), started from `start`.
struct FourTensors : torch::nn::Module {
  explicit FourTensors(const std::vector<torch::Tensor>& start) {
    for (size_t i = 0; i < start.size(); ++i) params.push_back(register_parameter("p" + std::to_string(i), start[i].clone()));
  }
  std::vector<torch::Tensor> params;
};

TEST(AdamW, FusedStepEqualsTorchOptimAdamWFusedAndForeach) {
  // Six steps of tests/reference/optimizer_reference.py: gradients from 1 to 1e-6, a learning
  // rate that changes each step, clipping to a global norm of 1 (the first steps' bias
  // corrections, weight decay in one group only).
  auto ref = testing::python_reference("optimizer_reference.py");
  std::vector<torch::Tensor> start;
  for (int i = 0; i < 4; ++i) start.push_back(ref.at("start." + std::to_string(i)));
  auto module = std::make_shared<FourTensors>(start);
  auto& net = *module;
  OptimizerOptions o;
  o.lr = 0.01, o.weight_decay = 0.1, o.beta1 = 0.9, o.beta2 = 0.95, o.eps = 1e-8;
  auto adamw = make_adamw(net, o);
  const auto lrs = ref.at("lr");
  for (int step = 0; step < 6; ++step) {
    for (int i = 0; i < 4; ++i) net.params[i].mutable_grad() = ref.at("grad." + std::to_string(step) + "." + std::to_string(i)).clone();
    const auto norm = clip_gradients(net.params, 1.0);
    EXPECT_NEAR(norm.item<double>(), ref.at("norm")[step].item<double>(), 1e-6 * ref.at("norm")[step].item<double>());
    set_learning_rate(*adamw, lrs[step].item<double>());
    adamw->update();
  }
  for (const std::string kind : {"fused", "foreach"}) {
    SCOPED_TRACE(kind);
    for (int i = 0; i < 4; ++i) {
      const auto& state = static_cast<const torch::optim::AdamWParamState&>(*adamw->state().at(net.params[i].unsafeGetTensorImpl()));
      const auto n = std::to_string(i);
      EXPECT_ALLCLOSE(net.params[i], ref.at(kind + ".param." + n), 1e-6) << i;
      EXPECT_ALLCLOSE(state.exp_avg(), ref.at(kind + ".exp_avg." + n), 1e-7) << i;
      EXPECT_ALLCLOSE(state.exp_avg_sq(), ref.at(kind + ".exp_avg_sq." + n), 1e-9) << i;
    }
  }
}

TEST(AdamW, SkippedUpdateChangesNothingAndStepCountsAreSaved) {
  torch::manual_seed(3);
  const std::vector<torch::Tensor> start = {torch::randn({6, 5}), torch::randn({5})};
  auto a_module = std::make_shared<FourTensors>(start), b_module = std::make_shared<FourTensors>(start);
  auto &a = *a_module, &b = *b_module;
  OptimizerOptions o;
  o.lr = 0.05;
  auto skipping = make_adamw(a, o), plain = make_adamw(b, o);
  const auto found_inf = torch::ones({}), clean = torch::zeros({});
  for (int step = 0; step < 4; ++step) {
    std::vector<torch::Tensor> grads = {torch::randn({6, 5}), torch::randn({5})};
    for (int i = 0; i < 2; ++i) a.params[i].mutable_grad() = grads[i].clone(), b.params[i].mutable_grad() = grads[i].clone();
    if (step == 1) {
      // A skipped update: parameters, moments and step counts stay; the run goes on as if the
      // step had not been.
      const auto before = a.params[0].detach().clone();
      skipping->update(found_inf);
      EXPECT_TRUE(torch::equal(a.params[0], before));
      for (int i = 0; i < 2; ++i) a.params[i].mutable_grad() = grads[i].clone();
    }
    skipping->update(clean);
    plain->update();
    for (int i = 0; i < 2; ++i) EXPECT_TRUE(torch::equal(a.params[i], b.params[i])) << "step " << step;
  }
  // Saved, the state holds the device step counts (4, not the 5 calls); loaded, the next update
  // is the one the saved optimizer would make.
  std::stringstream buffer;
  torch::serialize::OutputArchive out;
  skipping->save(out);
  out.save_to(buffer);
  for (const auto& p : a.params) {
    EXPECT_EQ(static_cast<const torch::optim::AdamWParamState&>(*skipping->state().at(p.unsafeGetTensorImpl())).step(), 4);
  }
  auto c_module = std::make_shared<FourTensors>(std::vector<torch::Tensor>{a.params[0].detach(), a.params[1].detach()});
  auto& c = *c_module;
  auto reloaded = make_adamw(c, o);
  torch::serialize::InputArchive in;
  in.load_from(buffer);
  reloaded->load(in);
  for (int i = 0; i < 2; ++i) {
    const auto g = torch::randn_like(a.params[i]);
    a.params[i].mutable_grad() = g.clone(), c.params[i].mutable_grad() = g.clone();
  }
  skipping->update();
  reloaded->update();
  for (int i = 0; i < 2; ++i) EXPECT_TRUE(torch::equal(a.params[i], c.params[i]));
}

TEST(AdamW, NoClippingBelowTheNorm) {
  // Under max_norm the coefficient is 1 (min(max / (norm + 1e-6), 1)): gradients unchanged, the
  // norm still returned.
  torch::nn::Linear net(3, 2);
  net->weight.mutable_grad() = torch::full({2, 3}, 0.1);
  net->bias.mutable_grad() = torch::full({2}, 0.2);
  const auto norm = clip_gradients(net->parameters(), 10.0);
  EXPECT_NEAR(norm.item<double>(), std::sqrt(6 * 0.01 + 2 * 0.04), 1e-6);
  EXPECT_TRUE(torch::equal(net->weight.grad(), torch::full({2, 3}, 0.1)));
}

}  // namespace
}  // namespace zoo
