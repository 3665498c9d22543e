#include "kernels/quantized_weight.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <limits>
#include <stdexcept>
#include <string>

#include "kernels/f32_rows_dot.h"
#include "kernels/quantized_rows_dot.h"
#include "models/generation.h"
#include "models/model.h"
#include "test_util.h"

namespace zoo {
namespace {

using testing::error_of;
using testing::max_abs_diff;

// tests/reference/quantize_reference.py: torchao 0.18's int8 and int4 weight-only quantization of
// one weight with awkward rows (zeros, a constant, only negatives, one outlier, 1e-30 values).
// zoo's integers, scales and zeros are torchao's exactly; its dequantized weight too.
TEST(QuantizedWeight, IntegersScalesAndZerosAreTorchaos) {
  auto ref = testing::python_reference("quantize_reference.py");
  const auto weight = ref.at("weight");
  const auto int8 = quantize_weight(weight, WeightFormat::kInt8, 0, "w");
  EXPECT_TRUE(torch::equal(int8.data, ref.at("int8.data")));
  EXPECT_TRUE(torch::equal(int8.scale, ref.at("int8.scale")));
  EXPECT_TRUE(torch::equal(dequantize_weight(int8), ref.at("int8.dequantized")));
  EXPECT_EQ(int8.bytes(), 24 * 256 + 24 * 4);
  for (const int64_t group : {32, 64, 128}) {
    SCOPED_TRACE(group);
    const std::string key = "int4." + std::to_string(group) + ".";
    const auto int4 = quantize_weight(weight, WeightFormat::kInt4, group, "w");
    EXPECT_TRUE(torch::equal(unpack_int4(int4.data), ref.at(key + "values")));
    EXPECT_TRUE(torch::equal(int4.scale, ref.at(key + "scale")));
    EXPECT_TRUE(torch::equal(int4.zero, ref.at(key + "zero")));
    EXPECT_TRUE(torch::equal(dequantize_weight(int4), ref.at(key + "dequantized")));
    EXPECT_EQ(int4.bytes(), 24 * 128 + 2 * 24 * (256 / group) * 4);
    EXPECT_NO_THROW(check_quantized_weight(int4, "w", 24, 256));
  }
  // bf16 weights quantize from their float32 values.
  EXPECT_TRUE(torch::equal(quantize_weight(weight.to(torch::kBFloat16), WeightFormat::kInt8, 0, "w").data,
                           quantize_weight(weight.to(torch::kBFloat16).to(torch::kFloat), WeightFormat::kInt8, 0, "w").data));
}

// The packed layout against a plain statement of it: each 32 inputs in 16 bytes, byte j holding
// input j (low half) and input j + 16 (high half); and back.
// What --quantize and the bench rows ask: int8 a scale per output, int4 in groups (32 unless told).
TEST(QuantizedWeight, EveryWeightIsInt8PerOutputOrInt4InGroups) {
  EXPECT_EQ(WeightQuantization::every_weight(WeightFormat::kInt8).describe(), "int8");
  EXPECT_EQ(WeightQuantization::every_weight(WeightFormat::kInt8, 64).group_size, 0);
  EXPECT_EQ(WeightQuantization::every_weight(WeightFormat::kInt4).describe(), "int4 (groups of 32)");
  EXPECT_EQ(WeightQuantization::every_weight(WeightFormat::kInt4, 128).group_size, 128);
  EXPECT_TRUE(WeightQuantization::every_weight(WeightFormat::kInt4).token_embeddings);
}

TEST(QuantizedWeight, Int4PackingIsThePlainLayout) {
  for (const int64_t in : {32, 64, 96, 256}) {
    const auto values = torch::randint(0, 16, {5, in}, torch::kByte);
    const auto packed = pack_int4(values);
    ASSERT_EQ(packed.sizes(), (std::vector<int64_t>{5, in / 2}));
    auto plain = torch::empty({5, in / 2}, torch::kByte);
    const auto v = values.accessor<uint8_t, 2>();
    auto p = plain.accessor<uint8_t, 2>();
    for (int64_t n = 0; n < 5; ++n) {
      for (int64_t block = 0; block < in / 32; ++block) {
        for (int64_t j = 0; j < 16; ++j) {
          p[n][block * 16 + j] = static_cast<uint8_t>(v[n][block * 32 + j] | (v[n][block * 32 + 16 + j] << 4));
        }
      }
    }
    EXPECT_TRUE(torch::equal(packed, plain)) << in;
    EXPECT_TRUE(torch::equal(unpack_int4(packed), values)) << in;
  }
}

TEST(QuantizedWeight, BadWeightsAndPackedTensorsAreRefusedByName) {
  auto w = torch::randn({6, 64});
  w[2][3] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(error_of([&] { quantize_weight(w, WeightFormat::kInt8, 0, "blocks.0.attn.qkv.weight"); }),
            "blocks.0.attn.qkv.weight: the weight has NaN at (2, 3)");
  w[2][3] = 0, w[5][63] = -std::numeric_limits<float>::infinity();
  EXPECT_EQ(error_of([&] { quantize_weight(w, WeightFormat::kInt4, 32, "w"); }), "w: the weight has -inf at (5, 63)");
  w[5][63] = 0;
  EXPECT_EQ(error_of([&] { quantize_weight(w, WeightFormat::kInt4, 48, "w"); }), "w: int4 group size 48 (takes 32, 64 or 128)");
  EXPECT_EQ(error_of([&] { quantize_weight(torch::randn({6, 96}), WeightFormat::kInt4, 64, "w"); }),
            "w: int4 group size 64 does not divide the weight's 96 inputs (6 x 96)");
  EXPECT_EQ(error_of([&] { quantize_weight(torch::randn({6}), WeightFormat::kInt8, 0, "w"); }),
            "w: only a 2-D floating-point weight is quantized, got 1-D Float");
  EXPECT_EQ(error_of([&] { quantize_weight(torch::ones({2, 32}, torch::kLong), WeightFormat::kInt8, 0, "w"); }),
            "w: only a 2-D floating-point weight is quantized, got 2-D Long");

  // A packed tensor as a loader reads it: truncated, wrong types, bad scales or zeros.
  const auto int4 = quantize_weight(w, WeightFormat::kInt4, 32, "w");
  auto truncated = int4;
  truncated.data = int4.data.narrow(1, 0, 16);
  EXPECT_EQ(error_of([&] { check_quantized_weight(truncated, "h.0.mlp.fc.weight"); }),
            "h.0.mlp.fc.weight: int4 weight: expected uint8 integers (out, in / 2) and float32 scales and zeros (6, 1), "
            "got Byte [6, 16], scales [6, 2], zeros [6, 2]");
  auto negative = int4;
  negative.scale = int4.scale.clone();
  negative.scale[1][1] = -1.0f;
  EXPECT_EQ(error_of([&] { check_quantized_weight(negative, "w"); }), "w: a scale is zero or negative");
  auto nan_zero = int4;
  nan_zero.zero = int4.zero.clone();
  nan_zero.zero[4][0] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(error_of([&] { check_quantized_weight(nan_zero, "w"); }), "w: the zeros has NaN at (4, 0)");
  EXPECT_EQ(error_of([&] { check_quantized_weight(int4, "w", 6, 128); }),
            "w: quantized weight of 6 x 64, expected 6 x 128");
  auto int8 = quantize_weight(w, WeightFormat::kInt8, 0, "w");
  int8.data = int8.data.to(torch::kShort);
  EXPECT_EQ(error_of([&] { check_quantized_weight(int8, "w"); }),
            "w: int8 weight: expected int8 integers (out, in) and float32 scales (out), got Short [6, 64] and Float [6]");
  int8.data = torch::Tensor();
  EXPECT_EQ(error_of([&] { check_quantized_weight(int8, "w"); }),
            "w: a quantized weight needs 2-D integers and scales, got integers none, scales [6]");
}

// The product against dequantize-then-matmul in float64, for every row count the few-row kernels
// take (1 row, blocks of 4 and the rows past them) and a prefill's (dequantized then one product):
// columns that do not fill a kernel block (45), an int8 width with a tail past 16 lanes, float32
// and bf16 rows, with and without bias. The kernels' bits are the same for a row alone or batched.
TEST(QuantizedProject, EqualsDequantizeThenMatmulAndTheSameBitsAloneOrBatched) {
  torch::manual_seed(3);
  torch::NoGradGuard no_grad;
  const int64_t out = 45;
  struct Case {
    WeightFormat format;
    int64_t in, group;
  };
  for (const Case c : {Case{WeightFormat::kInt8, 771, 0}, Case{WeightFormat::kInt8, 64, 0},
                       Case{WeightFormat::kInt4, 256, 32}, Case{WeightFormat::kInt4, 384, 128},
                       Case{WeightFormat::kInt4, 64, 64}}) {
    const auto q = quantize_weight(torch::randn({out, c.in}) * 0.1, c.format, c.group, "w");
    const auto dense = dequantize_weight(q, torch::kDouble);
    const auto bias = torch::randn({out});
    for (const int64_t rows : {1, 2, 4, 5, 7, 16, 23, 24, 100}) {
      for (const bool with_bias : {true, false}) {
        SCOPED_TRACE(::testing::Message() << to_string(c.format) << " in " << c.in << " rows " << rows << " bias "
                                        << with_bias);
        const auto b = with_bias ? bias : torch::Tensor();
        const auto x = torch::randn({rows, c.in});
        const auto want = torch::nn::functional::linear(x.to(torch::kDouble), dense,
                                                         with_bias ? bias.to(torch::kDouble) : torch::Tensor());
        const auto y = quantized_project(x, q, b);
        ASSERT_EQ(y.scalar_type(), torch::kFloat);
        // float32 sums of c.in products of terms up to ~4 x 0.4 in size.
        EXPECT_LE(max_abs_diff(y.to(torch::kDouble), want), 2e-5 * std::sqrt(static_cast<double>(c.in)));
        const auto xb = x.to(torch::kBFloat16);
        const auto yb = quantized_project(xb, q, b);
        ASSERT_EQ(yb.scalar_type(), torch::kBFloat16);
        const auto want_b = torch::nn::functional::linear(xb.to(torch::kDouble), dense,
                                                           with_bias ? bias.to(torch::kDouble) : torch::Tensor());
        EXPECT_LE(max_abs_diff(yb.to(torch::kDouble), want_b), 1e-2 * want_b.abs().max().item<double>() + 1e-3);
        if (rows <= kFewRowsMax && cpu_runs_quantized_rows_dot()) {
          for (int64_t r = 0; r < rows; r += 3) {
            EXPECT_TRUE(torch::equal(quantized_project(x.narrow(0, r, 1), q, b), y.narrow(0, r, 1))) << r;
            EXPECT_TRUE(torch::equal(quantized_project(xb.narrow(0, r, 1), q, b), yb.narrow(0, r, 1))) << r;
          }
        }
      }
    }
    // Leading dimensions are kept.
    EXPECT_EQ(quantized_project(torch::randn({2, 3, c.in}), q).sizes(), (std::vector<int64_t>{2, 3, out}));
  }
  EXPECT_EQ(error_of([] {
              quantized_project(torch::randn({2, 60}), quantize_weight(torch::randn({4, 64}), WeightFormat::kInt8, 0, "w"));
            }).rfind("quantized_project: expected (..., 64), got [2, 60]", 0),
            0u);
}

// With gradients the product is dequantize-then-linear, differentiable in the input and bias
// (the frozen base of a LoRA step).
// Each kernel this CPU runs, called directly (zoo picks AVX-512 where it can; the AVX2 twin serves
// CPUs without it, and runs on every machine of this project): against dequantize-then-matmul in
// float64, the same bits for a row alone or among others, and for any range of columns.
TEST(QuantizedRowsDot, EachKernelEqualsTheDequantizedProductAndTheSameBitsAloneOrBatched) {
  EXPECT_TRUE(cpu_runs(QuantizedRowsKernel::kAvx2)) << "x86-64 CPUs of this project have AVX2";
  struct Case {
    WeightFormat format;
    int64_t out, in, group;
  };
  for (const auto kernel : {QuantizedRowsKernel::kAvx512, QuantizedRowsKernel::kAvx2}) {
    if (!cpu_runs(kernel)) continue;  // AVX-512 on an AVX2 machine: that CPU cannot run it
    for (const Case c : {Case{WeightFormat::kInt8, 13, 771, 0}, Case{WeightFormat::kInt8, 7, 64, 0},
                         Case{WeightFormat::kInt4, 13, 256, 32}, Case{WeightFormat::kInt4, 11, 384, 128}}) {
      SCOPED_TRACE(to_string(kernel) + " " + to_string(c.format) + " " + std::to_string(c.in));
      torch::manual_seed(7);
      const auto q = quantize_weight(torch::randn({c.out, c.in}), c.format, c.group, "w");
      const auto bias = torch::randn({c.out});
      const int64_t rows = 9;
      const auto x = torch::randn({rows, c.in});
      const auto run = [&](const torch::Tensor& rows_x, int64_t begin, int64_t end) {
        auto y = torch::zeros({rows_x.size(0), c.out});
        const auto contiguous = rows_x.contiguous();
        switch (c.format) {
          case WeightFormat::kInt8:
            int8_rows_dot(contiguous.data_ptr<float>(), contiguous.size(0), q.data.data_ptr<int8_t>(),
                          q.scale.data_ptr<float>(), c.in, bias.data_ptr<float>(), begin, end, y.data_ptr<float>(),
                          c.out, kernel);
            break;
          case WeightFormat::kInt4:
            int4_rows_dot(contiguous.data_ptr<float>(), contiguous.size(0), q.data.data_ptr<uint8_t>(),
                          q.scale.data_ptr<float>(), q.zero.data_ptr<float>(), c.in, c.group, bias.data_ptr<float>(),
                          begin, end, y.data_ptr<float>(), c.out, kernel);
            break;
        }
        return y;
      };
      const auto all = run(x, 0, c.out);
      const auto want = torch::addmm(bias.to(torch::kDouble), x.to(torch::kDouble),
                                     dequantize_weight(q).to(torch::kDouble).t());
      EXPECT_LE(max_abs_diff(all.to(torch::kDouble), want) / want.abs().max().item<double>(), 2e-6);
      for (int64_t r = 0; r < rows; ++r) EXPECT_TRUE(run(x.narrow(0, r, 1), 0, c.out)[0].equal(all[r])) << r;
      EXPECT_TRUE(run(x.narrow(0, 2, 5), 0, c.out).equal(all.narrow(0, 2, 5)));
      const auto middle = run(x, 2, c.out - 1).narrow(1, 2, c.out - 3);
      EXPECT_TRUE(middle.equal(all.narrow(1, 2, c.out - 3)));
    }
  }
}

// int8 weights under bf16 rows, on CPUs with AVX-512 BF16 (this project's Intel Xeon and AMD Zen 4
// machines; a Zen 3 has none and its bf16 rows take the float32 kernels): against the bf16 rows
// times the dequantized weight in float64, the same bits for a row alone or among others, for
// any range of columns, and widths with a tail past the 32 inputs of a step (771, 40).
TEST(QuantizedRowsDot, Int8UnderBf16RowsEqualsTheDequantizedProductAndTheSameBitsAloneOrBatched) {
  if (!cpu_runs_int8_bf16_rows_dot()) {
    EXPECT_FALSE(__builtin_cpu_supports("avx512bf16") && cpu_runs(QuantizedRowsKernel::kAvx512));
    EXPECT_THROW(int8_bf16_rows_dot(nullptr, 0, nullptr, nullptr, 0, nullptr, 0, 0, nullptr, 0), std::logic_error);
    return;
  }
  for (const auto [out, in] : {std::pair<int64_t, int64_t>{13, 771}, {7, 64}, {30, 40}}) {
    SCOPED_TRACE(std::to_string(out) + " x " + std::to_string(in));
    torch::manual_seed(9);
    const auto q = quantize_weight(torch::randn({out, in}), WeightFormat::kInt8, 0, "w");
    const auto bias = torch::randn({out});
    const int64_t rows = 9;
    const auto x = torch::randn({rows, in}).to(torch::kBFloat16);
    const auto run = [&](const torch::Tensor& rows_x, int64_t begin, int64_t end) {
      auto y = torch::zeros({rows_x.size(0), out});
      const auto contiguous = rows_x.contiguous();
      int8_bf16_rows_dot(reinterpret_cast<const uint16_t*>(contiguous.data_ptr<at::BFloat16>()), contiguous.size(0),
                         q.data.data_ptr<int8_t>(), q.scale.data_ptr<float>(), in, bias.data_ptr<float>(), begin, end,
                         y.data_ptr<float>(), out);
      return y;
    };
    const auto all = run(x, 0, out);
    const auto want =
        torch::addmm(bias.to(torch::kDouble), x.to(torch::kDouble), dequantize_weight(q).to(torch::kDouble).t());
    EXPECT_LE(max_abs_diff(all.to(torch::kDouble), want) / want.abs().max().item<double>(), 2e-6);
    for (int64_t r = 0; r < rows; ++r) EXPECT_TRUE(run(x.narrow(0, r, 1), 0, out)[0].equal(all[r])) << r;
    EXPECT_TRUE(run(x.narrow(0, 2, 5), 0, out).equal(all.narrow(0, 2, 5)));
    const auto middle = run(x, 2, out - 1).narrow(1, 2, out - 3);
    EXPECT_TRUE(middle.equal(all.narrow(1, 2, out - 3)));
  }
}

// The many-row products' tiles: each kernel this CPU runs dequantizes any range of rows to
// dequantize_weight's bits (its int4 product and sum each rounded: a fused multiply-add fails it).
// Then a product over several tiles (2048 inputs: 128 outputs a tile, the last one partial)
// against dequantize-then-matmul in float64.
TEST(QuantizedRowsDot, EachKernelDequantizesRowsToTheReferenceBits) {
  struct Case {
    WeightFormat format;
    int64_t in, group;
  };
  for (const auto kernel : {QuantizedRowsKernel::kAvx512, QuantizedRowsKernel::kAvx2}) {
    if (!cpu_runs(kernel)) continue;
    for (const Case c : {Case{WeightFormat::kInt8, 771, 0}, Case{WeightFormat::kInt8, 64, 0},
                         Case{WeightFormat::kInt4, 256, 32}, Case{WeightFormat::kInt4, 384, 128}}) {
      SCOPED_TRACE(to_string(kernel) + " " + to_string(c.format) + " " + std::to_string(c.in));
      torch::manual_seed(5);
      const auto q = quantize_weight(torch::randn({13, c.in}) * 0.3, c.format, c.group, "w");
      auto rows = torch::full({9, c.in}, std::nanf(""));
      switch (c.format) {
        case WeightFormat::kInt8:
          int8_dequantize_rows(q.data.data_ptr<int8_t>(), q.scale.data_ptr<float>(), c.in, 2, 11,
                               rows.data_ptr<float>(), kernel);
          break;
        case WeightFormat::kInt4:
          int4_dequantize_rows(q.data.data_ptr<uint8_t>(), q.scale.data_ptr<float>(), q.zero.data_ptr<float>(), c.in,
                               c.group, 2, 11, rows.data_ptr<float>(), kernel);
          break;
      }
      EXPECT_TRUE(rows.equal(dequantize_weight(q).narrow(0, 2, 9)));
    }
  }
  if (!cpu_runs_quantized_rows_dot()) return;
  torch::NoGradGuard no_grad;
  torch::manual_seed(6);
  for (const auto format : {WeightFormat::kInt8, WeightFormat::kInt4}) {
    const auto q = quantize_weight(torch::randn({300, 2048}) * 0.05, format, 64, "w");
    const auto x = torch::randn({2, 15, 2048});
    const auto bias = torch::randn({300});
    const auto want = torch::nn::functional::linear(x.to(torch::kDouble), dequantize_weight(q, torch::kDouble),
                                                    bias.to(torch::kDouble));
    const auto y = quantized_project(x, q, bias);
    EXPECT_EQ(y.sizes(), (std::vector<int64_t>{2, 15, 300}));
    EXPECT_LE(max_abs_diff(y.to(torch::kDouble), want), 2e-5 * std::sqrt(2048.0)) << to_string(format);
  }
}

// QLoRA's frozen base: the input's (and bias's) gradients through the packed weight, as through
// the dequantized one, from an autograd node that keeps the integers (not a float weight).
TEST(QuantizedProject, GradientsReachTheInputAndBias) {
  for (const auto dtype : {torch::kFloat, torch::kBFloat16}) {
    for (const auto& q : {quantize_weight(torch::randn({12, 64}), WeightFormat::kInt4, 32, "w"),
                          quantize_weight(torch::randn({12, 64}), WeightFormat::kInt8, 0, "w")}) {
      SCOPED_TRACE(to_string(q.format) + " " + c10::toString(dtype));
      const auto x = torch::randn({2, 3, 64}).to(dtype).requires_grad_();
      const auto bias = torch::randn({12}, torch::requires_grad());  // float32 beside bf16 rows, as a model's
      const auto y = quantized_project(x, q, bias);
      EXPECT_NE(y.grad_fn()->name().find("QuantizedLinearFunction"), std::string::npos) << y.grad_fn()->name();
      EXPECT_EQ(y.scalar_type(), dtype);
      y.to(torch::kFloat).pow(2).sum().backward();
      const auto x2 = x.detach().clone().requires_grad_(), bias2 = bias.detach().clone().requires_grad_();
      torch::nn::functional::linear(x2, dequantize_weight(q, dtype), bias2.to(dtype)).to(torch::kFloat).pow(2).sum().backward();
      // Relative to the largest gradient: the same sums in another order.
      const double tolerance = dtype == torch::kFloat ? 1e-6 : 1e-2;
      const auto relative = [](const torch::Tensor& got, const torch::Tensor& want) {
        return max_abs_diff(got.to(torch::kFloat), want.to(torch::kFloat)) / want.abs().max().item<double>();
      };
      EXPECT_LE(relative(x.grad(), x2.grad()), tolerance);
      EXPECT_EQ(bias.grad().scalar_type(), torch::kFloat);
      EXPECT_LE(relative(bias.grad(), bias2.grad()), tolerance);
    }
  }
}

// A model quantized at load (zoo generate/serve --quantize): every linear layer and the token
// embedding (a GPT's, a T5's and a BERT's, their heads tied to it) hold their integers and nothing
// else (their float weights emptied), and the model gives the greedy tokens (a GPT and a BERT the
// logits) of the same model whose weights were replaced by what the integers stand for, for
// prompts of two lengths decoded together (padded rows) with the cache.
TEST(QuantizedModel, GivesTheDequantizedModelsLogitsAndGreedyTokens) {
  struct Case {
    WeightFormat format;
    int64_t group;
  };
  for (const std::string family : {"gpt", "t5", "bert"}) {
    const auto make = [&] {
      torch::manual_seed(1);
      std::vector<std::string> overrides{"d_model=64", "d_ff=128"};
      if (family == "bert") overrides.push_back("head=pretraining");  // the tied MLM head, NSP, a pooler
      Model model = build_model(testing::tiny_config(family, overrides));
      model.module()->eval();
      return model;
    };
    for (const Case c : {Case{WeightFormat::kInt8, 0}, Case{WeightFormat::kInt4, 32}, Case{WeightFormat::kInt4, 64}}) {
      SCOPED_TRACE(family + " " + to_string(c.format) + " " + std::to_string(c.group));
      Model quantized = make(), reference = make();
      torch::NoGradGuard no_grad;
      int64_t linears = 0;
      const auto replace = [&](torch::Tensor& weight, const std::string& name) {
        weight.set_data(dequantize_weight(quantize_weight(weight, c.format, c.group, name)));
      };
      for (const auto& item : reference.module()->named_modules()) {
        if (auto* linear = item.value()->as<torch::nn::Linear>()) replace(linear->weight, item.key()), ++linears;
        if (item.key() == "token_embedding") replace(item.value()->as<torch::nn::Embedding>()->weight, item.key());
      }
      const auto summary = quantize_model(quantized, {c.format, c.group, true});
      EXPECT_EQ(summary.linears, linears);
      EXPECT_EQ(summary.tables, 1);
      EXPECT_LT(summary.bytes_after * (c.format == WeightFormat::kInt8 ? 3 : 5), summary.bytes_before);
      for (const auto& item : quantized.module()->named_modules()) {
        auto* linear = item.value()->as<torch::nn::Linear>();
        auto* table = item.key() == "token_embedding" ? item.value()->as<torch::nn::Embedding>() : nullptr;
        if (linear == nullptr && table == nullptr) continue;
        const torch::Tensor& weight = linear != nullptr ? linear->weight : table->weight;
        EXPECT_EQ(weight.numel(), 0) << item.key();
        EXPECT_TRUE(quantized_weight_of(*item.value(), weight).has_value()) << item.key();
      }
      GenerationOptions o;
      o.max_new_tokens = 10;
      const std::vector<std::vector<int64_t>> prompts{{3, 14, 15, 9, 2}, {6, 5}};
      if (family == "bert") {
        const auto ids = torch::randint(0, 97, {2, 9}, torch::kLong);
        const auto got = quantized.bert->forward(ids), want = reference.bert->forward(ids);
        EXPECT_LE(max_abs_diff(got.sequence_output, want.sequence_output), 1e-4);
        EXPECT_LE(max_abs_diff(got.logits, want.logits), 1e-4);
      } else if (family == "gpt") {
        const auto ids = torch::randint(0, 97, {2, 9}, torch::kLong);
        EXPECT_LE(max_abs_diff(quantized.gpt->forward(ids), reference.gpt->forward(ids)), 1e-4);
        EXPECT_EQ(generate(quantized.gpt, prompts, o).tokens, generate(reference.gpt, prompts, o).tokens);
      } else {
        EXPECT_EQ(generate(quantized.seq2seq, prompts, o).tokens, generate(reference.seq2seq, prompts, o).tokens);
      }
      EXPECT_EQ(error_of([&] { quantize_model_weights(*quantized.module(), {c.format, c.group, true}); }),
                "token_embedding.weight: the weight is quantized already");
      EXPECT_EQ(error_of([&] { quantize_model(quantized, {c.format, c.group, true}); }),
                "the model's weights are quantized already (" + quantized.quantization->describe() + ")");
    }
  }
}

// The rows of a quantized table, as the dequantized table has them, for ids of any shape.
TEST(QuantizedModel, TableRowsAreTheDequantizedTables) {
  const auto table = torch::randn({40, 64});
  for (const auto& q : {quantize_weight(table, WeightFormat::kInt8, 0, "t"), quantize_weight(table, WeightFormat::kInt4, 32, "t")}) {
    const auto ids = torch::tensor({{3, 0, 39}, {3, 7, 7}}, torch::kLong);
    const auto rows = dequantize_rows(q, ids, torch::kFloat);
    ASSERT_EQ(rows.sizes(), (std::vector<int64_t>{2, 3, 64}));
    EXPECT_TRUE(torch::equal(rows, dequantize_weight(q).index({ids})));
    EXPECT_EQ(dequantize_rows(q, ids, torch::kBFloat16).scalar_type(), torch::kBFloat16);
  }
}

}  // namespace
}  // namespace zoo
