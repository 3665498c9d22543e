#include "kernels/linear.h"

#include <algorithm>
#include <cstdint>
#include <memory>

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include "kernels/bf16_dot.h"

namespace zoo {
namespace {

const uint16_t* bf16_bits(const torch::Tensor& t) {
  return reinterpret_cast<const uint16_t*>(t.data_ptr<at::BFloat16>());
}

// The bf16 product of one vector: float32 sums rounded once to bf16 with the bias (kernels/bf16_dot.h:
// about 25 GB/s of weights with AVX-512 BF16 on Zen 4, where LibTorch 1.13's bf16 mv read 3 GB/s).
torch::Tensor bf16_matrix_vector(const torch::Tensor& weight, const torch::Tensor& vector, const torch::Tensor& bias) {
  const int64_t out = weight.size(0), in = weight.size(1);
  const auto w = weight.contiguous();
  const auto x = vector.contiguous();
  const auto b = bias.defined() ? bias.contiguous() : bias;
  auto y = torch::empty({out}, x.options());
  std::unique_ptr<float[]> sums(new float[static_cast<size_t>(out)]);  // not zeroed: every row is written
  const uint16_t* w_bits = bf16_bits(w);
  const uint16_t* x_bits = bf16_bits(x);
  const uint16_t* bias_bits = b.defined() ? bf16_bits(b) : nullptr;
  auto* y_bits = reinterpret_cast<uint16_t*>(y.data_ptr<at::BFloat16>());
  const Bf16DotKernel kernel = fastest_bf16_dot_kernel();
  // Rows in blocks of at least 64 KiB of weights: a projection smaller than that stays on one thread.
  const int64_t grain = std::max<int64_t>(1, (int64_t{32} << 10) / std::max<int64_t>(1, in));
  at::parallel_for(0, out, grain, [&](int64_t begin, int64_t end) {
    bf16_rows_dot(kernel, w_bits, x_bits, in, begin, end, sums.get());
    round_to_bf16(sums.get() + begin, bias_bits ? bias_bits + begin : nullptr, end - begin, y_bits + begin);
  });
  return y;
}

// A few rows against a wide matrix (an output head over the vocabulary, as a batch of decoding
// sequences computes it): LibTorch's GEMM takes the whole matrix at once and, for 8-16 rows of
// gpt2-small's 50257 x 768 head, runs at half the speed it reaches on blocks of 2048 rows of it
// (39 ms against 25 for 16 rows on 2 Zen 4 cores).
constexpr int64_t kWideRows = 16384, kWideBlock = 2048, kFewRows = 64;

torch::Tensor project_wide(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  const int64_t in = weight.size(1), out = weight.size(0);
  const auto rows = x.reshape({-1, in});
  auto y = torch::empty({rows.size(0), out}, x.options());
  for (int64_t start = 0; start < out; start += kWideBlock) {
    const int64_t n = std::min(kWideBlock, out - start);
    auto block = y.narrow(1, start, n);
    if (bias.defined()) {
      torch::addmm_out(block, bias.narrow(0, start, n), rows, weight.narrow(0, start, n).t());
    } else {
      torch::mm_out(block, rows, weight.narrow(0, start, n).t());
    }
  }
  auto sizes = x.sizes().vec();
  sizes.back() = out;
  return y.view(sizes);
}

}  // namespace

torch::Tensor project(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  const int64_t in = weight.size(1);
  const bool no_grad = !torch::GradMode::is_enabled() ||
                       !(x.requires_grad() || weight.requires_grad() || (bias.defined() && bias.requires_grad()));
  if (no_grad && x.device().is_cpu() && x.dim() >= 2 && x.numel() > in && x.numel() <= kFewRows * in &&
      weight.size(0) >= kWideRows && x.scalar_type() == torch::kFloat && weight.scalar_type() == torch::kFloat &&
      (!bias.defined() || bias.scalar_type() == torch::kFloat)) {
    return project_wide(x, weight, bias);
  }
  // Mixed types (a bf16 frozen projection under autocast) go where autocast casts them.
  if (x.numel() != in || !x.device().is_cpu() || x.dim() == 0 || x.scalar_type() != weight.scalar_type()) {
    return torch::nn::functional::linear(x, weight, bias);
  }
  auto vector = x.reshape({in});
  torch::Tensor y;
  const bool differentiable = torch::GradMode::is_enabled() &&
                              (x.requires_grad() || weight.requires_grad() || (bias.defined() && bias.requires_grad()));
  const bool bf16 = weight.scalar_type() == torch::kBFloat16 && x.scalar_type() == torch::kBFloat16 &&
                    (!bias.defined() || bias.scalar_type() == torch::kBFloat16);
  // Without AVX-512 BF16's dot-product instruction, LibTorch 2.15's bf16 linear (oneDNN) reads
  // the weights faster than zoo's widening kernel: gpt2-small decoded at 49-51 tokens/s against
  // 36 on this project's AVX2 Zen 3 (its bf16 mv, at 9, is slower than both).
  if (bf16 && fastest_bf16_dot_kernel() != Bf16DotKernel::kDotProductInstruction) {
    return torch::nn::functional::linear(x, weight, bias);
  }
  if (bf16 && !differentiable) {
    y = bf16_matrix_vector(weight, vector, bias);
  } else {
    y = bias.defined() ? at::addmv(bias, weight, vector) : at::mv(weight, vector);
  }
  auto sizes = x.sizes().vec();
  sizes.back() = weight.size(0);
  return y.view(sizes);
}

}  // namespace zoo
