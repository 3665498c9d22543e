#include "kernels/linear_cross_entropy.h"

#include <algorithm>

#include <ATen/autocast_mode.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/torch.h>

namespace zoo {
c10::ScalarType loss_product_type(const torch::Tensor& hidden) {
  if (hidden.scalar_type() == torch::kDouble) return torch::kDouble;  // autocast leaves float64 alone
  const auto device = hidden.device().type();
  return at::autocast::is_autocast_enabled(device) ? at::autocast::get_autocast_dtype(device) : hidden.scalar_type();
}

namespace {

struct LinearCrossEntropy : public torch::autograd::Function<LinearCrossEntropy> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& hidden,
                               const torch::Tensor& weight, const torch::Tensor& labels, double smoothing,
                               int64_t ignore_index, int64_t chunk_rows, double softcap) {
    const int64_t n = hidden.size(0), vocab = weight.size(0);
    const auto valid = labels.ne(ignore_index);
    const bool hidden_grad = hidden.requires_grad(), weight_grad = weight.requires_grad();
    const bool gradients = hidden_grad || weight_grad;
    // Logits and sums in float32, or float64 for float64 inputs (bf16 logits under autocast are
    // widened before the softmax, as cross_entropy's callers do).
    const auto wide = hidden.scalar_type() == torch::kDouble ? torch::kDouble : torch::kFloat;
    torch::Tensor grad_hidden = hidden_grad ? torch::empty_like(hidden) : torch::Tensor();
    torch::Tensor grad_weight = weight_grad ? torch::zeros_like(weight, wide) : torch::Tensor();
    auto total = torch::zeros({}, hidden.options().dtype(wide));
    torch::NoGradGuard no_grad;
    // Each kept row's weight in the mean, 1 / count, counted on the device: nothing is read back
    // (with no kept row every weight is 0, and so are the loss and its gradients).
    const auto weights = valid.to(wide) / valid.sum().clamp_min(1).to(wide);
    // The weight in the products' type once (autocast would cast its transpose, not a leaf, for
    // every chunk).
    const auto products = loss_product_type(hidden);
    const auto w = weight.to(products);
    const auto h_all = hidden.to(products);
    for (int64_t start = 0; start < n; start += chunk_rows) {
      const int64_t rows = std::min(chunk_rows, n - start);
      const auto h = h_all.narrow(0, start, rows);
      const auto y = labels.narrow(0, start, rows);
      const auto keep = weights.narrow(0, start, rows);
      auto z = torch::mm(h, w.t()).to(wide);  // (rows, V)
      torch::Tensor capped;  // tanh(z / cap), for the cap's derivative 1 - tanh^2
      if (softcap > 0.0) {
        capped = z.div(softcap).tanh_();
        z = capped * softcap;
      }
      const auto targets = y.clamp_min(0).unsqueeze(1);
      const auto target = z.gather(1, targets).squeeze(1);
      // Without smoothing, no pass over the chunk's logits for their mean.
      const auto mean = smoothing == 0.0 ? torch::Tensor() : z.mean(1);
      // log-sum-exp with the chunk's passes in place, its exponentials kept for the softmax:
      // torch::logsumexp makes an out-of-place (rows, V) - (rows, 1), slow on the CPU (its sub
      // took 0.5 s of a Qwen2-0.5B step), and exponentiates again.
      const auto top = z.amax(1, /*keepdim=*/true);  // (rows, 1)
      auto e = z.sub_(top).exp_();                              // exp(z - max), in z's memory
      const auto sums = e.sum(1);
      const auto lse = sums.log().add_(top.squeeze(1));
      const auto loss = smoothing == 0.0 ? lse - target : (1.0 - smoothing) * (lse - target) + smoothing * (lse - mean);
      total.add_(loss.dot(keep));
      if (!gradients) continue;
      // d loss / d z = softmax(z) - (1 - smoothing) onehot(y) - smoothing / V, each row times its
      // weight in the mean.
      auto dz = e.mul_((keep / sums).unsqueeze(1));
      dz.scatter_add_(1, targets, (keep * -(1.0 - smoothing)).unsqueeze(1));
      if (smoothing != 0.0) dz.sub_((keep * (smoothing / static_cast<double>(vocab))).unsqueeze(1));
      if (softcap > 0.0) dz.mul_(1.0 - capped.square_());
      const auto dz_products = dz.to(products);
      // Products written in place where the types allow (no (rows, d) or (V, d) temporary).
      if (hidden_grad) {
        auto rows_grad = grad_hidden.narrow(0, start, rows);
        if (rows_grad.scalar_type() == products) torch::mm_out(rows_grad, dz_products, w);
        else rows_grad.copy_(torch::mm(dz_products, w));
      }
      if (weight_grad) {
        if (products == wide) grad_weight.addmm_(dz_products.t(), h);
        else grad_weight.add_(torch::mm(dz_products.t(), h));
      }
    }
    ctx->save_for_backward({grad_hidden, grad_weight});
    return total;
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

int64_t loss_chunk_rows(const torch::Device& device, int64_t rows, int64_t vocab, int64_t budget_bytes) {
  TORCH_CHECK(rows >= 0 && vocab > 0, "loss_chunk_rows: rows (", rows, ") and vocab (", vocab, ") out of range");
  rows = std::max<int64_t>(rows, 1);
  const int64_t row_bytes = vocab * static_cast<int64_t>(sizeof(float));  // a row of float32 logits
  if (device.is_cpu()) {
    // At least 8M logits, and at least 512 rows while their logits stay within 256 MB: the
    // products' first dimension is what makes the CPU's GEMM efficient. On a 2-core Zen 4
    // (avx512f avx512_bf16) the head and loss of 1024 rows of GPT-2's vocabulary took 1.38 s in
    // 166-row chunks and 1.21 s in 512-row ones; 512 rows of Qwen2's 151,936, 3.38 s in 55-row
    // chunks and 1.88 s in one.
    // Equal chunks: a short last one multiplies slowly (71 of Qwen2's rows ran at 86 GFLOP/s, 441
    // at 154).
    const int64_t by_logits = (int64_t{8} << 20) / vocab;
    const int64_t by_product = std::min<int64_t>(512, (int64_t{256} << 20) / row_bytes);
    const int64_t most = std::min(rows, std::max<int64_t>({1, by_logits, by_product}));
    const int64_t chunks = (rows + most - 1) / most;
    return (rows + chunks - 1) / chunks;
  }
  // On a GPU few large products are what is fast: one chunk when the float32 logits fit the
  // budget, else the fewest chunks of equal size that do, in multiples of 128 rows (the tiles
  // of the GEMMs).
  if (budget_bytes <= 0) budget_bytes = kGpuLossBudgetBytes;
  const int64_t fit = std::max<int64_t>(1, budget_bytes / row_bytes);
  if (rows <= fit) return rows;
  const int64_t chunks = (rows + fit - 1) / fit;
  const int64_t even = (rows + chunks - 1) / chunks;  // <= fit
  if (fit < 128) return even;
  return std::min((even + 127) / 128 * 128, fit / 128 * 128);
}

torch::Tensor linear_cross_entropy(const torch::Tensor& hidden, const torch::Tensor& weight, const torch::Tensor& labels,
                                   double label_smoothing, int64_t ignore_index, int64_t chunk_rows, double softcap) {
  TORCH_CHECK(hidden.dim() == 2 && weight.dim() == 2 && hidden.size(1) == weight.size(1),
              "linear_cross_entropy: hidden (N, d) and weight (V, d) expected, got ", hidden.sizes(), " and ",
              weight.sizes());
  TORCH_CHECK(labels.dim() == 1 && labels.size(0) == hidden.size(0), "linear_cross_entropy: labels (N) expected, got ",
              labels.sizes(), " for ", hidden.size(0), " rows");
  if (chunk_rows <= 0) chunk_rows = loss_chunk_rows(hidden.device(), hidden.size(0), weight.size(0));
  TORCH_CHECK(softcap >= 0.0, "linear_cross_entropy: softcap must be >= 0, got ", softcap);
  return LinearCrossEntropy::apply(hidden, weight, labels, label_smoothing, ignore_index, chunk_rows, softcap);
}

}  // namespace zoo
