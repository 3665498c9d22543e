#include "kernels/linformer_attention.h"

#include <torch/torch.h>

#include "kernels/math_attention.h"

namespace zoo {

namespace {

void check_shapes(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& e,
                  const torch::Tensor& f, const torch::Tensor& token_mask) {
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && k.sizes() == v.sizes() && q.size(0) == k.size(0) &&
                  q.size(2) == k.size(2) && q.size(3) == k.size(3) && k.size(1) > 0 && q.size(1) % k.size(1) == 0,
              "linformer attention: expected q (B, H, T, D) and k, v (B, Hkv, T, D) with H a multiple of Hkv, got ",
              q.sizes(), ", ", k.sizes(), ", ", v.sizes());
  const int64_t t = k.size(2), hkv = k.size(1);
  for (const auto* p : {&e, &f}) {
    TORCH_CHECK(p->dim() == 3 && (p->size(0) == 1 || p->size(0) == hkv) && p->size(2) >= t && p->sizes() == e.sizes(),
                "linformer attention: the projections must be (1 or ", hkv, ", k, n >= ", t, ") and alike, got ",
                e.sizes(), " and ", f.sizes());
  }
  TORCH_CHECK(!token_mask.defined() || token_mask.sizes() == torch::IntArrayRef({k.size(0), t}),
              "linformer attention: token_mask must be (", k.size(0), ", ", t, "), got ", token_mask.sizes());
}

// x (B, Hkv, T, D) with padded tokens zeroed, projected by p's first T columns: (B, Hkv, k, D).
torch::Tensor project(const torch::Tensor& x, const torch::Tensor& p, const torch::Tensor& token_mask) {
  const int64_t t = x.size(2);
  const auto real = token_mask.defined() ? x * token_mask.ne(0).view({x.size(0), 1, t, 1}).to(x.scalar_type()) : x;
  return torch::matmul(p.narrow(2, 0, t).to(x.scalar_type()), real);
}

}  // namespace

torch::Tensor linformer_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                  const torch::Tensor& e, const torch::Tensor& f, const torch::Tensor& token_mask,
                                  double scale, double dropout) {
  check_shapes(q, k, v, e, f, token_mask);
  const auto keys = project(k, e, token_mask), values = project(v, f, token_mask);
  const auto folded = fold_query_heads(q, torch::Tensor(), k.size(1));
  const auto o = at::scaled_dot_product_attention(folded.q, keys, values, std::nullopt, dropout, false, scale);
  return unfold_query_heads(o, q.size(1));
}

torch::Tensor linformer_attention_reference(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                            const torch::Tensor& e, const torch::Tensor& f,
                                            const torch::Tensor& token_mask, double scale) {
  check_shapes(q, k, v, e, f, token_mask);
  const int64_t b = q.size(0), h = q.size(1), t = q.size(2), hkv = k.size(1), group = h / hkv;
  std::vector<torch::Tensor> rows;
  for (int64_t n = 0; n < b; ++n) {
    std::vector<torch::Tensor> heads;
    for (int64_t i = 0; i < h; ++i) {
      const int64_t j = i / group, p = e.size(0) == 1 ? 0 : j;
      auto key = k[n][j], value = v[n][j];  // (T, D)
      if (token_mask.defined()) {
        const auto real = token_mask[n].ne(0).to(k.scalar_type()).unsqueeze(1);
        key = key * real, value = value * real;
      }
      const auto e_i = e[p].narrow(1, 0, t).to(k.scalar_type()), f_i = f[p].narrow(1, 0, t).to(k.scalar_type());
      const auto scores = torch::matmul(q[n][i], torch::matmul(e_i, key).t()) * scale;  // (T, k)
      heads.push_back(torch::matmul(torch::softmax(scores, -1), torch::matmul(f_i, value)));
    }
    rows.push_back(torch::stack(heads));
  }
  return torch::stack(rows);
}

}  // namespace zoo
