#include "models/lora.h"

#include <map>
#include <utility>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "layers/attention.h"
#include "layers/feed_forward.h"
#include "models/model.h"
#include "test_util.h"
#include "train/autocast.h"

namespace zoo {
namespace {

using testing::error_of;

// One config per kind of projection layout: GPT-2 (fused q/k/v, GELU), LLaMA-style (GQA, fused
// q/k/v, SwiGLU's gate), BERT (post-norm encoder), T5 (separate q and fused k/v in
// cross-attention, gated feed-forward).
const char* kConfigs[] = {
    "{family: gpt, vocab_size: 97, d_model: 32, n_layers: 2, n_heads: 4, d_ff: 64, max_positions: 32}",
    "{family: gpt, vocab_size: 97, d_model: 32, n_layers: 2, n_heads: 4, n_kv_heads: 2, d_ff: 48, max_positions: 32, "
    "activation: swiglu, norm: rmsnorm, position: rope, bias: false, tie_embeddings: false}",
    "{family: bert, vocab_size: 97, d_model: 32, n_layers: 2, n_heads: 4, d_ff: 64, max_positions: 32, head: mlm}",
    "{family: t5, vocab_size: 150, d_model: 32, n_layers: 2, n_heads: 4, d_ff: 64, activation: geglu}",
    // Qwen3-MoE's: a dense layer, then a mixture whose experts' gate_up and down take adapters.
    "{family: gpt, vocab_size: 97, d_model: 32, n_layers: 2, n_heads: 4, n_kv_heads: 2, d_ff: 48, max_positions: 32, "
    "activation: swiglu, norm: rmsnorm, position: rope, bias: false, qk_norm: true, experts: 4, expert_d_ff: 16, "
    "dense_layers: [0]}",
};

Model tiny(int index) {
  torch::manual_seed(0);
  auto model = build_model(parse_config(kConfigs[index]));
  model.module()->eval();
  return model;
}

torch::Tensor ids(int64_t vocab) { return torch::randint(3, vocab, {2, 9}, torch::kLong); }

// The model's logits on fixed inputs, whatever the family.
torch::Tensor run(Model& model) {
  torch::manual_seed(7);
  const auto x = ids(model.config.vocab_size);
  switch (model.config.family) {
    case Family::kGpt: return model.gpt->forward(x);
    case Family::kBert: return model.bert->forward(x).logits;
    case Family::kT5:
    case Family::kTransformer: return model.seq2seq->forward(x, {}, x.narrow(1, 0, 5));
  }
  throw std::logic_error("family");
}

void randomize_adapters(Model& model) {
  torch::NoGradGuard no_grad;
  for (auto& p : model.module()->named_parameters())
    if (is_adapter_tensor(p.key())) p.value().normal_(0, 0.2);
}

class LoraModels : public ::testing::TestWithParam<int> {};

// B = 0: before any update the adapted model computes exactly (bit for bit) what its base does.
TEST_P(LoraModels, AtStepZeroEqualsTheBaseExactly) {
  auto model = tiny(GetParam());
  const auto base = run(model);
  LoraConfig config;
  config.rank = 4, config.dropout = 0.0;  // experts take none; in eval it changes nothing
  config.targets = {"all"};
  const auto adapted = attach_lora(model, config);
  EXPECT_FALSE(adapted.empty());
  EXPECT_TRUE(torch::equal(run(model), base));
}

// Merged weights compute what the unmerged adapters do (to float rounding), and afterwards the
// model has no adapter left: a plain model of its config.
TEST_P(LoraModels, MergedEqualsUnmerged) {
  auto model = tiny(GetParam());
  const auto base = run(model);
  LoraConfig config;
  config.rank = 2, config.alpha = 5, config.dropout = 0.0;
  config.targets = {"q", "v", "out", "down"};
  attach_lora(model, config);
  randomize_adapters(model);
  const auto unmerged = run(model);
  EXPECT_GT(testing::max_abs_diff(unmerged, base), 1e-2);  // the adapters do change the output
  merge_lora(model);
  EXPECT_ALLCLOSE(run(model), unmerged, 1e-5);
  for (const auto& p : model.module()->named_parameters()) EXPECT_FALSE(is_adapter_tensor(p.key())) << p.key();
  auto plain = build_model(model.config);
  EXPECT_EQ(plain.module()->named_parameters().size(), model.module()->named_parameters().size());
}

std::string layout_name(int index) {
  return index == 0 ? "gpt2" : index == 1 ? "llama" : index == 2 ? "bert" : index == 3 ? "t5" : "qwen3_moe";
}
INSTANTIATE_TEST_SUITE_P(Layouts, LoraModels, ::testing::Values(0, 1, 2, 3, 4),
                         [](const auto& info) { return layout_name(info.param); });

// PEFT's formula by hand: y = x W^T + b + (alpha / r) x A^T B^T on the adapted rows only.
// A q-and-v adapter pair on a fused [q; k; v] projection leaves the k rows as they were.
TEST(Lora, FusedPartsFollowTheFormulaOnTheirRowsOnly) {
  torch::manual_seed(1);
  Attention attention(AttentionOptions(16, 4).n_kv_heads(2));  // q 16 rows, k 8, v 8
  attention->eval();
  auto x = torch::randn({2, 5, 16});
  const auto base = torch::nn::functional::linear(x, attention->qkv->weight, attention->qkv->bias);
  for (const auto& part : attention->projection_parts()) {
    if (part.part == "q" || part.part == "v") {
      attention->lora.add(*attention, part.part, part.projection,
                          LoraOptions(16, part.rows, 3).row_offset(part.row_offset).alpha(6));
    }
  }
  auto* q = attention->named_children()["lora_q"]->as<LoraImpl>();
  auto* v = attention->named_children()["lora_v"]->as<LoraImpl>();
  ASSERT_TRUE(q && v);
  EXPECT_EQ(q->A.sizes(), (std::vector<int64_t>{3, 16}));
  EXPECT_EQ(v->B.sizes(), (std::vector<int64_t>{8, 3}));
  EXPECT_EQ(v->options.row_offset(), 24);
  {
    torch::NoGradGuard no_grad;
    q->B.normal_(), v->B.normal_();
  }
  const auto y = attention->lora.project(attention->qkv, x);
  const double s = 6.0 / 3.0;
  const auto expected_q = base.narrow(-1, 0, 16) + s * x.matmul(q->A.t()).matmul(q->B.t());
  const auto expected_v = base.narrow(-1, 24, 8) + s * x.matmul(v->A.t()).matmul(v->B.t());
  EXPECT_ALLCLOSE(y.narrow(-1, 0, 16), expected_q, 1e-5);
  EXPECT_TRUE(torch::equal(y.narrow(-1, 16, 8), base.narrow(-1, 16, 8)));
  EXPECT_ALLCLOSE(y.narrow(-1, 24, 8), expected_v, 1e-5);
  // Kaiming-uniform A (a = sqrt(5)): bound 1 / sqrt(fan_in) = 0.25.
  EXPECT_LE(q->A.abs().max().item<double>(), 0.25);
  EXPECT_GT(q->A.abs().max().item<double>(), 0.2);
}

// Separate q, k, v projections (no fused matrix): each part adapts its own projection whole.
TEST(Lora, SeparateProjectionsMergeToTheSameOutput) {
  torch::manual_seed(3);
  Attention attention(AttentionOptions(16, 4).fused_projections(false).causal(true));
  attention->eval();
  const auto x = torch::randn({2, 5, 16});
  const auto bias = attention_bias(*attention, x);
  const auto base = attention->forward(x, bias);
  for (const auto& part : attention->projection_parts()) {
    EXPECT_EQ(part.row_offset, 0) << part.part;
    attention->lora.add(*attention, part.part, part.projection, LoraOptions(16, part.rows, 2));
  }
  EXPECT_TRUE(torch::equal(attention->forward(x, bias), base));
  {
    torch::NoGradGuard no_grad;
    for (auto& p : attention->named_parameters())
      if (is_adapter_tensor(p.key())) p.value().normal_(0, 0.2);
  }
  const auto unmerged = attention->forward(x, bias);
  EXPECT_GT(testing::max_abs_diff(unmerged, base), 1e-2);
  attention->lora.merge_into_weights(*attention);
  EXPECT_ALLCLOSE(attention->forward(x, bias), unmerged, 1e-5);
  EXPECT_TRUE(attention->lora.empty());
}

// d loss / dA and d loss / dB against central differences, in double, through a feed-forward
// block with adapters on up and down (dropout off).
TEST(Lora, GradientsOfAAndBMatchFiniteDifferencesInDouble) {
  torch::manual_seed(2);
  FeedForward ff(FeedForwardOptions(6, 10).activation(Activation::kSwiGLU));
  for (const auto& part : ff->projection_parts()) {
    const int64_t in = part.projection->weight.size(1);
    ff->lora.add(*ff, part.part, part.projection, LoraOptions(in, part.rows, 2).alpha(3));
  }
  ff->to(torch::kDouble);
  {
    torch::NoGradGuard no_grad;
    for (auto& p : ff->named_parameters())
      if (is_adapter_tensor(p.key())) p.value().normal_(0, 0.5);
  }
  const auto x = torch::randn({3, 6}, torch::kDouble);
  const auto w = torch::randn({3, 6}, torch::kDouble);
  auto loss_fn = [&] { return (ff->forward(x) * w).sum(); };
  loss_fn().backward();
  const double eps = 1e-6;
  torch::NoGradGuard no_grad;
  int checked = 0;
  for (auto& p : ff->named_parameters()) {
    if (!is_adapter_tensor(p.key())) continue;
    auto grad = p.value().grad().clone();
    auto flat = p.value().view(-1);
    for (int64_t i = 0; i < flat.numel(); ++i) {
      const double old = flat[i].item<double>();
      flat[i] = old + eps;
      const double up = loss_fn().item<double>();
      flat[i] = old - eps;
      const double down = loss_fn().item<double>();
      flat[i] = old;
      EXPECT_NEAR(grad.view(-1)[i].item<double>(), (up - down) / (2 * eps), 1e-7) << p.key() << "[" << i << "]";
    }
    ++checked;
  }
  EXPECT_EQ(checked, 6);  // A and B of up, gate, down
}

// Activation checkpointing: the same loss and gradients (every parameter's, in float64) as the
// plain model, dropout on, for each layout; and with LoRA on a frozen base, where the block
// inputs need no gradient but the adapters inside do.
std::pair<double, std::map<std::string, torch::Tensor>> loss_and_gradients(Model& model, bool recompute) {
  model.set_activation_checkpointing(recompute);
  for (auto& p : model.module()->parameters()) p.mutable_grad() = torch::Tensor();
  torch::manual_seed(11);
  const auto logits = run(model);
  torch::manual_seed(12);
  const auto loss = (logits * torch::randn_like(logits)).sum();
  loss.backward();
  std::map<std::string, torch::Tensor> grads;
  for (const auto& p : model.module()->named_parameters())
    if (p.value().grad().defined()) grads[p.key()] = p.value().grad().clone();
  return {loss.item<double>(), grads};
}

void expect_recompute_matches(Model& model) {
  const auto [plain_loss, plain] = loss_and_gradients(model, false);
  const auto [loss, grads] = loss_and_gradients(model, true);
  EXPECT_NEAR(loss, plain_loss, 1e-6);
  ASSERT_EQ(grads.size(), plain.size());
  for (const auto& [name, g] : plain) {
    ASSERT_TRUE(grads.count(name)) << name;
    EXPECT_ALLCLOSE(grads.at(name), g, 1e-6) << name;
  }
}

TEST_P(LoraModels, ActivationCheckpointingGivesTheSameGradients) {
  auto config = parse_config(kConfigs[GetParam()]);
  config.dropout = 0.1;
  torch::manual_seed(0);
  auto model = build_model(config);
  model.module()->to(torch::kDouble);
  model.module()->train();
  expect_recompute_matches(model);
  // LoRA: a frozen base, adapters everywhere.
  LoraConfig lora;
  lora.rank = 2, lora.dropout = config.has_moe_layers() ? 0.0 : 0.1, lora.targets = {"all"};  // experts take none
  attach_lora(model, lora);
  model.module()->to(torch::kDouble);
  randomize_adapters(model);
  for (auto& p : model.module()->named_parameters()) p.value().set_requires_grad(is_adapter_tensor(p.key()));
  expect_recompute_matches(model);
}

// Under bf16 autocast a frozen projection computes with its weight and bias cast to bf16; holding
// them in bf16 (what a LoRA run does) gives the same loss and adapter gradients bit for bit, and
// leaves norms, embeddings and the adapters in float32.
TEST_P(LoraModels, FrozenProjectionsHeldInBf16ComputeAlikeUnderAutocast) {
  auto model = tiny(GetParam());
  LoraConfig lora;
  lora.rank = 4, lora.dropout = 0.0, lora.targets = {"all"};
  attach_lora(model, lora);
  randomize_adapters(model);
  for (auto& p : model.module()->named_parameters()) p.value().set_requires_grad(is_adapter_tensor(p.key()));
  auto loss_and_gradients = [&] {
    for (auto& p : model.module()->parameters()) p.mutable_grad() = torch::Tensor();
    torch::Tensor loss;
    {
      AutocastScope autocast(Precision::kBf16, torch::kCPU);
      loss = run(model).to(torch::kFloat).square().mean();
    }
    loss.backward();
    std::map<std::string, torch::Tensor> grads;
    for (const auto& p : model.module()->named_parameters())
      if (p.value().requires_grad()) grads[p.key()] = p.value().grad().clone();
    return std::make_pair(loss.detach(), grads);
  };
  const auto [loss_fp32, grads_fp32] = loss_and_gradients();
  EXPECT_GT(hold_frozen_projections_in_compute_dtype(*model.module(), Precision::kBf16), 0);
  int64_t bf16 = 0;
  for (const auto& p : model.module()->named_parameters()) {
    const bool frozen_projection = p.value().scalar_type() == torch::kBFloat16;
    bf16 += frozen_projection;
    if (frozen_projection) EXPECT_FALSE(p.value().requires_grad()) << p.key();
    if (p.key().find("norm") != std::string::npos || p.key().find("embedding") != std::string::npos ||
        is_adapter_tensor(p.key())) {
      EXPECT_EQ(p.value().scalar_type(), torch::kFloat) << p.key();
    }
  }
  EXPECT_GT(bf16, 0);
  const auto [loss_bf16, grads_bf16] = loss_and_gradients();
  EXPECT_TRUE(torch::equal(loss_bf16, loss_fp32)) << loss_bf16.item<float>() << " vs " << loss_fp32.item<float>();
  ASSERT_EQ(grads_bf16.size(), grads_fp32.size());
  for (const auto& [name, g] : grads_fp32) EXPECT_TRUE(torch::equal(grads_bf16.at(name), g)) << name;
  // fp32 runs keep every weight as it is.
  auto plain = tiny(GetParam());
  for (auto& p : plain.module()->parameters()) p.set_requires_grad(false);
  EXPECT_EQ(hold_frozen_projections_in_compute_dtype(*plain.module(), Precision::kFp32), 0);
}

TEST(Lora, TargetsAreNamesPartsOrGlobs) {
  auto model = tiny(3);  // t5: encoder and decoder, cross-attention
  const auto names = projection_names(model);
  auto has = [&](const std::string& name) {
    for (const auto& n : names)
      if (n.name == name) return true;
    return false;
  };
  EXPECT_TRUE(has("encoder_blocks.0.self_attn.q"));
  EXPECT_TRUE(has("decoder_blocks.1.cross_attn.v"));
  EXPECT_TRUE(has("decoder_blocks.1.ff.gate"));
  LoraConfig config;
  config.rank = 2;
  config.targets = {"decoder_blocks.*.cross_attn.q", "k"};
  const auto adapted = attach_lora(model, config);
  // 2 cross-attention q; k in 2 encoder self, 2 decoder self and 2 cross attentions.
  EXPECT_EQ(adapted.size(), 8u);
  EXPECT_EQ(adapted.front(), "encoder_blocks.0.self_attn.k");
}

// A mixture's experts take one adapter per expert on gate_up and down (PEFT's
// target_parameters): expert e's update is (alpha / r) B_e A_e, which merging adds to its weight;
// dropout is refused, as PEFT refuses it there.
TEST(Lora, ExpertsAdaptEachExpertAndMergeByTheFormula) {
  auto model = tiny(4);
  LoraConfig config;
  config.rank = 2, config.alpha = 6, config.dropout = 0.0, config.targets = {"gate_up", "blocks.1.moe.down"};
  EXPECT_EQ(attach_lora(model, config), (std::vector<std::string>{"blocks.1.moe.gate_up", "blocks.1.moe.down"}));
  randomize_adapters(model);
  auto* moe = model.gpt->blocks[1]->as<TransformerBlockImpl>()->moe.get();
  ASSERT_TRUE(moe->lora_gate_up && moe->lora_down);
  EXPECT_EQ(moe->lora_gate_up->A.sizes(), (std::vector<int64_t>{4, 2, 32}));
  EXPECT_EQ(moe->lora_down->B.sizes(), (std::vector<int64_t>{4, 32, 2}));
  const auto want = moe->gate_up.detach() + 3.0 * torch::matmul(moe->lora_gate_up->B, moe->lora_gate_up->A).detach();
  const auto unmerged = run(model);
  merge_lora(model);
  EXPECT_ALLCLOSE(moe->gate_up, want, 1e-6);
  EXPECT_ALLCLOSE(run(model), unmerged, 1e-5);
  auto other = tiny(4);
  config.dropout = 0.05;
  EXPECT_EQ(error_of([&] { attach_lora(other, config); }),
            "lora.dropout: 0.05 with adapters on blocks.1.moe.gate_up, a mixture's experts, which take no dropout (as "
            "PEFT's): set lora.dropout=0");
}

TEST(Lora, BadTargetsAndRanksAreNamed) {
  {
    auto model = tiny(0);
    LoraConfig config;
    config.rank = 4;
    config.targets = {"q", "query"};
    EXPECT_EQ(error_of([&] { attach_lora(model, config); }),
              "lora.targets: 'query' matches no projection of this model; its projections are q, k, v, out, up, "
              "down in every layer (names such as blocks.0.self_attn.q)");
  }
  {
    auto model = tiny(1);  // k and v are 16 rows (2 key/value heads of 8)
    LoraConfig config;
    config.rank = 20;
    config.targets = {"k"};
    EXPECT_EQ(error_of([&] { attach_lora(model, config); }),
              "lora.rank: 20 exceeds blocks.0.self_attn.k (16 x 32)");
    config.rank = 0;
    EXPECT_EQ(error_of([&] { attach_lora(model, config); }), "lora.rank: must be positive, got 0");
  }
}

}  // namespace
}  // namespace zoo
