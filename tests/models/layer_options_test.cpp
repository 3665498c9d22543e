#include "models/layer_options.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "kernels/f32_rows_dot.h"
#include "models/model.h"
#include "test_util.h"

namespace zoo {
namespace {

// A model small enough to train a step of in milliseconds, with no dropout so that the tiled
// and the math paths compute the same function.
Model tiny(const std::string& family, const std::vector<std::string>& overrides) {
  auto config = testing::tiny_config(family, {"vocab_size=53", "max_positions=160"});
  for (const auto& o : overrides) apply_override(config, o);
  torch::manual_seed(7);
  return build_model(config);
}

// The loss of a training step over the real tokens, with fixed random weights on the logits so
// that every logit's gradient differs; its gradients are read from the parameters afterwards.
torch::Tensor loss_of(Model& model, const torch::Tensor& ids, const torch::Tensor& mask) {
  torch::Tensor logits;
  if (model.gpt) logits = model.gpt->forward(ids, mask);
  if (model.bert) logits = model.bert->forward(ids, mask).sequence_output;
  if (model.seq2seq) logits = model.seq2seq->forward(ids, mask, ids.narrow(1, 0, ids.size(1) - 3));
  const auto real = model.seq2seq ? torch::ones({1}) : mask.unsqueeze(-1).to(torch::kFloat);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(11);
  const auto weights = at::randn(logits.sizes(), gen, torch::kFloat);
  return (logits * weights * real).sum();
}

struct Case {
  const char* name;
  std::string family;
  std::vector<std::string> overrides;
};

class StackAttentionTest : public ::testing::TestWithParam<Case> {};

// Each configuration below needs a (T, Tk) tensor on LibTorch's kernel, so auto takes the tiled
// kernel at training lengths: its loss and every parameter's gradient (T5's bias table included)
// must match those of attention_backend: math, the explicit reference, with and without
// activation checkpointing. At this test's length auto would keep LibTorch's kernel (the bias is
// small), so the model is told `tiled`.
TEST_P(StackAttentionTest, TiledStepMatchesTheMathPath) {
  const auto& c = GetParam();
  // 131 tokens: two 64-query blocks and a partial third, two 128-key blocks; left padding
  // leaves rows whose keys are all masked (output 0 on the tiled path, uniform on the math one,
  // excluded from the loss as from any real one).
  const int64_t t = 131;
  auto ids = torch::randint(53, {2, t}, torch::kLong);
  auto mask = torch::ones({2, t}, torch::kLong);
  mask[1].narrow(0, 0, 40).zero_();

  for (const bool recompute : {false, true}) {
    SCOPED_TRACE(std::string(c.name) + (recompute ? ", activation checkpointing" : ""));
    auto tiled_overrides = c.overrides;
    tiled_overrides.push_back("attention_backend=tiled");
    auto tiled = tiny(c.family, tiled_overrides);
    tiled.set_activation_checkpointing(recompute);
    tiled.module()->train();
    auto math_overrides = c.overrides;
    math_overrides.push_back("attention_backend=math");
    auto math = tiny(c.family, math_overrides);
    math.set_activation_checkpointing(recompute);
    math.module()->train();

    // Auto's choice for the stack that reads the mask (an encoder-decoder's encoder) at 1024 tokens.
    auto config = tiled.config;
    config.attention_backend = AttentionBackend::kAuto;
    const bool causal = tiled.gpt ? true : false;
    const auto call = stack_attention_call(config, causal, true, true, 1024, 0, 1024, true, true, true);
    ASSERT_EQ(choose_attention_path(call).path, AttentionPath::kTiled) << describe(choose_attention_path(call));

    const auto loss_tiled = loss_of(tiled, ids, mask);
    const auto loss_math = loss_of(math, ids, mask);
    loss_tiled.backward();
    loss_math.backward();
    const double scale = loss_math.abs().item<double>();
    EXPECT_LE(std::abs(loss_tiled.item<double>() - loss_math.item<double>()), 1e-5 * scale);
    const auto a = tiled.module()->named_parameters(), b = math.module()->named_parameters();
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      const auto& ga = a[i].value().grad();
      const auto& gb = b[i].value().grad();
      ASSERT_EQ(ga.defined(), gb.defined()) << a[i].key();
      if (!gb.defined()) continue;  // outside the loss (BERT's pooler)
      const double reference = gb.abs().max().item<double>();
      EXPECT_LE(testing::max_abs_diff(ga, gb), 1e-5 * std::max(reference, 1e-3)) << a[i].key();
    }
  }
}

// Decoding through the tiled kernel with a sliding-window cache that drops its first keys (the
// keys start past 0), left padding, a chunk after the prefill and single tokens: the logits of
// every real token equal a full pass of the same model on the math path.
TEST(StackAttention, TiledDecodingWithASlidingWindowCacheMatchesTheMathPath) {
  const std::vector<std::string> shape = {"position=alibi", "window=37", "n_kv_heads=2"};
  auto tiled_overrides = shape, math_overrides = shape;
  tiled_overrides.push_back("attention_backend=tiled");
  math_overrides.push_back("attention_backend=math");
  auto tiled = tiny("gpt", tiled_overrides), math = tiny("gpt", math_overrides);
  tiled.module()->eval();
  math.module()->eval();
  torch::NoGradGuard no_grad;
  const int64_t t = 131;
  auto ids = torch::randint(53, {2, t}, torch::kLong);
  auto mask = torch::ones({2, t}, torch::kLong);
  mask[1].narrow(0, 0, 9).zero_();
  const auto reference = math.gpt->forward(ids, mask);

  auto cache = tiled.gpt->make_cache();
  std::vector<torch::Tensor> pieces;
  for (const auto& [start, length] : std::vector<std::pair<int64_t, int64_t>>{{0, 100}, {100, 20}, {120, 1}, {121, 10}}) {
    for (int64_t i = start; i < start + length; i += length == 10 ? 1 : length) {
      const int64_t n = length == 10 ? 1 : length;
      pieces.push_back(tiled.gpt->forward(ids.narrow(1, i, n), mask.narrow(1, 0, i + n), &cache));
    }
  }
  const auto cached = torch::cat(pieces, 1);
  const auto real = mask.to(torch::kBool).unsqueeze(-1);
  const double scale = reference.abs().max().item<double>();
  EXPECT_LE(testing::max_abs_diff(cached.masked_fill(~real, 0), reference.masked_fill(~real, 0)), 1e-5 * scale);
}

// Attention dropout inside the tiles draws its seed from LibTorch's generator, which
// recomputation restores: a step with activation checkpointing redraws the first forward's mask,
// so its loss and gradients are those of the plain step from the same seed.
TEST(StackAttention, TiledDropoutIsRedrawnByRecomputation) {
  auto ids = torch::randint(53, {2, 131}, torch::kLong);
  auto mask = torch::ones({2, 131}, torch::kLong);
  mask[1].narrow(0, 0, 40).zero_();
  std::vector<torch::Tensor> losses;
  std::vector<std::vector<torch::Tensor>> grads;
  for (const bool recompute : {false, true}) {
    auto model = tiny("gpt", {"position=alibi", "attention_dropout=0.3"});
    model.set_activation_checkpointing(recompute);
    model.module()->train();
    const auto call = stack_attention_call(model.config, true, true, true, 131, 0, 131, true, true, true);
    ASSERT_EQ(choose_attention_path(call).path, AttentionPath::kTiled) << describe(choose_attention_path(call));
    torch::manual_seed(99);
    auto loss = loss_of(model, ids, mask);
    loss.backward();
    losses.push_back(loss.detach());
    grads.emplace_back();
    for (const auto& p : model.module()->parameters()) grads.back().push_back(p.grad().defined() ? p.grad() : torch::Tensor());
  }
  EXPECT_EQ(losses[0].item<double>(), losses[1].item<double>());
  for (size_t i = 0; i < grads[0].size(); ++i) {
    if (!grads[0][i].defined()) continue;
    EXPECT_LE(testing::max_abs_diff(grads[0][i], grads[1][i]), 1e-6 * std::max(1.0, grads[0][i].abs().max().item<double>()));
  }
  // And dropout changed the step: without it the loss differs.
  auto plain = tiny("gpt", {"position=alibi"});
  plain.module()->train();
  EXPECT_NE(loss_of(plain, ids, mask).item<double>(), losses[0].item<double>());
}

INSTANTIATE_TEST_SUITE_P(
    EveryTermTheKernelMakes, StackAttentionTest,
    ::testing::Values(Case{"GptAlibiPadding", "gpt", {"position=alibi"}},
                      Case{"GptLearnedPadding", "gpt", {}},
                      Case{"GptRopeWindowGrouped", "gpt", {"position=rope", "window=37", "n_kv_heads=2"}},
                      Case{"BertAlibiPadding", "bert", {"position=alibi"}},
                      Case{"BertRelativePadding", "bert", {"position=relative"}},
                      Case{"T5RelativePadding", "t5", {}}),
    [](const ::testing::TestParamInfo<Case>& info) { return std::string(info.param.name); });

// `zoo info`'s attention paths name the kernel a decoding step takes: zoo's decode kernel where
// the CPU runs it in float32 (AVX-512F), else LibTorch's, saying why.
TEST(StackAttention, ZooInfoNamesTheDecodingStepsKernel) {
  const auto text = describe_attention_paths(tiny("gpt", {}).config);
  const std::string want = cpu_runs_f32_rows_dot() ? "decoder, decoding step: decode (one query row (decoding))"
                                                   : "decoder, decoding step: libtorch (one query row (decoding))";
  EXPECT_NE(text.find(want), std::string::npos) << text;
  const auto t5 = describe_attention_paths(tiny("t5", {}).config);
  EXPECT_NE(t5.find(cpu_runs_f32_rows_dot() ? "decoder, decoding step: decode" : "decoder, decoding step: libtorch"),
            std::string::npos)
      << t5;
  // Longformer's and Linformer's layers name their own kernels.
  EXPECT_EQ(describe_attention_paths(tiny("bert", {"attention=longformer", "attention_window=[4]"}).config).rfind(
                "attention path: longformer (kernels/longformer_attention.h): the window on zoo's tiled kernel", 0),
            0u);
  EXPECT_EQ(describe_attention_paths(tiny("bert", {"linformer_k=8", "attention=linformer"}).config).rfind(
                "attention path: linformer (kernels/linformer_attention.h)", 0),
            0u);
}

}  // namespace
}  // namespace zoo
