#include "kernels/linear_attention.h"

#include <cmath>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

namespace zoo {
namespace {

// The plain reference (linear_attention_reference), as its output and final state.
std::pair<torch::Tensor, torch::Tensor> naive(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                              const torch::Tensor& g, const torch::Tensor& h0, double scale) {
  const auto result = linear_attention_reference(q, k, v, g, h0, scale);
  return {result.output, result.final_state};
}

double relative_rms(const torch::Tensor& got, const torch::Tensor& want) {
  const auto w = want.to(torch::kDouble), d = got.to(torch::kDouble) - w;
  return std::sqrt(d.pow(2).mean().item<double>()) / std::max(std::sqrt(w.pow(2).mean().item<double>()), 1e-300);
}

struct Inputs {
  torch::Tensor q, k, v, g, h0;
  std::vector<torch::Tensor> all() const { return {q, k, v, g, h0}; }
};

// Gates log(sigmoid(u)) / normalizer: normalizer 10 is a mild decay, 0.1 an extreme one.
Inputs make_inputs(int64_t t, double normalizer, bool gated, torch::ScalarType dtype, int64_t seed = 0) {
  torch::manual_seed(seed);
  const int64_t b = 2, h = 2, dk = 8, dv = 12;
  Inputs in;
  in.q = torch::randn({b, h, t, dk}, torch::kDouble);
  in.k = torch::randn({b, h, t, dk}, torch::kDouble);
  in.v = torch::randn({b, h, t, dv}, torch::kDouble);
  if (gated) in.g = torch::log_sigmoid(torch::randn({b, h, t, dk}, torch::kDouble)) / normalizer;
  in.h0 = torch::randn({b, h, dk, dv}, torch::kDouble);
  for (auto* x : {&in.q, &in.k, &in.v, &in.g, &in.h0})
    if (x->defined()) *x = x->to(dtype).requires_grad_(true);
  return in;
}

// Outputs, final state and the gradients of q, k, v, g and h0 of a loss through both, from
// fixed output weights built here (not from the output's strides).
struct Results {
  torch::Tensor out, state;
  std::vector<torch::Tensor> grads;
};

template <typename Fn>
Results run(const Inputs& in, Fn fn) {
  auto [out, state] = fn(in);
  torch::manual_seed(7);
  const auto w_out = torch::randn(out.sizes(), torch::kDouble).to(out.scalar_type());
  const auto w_state = torch::randn(state.sizes(), torch::kDouble).to(state.scalar_type());
  const auto loss = (out * w_out).sum() + (state * w_state).sum();
  std::vector<torch::Tensor> inputs;
  for (const auto& x : in.all())
    if (x.defined()) inputs.push_back(x);
  Results r{out.detach(), state.detach(), torch::autograd::grad({loss}, inputs)};
  return r;
}

void expect_close(const Results& got, const Results& want, double tolerance, const std::string& what) {
  EXPECT_LT(relative_rms(got.out, want.out), tolerance) << what << ": output";
  EXPECT_LT(relative_rms(got.state, want.state), tolerance) << what << ": final state";
  const char* names[] = {"q", "k", "v", "g", "h0"};
  ASSERT_EQ(got.grads.size(), want.grads.size());
  for (size_t i = 0; i < got.grads.size(); ++i) {
    const bool gated = got.grads.size() == 5;
    const char* name = gated ? names[i] : (i < 3 ? names[i] : "h0");
    EXPECT_LT(relative_rms(got.grads[i], want.grads[i]), tolerance) << what << ": gradient of " << name;
  }
}

constexpr double kScale = 0.35;

auto chunked = [](const Inputs& in) {
  auto r = chunked_linear_attention(in.q, in.k, in.v, in.g, in.h0, kScale, /*want_final_state=*/true);
  return std::make_pair(r.output, r.final_state);
};
auto reference = [](const Inputs& in) { return naive(in.q, in.k, in.v, in.g, in.h0, kScale); };

// Lengths on both sides of the chunk (64) and sub-chunk (16) boundaries, one token, several chunks.
const int64_t kLengths[] = {1, 15, 17, 63, 64, 65, 130};
const double kNormalizers[] = {0.1, 1.0, 10.0};

TEST(LinearAttention, ChunkedEqualsTheRecurrenceInFloat64) {
  for (const int64_t t : kLengths) {
    for (const double normalizer : kNormalizers) {
      const auto in = make_inputs(t, normalizer, /*gated=*/true, torch::kDouble);
      expect_close(run(in, chunked), run(in, reference), 1e-10,
                   "T " + std::to_string(t) + ", gate / " + std::to_string(normalizer));
    }
    const auto plain = make_inputs(t, 1.0, /*gated=*/false, torch::kDouble);
    expect_close(run(plain, chunked), run(plain, reference), 1e-10, "no decay, T " + std::to_string(t));
  }
}

TEST(LinearAttention, ChunkedInFloat32IsWithinFiveThousandthsOfFloat64) {
  for (const int64_t t : kLengths) {
    for (const double normalizer : kNormalizers) {
      const auto in32 = make_inputs(t, normalizer, /*gated=*/true, torch::kFloat);
      const auto in64 = make_inputs(t, normalizer, /*gated=*/true, torch::kDouble);
      expect_close(run(in32, chunked), run(in64, reference), 5e-3,
                   "float32, T " + std::to_string(t) + ", gate / " + std::to_string(normalizer));
    }
  }
}

TEST(LinearAttention, ExtremeDecayStaysFinite) {
  // Decays of exp(-50) per token: any exp(+b) of the cumulative log decay would overflow.
  auto in = make_inputs(130, 1.0, /*gated=*/true, torch::kFloat);
  {
    torch::NoGradGuard no_grad;
    in.g.fill_(-50.0);
  }
  const auto got = run(in, chunked);
  EXPECT_TRUE(torch::isfinite(got.out).all().item<bool>());
  for (const auto& g : got.grads) EXPECT_TRUE(torch::isfinite(g).all().item<bool>());
  const auto in64 = make_inputs(130, 1.0, /*gated=*/true, torch::kDouble);
  {
    torch::NoGradGuard no_grad;
    in64.g.fill_(-50.0);
  }
  EXPECT_LT(relative_rms(got.out, run(in64, reference).out), 5e-3);
}

TEST(LinearAttention, TrainingRecomputesAndGivesTheSameGradients) {
  // Without a final state asked for, the forward keeps only its inputs (backward recomputes):
  // the gradients equal the reference's all the same.
  const auto in = make_inputs(100, 1.0, /*gated=*/true, torch::kDouble);
  const auto out = chunked_linear_attention(in.q, in.k, in.v, in.g, in.h0, kScale, /*want_final_state=*/false).output;
  EXPECT_FALSE(chunked_linear_attention(in.q, in.k, in.v, in.g, in.h0, kScale, false).final_state.defined());
  const auto want = naive(in.q, in.k, in.v, in.g, in.h0, kScale).first;
  torch::manual_seed(3);
  const auto w = torch::randn(out.sizes(), torch::kDouble);
  const auto got_grads = torch::autograd::grad({(out * w).sum()}, in.all());
  const auto want_grads = torch::autograd::grad({(want * w).sum()}, in.all());
  EXPECT_LT(relative_rms(out, want), 1e-10);
  for (size_t i = 0; i < got_grads.size(); ++i) EXPECT_LT(relative_rms(got_grads[i], want_grads[i]), 1e-10) << i;
}

TEST(LinearAttention, RecurrentDecodingContinuesTheChunkedForm) {
  // A prompt of 70 through the chunks, then 9 tokens one at a time from its state: the same
  // outputs and state as the whole sequence at once.
  torch::NoGradGuard no_grad;
  const auto in = make_inputs(79, 1.0, /*gated=*/true, torch::kFloat);
  const auto whole = chunked_linear_attention(in.q, in.k, in.v, in.g, {}, kScale, true);
  auto part = [&](const torch::Tensor& x, int64_t from, int64_t n) { return x.narrow(2, from, n); };
  auto r = chunked_linear_attention(part(in.q, 0, 70), part(in.k, 0, 70), part(in.v, 0, 70), part(in.g, 0, 70), {},
                                    kScale, true);
  std::vector<torch::Tensor> outputs{r.output};
  torch::Tensor state = r.final_state;
  for (int64_t i = 70; i < 79; ++i) {
    auto step = recurrent_linear_attention(part(in.q, i, 1), part(in.k, i, 1), part(in.v, i, 1), part(in.g, i, 1),
                                           state, kScale);
    outputs.push_back(step.output);
    state = step.final_state;
  }
  EXPECT_LT((torch::cat(outputs, 2) - whole.output).abs().max().item<double>(), 1e-5);
  EXPECT_LT((state - whole.final_state).abs().max().item<double>(), 1e-5);
  EXPECT_EQ(state.scalar_type(), torch::kFloat);
}

TEST(LinearAttention, Bfloat16InputsKeepAFloat32State) {
  torch::NoGradGuard no_grad;
  const auto in = make_inputs(90, 1.0, /*gated=*/true, torch::kFloat);
  const auto full = chunked_linear_attention(in.q, in.k, in.v, in.g, {}, kScale, true);
  auto bf = [](const torch::Tensor& x) { return x.to(torch::kBFloat16); };
  const auto half = chunked_linear_attention(bf(in.q), bf(in.k), bf(in.v), bf(in.g), {}, kScale, true);
  EXPECT_EQ(half.output.scalar_type(), torch::kBFloat16);
  EXPECT_EQ(half.final_state.scalar_type(), torch::kFloat);
  EXPECT_LT(relative_rms(half.output, full.output), 5e-2);
  EXPECT_LT(relative_rms(half.final_state, full.final_state), 5e-2);
}

TEST(LinearAttention, ShapesAreCheckedAndNamed) {
  const auto q = torch::randn({1, 2, 5, 4});
  try {
    chunked_linear_attention(q, q, torch::randn({1, 2, 6, 4}), {}, {}, 1.0, false);
    FAIL() << "no error";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("v must be (B, H, T, Dv)"), std::string::npos) << e.what();
  }
  EXPECT_THROW(recurrent_linear_attention(q, q, q, {}, torch::zeros({1, 2, 4, 5}), 1.0), c10::Error);
}

TEST(PerformerFeatures, RowsAreOrthogonalWithinABlock) {
  const auto w = orthogonal_random_features(20, 8, 3);
  ASSERT_EQ(w.sizes(), torch::IntArrayRef({20, 8}));
  const auto block = w.narrow(0, 0, 8);
  const auto gram = torch::matmul(block, block.t());
  const auto off = gram - torch::diag(torch::diag(gram));
  EXPECT_LT(off.abs().max().item<double>(), 1e-4);
  EXPECT_TRUE(torch::equal(w, orthogonal_random_features(20, 8, 3))) << "the same seed draws the same features";
  EXPECT_FALSE(torch::equal(w, orthogonal_random_features(20, 8, 4)));
}

TEST(PerformerFeatures, ApproximationOfTheSoftmaxKernelImprovesWithMoreFeatures) {
  // phi(q) . phi(k) against exp(q . k / sqrt(d)), averaged over pairs and over five seeds.
  torch::manual_seed(0);
  const int64_t d = 16;
  const auto q = torch::randn({256, d}) * 0.5, k = torch::randn({256, d}) * 0.5;
  const auto exact = (torch::matmul(q, k.t()) / std::sqrt(static_cast<double>(d))).exp();
  std::vector<double> errors;
  for (const int64_t m : {64, 256, 1024}) {
    double error = 0;
    for (int64_t seed = 0; seed < 5; ++seed) {
      const auto w = orthogonal_random_features(m, d, seed);
      const auto estimate = torch::matmul(performer_features(q, w, false), performer_features(k, w, false).t());
      error += ((estimate - exact).abs() / exact).mean().item<double>() / 5;
    }
    errors.push_back(error);
  }
  EXPECT_LT(errors[1], errors[0] * 0.75) << errors[0] << " -> " << errors[1];
  EXPECT_LT(errors[2], errors[1] * 0.75) << errors[1] << " -> " << errors[2];
  EXPECT_LT(errors[2], 0.1);
}

}  // namespace
}  // namespace zoo
