#include "layers/block.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "test_util.h"

namespace zoo {
namespace {

using testing::max_abs_diff;

constexpr int64_t kD = 16, kHeads = 4, kFF = 32;

// A block through the biases a model builds (attention_bias): self-attention over x's keys after
// `past` cached ones with `padding`, cross-attention over `memory` with `memory_padding`.
torch::Tensor run(TransformerBlock& block, const torch::Tensor& x, const torch::Tensor& padding = {},
                  const torch::Tensor& memory = {}, const torch::Tensor& memory_padding = {},
                  KVCache* cache = nullptr, int64_t past = 0) {
  const auto self_bias =
      attention_bias(*block->self_attn, x, {.query_start = past, .key_padding_mask = padding});
  AttentionBias cross_bias;
  if (block->cross_attn) {
    const int64_t memory_length = memory.defined() ? memory.size(1) : memory_padding.size(1);
    cross_bias = attention_bias(*block->cross_attn, x, {.keys = memory_length, .key_padding_mask = memory_padding});
  }
  return block->forward(x, self_bias, memory, cross_bias, cache);
}

TransformerBlockOptions torch_like(bool decoder, bool pre_norm, Activation act) {
  return TransformerBlockOptions(AttentionOptions(kD, kHeads).causal(decoder),
                                 FeedForwardOptions(kD, kFF).activation(act), NormOptions(kD))
      .cross_attention(decoder)
      .norm_position(pre_norm ? NormPosition::kPre : NormPosition::kPost);
}

// Loads PyTorch's TransformerEncoderLayer / TransformerDecoderLayer weights (prefix `p`) into a
// zoo block: the name table between the two layouts.
void load_torch_layer(TransformerBlock& block, std::map<std::string, torch::Tensor>& ref,
                      const std::string& p, bool decoder) {
  auto copy = [&](const std::string& ours, const torch::Tensor& theirs) {
    testing::copy_into(*block, ours, theirs);
  };
  copy("self_attn.qkv.weight", ref[p + "self_attn.in_proj_weight"]);
  copy("self_attn.qkv.bias", ref[p + "self_attn.in_proj_bias"]);
  copy("self_attn.out.weight", ref[p + "self_attn.out_proj.weight"]);
  copy("self_attn.out.bias", ref[p + "self_attn.out_proj.bias"]);
  copy("ff.up.weight", ref[p + "linear1.weight"]);
  copy("ff.up.bias", ref[p + "linear1.bias"]);
  copy("ff.down.weight", ref[p + "linear2.weight"]);
  copy("ff.down.bias", ref[p + "linear2.bias"]);
  copy("self_attn_norm.weight", ref[p + "norm1.weight"]);
  copy("self_attn_norm.bias", ref[p + "norm1.bias"]);
  const std::string ff_norm = decoder ? "norm3" : "norm2";
  copy("ff_norm.weight", ref[p + ff_norm + ".weight"]);
  copy("ff_norm.bias", ref[p + ff_norm + ".bias"]);
  if (decoder) {
    auto w = ref[p + "multihead_attn.in_proj_weight"];
    auto b = ref[p + "multihead_attn.in_proj_bias"];
    copy("cross_attn.q.weight", w.narrow(0, 0, kD));
    copy("cross_attn.q.bias", b.narrow(0, 0, kD));
    copy("cross_attn.kv.weight", w.narrow(0, kD, 2 * kD));
    copy("cross_attn.kv.bias", b.narrow(0, kD, 2 * kD));
    copy("cross_attn.out.weight", ref[p + "multihead_attn.out_proj.weight"]);
    copy("cross_attn.out.bias", ref[p + "multihead_attn.out_proj.bias"]);
    copy("cross_attn_norm.weight", ref[p + "norm2.weight"]);
    copy("cross_attn_norm.bias", ref[p + "norm2.bias"]);
  }
}

TEST(TransformerBlock, MatchesPyTorchEncoderAndDecoderLayers) {
  auto ref = testing::python_reference("torch_layers.py");
  auto src = ref["src"], tgt = ref["tgt"], src_keep = ref["src_keep"];
  for (bool pre : {false, true}) {
    const std::string tag = pre ? "pre" : "post";
    TransformerBlock enc(torch_like(false, pre, Activation::kGELU));
    enc->eval();
    load_torch_layer(enc, ref, "enc_" + tag + ".", false);
    EXPECT_LE(max_abs_diff(run(enc, src, src_keep), ref["enc_" + tag + ".output"]), 1e-5)
        << "encoder, " << tag << "-norm";

    TransformerBlock dec(torch_like(true, pre, Activation::kReLU));
    dec->eval();
    load_torch_layer(dec, ref, "dec_" + tag + ".", true);
    EXPECT_LE(max_abs_diff(run(dec, tgt, {}, src, src_keep), ref["dec_" + tag + ".output"]),
              1e-5)
        << "decoder, " << tag << "-norm";
  }
}

TEST(TransformerBlock, PreAndPostNormFollowTheirFormulas) {
  // With every branch but the feed-forward silenced (zero attention output), the block reduces
  // to x + ff(norm(x)) or norm(x + ff(x)).
  for (bool pre : {false, true}) {
    TransformerBlock block(torch_like(false, pre, Activation::kSwiGLU));
    {
      torch::NoGradGuard no_grad;
      block->self_attn->out->weight.zero_();
      block->self_attn->out->bias.zero_();
    }
    auto x = torch::randn({2, 3, kD});
    torch::Tensor expected;
    if (pre) {
      expected = x + block->ff->forward(block->ff_norm->forward(x));
    } else {
      auto h = block->self_attn_norm->forward(x);
      expected = block->ff_norm->forward(h + block->ff->forward(h));
    }
    EXPECT_LE(max_abs_diff(run(block, x), expected), 1e-5) << (pre ? "pre" : "post");
  }
}

// Gemma's sandwich: a norm before and after each branch, x + post(f(pre(x))), with norms of
// their own (random here) that the block's state holds as self_attn_post_norm and ff_post_norm.
TEST(TransformerBlock, SandwichNormsWrapEachBranch) {
  auto options = TransformerBlockOptions(AttentionOptions(kD, kHeads).causal(true).bias(false),
                                         FeedForwardOptions(kD, kFF).activation(Activation::kGeGLUTanh).bias(false),
                                         NormOptions(kD).kind(NormKind::kRMSNormPlusOne))
                     .norm_position(NormPosition::kSandwich);
  TransformerBlock block(options);
  const auto names = block->named_parameters();
  for (const char* name : {"self_attn_norm.weight", "self_attn_post_norm.weight", "ff_norm.weight", "ff_post_norm.weight"}) {
    EXPECT_TRUE(names.contains(name)) << name;
  }
  {
    torch::NoGradGuard no_grad;
    for (auto& p : block->parameters()) p.normal_(0.0, 0.3);
  }
  auto x = torch::randn({2, 5, kD});
  const auto a = block->self_attn->forward(block->self_attn_norm->forward(x), attention_bias(*block->self_attn, x));
  const auto h = x + block->self_attn_post_norm->forward(a);
  const auto expected = h + block->ff_post_norm->forward(block->ff->forward(block->ff_norm->forward(h)));
  EXPECT_LE(max_abs_diff(run(block, x), expected), 1e-6);
  // Without the post norms (pre-norm's formula over the same weights) the output differs.
  const auto pre_norm = h - block->self_attn_post_norm->forward(a) + a;
  EXPECT_GT(max_abs_diff(run(block, x), pre_norm + block->ff->forward(block->ff_norm->forward(pre_norm))), 1e-2);
}

TEST(TransformerBlock, CachedDecoderEqualsFullPass) {
  for (bool pre : {false, true}) {
    auto opts = torch_like(true, pre, Activation::kGeGLUTanh);
    opts.attention().n_kv_heads(2).rope(true).window(3);
    opts.layer_index(1);
    TransformerBlock block(opts);
    block->eval();
    torch::NoGradGuard no_grad;
    auto x = torch::randn({2, 7, kD});
    auto memory = torch::randn({2, 4, kD});
    auto keep = torch::ones({2, 4}, torch::kBool);
    keep[0][3] = false;
    auto full = run(block, x, {}, memory, keep);
    KVCache cache(2);
    std::vector<torch::Tensor> steps;
    for (int64_t i = 0; i < 7; ++i) {
      // The encoder output is only needed on the first step: the cache keeps its projection.
      steps.push_back(run(block, x.narrow(1, i, 1), {}, i == 0 ? memory : torch::Tensor(), keep, &cache, i));
    }
    EXPECT_LE(max_abs_diff(torch::cat(steps, 1), full), 1e-5);
    EXPECT_EQ(cache.self_attention(1).seen(), 7);
    EXPECT_TRUE(cache.self_attention(0).empty());  // layer_index picks the entry
    EXPECT_TRUE(cache.cross_attention(1).is_static());
  }
}

TEST(TransformerBlock, ResidualDropoutOnlyInTraining) {
  auto opts = torch_like(false, true, Activation::kGELU).dropout(0.5);
  TransformerBlock block(opts);
  auto x = torch::randn({2, 5, kD});
  block->eval();
  EXPECT_LE(max_abs_diff(run(block, x), run(block, x)), 0.0);
  block->train();
  EXPECT_GT(max_abs_diff(run(block, x), run(block, x)), 1e-3);
}

TEST(TransformerBlock, BackwardReachesEveryParameter) {
  for (auto act : {Activation::kReLU, Activation::kGELUTanh, Activation::kSwiGLU}) {
    for (bool pre : {false, true}) {
      auto opts = torch_like(true, pre, act);
      opts.norm().kind(pre ? NormKind::kRMSNorm : NormKind::kLayerNorm);
      TransformerBlock block(opts);
      auto x = torch::randn({2, 4, kD});
      auto memory = torch::randn({2, 3, kD});
      run(block, x, {}, memory).pow(2).sum().backward();
      for (const auto& p : block->named_parameters()) {
        ASSERT_TRUE(p.value().grad().defined()) << p.key();
        EXPECT_TRUE(torch::isfinite(p.value().grad()).all().item<bool>()) << p.key();
        EXPECT_GT(p.value().grad().abs().sum().item<double>(), 0.0) << p.key();
      }
    }
  }
}

TEST(TransformerBlock, MismatchedWidthsAreRejected) {
  try {
    TransformerBlock(TransformerBlockOptions(AttentionOptions(16, 4), FeedForwardOptions(32, 64),
                                             NormOptions(16)));
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(),
                 "block: d_model differs between attention (16), feed-forward (32) and norm (16)");
  }
  EXPECT_THROW(TransformerBlock(torch_like(false, true, Activation::kGELU).dropout(-0.1)),
               std::invalid_argument);
}

TEST(TransformerBlock, MemoryWithoutCrossAttentionIsAnError) {
  TransformerBlock block(torch_like(false, true, Activation::kGELU));
  EXPECT_THROW(run(block, torch::randn({1, 2, kD}), {}, torch::randn({1, 2, kD})), c10::Error);
  TransformerBlock decoder(torch_like(true, true, Activation::kGELU));
  const auto x = torch::randn({1, 2, kD});
  EXPECT_THROW(decoder->forward(x, attention_bias(*decoder->self_attn, x)), c10::Error);
}

}  // namespace
}  // namespace zoo
