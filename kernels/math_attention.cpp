#include "kernels/math_attention.h"

#include <torch/torch.h>

namespace zoo {

FoldedQueries fold_query_heads(const torch::Tensor& q, const torch::Tensor& bias, int64_t key_heads) {
  const int64_t b = q.size(0), h = q.size(1), t = q.size(2), d = q.size(3);
  TORCH_CHECK(key_heads > 0 && h % key_heads == 0, "attention: ", h, " query heads cannot share ", key_heads,
              " key heads");
  const int64_t rep = h / key_heads;
  FoldedQueries folded{rep > 1 ? q.reshape({b, key_heads, rep * t, d}) : q, bias};
  if (bias.defined()) {
    auto& m = folded.bias;
    while (m.dim() < 4) m = m.unsqueeze(0);
    if (rep > 1) m = m.expand({m.size(0), h, t, m.size(-1)}).reshape({m.size(0), key_heads, rep * t, m.size(-1)});
  }
  return folded;
}

torch::Tensor unfold_query_heads(const torch::Tensor& out, int64_t heads) {
  const int64_t b = out.size(0), hkv = out.size(1), rows = out.size(2), d = out.size(3);
  if (hkv == heads) return out;
  return out.reshape({b, heads, rows * hkv / heads, d});
}

torch::Tensor soft_cap(const torch::Tensor& scores, double cap) {
  if (cap == 0.0) return scores;
  return torch::tanh(scores / cap) * cap;
}

std::tuple<torch::Tensor, torch::Tensor> math_attention(const torch::Tensor& q, const torch::Tensor& k,
                                                        const torch::Tensor& v, const torch::Tensor& bias,
                                                        double scale, double dropout, double softcap) {
  const int64_t h = q.size(1), tk = k.size(2);
  const auto folded = fold_query_heads(q, bias, k.size(1));
  auto scores = soft_cap(torch::matmul(folded.q, k.transpose(-2, -1)) * scale, softcap);  // (B, Hkv, rep * T, Tk)
  if (folded.bias.defined()) scores = scores + folded.bias;
  // Half-precision scores are normalised in float32; float and double as they are.
  const auto dtype = q.scalar_type();
  const bool low = dtype == torch::kHalf || dtype == torch::kBFloat16;
  auto weights = torch::softmax(scores, -1, low ? torch::kFloat : dtype).to(dtype);
  if (dropout > 0.0) weights = torch::dropout(weights, dropout, /*train=*/true);
  const auto out = unfold_query_heads(torch::matmul(weights, v), h);
  return {out, weights.reshape({q.size(0), h, q.size(2), tk})};
}

}  // namespace zoo
