#include "kernels/linear.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <ATen/Context.h>
#include <ATen/autocast_mode.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/torch.h>

#include "kernels/bf16_dot.h"
#include "kernels/f32_rows_dot.h"
#include "kernels/parallel.h"
#include "kernels/quantized_weight.h"

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
  parallel_for(0, out, grain, [&](int64_t begin, int64_t end) {
    bf16_rows_dot(kernel, w_bits, x_bits, in, begin, end, sums.get());
    round_to_bf16(sums.get() + begin, bias_bits ? bias_bits + begin : nullptr, end - begin, y_bits + begin);
  });
  return y;
}

// float32 products without gradients go to oneDNN's linear (`mkldnn::_linear_pointwise`, the op
// PyTorch's own CPU compiler emits), which LibTorch 2.15 registers but whose `linear` sends to
// MKL (not under autocast, which casts for linear). On 2 Zen 4 cores MKL reads gpt2-small's
// weights at 13 GB/s for one row and takes 62 ms for 8 (its AVX2 path on AMD), oneDNN 21 ms and
// 33: every decoding step, batched or not.
const c10::OperatorHandle* onednn_linear() {
  static const std::optional<c10::OperatorHandle> op =
      c10::Dispatcher::singleton().findSchema({"mkldnn::_linear_pointwise", ""});
  return op.has_value() ? &*op : nullptr;
}

// float32 on the CPU, outside autocast, contiguous weights: the paths below.
bool plain_float32(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  return x.device().is_cpu() && x.dim() >= 1 && x.numel() > 0 && x.scalar_type() == torch::kFloat &&
         weight.scalar_type() == torch::kFloat && weight.dim() == 2 && weight.is_contiguous() &&
         (!bias.defined() || (bias.scalar_type() == torch::kFloat && bias.is_contiguous())) &&
         !at::autocast::is_autocast_enabled(at::kCPU);
}

bool has_onednn_linear() { return at::hasMKLDNN() && onednn_linear() != nullptr; }

torch::Tensor onednn_project(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  const int64_t in = weight.size(1);
  torch::jit::Stack stack{x.reshape({-1, in}).contiguous(),
                          weight,
                          bias.defined() ? c10::IValue(bias) : c10::IValue(),
                          c10::IValue(std::string("none")),
                          c10::IValue(c10::List<std::optional<at::Scalar>>()),
                          c10::IValue()};
  onednn_linear()->callBoxed(&stack);
  auto sizes = x.sizes().vec();
  sizes.back() = weight.size(0);
  return stack.back().toTensor().view(sizes);
}

// A few float32 rows (a batch of decoding sequences) through zoo's kernel
// (kernels/f32_rows_dot.h), the columns split between threads.
bool takes_few_rows_kernel(const torch::Tensor& x, const torch::Tensor& weight) {
  return x.numel() <= kFewRowsMax * weight.size(1) && cpu_runs_f32_rows_dot();
}

torch::Tensor few_rows_project(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  const int64_t in = weight.size(1), out = weight.size(0);
  const auto rows = x.reshape({-1, in}).contiguous();
  const int64_t n = rows.size(0);
  auto y = torch::empty({n, out}, x.options());
  const float* x_data = rows.data_ptr<float>();
  const float* w_data = weight.data_ptr<float>();
  const float* b_data = bias.defined() ? bias.data_ptr<float>() : nullptr;
  float* y_data = y.data_ptr<float>();
  // Columns in blocks of at least 32 KiB of weights, whole blocks of 8.
  const int64_t grain = ((std::max<int64_t>(8, (int64_t{8} << 10) / std::max<int64_t>(1, in)) + 7) / 8) * 8;
  parallel_for(0, out, grain, [&](int64_t begin, int64_t end) {
    f32_rows_dot(x_data, n, w_data, in, b_data, begin, end, y_data, out);
  });
  auto sizes = x.sizes().vec();
  sizes.back() = out;
  return y.view(sizes);
}

}  // namespace

torch::Tensor project(const torch::nn::Linear& layer, const torch::Tensor& x) {
  if (layer->weight.numel() == 0) {
    if (const auto quantized = quantized_weight_of(*layer, layer->weight)) {
      return quantized_project(x, *quantized, layer->bias);
    }
  }
  return project(x, layer->weight, layer->bias);
}

torch::Tensor project(const torch::Tensor& x, const torch::nn::Embedding& table) {
  if (table->weight.numel() == 0) {
    if (const auto quantized = quantized_weight_of(*table, table->weight)) return quantized_project(x, *quantized);
  }
  return project(x, table->weight);
}

torch::Tensor embed(const torch::nn::Embedding& table, const torch::Tensor& ids) {
  if (table->weight.numel() == 0) {
    if (const auto quantized = quantized_weight_of(*table, table->weight)) {
      return dequantize_rows(*quantized, ids, table->weight.scalar_type());
    }
  }
  return table.ptr()->forward(ids);  // the holder is const, the module it holds is not
}

torch::Tensor project(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  const int64_t in = weight.size(1);
  const bool no_grad = !torch::GradMode::is_enabled() ||
                       !(x.requires_grad() || weight.requires_grad() || (bias.defined() && bias.requires_grad()));
  if (no_grad && plain_float32(x, weight, bias)) {
    if (takes_few_rows_kernel(x, weight)) return few_rows_project(x, weight, bias);
    if (has_onednn_linear()) return onednn_project(x, weight, bias);
  }
  // Mixed types (a bf16 frozen projection under autocast) go where autocast casts them.
  if (x.numel() != in || !x.device().is_cpu() || x.dim() == 0 || x.scalar_type() != weight.scalar_type()) {
    return torch::nn::functional::linear(x, weight, bias);
  }
  auto vector = x.reshape({in});
  torch::Tensor y;
  const bool bf16 = weight.scalar_type() == torch::kBFloat16 && x.scalar_type() == torch::kBFloat16 &&
                    (!bias.defined() || bias.scalar_type() == torch::kBFloat16);
  // Without AVX-512 BF16's dot-product instruction, LibTorch 2.15's bf16 linear (oneDNN) reads
  // the weights faster than zoo's widening kernel: gpt2-small decoded at 49-51 tokens/s against
  // 36 on this project's AVX2 Zen 3 (its bf16 mv, at 9, is slower than both).
  if (bf16 && fastest_bf16_dot_kernel() != Bf16DotKernel::kDotProductInstruction) {
    return torch::nn::functional::linear(x, weight, bias);
  }
  if (bf16 && no_grad) {
    y = bf16_matrix_vector(weight, vector, bias);
  } else {
    y = bias.defined() ? at::addmv(bias, weight, vector) : at::mv(weight, vector);
  }
  auto sizes = x.sizes().vec();
  sizes.back() = weight.size(0);
  return y.view(sizes);
}

}  // namespace zoo
