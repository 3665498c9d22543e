#include "layers/linear.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include <ATen/Parallel.h>
#include <torch/torch.h>

namespace zoo {
namespace {

inline float bf16_to_float(uint16_t bits) {
  const uint32_t wide = static_cast<uint32_t>(bits) << 16;  // bf16 is the top half of a float32
  float f;
  std::memcpy(&f, &wide, sizeof f);
  return f;
}

// y[i] = w[i, :] . x for rows [begin, end): bf16 weights widened to float32, float32 sums in 16
// independent lanes (what the compiler turns into one vector register per lane group). Built
// for AVX-512, AVX2 and plain x86-64, chosen at load time by the CPU.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
void bf16_rows_times_vector(const uint16_t* w, const float* x, int64_t in, int64_t begin, int64_t end, float* y) {
  constexpr int64_t kLanes = 16;
  for (int64_t i = begin; i < end; ++i) {
    const uint16_t* row = w + i * in;
    float lanes[kLanes] = {};
    int64_t j = 0;
    for (; j + kLanes <= in; j += kLanes) {
      for (int64_t l = 0; l < kLanes; ++l) lanes[l] += bf16_to_float(row[j + l]) * x[j + l];
    }
    float sum = 0;
    for (; j < in; ++j) sum += bf16_to_float(row[j]) * x[j];
    for (int64_t l = 0; l < kLanes; ++l) sum += lanes[l];
    y[i] = sum;
  }
}

// LibTorch's bf16 mv on the CPU widens element by element without vector code (3 GB/s here,
// slower than float32); this widens with vector code and reads half the bytes of float32
// (about 16.5 GB/s here, short of sgemv's 24: README, Performance).
torch::Tensor bf16_matrix_vector(const torch::Tensor& weight, const torch::Tensor& vector, const torch::Tensor& bias) {
  const int64_t out = weight.size(0), in = weight.size(1);
  const auto w = weight.contiguous();
  const auto x = vector.to(torch::kFloat).contiguous();
  auto y = torch::empty({out}, x.options());
  const auto* w_data = reinterpret_cast<const uint16_t*>(w.data_ptr<at::BFloat16>());
  const float* x_data = x.data_ptr<float>();
  float* y_data = y.data_ptr<float>();
  // Rows in blocks of at least 64 KiB of weights: a projection smaller than that stays on one thread.
  const int64_t grain = std::max<int64_t>(1, (int64_t{32} << 10) / std::max<int64_t>(1, in));
  at::parallel_for(0, out, grain, [&](int64_t begin, int64_t end) {
    bf16_rows_times_vector(w_data, x_data, in, begin, end, y_data);
  });
  if (bias.defined()) y.add_(bias.to(torch::kFloat));
  return y.to(weight.scalar_type());
}

}  // namespace

torch::Tensor project(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  const int64_t in = weight.size(1);
  if (x.numel() != in || !x.device().is_cpu() || x.dim() == 0) {
    return torch::nn::functional::linear(x, weight, bias);
  }
  auto vector = x.reshape({in});
  torch::Tensor y;
  const bool differentiable = torch::GradMode::is_enabled() &&
                              (x.requires_grad() || weight.requires_grad() || (bias.defined() && bias.requires_grad()));
  if (weight.scalar_type() == torch::kBFloat16 && x.scalar_type() == torch::kBFloat16 && !differentiable) {
    y = bf16_matrix_vector(weight, vector, bias);
  } else {
    y = bias.defined() ? at::addmv(bias, weight, vector) : at::mv(weight, vector);
  }
  auto sizes = x.sizes().vec();
  sizes.back() = weight.size(0);
  return y.view(sizes);
}

}  // namespace zoo
