#include "kernels/linear_attention.h"

#include <cmath>
#include <limits>
#include <vector>

#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/torch.h>

#include "kernels/recompute.h"

namespace zoo {
namespace {

// float64 stays float64 (the tests' exact comparisons); everything else runs in float32.
torch::ScalarType compute_type(const torch::Tensor& v) {
  return v.scalar_type() == torch::kDouble ? torch::kDouble : torch::kFloat;
}

void check_shapes(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                  const torch::Tensor& log_decay, const torch::Tensor& state) {
  TORCH_CHECK(q.dim() == 4 && k.sizes() == q.sizes(), "linear attention: q and k must be (B, H, T, Dk) alike, got ",
              q.sizes(), " and ", k.sizes());
  TORCH_CHECK(v.dim() == 4 && v.size(0) == q.size(0) && v.size(1) == q.size(1) && v.size(2) == q.size(2),
              "linear attention: v must be (B, H, T, Dv) with q's B, H and T, got ", v.sizes(), " for q ", q.sizes());
  TORCH_CHECK(!log_decay.defined() || log_decay.sizes() == q.sizes(),
              "linear attention: log_decay must be shaped like q ", q.sizes(), ", got ", log_decay.sizes());
  TORCH_CHECK(!state.defined() || state.sizes() == torch::IntArrayRef({q.size(0), q.size(1), q.size(3), v.size(3)}),
              "linear attention: the state must be (B, H, Dk, Dv) = (", q.size(0), ", ", q.size(1), ", ", q.size(3),
              ", ", v.size(3), "), got ", state.sizes());
}

// The chunkwise form, written with differentiable tensor operations (autograd gives its backward).
LinearAttentionResult chunked_forward(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                      const torch::Tensor& log_decay, const torch::Tensor& initial_state, double scale) {
  // Autocast would run the products in bf16; the state and the decays need float32.
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  const auto dtype = compute_type(v);
  const int64_t b = q.size(0), h = q.size(1), t = q.size(2), dk = q.size(3), dv = v.size(3);
  constexpr int64_t C = kLinearAttentionChunk, c = kLinearAttentionSubChunk, S = C / c;
  const int64_t n = (t + C - 1) / C, padded = n * C;
  // Padding tokens have k = 0 and no decay: they leave the state as it was.
  auto chunks = [&](const torch::Tensor& x) {
    auto y = x.to(dtype);
    if (padded > t) y = torch::constant_pad_nd(y, {0, 0, 0, padded - t});
    return y.reshape({b, h, n, C, x.size(3)});
  };
  const auto qc = chunks(q) * scale, kc = chunks(k), vc = chunks(v);
  const bool gated = log_decay.defined();
  const auto opts = qc.options();

  torch::Tensor intra;          // (B, H, N, C, Dv): each token's terms from its own chunk
  torch::Tensor q_from_start;   // q_i decayed from the chunk's start to i
  torch::Tensor k_to_end;       // k_j decayed from j to the chunk's end
  torch::Tensor chunk_decay;    // (B, H, N, Dk): the log decay over a whole chunk
  if (!gated) {
    const auto causal = torch::ones({C, C}, opts.dtype(torch::kBool)).tril();
    intra = torch::matmul(torch::matmul(qc, kc.transpose(-1, -2)).masked_fill(causal.logical_not(), 0.0), vc);
    q_from_start = qc, k_to_end = kc;
  } else {
    const auto cum = chunks(log_decay).cumsum(3);  // b_i: log decay from the chunk's start through i
    const auto qs = qc.view({b, h, n, S, c, dk}), ks = kc.view({b, h, n, S, c, dk});
    const auto vs = vc.view({b, h, n, S, c, dv}), bs = cum.view({b, h, n, S, c, dk});
    // Diagonal sub-chunks, pairwise: score_ij = sum_d q_id k_jd exp(b_id - b_jd), j <= i. The
    // exponents above the diagonal are positive and masked before exp (they would overflow).
    const auto above = torch::ones({c, c}, opts.dtype(torch::kBool)).triu(1).unsqueeze(-1);
    const auto pair_decay = (bs.unsqueeze(-2) - bs.unsqueeze(-3)).masked_fill(above, -std::numeric_limits<double>::infinity());
    const auto diagonal = (qs.unsqueeze(-2) * ks.unsqueeze(-3) * pair_decay.exp()).sum(-1);  // (B, H, N, S, c, c)
    const auto own = torch::matmul(diagonal, vs);                                              // (B, H, N, S, c, Dv)
    // Earlier sub-chunks through the reference point r, the last token before sub-chunk s: q
    // decays from r to i and k from j to r, both exponents <= 0.
    std::vector<torch::Tensor> parts{own.select(3, 0)};
    for (int64_t s = 1; s < S; ++s) {
      const auto ref = bs.select(3, s - 1).select(3, c - 1).unsqueeze(3);  // (B, H, N, 1, Dk)
      const auto q_s = qs.select(3, s) * (bs.select(3, s) - ref).exp();
      const auto k_before = kc.narrow(3, 0, s * c) * (ref - cum.narrow(3, 0, s * c)).exp();
      const auto kv = torch::matmul(k_before.transpose(-1, -2), vc.narrow(3, 0, s * c));  // (B, H, N, Dk, Dv)
      parts.push_back(own.select(3, s) + torch::matmul(q_s, kv));
    }
    intra = torch::stack(parts, 3).view({b, h, n, C, dv});
    chunk_decay = cum.select(3, C - 1);
    q_from_start = qc * cum.exp();
    k_to_end = kc * (chunk_decay.unsqueeze(3) - cum).exp();
  }
  // Across chunks: the state at each chunk's start, one step per chunk.
  const auto updates = torch::matmul(k_to_end.transpose(-1, -2), vc);  // (B, H, N, Dk, Dv)
  torch::Tensor state = initial_state.defined() ? initial_state.to(dtype) : torch::zeros({b, h, dk, dv}, opts);
  std::vector<torch::Tensor> starts;
  starts.reserve(static_cast<size_t>(n));
  const auto chunk_factor = gated ? chunk_decay.exp().unsqueeze(-1) : torch::Tensor();  // (B, H, N, Dk, 1)
  for (int64_t i = 0; i < n; ++i) {
    starts.push_back(state);
    state = (gated ? chunk_factor.select(2, i) * state : state) + updates.select(2, i);
  }
  const auto inter = torch::matmul(q_from_start, torch::stack(starts, 2));
  auto out = (intra + inter).view({b, h, padded, dv}).narrow(2, 0, t).to(v.scalar_type());
  return {out, state};
}

}  // namespace

LinearAttentionResult chunked_linear_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                               const torch::Tensor& log_decay, const torch::Tensor& initial_state,
                                               double scale, bool want_final_state) {
  check_shapes(q, k, v, log_decay, initial_state);
  bool needs_grad = false;
  for (const auto* x : {&q, &k, &v, &log_decay, &initial_state})
    needs_grad = needs_grad || (x->defined() && x->requires_grad());
  if (want_final_state || !needs_grad || !torch::GradMode::is_enabled()) {
    return chunked_forward(q, k, v, log_decay, initial_state, scale);
  }
  // Training: keep the inputs only; backward recomputes the chunks and their states.
  auto run = [scale](const std::vector<torch::Tensor>& in) {
    return chunked_forward(in[0], in[1], in[2], in[3], in[4], scale).output;
  };
  return {recompute_in_backward(run, {q, k, v, log_decay, initial_state}, {}), torch::Tensor()};
}

LinearAttentionResult recurrent_linear_attention(const torch::Tensor& q, const torch::Tensor& k,
                                                 const torch::Tensor& v, const torch::Tensor& log_decay,
                                                 const torch::Tensor& state, double scale) {
  check_shapes(q, k, v, log_decay, state);
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  const auto dtype = compute_type(v);
  torch::Tensor s = state.defined() ? state.to(dtype)
                                    : torch::zeros({q.size(0), q.size(1), q.size(3), v.size(3)}, q.options().dtype(dtype));
  std::vector<torch::Tensor> outputs;
  outputs.reserve(static_cast<size_t>(q.size(2)));
  for (int64_t i = 0; i < q.size(2); ++i) {
    const auto q_i = q.select(2, i).to(dtype) * scale, k_i = k.select(2, i).to(dtype), v_i = v.select(2, i).to(dtype);
    if (log_decay.defined()) s = log_decay.select(2, i).to(dtype).exp().unsqueeze(-1) * s;
    s = s + k_i.unsqueeze(-1) * v_i.unsqueeze(-2);
    outputs.push_back(torch::matmul(q_i.unsqueeze(-2), s).squeeze(-2));
  }
  return {torch::stack(outputs, 2).to(v.scalar_type()), s};
}

LinearAttentionResult linear_attention_reference(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                                 const torch::Tensor& log_decay, const torch::Tensor& initial_state,
                                                 double scale) {
  check_shapes(q, k, v, log_decay, initial_state);
  const int64_t b = q.size(0), h = q.size(1), t = q.size(2), dk = q.size(3), dv = v.size(3);
  torch::Tensor state = initial_state.defined() ? initial_state : torch::zeros({b, h, dk, dv}, q.options());
  std::vector<torch::Tensor> out;
  for (int64_t i = 0; i < t; ++i) {
    if (log_decay.defined()) state = state * log_decay.select(2, i).exp().unsqueeze(-1);
    state = state + k.select(2, i).unsqueeze(-1) * v.select(2, i).unsqueeze(-2);
    out.push_back(((q.select(2, i) * scale).unsqueeze(-1) * state).sum(-2));
  }
  return {torch::stack(out, 2), state};
}

torch::Tensor orthogonal_random_features(int64_t features, int64_t dim, int64_t seed) {
  TORCH_CHECK(features > 0 && dim > 0, "performer features: ", features, " features of dimension ", dim);
  auto generator = at::make_generator<at::CPUGeneratorImpl>(static_cast<uint64_t>(seed));
  std::vector<torch::Tensor> blocks;
  for (int64_t drawn = 0; drawn < features; drawn += dim) {
    const auto gaussian = at::normal(0.0, 1.0, {dim, dim}, generator, torch::kFloat);
    const auto q = std::get<0>(torch::linalg_qr(gaussian));  // orthonormal columns
    blocks.push_back(q.t().narrow(0, 0, std::min(dim, features - drawn)));
  }
  // Row norms of Gaussian vectors (chi with dim degrees of freedom): marginally N(0, I) rows.
  const auto norms = at::normal(0.0, 1.0, {features, dim}, generator, torch::kFloat).norm(2, {1}, true);
  return torch::cat(blocks, 0) * norms;
}

torch::Tensor performer_features(const torch::Tensor& x, const torch::Tensor& projection, bool stabilize) {
  const int64_t dim = x.size(-1);
  TORCH_CHECK(projection.dim() == 2 && projection.size(1) == dim, "performer features: projection ",
              projection.sizes(), " for inputs of dimension ", dim);
  const auto scaled = x * std::pow(static_cast<double>(dim), -0.25);
  auto exponent = torch::matmul(scaled, projection.to(x.scalar_type()).t()) -
                  scaled.pow(2).sum(-1, true) / 2.0;
  if (stabilize) exponent = exponent - std::get<0>(exponent.max(-1, true)).detach();
  return exponent.exp() / std::sqrt(static_cast<double>(projection.size(0)));
}

}  // namespace zoo
