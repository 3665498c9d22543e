#include "kernels/linear_cross_entropy.h"

#include <algorithm>

#include <ATen/autocast_mode.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/torch.h>

namespace zoo {
namespace {

// The type autocast multiplies `t` in where it is on for t's device, else t's own type (autocast
// leaves float64 alone).
c10::ScalarType product_type(const torch::Tensor& t) {
  if (t.scalar_type() == torch::kDouble) return torch::kDouble;
  const auto device = t.device().type();
  return at::autocast::is_autocast_enabled(device) ? at::autocast::get_autocast_dtype(device) : t.scalar_type();
}

struct LinearCrossEntropy : public torch::autograd::Function<LinearCrossEntropy> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& hidden,
                               const torch::Tensor& weight, const torch::Tensor& labels, double smoothing,
                               int64_t ignore_index, int64_t chunk_rows, double softcap) {
    const int64_t n = hidden.size(0), vocab = weight.size(0);
    const auto valid = labels.ne(ignore_index);
    const int64_t count = valid.sum().item<int64_t>();
    const bool hidden_grad = hidden.requires_grad(), weight_grad = weight.requires_grad();
    const bool gradients = hidden_grad || weight_grad;
    // Logits and sums in float32, or float64 for float64 inputs (bf16 logits under autocast are
    // widened before the softmax, as cross_entropy's callers do).
    const auto wide = hidden.scalar_type() == torch::kDouble ? torch::kDouble : torch::kFloat;
    torch::Tensor grad_hidden = hidden_grad ? torch::empty_like(hidden) : torch::Tensor();
    torch::Tensor grad_weight = weight_grad ? torch::zeros_like(weight, wide) : torch::Tensor();
    auto total = torch::zeros({}, hidden.options().dtype(wide));
    const double scale = count > 0 ? 1.0 / static_cast<double>(count) : 0.0;
    torch::NoGradGuard no_grad;
    // The weight in the products' type once (autocast would cast its transpose, not a leaf, for
    // every chunk).
    const auto products = product_type(hidden);
    const auto w = weight.to(products);
    const auto h_all = hidden.to(products);
    for (int64_t start = 0; start < n; start += chunk_rows) {
      const int64_t rows = std::min(chunk_rows, n - start);
      const auto h = h_all.narrow(0, start, rows);
      const auto y = labels.narrow(0, start, rows);
      const auto keep = valid.narrow(0, start, rows).to(wide);
      auto z = torch::mm(h, w.t()).to(wide);  // (rows, V)
      torch::Tensor capped;  // tanh(z / cap), for the cap's derivative 1 - tanh^2
      if (softcap > 0.0) {
        capped = z.div(softcap).tanh_();
        z = capped * softcap;
      }
      const auto lse = torch::logsumexp(z, 1);
      const auto target = z.gather(1, y.clamp_min(0).unsqueeze(1)).squeeze(1);
      const auto loss = (1.0 - smoothing) * (lse - target) + smoothing * (lse - z.mean(1));
      total += (loss * keep).sum();
      if (!gradients || count == 0) continue;
      // d loss / d z = softmax(z) - (1 - smoothing) onehot(y) - smoothing / V, on kept rows.
      // In place: LibTorch 1.13's out-of-place (rows, V) - (rows, 1) is 30x slower than sub_.
      auto dz = z.sub_(lse.unsqueeze(1)).exp_();
      dz.scatter_add_(1, y.clamp_min(0).unsqueeze(1),
                      torch::full({rows, 1}, -(1.0 - smoothing), dz.options()));
      dz.sub_(smoothing / static_cast<double>(vocab)).mul_((keep * scale).unsqueeze(1));
      if (softcap > 0.0) dz.mul_(1.0 - capped.square_());
      const auto dz_products = dz.to(products);
      if (hidden_grad) grad_hidden.narrow(0, start, rows).copy_(torch::mm(dz_products, w));
      if (weight_grad) grad_weight.add_(torch::mm(dz_products.t(), h));
    }
    if (hidden_grad && count == 0) grad_hidden.zero_();
    ctx->save_for_backward({grad_hidden, grad_weight});
    return total * scale;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const auto& g = grad_outputs[0];
    torch::Tensor grad_hidden, grad_weight;
    if (saved[0].defined()) grad_hidden = saved[0] * g.to(saved[0].scalar_type());
    if (saved[1].defined()) grad_weight = saved[1] * g;
    return {grad_hidden, grad_weight, torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor(),
            torch::Tensor()};
  }
};

}  // namespace

torch::Tensor linear_cross_entropy(const torch::Tensor& hidden, const torch::Tensor& weight, const torch::Tensor& labels,
                                   double label_smoothing, int64_t ignore_index, int64_t chunk_rows, double softcap) {
  TORCH_CHECK(hidden.dim() == 2 && weight.dim() == 2 && hidden.size(1) == weight.size(1),
              "linear_cross_entropy: hidden (N, d) and weight (V, d) expected, got ", hidden.sizes(), " and ",
              weight.sizes());
  TORCH_CHECK(labels.dim() == 1 && labels.size(0) == hidden.size(0), "linear_cross_entropy: labels (N) expected, got ",
              labels.sizes(), " for ", hidden.size(0), " rows");
  if (chunk_rows <= 0) chunk_rows = std::max<int64_t>(1, (int64_t{8} << 20) / std::max<int64_t>(1, weight.size(0)));
  TORCH_CHECK(softcap >= 0.0, "linear_cross_entropy: softcap must be >= 0, got ", softcap);
  return LinearCrossEntropy::apply(hidden, weight, labels, label_smoothing, ignore_index, chunk_rows, softcap);
}

}  // namespace zoo
