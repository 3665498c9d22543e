#include "kernels/longformer_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include <torch/autograd.h>
#include <torch/torch.h>

#include "kernels/tiled_attention.h"

namespace zoo {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

void check_inputs(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& global_q,
                  const torch::Tensor& global_k, const torch::Tensor& global_v, const LongformerAttentionOptions& o) {
  TORCH_CHECK(q.dim() == 4, "longformer_attention: q must be (B, H, T, D), got ", q.sizes());
  for (const auto* t : {&k, &v, &global_q, &global_k, &global_v}) {
    TORCH_CHECK(t->sizes() == q.sizes(), "longformer_attention: k, v and the global q, k, v must have q's shape ",
                q.sizes(), " (one key head per query head), got ", t->sizes());
  }
  TORCH_CHECK(o.window() >= 0, "longformer_attention: window must be >= 0, got ", o.window());
  TORCH_CHECK(o.dilation().empty() || static_cast<int64_t>(o.dilation().size()) == q.size(1),
              "longformer_attention: one dilation per head (", q.size(1), "), got ", o.dilation().size());
  for (const int64_t d : o.dilation()) TORCH_CHECK(d >= 1, "longformer_attention: dilations must be >= 1, got ", d);
  for (const auto* m : {&o.global_mask(), &o.token_mask()}) {
    TORCH_CHECK(!m->defined() || (m->dim() == 2 && m->size(0) == q.size(0) && m->size(1) == q.size(2)),
                "longformer_attention: global and token masks must be (", q.size(0), ", ", q.size(2), "), got ",
                m->sizes());
  }
  TORCH_CHECK(o.dropout() >= 0.0 && o.dropout() < 1.0, "longformer_attention: dropout must be in [0, 1), got ",
              o.dropout());
}

torch::Tensor as_bool(const torch::Tensor& mask, int64_t batch, int64_t tokens, bool fill, const torch::Device& device) {
  if (!mask.defined()) return torch::full({batch, tokens}, fill, torch::TensorOptions(torch::kBool).device(device));
  return (mask.scalar_type() == torch::kBool ? mask : mask.ne(0)).to(device);
}

double resolved_scale(const LongformerAttentionOptions& o, int64_t head_dim) {
  return o.scale() > 0 ? o.scale() : 1.0 / std::sqrt(static_cast<double>(head_dim));
}

int64_t dilation_of(const LongformerAttentionOptions& o, int64_t head) {
  return o.dilation().empty() ? 1 : o.dilation()[static_cast<size_t>(head)];
}

// The global tokens of each row, in order, as (B, G) positions padded with 0 and (B, G) which
// of them are real; G = the most any row has (0: both (B, 0)).
struct GlobalTokens {
  int64_t count = 0;
  torch::Tensor index, valid;
};

GlobalTokens global_tokens(const torch::Tensor& global) {
  GlobalTokens g;
  const auto counts = global.sum(1);
  g.count = global.numel() == 0 ? 0 : counts.max().item<int64_t>();
  if (g.count == 0) {
    // Empty, not undefined: autograd's functions take defined tensors.
    g.index = torch::empty({global.size(0), 0}, global.options().dtype(torch::kLong));
    g.valid = torch::empty({global.size(0), 0}, global.options());
    return g;
  }
  // A stable sort of "not global" puts each row's global positions first, in order.
  g.index = torch::argsort(global.logical_not().to(torch::kInt), /*stable=*/true, /*dim=*/1).narrow(1, 0, g.count);
  g.valid = torch::arange(g.count, counts.options()).view({1, -1}) < counts.view({-1, 1});
  g.index = g.index.masked_fill(g.valid.logical_not(), 0);
  return g;
}

// (B, H, T, ...) -> (B * d, H, n, ...), n = ceil(T / d): class r of batch row b holds tokens r,
// r + d, r + 2d, ..., so that the tokens a dilated window joins are adjacent. Past T, `fill`.
torch::Tensor to_classes(const torch::Tensor& x, int64_t d, double fill) {
  if (d == 1) return x;
  const int64_t t = x.size(2), n = (t + d - 1) / d;
  auto padded = x;
  if (n * d > t) {
    auto shape = x.sizes().vec();
    shape[2] = n * d - t;
    padded = torch::cat({x, torch::full(shape, fill, x.options())}, 2);
  }
  auto shape = padded.sizes().vec();
  std::vector<int64_t> split = {shape[0], shape[1], n, d};
  split.insert(split.end(), shape.begin() + 3, shape.end());
  std::vector<int64_t> order = {0, 3, 1, 2};
  for (int64_t i = 4; i < static_cast<int64_t>(split.size()); ++i) order.push_back(i);
  std::vector<int64_t> merged = {shape[0] * d, shape[1], n};
  merged.insert(merged.end(), shape.begin() + 3, shape.end());
  return padded.view(split).permute(order).reshape(merged);
}

// The inverse of to_classes: (B * d, H, n, ...) -> (B, H, T, ...).
torch::Tensor from_classes(const torch::Tensor& x, int64_t d, int64_t t) {
  if (d == 1) return x;
  auto shape = x.sizes().vec();
  const int64_t b = shape[0] / d, h = shape[1], n = shape[2];
  std::vector<int64_t> split = {b, d, h, n};
  split.insert(split.end(), shape.begin() + 3, shape.end());
  std::vector<int64_t> order = {0, 2, 3, 1};
  for (int64_t i = 4; i < static_cast<int64_t>(split.size()); ++i) order.push_back(i);
  std::vector<int64_t> merged = {b, h, n * d};
  merged.insert(merged.end(), shape.begin() + 3, shape.end());
  return x.view(split).permute(order).reshape(merged).narrow(2, 0, t);
}

// The heads of each dilation, in order of first appearance.
std::vector<std::pair<int64_t, std::vector<int64_t>>> heads_by_dilation(const LongformerAttentionOptions& o,
                                                                        int64_t heads) {
  std::vector<std::pair<int64_t, std::vector<int64_t>>> groups;
  for (int64_t h = 0; h < heads; ++h) {
    const int64_t d = dilation_of(o, h);
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == d; });
    if (it == groups.end()) {
      groups.push_back({d, {h}});
    } else {
      it->second.push_back(h);
    }
  }
  return groups;
}

// Calls run(group, d, index, pick) for the heads of each dilation d: `index` their numbers,
// pick(x) a (B, H, T, ...) tensor's rows of those heads, in d's classes.
template <typename Run>
void for_each_dilation(const std::vector<int64_t>& dilation, int64_t heads, const Run& run) {
  LongformerAttentionOptions o(0);
  o.dilation(dilation);
  const auto groups = heads_by_dilation(o, heads);
  for (size_t g = 0; g < groups.size(); ++g) {
    const auto& [d, members] = groups[g];
    const auto index = torch::tensor(members, torch::kLong);
    const bool all = static_cast<int64_t>(members.size()) == heads;
    const auto pick = [&](const torch::Tensor& x) { return to_classes(all ? x : x.index_select(1, index), d, 0.0); };
    run(g, d, index, pick);
  }
}

// What the window's calls and their backward share.
struct Window {
  int64_t window = 0;  // one-sided
  std::vector<int64_t> dilation;
  torch::Tensor keys;  // (B, T) bool: the keys the window may see (real and not global)
  double scale = 0, dropout = 0;
  int64_t seed = 0;
};

TiledAttentionOptions window_terms(const Window& w, int64_t d, size_t group) {
  auto terms = TiledAttentionOptions()
                   .scale(w.scale)
                   .window(w.window + 1)  // |i - j| < window + 1 within a class
                   .key_padding_mask(to_classes(w.keys.unsqueeze(1), d, 0.0).squeeze(1))
                   .dropout(w.dropout);
  // Each dilation's heads draw from their own seed (their head indices restart at 0).
  if (w.dropout > 0) terms.dropout_seed(w.seed + static_cast<int64_t>(group));
  return terms;
}

class LongformerLocalFunction : public torch::autograd::Function<LongformerLocalFunction> {
 public:
  // The rows of the queries that are not global: the window's keys, then the global keys as
  // extra columns, merged by their log-sum-exp. Returns out (B, H, T, D).
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, const torch::Tensor& window_keys,
                               const torch::Tensor& global_index, const torch::Tensor& global_valid, int64_t window,
                               std::vector<int64_t> dilation, double scale, double dropout, int64_t seed) {
    const Window w{window, dilation, window_keys, scale, dropout, seed};
    const int64_t b = q.size(0), h = q.size(1), t = q.size(2), hd = q.size(3);
    auto out = torch::empty({b, h, t, hd}, q.options().dtype(torch::kFloat));
    auto lse = torch::empty({b, h, t}, q.options().dtype(torch::kFloat));
    for_each_dilation(dilation, h, [&](size_t g, int64_t d, const torch::Tensor& index, const auto& pick) {
      const auto part = tiled_attention_forward(pick(q), pick(k), pick(v), window_terms(w, d, g));
      out.index_copy_(1, index, from_classes(part.out, d, t).to(torch::kFloat));
      lse.index_copy_(1, index, from_classes(part.lse, d, t));
    });
    torch::Tensor keep;
    if (global_index.size(1) > 0) {
      const int64_t count = global_index.size(1);
      const auto at = global_index.view({b, 1, count, 1}).expand({b, h, count, hd});
      const auto kg = k.gather(2, at).to(torch::kFloat), vg = v.gather(2, at).to(torch::kFloat);
      const auto scores = (torch::matmul(q.to(torch::kFloat), kg.transpose(2, 3)) * scale)
                              .masked_fill(global_valid.logical_not().view({b, 1, 1, count}), -kInf);
      const auto merged = torch::logaddexp(lse, torch::logsumexp(scores, -1));
      const auto empty = merged == -kInf;
      const auto safe = merged.masked_fill(empty, 0.0f);
      const auto take = (lse - safe).exp().masked_fill(empty, 0.0f).unsqueeze(-1);
      auto probs = (scores - safe.unsqueeze(-1)).exp();
      if (dropout > 0) {
        keep = torch::bernoulli(torch::full_like(probs, 1.0 - dropout)).div_(1.0 - dropout);
        probs = probs * keep;
      }
      out = out * take + torch::matmul(probs, vg);
      lse = merged;
    }
    out = out.to(q.scalar_type());
    ctx->save_for_backward({q, k, v, out, lse, window_keys, global_index, global_valid, keep});
    auto& saved = ctx->saved_data;
    saved["window"] = window;
    saved["dilation"] = dilation;
    saved["scale"] = scale;
    saved["dropout"] = dropout;
    saved["seed"] = seed;
    return out;
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grad_outputs) {
    const auto s = ctx->get_saved_variables();
    const auto &q = s[0], &k = s[1], &v = s[2], &out = s[3], &lse = s[4], &global_index = s[6],
               &global_valid = s[7], &keep = s[8];
    const auto& saved = ctx->saved_data;
    const Window w{saved.at("window").toInt(), saved.at("dilation").toIntVector(), s[5], saved.at("scale").toDouble(),
                   saved.at("dropout").toDouble(), saved.at("seed").toInt()};
    const int64_t b = q.size(0), h = q.size(1), t = q.size(2), hd = q.size(3);
    const auto d_out = grad_outputs[0].defined() ? grad_outputs[0].to(q.scalar_type()) : torch::zeros_like(out);
    auto dq = torch::zeros({b, h, t, hd}, q.options().dtype(torch::kFloat));
    auto dk = torch::zeros_like(dq), dv = torch::zeros_like(dq);
    // Each window's rows take the merged lse and out: its probabilities are then those of the
    // merged softmax, and its row sums those of the merged rows (as ring attention's blocks).
    for_each_dilation(w.dilation, h, [&](size_t g, int64_t d, const torch::Tensor& index, const auto& pick) {
      const auto grads = tiled_attention_backward(pick(d_out), pick(q), pick(k), pick(v), pick(out), pick(lse),
                                                  window_terms(w, d, g));
      dq.index_copy_(1, index, from_classes(grads.dq, d, t).to(torch::kFloat));
      dk.index_copy_(1, index, from_classes(grads.dk, d, t).to(torch::kFloat));
      dv.index_copy_(1, index, from_classes(grads.dv, d, t).to(torch::kFloat));
    });
    if (global_index.size(1) > 0) {
      const int64_t count = global_index.size(1);
      const auto at = global_index.view({b, 1, count, 1}).expand({b, h, count, hd});
      const auto qf = q.to(torch::kFloat), dof = d_out.to(torch::kFloat);
      const auto kg = k.gather(2, at).to(torch::kFloat), vg = v.gather(2, at).to(torch::kFloat);
      const auto scores = (torch::matmul(qf, kg.transpose(2, 3)) * w.scale)
                              .masked_fill(global_valid.logical_not().view({b, 1, 1, count}), -kInf);
      const auto safe = lse.masked_fill(lse == -kInf, 0.0f).unsqueeze(-1);
      const auto probs = (scores - safe).exp();
      const auto kept = keep.defined() ? probs * keep : probs;
      auto d_probs = torch::matmul(dof, vg.transpose(2, 3));
      if (keep.defined()) d_probs = d_probs * keep;
      const auto row = (dof * out.to(torch::kFloat)).sum(-1, /*keepdim=*/true);
      const auto d_scores = probs * (d_probs - row) * w.scale;
      dq += torch::matmul(d_scores, kg);
      dk.scatter_add_(2, at, torch::matmul(d_scores.transpose(2, 3), qf));
      dv.scatter_add_(2, at, torch::matmul(kept.transpose(2, 3), dof));
    }
    const auto type = q.scalar_type();
    return {dq.to(type), dk.to(type), dv.to(type), {}, {}, {}, {}, {}, {}, {}, {}};
  }
};

}  // namespace

torch::Tensor longformer_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                   const torch::Tensor& global_q, const torch::Tensor& global_k,
                                   const torch::Tensor& global_v, const LongformerAttentionOptions& options) {
  check_inputs(q, k, v, global_q, global_k, global_v, options);
  const bool tiled = q.device().is_cpu() && (q.scalar_type() == torch::kFloat || q.scalar_type() == torch::kBFloat16);
  if (!tiled) return longformer_attention_reference(q, k, v, global_q, global_k, global_v, options);
  const int64_t b = q.size(0), h = q.size(1), t = q.size(2), hd = q.size(3);
  const auto global = as_bool(options.global_mask(), b, t, false, q.device());
  const auto tokens = as_bool(options.token_mask(), b, t, true, q.device());
  auto g = global_tokens(global);
  // A padded token marked global is a global row (dropped with the padding) but no key.
  if (g.count > 0) g.valid = g.valid.logical_and(tokens.gather(1, g.index));
  const double scale = resolved_scale(options, hd);
  const int64_t seed = options.dropout() > 0 ? draw_dropout_seed() : 0;
  auto out = LongformerLocalFunction::apply(q, k, v, tokens.logical_and(global.logical_not()), g.index, g.valid,
                                            options.window(), options.dilation(), scale, options.dropout(), seed);
  if (g.count > 0) {
    // The global rows: (G, T) scores through the global projections, over every real key.
    const auto at = g.index.view({b, 1, g.count, 1}).expand({b, h, g.count, hd});
    const auto scores = (torch::matmul(global_q.gather(2, at).to(torch::kFloat),
                                       global_k.to(torch::kFloat).transpose(2, 3)) * scale)
                            .masked_fill(tokens.logical_not().view({b, 1, 1, t}), -kInf);
    auto probs = torch::softmax(scores, -1);
    if (options.dropout() > 0) probs = torch::dropout(probs, options.dropout(), /*train=*/true);
    const auto rows = torch::matmul(probs, global_v.to(torch::kFloat)).to(q.scalar_type());  // (B, H, G, D)
    // Token i is global slot (number of global tokens up to i) - 1.
    const auto slot = (global.to(torch::kLong).cumsum(1) - 1).clamp_min(0);
    const auto spread = rows.gather(2, slot.view({b, 1, t, 1}).expand({b, h, t, hd}));
    out = torch::where(global.view({b, 1, t, 1}), spread, out);
  }
  return torch::where(tokens.view({b, 1, t, 1}), out, torch::zeros({}, out.options()));
}

torch::Tensor longformer_attention_reference(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                             const torch::Tensor& global_q, const torch::Tensor& global_k,
                                             const torch::Tensor& global_v, const LongformerAttentionOptions& options) {
  check_inputs(q, k, v, global_q, global_k, global_v, options);
  const int64_t b = q.size(0), h = q.size(1), t = q.size(2), hd = q.size(3);
  const auto global = as_bool(options.global_mask(), b, t, false, q.device());
  const auto tokens = as_bool(options.token_mask(), b, t, true, q.device());
  const double scale = resolved_scale(options, hd);
  // Query i, key j of head h: |i - j| <= w d_h with d_h dividing i - j.
  const auto position = torch::arange(t, torch::TensorOptions(torch::kLong).device(q.device()));
  const auto distance = position.view({t, 1}) - position.view({1, t});
  std::vector<torch::Tensor> bands;
  for (int64_t head = 0; head < h; ++head) {
    const int64_t d = dilation_of(options, head);
    bands.push_back(distance.abs().le(options.window() * d).logical_and(distance.remainder(d).eq(0)));
  }
  const auto band = torch::stack(bands).unsqueeze(0);  // (1, H, T, T)
  const auto global_keys = global.view({b, 1, 1, t});
  const auto real_keys = tokens.view({b, 1, 1, t});
  const auto local = band.logical_and(global_keys.logical_not()).logical_or(global_keys).logical_and(real_keys);
  // A finite floor, not -inf: a row with no key (a padded query far from real ones) is dropped
  // below, and must not bring NaN into the gradients on its way.
  const double floor = -1e30;
  const auto local_scores = (torch::matmul(q, k.transpose(2, 3)) * scale).masked_fill(local.logical_not(), floor);
  const auto local_out = torch::matmul(torch::softmax(local_scores, -1), v);
  const auto global_scores =
      (torch::matmul(global_q, global_k.transpose(2, 3)) * scale).masked_fill(real_keys.logical_not(), floor);
  const auto global_out = torch::matmul(torch::softmax(global_scores, -1), global_v);
  const auto out = torch::where(global.view({b, 1, t, 1}), global_out, local_out);
  return torch::where(tokens.view({b, 1, t, 1}), out, torch::zeros({}, out.options()));
}

}  // namespace zoo
