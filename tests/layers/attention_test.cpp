#include "layers/attention.h"

#include <limits>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "kernels/masks.h"
#include "kernels/math_attention.h"
#include "layers/position_bias.h"
#include "test_util.h"

namespace zoo {
namespace {

using testing::max_abs_diff;

// Attention through the bias a model builds for the call (attention_bias), as every model calls it.
torch::Tensor run(Attention& attn, const torch::Tensor& x, const AttentionMasks& masks = {},
                  const torch::Tensor& memory = {}, AttentionCache* cache = nullptr,
                  const torch::Tensor& position_ids = {}) {
  return attn->forward(x, attention_bias(*attn, x, masks), memory, cache, position_ids);
}

std::tuple<torch::Tensor, torch::Tensor> with_weights(Attention& attn, const torch::Tensor& x) {
  return attn->forward_with_weights(x, attention_bias(*attn, x, {}, /*need_weights=*/true));
}

AttentionBias bias_for_path(AttentionPath path) {
  AttentionBias bias;
  bias.choice.path = path;
  return bias;
}

torch::Tensor worked_q() { return torch::tensor({{1.0, 0.0}, {0.0, 1.0}, {1.0, 1.0}}); }
torch::Tensor worked_k() { return torch::tensor({{1.0, 1.0}, {0.0, 1.0}, {1.0, 0.0}}); }
torch::Tensor worked_v() { return torch::tensor({{1.0, 0.0}, {0.0, 1.0}, {0.5, 0.5}}); }

TEST(Attend, WorkedExampleMathAndLibTorchPaths) {
  // d_k = 2: softmax(Q K^T / sqrt(2)) V, worked by hand.
  auto q = worked_q().view({1, 1, 3, 2}).to(torch::kFloat);
  auto k = worked_k().view({1, 1, 3, 2}).to(torch::kFloat);
  auto v = worked_v().view({1, 1, 3, 2}).to(torch::kFloat);
  auto expected_out = torch::tensor({{0.6017, 0.3983}, {0.5, 0.5}, {0.6276, 0.3724}});
  auto expected_row2 = torch::tensor({0.5035, 0.2483, 0.2483});
  const double scale = 1.0 / std::sqrt(2.0);
  auto [out, weights] = math_attention(q, k, v, {}, scale, 0.0);
  EXPECT_LE(max_abs_diff(out.view({3, 2}), expected_out), 1e-4);
  EXPECT_LE(max_abs_diff(weights.view({3, 3})[2], expected_row2), 1e-4);
  auto [via_math, math_weights] = attend(q, k, v, bias_for_path(AttentionPath::kMath), {.scale = scale});
  EXPECT_TRUE(torch::equal(via_math, out) && torch::equal(math_weights, weights));
  auto [fused, none] = attend(q, k, v, bias_for_path(AttentionPath::kLibTorch), {.scale = scale});
  EXPECT_LE(max_abs_diff(fused.view({3, 2}), expected_out), 1e-4);
  EXPECT_FALSE(none.defined());  // weights come from the math path only
  auto [tiled, no_weights] = attend(q, k, v, bias_for_path(AttentionPath::kTiled), {.scale = scale});
  EXPECT_LE(max_abs_diff(tiled.view({3, 2}), expected_out), 1e-4);
}

TEST(Attention, WorkedExampleThroughModule) {
  // Input rows are [Q_i, K_i, V_i]; the q, k and v projections each pick their two columns and
  // the output projection writes the head back to the first two, so the module's attention is
  // the worked example's.
  Attention attn(AttentionOptions(6, 1).head_dim(2).fused_projections(false).bias(false));
  {
    torch::NoGradGuard no_grad;
    auto pick = [](int64_t col) { return torch::eye(6).narrow(0, col, 2); };  // (2, 6)
    attn->q->weight.copy_(pick(0));
    attn->k->weight.copy_(pick(2));
    attn->v->weight.copy_(pick(4));
    attn->out->weight.copy_(pick(0).t());
  }
  auto x = torch::cat({worked_q(), worked_k(), worked_v()}, 1).to(torch::kFloat).unsqueeze(0);
  auto [out, weights] = with_weights(attn, x);
  EXPECT_LE(max_abs_diff(weights[0][0][2], torch::tensor({0.5035, 0.2483, 0.2483})), 1e-4);
  auto expected = torch::tensor({{0.6017, 0.3983}, {0.5, 0.5}, {0.6276, 0.3724}});
  EXPECT_LE(max_abs_diff(out[0].narrow(1, 0, 2), expected), 1e-4);
  EXPECT_LE(max_abs_diff(run(attn, x), out), 1e-6);  // the fused kernel agrees
  EXPECT_THROW(attn->forward_with_weights(x, attention_bias(*attn, x)), c10::Error);  // a bias for another path
}

// Builds our attention from LibTorch's MultiheadAttention weights.
void copy_from_mha(Attention& attn, torch::nn::MultiheadAttention& mha) {
  torch::NoGradGuard no_grad;
  attn->qkv->weight.copy_(mha->in_proj_weight);
  attn->qkv->bias.copy_(mha->in_proj_bias);
  attn->out->weight.copy_(mha->out_proj->weight);
  attn->out->bias.copy_(mha->out_proj->bias);
}

class AttentionBackendTest : public ::testing::TestWithParam<AttentionBackend> {};

TEST_P(AttentionBackendTest, MatchesLibTorchMultiheadAttention) {
  const int64_t d = 16, h = 4, b = 2, t = 7;
  torch::nn::MultiheadAttention mha(torch::nn::MultiheadAttentionOptions(d, h));
  mha->eval();
  Attention attn(AttentionOptions(d, h).backend(GetParam()));
  attn->eval();
  copy_from_mha(attn, mha);
  auto x = torch::randn({b, t, d});
  auto xt = x.transpose(0, 1);  // LibTorch's MHA is (T, B, d)

  // Plain.
  auto ref = std::get<0>(mha->forward(xt, xt, xt)).transpose(0, 1);
  EXPECT_LE(max_abs_diff(run(attn, x), ref), 1e-5);

  // Key padding: LibTorch marks padding with true, zoo marks real tokens.
  auto pad = torch::zeros({b, t}, torch::kBool);
  pad[1].narrow(0, t - 3, 3).fill_(true);
  ref = std::get<0>(mha->forward(xt, xt, xt, pad)).transpose(0, 1);
  EXPECT_LE(max_abs_diff(run(attn, x, {.key_padding_mask = pad.logical_not()}), ref), 1e-5);

  // Causal plus padding.
  // LibTorch's C++ MultiheadAttention adds attn_mask to the scores: -inf above the diagonal.
  auto future = torch::zeros({t, t}).masked_fill(torch::ones({t, t}, torch::kBool).triu(1), -INFINITY);
  ref = std::get<0>(mha->forward(xt, xt, xt, pad, true, future)).transpose(0, 1);
  Attention causal(AttentionOptions(d, h).causal(true).backend(GetParam()));
  causal->eval();
  copy_from_mha(causal, mha);
  EXPECT_LE(max_abs_diff(run(causal, x, {.key_padding_mask = pad.logical_not()}), ref), 1e-5);
  ref = std::get<0>(mha->forward(xt, xt, xt, {}, true, future)).transpose(0, 1);
  EXPECT_LE(max_abs_diff(run(causal, x), ref), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Backends, AttentionBackendTest,
                         ::testing::Values(AttentionBackend::kFused, AttentionBackend::kMath,
                                           AttentionBackend::kTiled),
                         [](const auto& info) { return std::string(to_string(info.param)); });

TEST(Attention, WeightsFromExplicitPathMatchLibTorch) {
  const int64_t d = 8, h = 2, t = 5;
  torch::nn::MultiheadAttention mha(torch::nn::MultiheadAttentionOptions(d, h));
  Attention attn{AttentionOptions(d, h)};
  copy_from_mha(attn, mha);
  auto x = torch::randn({1, t, d});
  auto xt = x.transpose(0, 1);
  auto ref = mha->forward(xt, xt, xt, {}, true, {});  // weights averaged over heads
  auto [out, weights] = with_weights(attn, x);
  EXPECT_EQ(weights.sizes(), (std::vector<int64_t>{1, h, t, t}));
  EXPECT_LE(max_abs_diff(weights.mean(1), std::get<1>(ref)), 1e-6);
  EXPECT_LE(max_abs_diff(out, std::get<0>(ref).transpose(0, 1)), 1e-5);
}

// The published definition, written out: per-head projections, K/V heads repeated
// (repeat_interleave), softmax(q k^T / sqrt(D) + bias) v, output projection.
torch::Tensor reference_attention(Attention& attn, const torch::Tensor& x,
                                  const torch::Tensor& allowed /* (T, T) bool or undefined */) {
  const auto& o = attn->options;
  const int64_t b = x.size(0), t = x.size(1), h = o.n_heads(), hkv = o.resolved_n_kv_heads();
  const int64_t d = o.resolved_head_dim();
  auto w = attn->qkv->weight;
  auto bias = attn->qkv->bias;
  auto q = torch::nn::functional::linear(x, w.narrow(0, 0, h * d), bias.narrow(0, 0, h * d));
  auto k = torch::nn::functional::linear(x, w.narrow(0, h * d, hkv * d),
                                         bias.narrow(0, h * d, hkv * d));
  auto v = torch::nn::functional::linear(x, w.narrow(0, (h + hkv) * d, hkv * d),
                                         bias.narrow(0, (h + hkv) * d, hkv * d));
  q = q.view({b, t, h, d}).transpose(1, 2);
  k = k.view({b, t, hkv, d}).transpose(1, 2).repeat_interleave(h / hkv, 1);
  v = v.view({b, t, hkv, d}).transpose(1, 2).repeat_interleave(h / hkv, 1);
  auto scores = torch::matmul(q, k.transpose(-1, -2)) / std::sqrt(double(d));
  if (allowed.defined()) scores = scores.masked_fill(allowed.logical_not(), -INFINITY);
  auto y = torch::matmul(torch::softmax(scores, -1), v).transpose(1, 2).reshape({b, t, h * d});
  return attn->out->forward(y);
}

torch::Tensor band(int64_t t, int64_t window) {
  auto m = torch::zeros({t, t}, torch::kBool);
  for (int64_t i = 0; i < t; ++i)
    for (int64_t j = 0; j < t; ++j) m[i][j] = j <= i && (window == 0 || j > i - window);
  return m;
}

TEST(Attention, GroupedAndMultiQueryMatchRepeatedHeads) {
  const int64_t d = 24, h = 6, b = 2, t = 9;
  for (int64_t hkv : {6, 3, 2, 1}) {
    for (auto backend : {AttentionBackend::kFused, AttentionBackend::kMath}) {
      for (bool causal : {false, true}) {
        Attention attn(AttentionOptions(d, h).n_kv_heads(hkv).causal(causal).backend(backend));
        EXPECT_EQ(attn->qkv->weight.size(0), (h + 2 * hkv) * (d / h));
        auto x = torch::randn({b, t, d});
        auto expected = reference_attention(attn, x, causal ? band(t, 0) : torch::Tensor());
        EXPECT_LE(max_abs_diff(run(attn, x), expected), 1e-5)
            << "n_kv_heads " << hkv << " causal " << causal;
      }
    }
  }
}

TEST(Attention, GqaWithAllHeadsEqualsMha) {
  const int64_t d = 16, h = 4;
  torch::nn::MultiheadAttention mha(torch::nn::MultiheadAttentionOptions(d, h));
  Attention attn(AttentionOptions(d, h).n_kv_heads(h));
  copy_from_mha(attn, mha);
  auto x = torch::randn({3, 6, d});
  auto xt = x.transpose(0, 1);
  EXPECT_LE(max_abs_diff(run(attn, x), std::get<0>(mha->forward(xt, xt, xt)).transpose(0, 1)),
            1e-5);
}

TEST(Attention, SlidingWindowEqualsBandMask) {
  const int64_t d = 16, h = 4, t = 10;
  auto x = torch::randn({2, t, d});
  for (int64_t window : {1, 3, 6}) {
    Attention windowed(AttentionOptions(d, h).n_kv_heads(2).causal(true).window(window));
    EXPECT_LE(max_abs_diff(run(windowed, x), reference_attention(windowed, x, band(t, window))),
              1e-5)
        << "window " << window;
  }
  // A window as long as the sequence is plain causal attention.
  Attention plain(AttentionOptions(d, h).causal(true));
  Attention wide(AttentionOptions(d, h).causal(true).window(t));
  testing::copy_parameters(*wide, *plain);
  EXPECT_LE(max_abs_diff(run(wide, x), run(plain, x)), 1e-6);
}

// Why building `o` fails, or "accepted".
std::string message(const AttentionOptions& o) {
  try {
    Attention refused(o);
  } catch (const std::invalid_argument& e) {
    return std::string(e.what());
  }
  return std::string("accepted");
}

// Linformer's layer (kernels/linformer_attention.h): with T rows of identity E and F it is the
// softmax layer of the same weights (grouped heads, RoPE); a right-padded row gives its real
// tokens what they get alone (padded keys zeroed, E's first columns); what it cannot take is
// named.
TEST(Attention, LinformerAtIdentityIsSoftmaxAndPaddingIsZeroedKeys) {
  const int64_t d = 16, h = 4, t = 9;
  torch::manual_seed(8);
  const auto base = AttentionOptions(d, h).n_kv_heads(2).rope(true);
  Attention plain(base);
  for (const auto sharing : {LinformerSharing::kPerHead, LinformerSharing::kHeadwise, LinformerSharing::kKeyValue}) {
    SCOPED_TRACE(to_string(sharing));
    Attention lin(AttentionOptions(base).linformer_k(t).linformer_length(t).linformer_sharing(sharing));
    EXPECT_EQ(lin->linformer_e.size(0), sharing == LinformerSharing::kPerHead ? 2 : 1);
    EXPECT_EQ(lin->linformer_f.defined(), sharing != LinformerSharing::kKeyValue);
    {
      torch::NoGradGuard no_grad;
      lin->qkv->weight.copy_(plain->qkv->weight), lin->qkv->bias.copy_(plain->qkv->bias);
      lin->out->weight.copy_(plain->out->weight), lin->out->bias.copy_(plain->out->bias);
      for (auto* p : {&lin->linformer_e, &lin->linformer_f}) {
        if (p->defined()) p->copy_(torch::eye(t).expand_as(*p));
      }
    }
    const auto x = torch::randn({2, t, d});
    EXPECT_LE(max_abs_diff(run(lin, x), run(plain, x)), 1e-5);
  }
  Attention lin(AttentionOptions(base).linformer_k(4).linformer_length(12));
  const auto x = torch::randn({2, 7, d});
  auto keep = torch::ones({2, 7}, torch::kLong);
  keep[1].narrow(0, 5, 2).zero_();
  auto bias = attention_bias(*lin, x);
  bias.token_mask = keep;
  const auto padded = lin->forward(x, bias);
  const auto alone = run(lin, x.narrow(0, 1, 1).narrow(1, 0, 5));
  EXPECT_LE(max_abs_diff(padded[1].narrow(0, 0, 5), alone[0]), 1e-5);
  EXPECT_LE(max_abs_diff(padded[0], run(lin, x.narrow(0, 0, 1))[0]), 1e-5);
  // What it cannot take.
  const auto linformer = AttentionOptions(d, h).linformer_k(4).linformer_length(12);
  EXPECT_NE(message(AttentionOptions(linformer).causal(true)).find("causal self-attention cannot take it"),
            std::string::npos);
  EXPECT_NE(message(AttentionOptions(linformer).cross_attention(true)).find("it applies to self-attention"),
            std::string::npos);
  EXPECT_NE(message(AttentionOptions(linformer).window(3)).find("a window bounds keys"), std::string::npos);
  EXPECT_EQ(message(AttentionOptions(linformer).linformer_length(3)),
            "attention: linformer_k (4) must be at most the sequence length its projections take (3)");
  EXPECT_THROW(run(lin, torch::randn({1, 13, d})), c10::Error);  // past n = 12
  EXPECT_THROW(with_weights(lin, x), c10::Error);
}

// Longformer's layer against transformers' LongformerSelfAttention on the same weights (windows
// 4, 6 and 10, global tokens at the start and scattered, a padded row, a length transformers pads
// to the window): the output (zoo's output projection set to the identity, as transformers'
// self-attention stops before its dense) and the gradients of the input and three weights.
TEST(Attention, LongformerMatchesTransformersSelfAttention) {
  const auto ref = testing::python_reference("longformer_reference.py");
  const int64_t d = 32, h = 4;
  for (const int64_t window : {4, 6, 10}) {
    SCOPED_TRACE(window);
    const std::string n = "w" + std::to_string(window);
    Attention layer(AttentionOptions(d, h).longformer_window(window / 2));
    {
      torch::NoGradGuard no_grad;
      const auto& r = ref;
      layer->qkv->weight.copy_(torch::cat({r.at(n + "_wq"), r.at(n + "_wk"), r.at(n + "_wv")}));
      layer->qkv->bias.copy_(torch::cat({r.at(n + "_bq"), r.at(n + "_bk"), r.at(n + "_bv")}));
      layer->qkv_global->weight.copy_(torch::cat({r.at(n + "_wgq"), r.at(n + "_wgk"), r.at(n + "_wgv")}));
      layer->qkv_global->bias.copy_(torch::cat({r.at(n + "_bgq"), r.at(n + "_bgk"), r.at(n + "_bgv")}));
      layer->out->weight.copy_(torch::eye(d));
      layer->out->bias.zero_();
    }
    auto x = ref.at(n + "_x").clone().requires_grad_(true);
    auto bias = attention_bias(*layer, x);
    bias.token_mask = ref.at(n + "_tokens");
    bias.global_mask = ref.at(n + "_global");
    const auto out = layer->forward(x, bias);
    EXPECT_LE(max_abs_diff(out, ref.at(n + "_out")), 2e-5);
    (out * ref.at(n + "_probe")).sum().backward();
    EXPECT_LE(max_abs_diff(x.grad(), ref.at(n + "_dx")), 1e-4);
    EXPECT_LE(max_abs_diff(layer->qkv->weight.grad().narrow(0, 0, d), ref.at(n + "_dwq")), 1e-4);
    EXPECT_LE(max_abs_diff(layer->qkv_global->weight.grad().narrow(0, d, d), ref.at(n + "_dwgk")), 1e-4);
    EXPECT_LE(max_abs_diff(layer->qkv->bias.grad().narrow(0, 2 * d, d), ref.at(n + "_dbv")), 1e-4);
  }
  // What it cannot take.
  const auto longformer = AttentionOptions(d, h).longformer_window(2);
  EXPECT_NE(message(AttentionOptions(longformer).causal(true)).find("causal self-attention cannot take"),
            std::string::npos);
  EXPECT_NE(message(AttentionOptions(longformer).n_kv_heads(2)).find("one key head per query head"), std::string::npos);
  EXPECT_NE(message(AttentionOptions(longformer).rope(true)).find("not rope"), std::string::npos);
  EXPECT_NE(message(AttentionOptions(longformer).window(3)).find("its own window"), std::string::npos);
  EXPECT_EQ(message(AttentionOptions(longformer).longformer_dilation({1, 2})),
            "attention: longformer_dilation has 2 values, one per head (4) expected");
  Attention layer(longformer);
  const auto x = torch::randn({1, 5, d});
  EXPECT_THROW(with_weights(layer, x), c10::Error);
}

TEST(Attention, FusedAndMathBackendsAgreeWithEveryInput) {
  const int64_t d = 16, h = 4, b = 2, t = 8;
  AlibiBias alibi{AlibiBiasOptions(h)};
  auto x = torch::randn({b, t, d});
  auto keep = torch::ones({b, t}, torch::kBool);
  keep[0].narrow(0, 0, 2).fill_(false);  // left padding
  auto bias = alibi->forward(t, t);
  auto opts = AttentionOptions(d, h).n_kv_heads(2).causal(true).window(5).rope(true);
  Attention fused(AttentionOptions(opts).backend(AttentionBackend::kFused));
  Attention math(AttentionOptions(opts).backend(AttentionBackend::kMath));
  testing::copy_parameters(*math, *fused);
  const AttentionMasks masks{.key_padding_mask = keep, .position_bias = bias};
  EXPECT_LE(max_abs_diff(run(fused, x, masks), run(math, x, masks)), 1e-5);
}

// Qwen2: q, k and v projections biased, the output projection not; the biases reach the output.
TEST(Attention, QkvBiasBiasesTheInputProjectionsOnly) {
  Attention self(AttentionOptions(8, 2).n_kv_heads(1).bias(false).qkv_bias(true).causal(true));
  ASSERT_TRUE(self->qkv->bias.defined());
  EXPECT_EQ(self->qkv->bias.size(0), 8 + 2 * 4);
  EXPECT_FALSE(self->out->bias.defined());
  Attention cross(AttentionOptions(8, 2).bias(false).qkv_bias(true).cross_attention(true));
  EXPECT_TRUE(cross->q->bias.defined() && cross->kv->bias.defined());
  EXPECT_FALSE(cross->out->bias.defined());
  auto x = torch::randn({1, 5, 8});
  auto expected = reference_attention(self, x, band(5, 0));
  EXPECT_LE(max_abs_diff(run(self, x), expected), 1e-5);
  torch::NoGradGuard no_grad;
  auto before = run(self, x);
  self->qkv->bias.fill_(0.5);
  EXPECT_GT(max_abs_diff(run(self, x), before), 1e-3);
}

TEST(Attention, UnscaledMatchesExplicitScores) {
  // T5 does not divide scores by sqrt(head_dim).
  Attention attn(AttentionOptions(8, 2).scaled(false).bias(false));
  auto x = torch::randn({1, 4, 8});
  auto [out, weights] = with_weights(attn, x);
  auto qkv = attn->qkv->forward(x).split(8, -1);
  auto q = qkv[0].view({1, 4, 2, 4}).transpose(1, 2);
  auto k = qkv[1].view({1, 4, 2, 4}).transpose(1, 2);
  EXPECT_LE(max_abs_diff(weights, torch::softmax(torch::matmul(q, k.transpose(-1, -2)), -1)), 1e-6);
  EXPECT_LE(max_abs_diff(run(attn, x), out), 1e-5);  // fused path scales the same way
}

TEST(Attention, CrossAttentionReadsMemoryAndCachesIt) {
  const int64_t d = 16, h = 4;
  torch::nn::MultiheadAttention mha(torch::nn::MultiheadAttentionOptions(d, h));
  for (bool fused : {true, false}) {
    Attention cross(AttentionOptions(d, h).cross_attention(true).fused_projections(fused));
    {
      torch::NoGradGuard no_grad;
      auto w = mha->in_proj_weight, bias = mha->in_proj_bias;
      cross->q->weight.copy_(w.narrow(0, 0, d));
      cross->q->bias.copy_(bias.narrow(0, 0, d));
      if (fused) {
        cross->kv->weight.copy_(w.narrow(0, d, 2 * d));
        cross->kv->bias.copy_(bias.narrow(0, d, 2 * d));
      } else {
        cross->k->weight.copy_(w.narrow(0, d, d));
        cross->k->bias.copy_(bias.narrow(0, d, d));
        cross->v->weight.copy_(w.narrow(0, 2 * d, d));
        cross->v->bias.copy_(bias.narrow(0, 2 * d, d));
      }
      cross->out->weight.copy_(mha->out_proj->weight);
      cross->out->bias.copy_(mha->out_proj->bias);
    }
    auto x = torch::randn({2, 3, d});
    auto memory = torch::randn({2, 5, d});
    auto keep = torch::ones({2, 5}, torch::kBool);
    keep[1].narrow(0, 3, 2).fill_(false);
    auto ref = std::get<0>(mha->forward(x.transpose(0, 1), memory.transpose(0, 1),
                                        memory.transpose(0, 1), keep.logical_not()))
                   .transpose(0, 1);
    const AttentionMasks masks{.keys = 5, .key_padding_mask = keep};
    EXPECT_LE(max_abs_diff(run(cross, x, masks, memory), ref), 1e-5);
    // With a cache the memory is projected once; later calls need no memory.
    AttentionCache cache;
    auto first = run(cross, x.narrow(1, 0, 1), masks, memory, &cache);
    EXPECT_TRUE(cache.is_static());
    auto later = run(cross, x.narrow(1, 1, 2), masks, {}, &cache);
    EXPECT_LE(max_abs_diff(torch::cat({first, later}, 1), ref), 1e-5);
  }
}

// Decoding one token at a time through the cache must equal one full causal pass.
struct CachedCase {
  const char* name;
  int64_t n_kv_heads;
  int64_t window;  // 0 = none
  bool rope;
  PositionKind bias;
};

class AttentionCacheTest : public ::testing::TestWithParam<CachedCase> {};

TEST_P(AttentionCacheTest, IncrementalDecodingEqualsFullPass) {
  const auto& c = GetParam();
  const int64_t d = 32, h = 4, b = 2, t = 11;
  auto opts = AttentionOptions(d, h).n_kv_heads(c.n_kv_heads).causal(true).rope(c.rope);
  if (c.window > 0) opts.window(c.window);
  Attention attn(opts);
  attn->eval();
  AlibiBias alibi{AlibiBiasOptions(h)};
  RelativePositionBias relative(RelativePositionBiasOptions(h).bidirectional(false));
  // Bias for queries at start.. against every key from position 0.
  auto bias_for = [&](int64_t q_len, int64_t start) -> torch::Tensor {
    if (c.bias == PositionKind::kAlibi) return alibi->forward(q_len, start + q_len, start, 0);
    if (c.bias == PositionKind::kRelative) return relative->forward(q_len, start + q_len, start, 0);
    return {};
  };
  torch::NoGradGuard no_grad;
  auto x = torch::randn({b, t, d});
  auto full = run(attn, x, {.position_bias = bias_for(t, 0)});

  AttentionCache cache;
  std::vector<torch::Tensor> steps;
  for (int64_t i = 0; i < t; ++i) {
    steps.push_back(run(attn, x.narrow(1, i, 1), {.query_start = i, .position_bias = bias_for(1, i)}, {}, &cache));
    if (c.window > 0) EXPECT_LE(cache.length(), c.window) << "step " << i;
  }
  EXPECT_EQ(cache.seen(), t);
  EXPECT_LE(max_abs_diff(torch::cat(steps, 1), full), 1e-5);

  // A prompt in one chunk, then single tokens.
  AttentionCache chunked;
  auto prefix = run(attn, x.narrow(1, 0, 4), {.position_bias = bias_for(4, 0)}, {}, &chunked);
  std::vector<torch::Tensor> parts{prefix};
  for (int64_t i = 4; i < t; ++i) {
    parts.push_back(run(attn, x.narrow(1, i, 1), {.query_start = i, .position_bias = bias_for(1, i)}, {}, &chunked));
  }
  EXPECT_LE(max_abs_diff(torch::cat(parts, 1), full), 1e-5);
}

void PrintTo(const CachedCase& c, std::ostream* os) { *os << c.name; }

INSTANTIATE_TEST_SUITE_P(
    Variants, AttentionCacheTest,
    ::testing::Values(CachedCase{"Mha", 4, 0, false, PositionKind::kNone},
                      CachedCase{"Gqa", 2, 0, false, PositionKind::kNone},
                      CachedCase{"Mqa", 1, 0, false, PositionKind::kNone},
                      CachedCase{"SlidingWindow", 2, 3, false, PositionKind::kNone},
                      CachedCase{"Rope", 2, 0, true, PositionKind::kNone},
                      CachedCase{"RopeWindow", 4, 4, true, PositionKind::kNone},
                      CachedCase{"Alibi", 4, 0, false, PositionKind::kAlibi},
                      CachedCase{"AlibiWindow", 4, 5, false, PositionKind::kAlibi},
                      CachedCase{"RelativeBias", 4, 0, false, PositionKind::kRelative}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(Attention, LeftPaddedRowMatchesUnpaddedWithPositionIds) {
  // A prompt left-padded by 2 with positions counted from its first real token gives the same
  // outputs as the prompt alone.
  const int64_t d = 16, h = 4, t = 5, pad = 2;
  Attention attn(AttentionOptions(d, h).causal(true).rope(true).n_kv_heads(2));
  auto x = torch::randn({1, t, d});
  auto alone = run(attn, x);
  auto padded = torch::cat({torch::randn({1, pad, d}), x}, 1);
  auto keep = torch::ones({1, t + pad}, torch::kBool);
  keep[0].narrow(0, 0, pad).fill_(false);
  auto positions = (torch::arange(t + pad) - pad).clamp_min(0).unsqueeze(0);
  auto out = run(attn, padded, {.key_padding_mask = keep}, {}, nullptr, positions);
  EXPECT_LE(max_abs_diff(out.narrow(1, pad, t), alone), 1e-5);
  EXPECT_TRUE(torch::isfinite(out).all().item<bool>());  // padding rows too
}

TEST(Attention, BackwardGivesFiniteNonzeroGradients) {
  for (bool cross : {false, true}) {
    auto opts = AttentionOptions(16, 4).n_kv_heads(2).cross_attention(cross);
    if (!cross) opts.causal(true).rope(true);
    Attention attn(opts);
    auto x = torch::randn({2, 5, 16}, torch::requires_grad());
    auto memory = torch::randn({2, 7, 16});
    run(attn, x, {.keys = cross ? 7 : 0}, cross ? memory : torch::Tensor()).pow(2).sum().backward();
    for (const auto& p : attn->named_parameters()) {
      ASSERT_TRUE(p.value().grad().defined()) << p.key();
      EXPECT_TRUE(torch::isfinite(p.value().grad()).all().item<bool>()) << p.key();
      EXPECT_GT(p.value().grad().abs().sum().item<double>(), 0.0) << p.key();
    }
  }
}

TEST(Attention, GradientsMatchFiniteDifferencesInDouble) {
  for (auto backend : {AttentionBackend::kFused, AttentionBackend::kMath}) {
    Attention attn(AttentionOptions(8, 2).n_kv_heads(1).causal(true).rope(true).backend(backend));
    attn->to(torch::kDouble);
    AlibiBias alibi{AlibiBiasOptions(2)};
    auto bias = alibi->forward(4, 4).to(torch::kDouble);
    auto x = torch::randn({2, 4, 8}, torch::kDouble).requires_grad_();
    auto loss_fn = [&] { return (run(attn, x, {.position_bias = bias}) * torch::arange(8).to(torch::kDouble)).sum(); };
    loss_fn().backward();
    const double eps = 1e-6;
    torch::NoGradGuard no_grad;
    auto check = [&](torch::Tensor param, const std::string& name) {
      auto grad = param.grad().clone();
      auto flat = param.view(-1);
      for (int64_t i = 0; i < flat.numel(); i += std::max<int64_t>(1, flat.numel() / 7)) {
        double old = flat[i].item<double>();
        flat[i] = old + eps;
        double up = loss_fn().item<double>();
        flat[i] = old - eps;
        double down = loss_fn().item<double>();
        flat[i] = old;
        EXPECT_NEAR(grad.view(-1)[i].item<double>(), (up - down) / (2 * eps), 1e-6)
            << name << "[" << i << "]";
      }
    };
    check(x, "input");
    for (auto& p : attn->named_parameters()) check(p.value(), p.key());
  }
}

TEST(Attention, BadOptionsNameTheOptionAndValues) {
  auto message = [](const AttentionOptions& o) {
    try {
      o.validate();
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message(AttentionOptions(1000, 12)),
            "attention: d_model (1000) must be divisible by n_heads (12) unless head_dim is set");
  EXPECT_EQ(message(AttentionOptions(64, 8).n_kv_heads(3)),
            "attention: n_heads (8) must be divisible by n_kv_heads (3)");
  EXPECT_EQ(message(AttentionOptions(64, 8).causal(true).window(0)),
            "attention: window (0) must be >= 1");
  EXPECT_EQ(message(AttentionOptions(64, 8).causal(true).window(-4)),
            "attention: window (-4) must be >= 1");
  EXPECT_EQ(message(AttentionOptions(64, 8).cross_attention(true).window(4)),
            "attention: window (4) needs self-attention");
  EXPECT_EQ(message(AttentionOptions(64, 8).window(4)), "no error");  // an encoder's two-sided window
  EXPECT_EQ(message(AttentionOptions(64, 8).dropout(1.5)), "attention: dropout (1.5) must be in [0, 1)");
  EXPECT_EQ(message(AttentionOptions(30, 2).rope(true)), "attention: rope needs an even head_dim, got 15");
  EXPECT_EQ(message(AttentionOptions(64, 8).n_kv_heads(2)), "no error");
  EXPECT_THROW(Attention(AttentionOptions(10, 3)), std::invalid_argument);
}

TEST(Attention, ShapeErrorsSayWhatWasExpected) {
  Attention attn{AttentionOptions(16, 4)};
  try {
    run(attn, torch::randn({2, 3, 15}));
    FAIL() << "no error";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("expected input (B, T, 16), got [2, 3, 15]"),
              std::string::npos)
        << e.what();
  }
}

// Device-parameterised: the same cached-decoding invariant on every available device.
class AttentionDeviceTest : public ::testing::TestWithParam<std::string> {};

TEST_P(AttentionDeviceTest, CachedDecodingMatchesOnDevice) {
  ZOO_SKIP_IF_UNAVAILABLE(GetParam());
  torch::Device device(GetParam());
  Attention attn(AttentionOptions(32, 4).n_kv_heads(2).causal(true).rope(true).window(4));
  attn->to(device);
  attn->eval();
  torch::NoGradGuard no_grad;
  auto x = torch::randn({2, 6, 32}, device);
  auto full = run(attn, x);
  AttentionCache cache;
  std::vector<torch::Tensor> steps;
  for (int64_t i = 0; i < 6; ++i) steps.push_back(run(attn, x.narrow(1, i, 1), {.query_start = i}, {}, &cache));
  EXPECT_LE(max_abs_diff(torch::cat(steps, 1), full), 1e-4);
}

INSTANTIATE_TEST_SUITE_P(Devices, AttentionDeviceTest, ::testing::ValuesIn(testing::test_devices()));

}  // namespace
}  // namespace zoo
