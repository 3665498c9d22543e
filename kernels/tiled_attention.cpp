#include "kernels/tiled_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <mutex>
#include <vector>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/autograd.h>
#include <torch/torch.h>

#include "kernels/masks.h"
#include "kernels/parallel.h"

namespace zoo {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// The shapes and what the options make of them, checked once per call.
struct Problem {
  int64_t batch = 0, heads = 0, kv_heads = 0, group = 0, queries = 0, keys = 0, head_dim = 0;
  float scale = 0;
  float softcap = 0;  // 0: none
  bool causal = false;
  int64_t window = 0, query_start = 0, key_start = 0;
  torch::Tensor padding;  // (B, Tk) bool, contiguous; undefined: no padding
  // (H, Tq + Tk - 1) float32: the position term of (query i, key j) is at j - i + Tq - 1, since
  // ALiBi and T5 both depend on key - query only. O(H * T), never (Tq, Tk). Undefined for kNone.
  torch::Tensor position;
  torch::Tensor buckets;  // (Tq + Tk - 1) int64, kRelative: the bucket of each key - query
  float dropout = 0;      // probability of zeroing a weight
  uint64_t seed = 0;
  int64_t dropout_queries = 0, dropout_keys = 0;  // the mask's index space (absolute positions)

  // Keys [key_lo(i), key_hi(i)) pass the causal and window masks for query i (a window without
  // causal reaches window - 1 keys to each side); both are non-decreasing in i, so a block of
  // queries needs the keys key_lo(first)..key_hi(last).
  int64_t key_lo(int64_t i) const {
    if (window == 0) return 0;
    return std::clamp<int64_t>(query_start + i - window + 1 - key_start, 0, keys);
  }
  int64_t key_hi(int64_t i) const {
    if (causal) return std::clamp<int64_t>(query_start + i + 1 - key_start, 0, keys);
    if (window == 0) return keys;
    return std::clamp<int64_t>(query_start + i + window - key_start, 0, keys);
  }
  // Queries [query_lo(j), query_hi(j)) see key j (the inverse of the above).
  int64_t query_lo(int64_t j) const {
    if (causal) return std::clamp<int64_t>(key_start + j - query_start, 0, queries);
    if (window == 0) return 0;
    return std::clamp<int64_t>(key_start + j - window + 1 - query_start, 0, queries);
  }
  int64_t query_hi(int64_t j) const {
    if (window == 0) return queries;
    return std::clamp<int64_t>(key_start + j + window - query_start, 0, queries);
  }
};

Problem make_problem(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                     const TiledAttentionOptions& o) {
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4,
              "tiled_attention: q, k, v must be (B, H, T, D), got ", q.sizes(), ", ", k.sizes(), ", ", v.sizes());
  TORCH_CHECK(k.sizes() == v.sizes(), "tiled_attention: k ", k.sizes(), " and v ", v.sizes(), " must have one shape");
  TORCH_CHECK(k.size(0) == q.size(0) && k.size(3) == q.size(3), "tiled_attention: k and v (", k.sizes(),
              ") must have q's batch and head size (", q.sizes(), ")");
  TORCH_CHECK(k.size(1) > 0 && q.size(1) % k.size(1) == 0, "tiled_attention: query heads (", q.size(1),
              ") must be a multiple of key/value heads (", k.size(1), ")");
  TORCH_CHECK(q.scalar_type() == k.scalar_type() && q.scalar_type() == v.scalar_type(),
              "tiled_attention: q, k, v must share a dtype, got ", q.scalar_type(), ", ", k.scalar_type(), ", ",
              v.scalar_type());
  TORCH_CHECK(q.scalar_type() == torch::kFloat || q.scalar_type() == torch::kBFloat16,
              "tiled_attention: float32 or bfloat16 expected, got ", q.scalar_type());
  TORCH_CHECK(q.device().is_cpu() && k.device().is_cpu() && v.device().is_cpu(),
              "tiled_attention: a CPU kernel, got q on ", q.device());
  TORCH_CHECK(o.window() >= 0, "tiled_attention: window must be >= 0, got ", o.window());
  TORCH_CHECK(o.softcap() >= 0.0, "tiled_attention: softcap must be >= 0, got ", o.softcap());
  TORCH_CHECK(o.dropout() >= 0.0 && o.dropout() < 1.0, "tiled_attention: dropout must be in [0, 1), got ", o.dropout());
  Problem p;
  p.batch = q.size(0);
  p.heads = q.size(1);
  p.kv_heads = k.size(1);
  p.group = p.heads / p.kv_heads;
  p.queries = q.size(2);
  p.keys = k.size(2);
  p.head_dim = q.size(3);
  p.scale = static_cast<float>(o.scale() > 0 ? o.scale() : 1.0 / std::sqrt(static_cast<double>(p.head_dim)));
  p.softcap = static_cast<float>(o.softcap());
  p.causal = o.causal();
  p.window = o.window();
  p.query_start = o.query_start();
  p.key_start = o.key_start();
  p.dropout = static_cast<float>(o.dropout());
  TORCH_CHECK(o.dropout() == 0.0 || o.dropout_seed().has_value(), "tiled_attention: dropout needs a seed");
  p.seed = static_cast<uint64_t>(o.dropout_seed().value_or(0));
  p.dropout_queries = o.dropout_queries() > 0 ? o.dropout_queries() : p.query_start + p.queries;
  p.dropout_keys = o.dropout_keys() > 0 ? o.dropout_keys() : p.key_start + p.keys;
  TORCH_CHECK(p.query_start >= 0 && p.key_start >= 0 && p.dropout_queries >= p.query_start + p.queries &&
                  p.dropout_keys >= p.key_start + p.keys,
              "tiled_attention: the dropout mask's ", p.dropout_queries, " x ", p.dropout_keys,
              " positions must hold queries ", p.query_start, "..", p.query_start + p.queries, " and keys ",
              p.key_start, "..", p.key_start + p.keys);
  if (o.key_padding_mask().defined()) {
    const auto& m = o.key_padding_mask();
    TORCH_CHECK(m.dim() == 2 && m.size(0) == p.batch && m.size(1) == p.keys, "tiled_attention: key padding mask must be (",
                p.batch, ", ", p.keys, "), got ", m.sizes());
    p.padding = (m.scalar_type() == torch::kBool ? m : m.ne(0)).to(torch::kCPU).contiguous();
  }
  const int64_t span = p.queries + p.keys - 1;  // key - query from key_start - last query upwards
  const int64_t first = p.key_start - (p.query_start + p.queries - 1);
  switch (o.position_bias()) {
    case TiledPositionBias::kNone:
      break;
    case TiledPositionBias::kAlibi: {
      const auto& slopes = o.alibi_slopes();
      TORCH_CHECK(slopes.defined() && slopes.dim() == 1 && slopes.size(0) == p.heads,
                  "tiled_attention: ALiBi needs (", p.heads, ") slopes, got ",
                  slopes.defined() ? slopes.sizes() : torch::IntArrayRef{});
      if (span <= 0) break;
      // AlibiBias's own arithmetic: float32 distances, -slope * |query - key|.
      auto distance = torch::arange(first, first + span, torch::kFloat).abs();
      p.position = (-slopes.detach().to(torch::kCPU, torch::kFloat).view({-1, 1}) * distance.view({1, -1})).contiguous();
      break;
    }
    case TiledPositionBias::kRelative: {
      const auto& table = o.relative_table();
      TORCH_CHECK(table.defined() && table.dim() == 2 && table.size(1) == p.heads,
                  "tiled_attention: the relative bias table must be (num_buckets, ", p.heads, "), got ",
                  table.defined() ? table.sizes() : torch::IntArrayRef{});
      if (span <= 0) break;
      auto relative = torch::arange(first, first + span, torch::kLong);
      p.buckets = relative_position_bucket(relative, o.relative_bidirectional(), table.size(0),
                                           o.relative_max_distance());
      p.position = table.detach().to(torch::kCPU, torch::kFloat).index_select(0, p.buckets).t().contiguous();
      break;
    }
  }
  return p;
}

// The tiles are read as row views with any row stride (a (B, T, H, D) projection transposed to
// (B, H, T, D) is used in place); only the head dimension must be contiguous.
torch::Tensor unit_inner_stride(const torch::Tensor& t) { return t.stride(-1) == 1 ? t : t.contiguous(); }

// A contiguous (rows, cols) float32 view at the start of a flat buffer.
torch::Tensor tile(const torch::Tensor& buffer, int64_t rows, int64_t cols) {
  return buffer.narrow(0, 0, rows * cols).view({rows, cols});
}

// Rows [start, start + n) of one head (T, D) as float32: the head's own rows when it is float32,
// else a float32 copy in `buffer`.
torch::Tensor float_rows(const torch::Tensor& head, int64_t start, int64_t n, const torch::Tensor& buffer) {
  auto rows = head.narrow(0, start, n);
  if (rows.scalar_type() == torch::kFloat) return rows;
  auto t = tile(buffer, n, head.size(1));
  t.copy_(rows);
  return t;
}

// Sets the entries of one row of a tile (query i, keys j0 .. j0 + n) that the masks hide to `value`.
void fill_masked(const Problem& p, float* row, int64_t i, int64_t j0, int64_t n, const bool* padding_b, float value) {
  const int64_t lo = std::clamp<int64_t>(p.key_lo(i) - j0, 0, n);
  const int64_t hi = std::clamp<int64_t>(p.key_hi(i) - j0, 0, n);
  std::fill(row, row + lo, value);
  std::fill(row + std::max(lo, hi), row + n, value);
  if (padding_b != nullptr) {
    for (int64_t c = 0; c < n; ++c) {
      if (!padding_b[j0 + c]) row[c] = value;
    }
  }
}

// Soft-capping, where asked, of a tile of products q.k: cap * tanh(scale q.k / cap), scaled here
// (bias_and_mask_row scales the uncapped ones in its own pass). The backward keeps the tanh in
// `tanh_of` for the cap's derivative, 1 - tanh^2.
void cap_tile(const Problem& p, torch::Tensor& scores, torch::Tensor* tanh_of = nullptr) {
  if (p.softcap == 0) return;
  scores.mul_(p.scale / p.softcap).tanh_();
  if (tanh_of != nullptr) tanh_of->copy_(scores);
  scores.mul_(p.softcap);
}

// One row of a score tile (query i, keys j0 .. j0 + n): scaled (unless cap_tile did), the position
// term added, the keys the masks hide set to -inf. The forward and the backward both call it, so
// the recomputed probabilities are the forward's.
void bias_and_mask_row(const Problem& p, float* row, int64_t i, int64_t j0, int64_t n, const float* position_h,
                       const bool* padding_b) {
  const float scale = p.softcap > 0 ? 1.0f : p.scale;
  if (position_h != nullptr) {
    const float* term = position_h + (j0 - i + p.queries - 1);
    for (int64_t c = 0; c < n; ++c) row[c] = row[c] * scale + term[c];
  } else if (scale != 1.0f) {
    for (int64_t c = 0; c < n; ++c) row[c] *= scale;
  }
  fill_masked(p, row, i, j0, n, padding_b, -kInf);
}

// Shifted scores are clamped at -87 before the exponential (exp(-87) is still a normal float) and
// the masked ones zeroed after: -inf and underflowing inputs send MKL's vectorised exp down a
// slow path that took a fifth of the kernel's time. A weight below e^-87 of the row's largest
// changes no float32 sum.
constexpr float kLowestExponent = -87.0f;

void shift_row(float* row, int64_t n, float shift) {
  for (int64_t c = 0; c < n; ++c) row[c] = std::max(row[c] - shift, kLowestExponent);
}

// exp of a (rows, n) tile of shifted scores, masked entries 0.
void exp_tile(const Problem& p, torch::Tensor& tile_scores, int64_t i0, int64_t j0, const bool* padding_b) {
  tile_scores.exp_();  // LibTorch's vectorised exp
  const int64_t rows = tile_scores.size(0), n = tile_scores.size(1);
  float* data = tile_scores.data_ptr<float>();
  for (int64_t r = 0; r < rows; ++r) fill_masked(p, data + r * n, i0 + r, j0, n, padding_b, 0.0f);
}

// Query block order within a head: 0, last, 1, last - 1, ... With causal masks the cost of a
// block grows with its index, and parallel_for hands each thread a contiguous range of tasks,
// so interleaving cheap and dear blocks keeps the threads' shares even when B * H is small.
int64_t zigzag(int64_t position, int64_t count) {
  return position % 2 == 0 ? position / 2 : count - 1 - position / 2;
}

// Dropout's uniform draw for weight (b, h, i, j): SplitMix64's finaliser (Steele et al., 2014)
// of the seed plus the weight's index times the golden-ratio increment, top 24 bits as [0, 1).
// Counter-based, so any tile draws its own weights in any order on any thread.
float dropout_uniform(uint64_t seed, uint64_t index) {
  uint64_t z = seed + (index + 1) * 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  z ^= z >> 31;
  return static_cast<float>(z >> 40) * (1.0f / 16777216.0f);
}

// Multiplies row c of a tile by its dropout factor: 0, or 1 / (1 - p) where kept. The weight of
// query i and key j0 + c is drawn at its absolute positions in the mask's index space.
void drop_row(const Problem& p, float* row, int64_t b, int64_t h, int64_t i, int64_t j0, int64_t n) {
  const float keep_scale = 1.0f / (1.0f - p.dropout);
  const uint64_t base = ((static_cast<uint64_t>(b) * p.heads + h) * p.dropout_queries + p.query_start + i) *
                            p.dropout_keys + p.key_start + j0;
  for (int64_t c = 0; c < n; ++c) row[c] *= dropout_uniform(p.seed, base + c) >= p.dropout ? keep_scale : 0.0f;
}

}  // namespace

torch::Tensor tiled_dropout_keep_mask(int64_t seed, double dropout, int64_t batch, int64_t heads, int64_t queries,
                                      int64_t keys) {
  auto keep = torch::empty({batch, heads, queries, keys}, torch::kBool);
  bool* data = keep.data_ptr<bool>();
  const auto p = static_cast<float>(dropout);
  for (int64_t index = 0; index < keep.numel(); ++index) {
    data[index] = dropout_uniform(static_cast<uint64_t>(seed), static_cast<uint64_t>(index)) >= p;
  }
  return keep;
}

TiledAttentionResult tiled_attention_forward(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                             const TiledAttentionOptions& options) {
  torch::NoGradGuard no_grad;
  const Problem p = make_problem(q, k, v, options);
  const auto qc = unit_inner_stride(q), kc = unit_inner_stride(k), vc = unit_inner_stride(v);
  auto out = torch::empty({p.batch, p.heads, p.queries, p.head_dim}, q.options());  // every row written below
  auto lse = torch::full({p.batch, p.heads, p.queries}, -kInf, q.options().dtype(torch::kFloat));
  if (p.queries == 0 || p.keys == 0) return {out.zero_(), lse};

  const int64_t q_blocks = (p.queries + kTiledQueryBlock - 1) / kTiledQueryBlock;
  const int64_t d = p.head_dim;
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat);
  float* lse_data = lse.data_ptr<float>();
  const bool* padding = p.padding.defined() ? p.padding.data_ptr<bool>() : nullptr;
  const float* position = p.position.defined() ? p.position.data_ptr<float>() : nullptr;
  const int64_t span = p.queries + p.keys - 1;

  parallel_for(0, p.batch * p.heads * q_blocks, 1, [&](int64_t begin, int64_t end) {
    const auto q_buffer = torch::empty({kTiledQueryBlock * d}, f32);
    const auto k_buffer = torch::empty({kTiledKeyBlock * d}, f32);
    const auto v_buffer = torch::empty({kTiledKeyBlock * d}, f32);
    const auto s_buffer = torch::empty({kTiledQueryBlock * kTiledKeyBlock}, f32);
    const auto o_buffer = torch::empty({kTiledQueryBlock * d}, f32);
    std::vector<float> row_max(kTiledQueryBlock), row_sum(kTiledQueryBlock), rescale(kTiledQueryBlock);
    for (int64_t task = begin; task < end; ++task) {
      const int64_t bh = task / q_blocks, b = bh / p.heads, h = bh % p.heads, hk = h / p.group;
      const int64_t i0 = zigzag(task % q_blocks, q_blocks) * kTiledQueryBlock;
      const int64_t nq = std::min(kTiledQueryBlock, p.queries - i0);
      const auto qt = float_rows(qc[b][h], i0, nq, q_buffer);  // (nq, D)
      const auto kh = kc[b][hk], vh = vc[b][hk];                // (Tk, D), shared by the group
      const float* position_h = position != nullptr ? position + h * span : nullptr;
      const bool* padding_b = padding != nullptr ? padding + b * p.keys : nullptr;
      auto o = tile(o_buffer, nq, d);  // unnormalised output, float32
      o.zero_();
      float* od = o.data_ptr<float>();
      std::fill(row_max.begin(), row_max.end(), -kInf);
      std::fill(row_sum.begin(), row_sum.end(), 0.0f);

      const int64_t j_end = p.key_hi(i0 + nq - 1);
      for (int64_t j0 = p.key_lo(i0); j0 < j_end; j0 += kTiledKeyBlock) {
        const int64_t nk = std::min(kTiledKeyBlock, j_end - j0);
        const auto kt = float_rows(kh, j0, nk, k_buffer), vt = float_rows(vh, j0, nk, v_buffer);
        auto s = tile(s_buffer, nq, nk);
        at::mm_out(s, qt, kt.t());  // (nq, nk)
        cap_tile(p, s);
        float* sd = s.data_ptr<float>();
        for (int64_t r = 0; r < nq; ++r) {
          float* row = sd + r * nk;
          bias_and_mask_row(p, row, i0 + r, j0, nk, position_h, padding_b);
          const float new_max = std::max(row_max[r], *std::max_element(row, row + nk));
          // A row with no visible key so far keeps -inf scores: subtract 0, not -inf (NaN).
          const float shift = new_max == -kInf ? 0.0f : new_max;
          rescale[r] = std::exp(row_max[r] - shift);
          shift_row(row, nk, shift);
          row_max[r] = new_max;
        }
        exp_tile(p, s, i0, j0, padding_b);
        for (int64_t r = 0; r < nq; ++r) {
          const float* row = sd + r * nk;
          float sum = 0;
          for (int64_t c = 0; c < nk; ++c) sum += row[c];
          row_sum[r] = row_sum[r] * rescale[r] + sum;
          for (int64_t c = 0; c < d; ++c) od[r * d + c] *= rescale[r];
          // The normaliser sums the weights before dropout; the output takes the dropped ones.
          if (p.dropout > 0) drop_row(p, sd + r * nk, b, h, i0 + r, j0, nk);
        }
        o.addmm_(s, vt);  // o += p v
      }
      float* lse_h = lse_data + bh * p.queries + i0;
      for (int64_t r = 0; r < nq; ++r) {
        // No visible key at all: output 0 and lse -inf (the log of an empty sum).
        const float inverse = row_sum[r] > 0 ? 1.0f / row_sum[r] : 0.0f;
        for (int64_t c = 0; c < d; ++c) od[r * d + c] *= inverse;
        lse_h[r] = row_sum[r] > 0 ? row_max[r] + std::log(row_sum[r]) : -kInf;
      }
      out[b][h].narrow(0, i0, nq).copy_(o);
    }
  });
  return {out, lse};
}

namespace {

// What one (batch, head) task of the backward reads and writes: the head's rows, the rows of its
// gradients (its own: no races), and its float32 scratch tiles.
struct BackwardHead {
  int64_t b = 0, h = 0;
  torch::Tensor qh, doh, dqh;      // (Tq, D)
  const float* delta = nullptr;    // FlashAttention-2's D_i = rowsum(dO * O), the softmax's correction (Tq)
  const float* lse = nullptr;      // the forward's (Tq)
  const float* position = nullptr;  // the head's bias by key - query, or null
  double* d_position = nullptr;     // its gradient, or null
  const bool* padding = nullptr;    // the batch row's key padding, or null
  torch::Tensor q_buffer, do_buffer, p_buffer, ds_buffer, dp_buffer;
  torch::Tensor tanh_buffer;  // soft-capping: each score's tanh
};

// The tile of queries [i0, i0 + nq) and keys [j0, j0 + nk) (kt, vt as float32): P recomputed
// from the saved lse, then dV, dS, dQ and dK (dkt, dvt: the key block's rows of dK and dV).
void backward_tile(const Problem& p, BackwardHead& head, int64_t i0, int64_t nq, int64_t j0, int64_t nk,
                   const torch::Tensor& kt, const torch::Tensor& vt, torch::Tensor& dkt, torch::Tensor& dvt) {
  const auto qt = float_rows(head.qh, i0, nq, head.q_buffer), dot = float_rows(head.doh, i0, nq, head.do_buffer);
  auto pt = tile(head.p_buffer, nq, nk);
  at::mm_out(pt, qt, kt.t());
  auto tanh_of = p.softcap > 0 ? tile(head.tanh_buffer, nq, nk) : torch::Tensor();
  cap_tile(p, pt, p.softcap > 0 ? &tanh_of : nullptr);
  float* pd = pt.data_ptr<float>();
  for (int64_t r = 0; r < nq; ++r) {
    float* row = pd + r * nk;
    bias_and_mask_row(p, row, i0 + r, j0, nk, head.position, head.padding);
    // A row with no visible key has lse -inf: every entry is masked, zeroed below.
    shift_row(row, nk, head.lse[i0 + r] == -kInf ? 0.0f : head.lse[i0 + r]);
  }
  exp_tile(p, pt, i0, j0, head.padding);  // the forward's probabilities P
  auto ds = tile(head.ds_buffer, nq, nk);
  at::mm_out(ds, dot, vt.t());  // dP = dO V^T, of the dropped weights
  float* dsd = ds.data_ptr<float>();
  if (p.dropout > 0) {
    // With Z the dropout factors: dV += (P Z)^T dO and dP = (dO V^T) Z. P is kept as it is for
    // dS, which needs the weights before dropout.
    auto dropped = tile(head.dp_buffer, nq, nk);
    dropped.copy_(pt);
    for (int64_t r = 0; r < nq; ++r) {
      drop_row(p, dropped.data_ptr<float>() + r * nk, head.b, head.h, i0 + r, j0, nk);
      drop_row(p, dsd + r * nk, head.b, head.h, i0 + r, j0, nk);
    }
    dvt.addmm_(dropped.t(), dot);
  } else {
    dvt.addmm_(pt.t(), dot);  // dV += P^T dO
  }
  for (int64_t r = 0; r < nq; ++r) {
    const float delta_i = head.delta[i0 + r];
    float* ds_row = dsd + r * nk;
    const float* p_row = pd + r * nk;
    for (int64_t c = 0; c < nk; ++c) ds_row[c] = p_row[c] * (ds_row[c] - delta_i);  // dS = P (dP - D_i)
    if (head.d_position != nullptr) {
      // The bias enters unscaled, so its gradient is dS, summed by key - query here and by
      // bucket in the caller.
      double* slot = head.d_position + (j0 - (i0 + r) + p.queries - 1);
      for (int64_t c = 0; c < nk; ++c) slot[c] += ds_row[c];
    }
    if (p.softcap > 0) {
      // Through the cap to the scaled product: d cap tanh(x / cap) / dx = 1 - tanh^2.
      const float* t_row = tanh_of.data_ptr<float>() + r * nk;
      for (int64_t c = 0; c < nk; ++c) ds_row[c] *= 1.0f - t_row[c] * t_row[c];
    }
  }
  head.dqh.narrow(0, i0, nq).addmm_(ds, kt, 1.0, p.scale);  // dQ += scale dS K
  dkt.addmm_(ds.t(), qt, 1.0, p.scale);                     // dK += scale dS^T Q
}

}  // namespace

TiledAttentionGradients tiled_attention_backward(const torch::Tensor& d_out, const torch::Tensor& q,
                                                 const torch::Tensor& k, const torch::Tensor& v,
                                                 const torch::Tensor& out, const torch::Tensor& lse,
                                                 const TiledAttentionOptions& options) {
  torch::NoGradGuard no_grad;
  const Problem p = make_problem(q, k, v, options);
  TORCH_CHECK(d_out.sizes() == q.sizes() && out.sizes() == q.sizes(), "tiled_attention_backward: d_out ",
              d_out.sizes(), " and out ", out.sizes(), " must have q's shape ", q.sizes());
  TORCH_CHECK(lse.dim() == 3 && lse.size(0) == p.batch && lse.size(1) == p.heads && lse.size(2) == p.queries &&
                  lse.scalar_type() == torch::kFloat,
              "tiled_attention_backward: lse must be float32 (", p.batch, ", ", p.heads, ", ", p.queries, "), got ",
              lse.scalar_type(), " ", lse.sizes());
  const auto qc = unit_inner_stride(q), kc = unit_inner_stride(k), vc = unit_inner_stride(v);
  const auto doc = unit_inner_stride(d_out.to(q.scalar_type()));
  const auto lse_c = lse.contiguous();
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat);
  const int64_t d = p.head_dim;
  const int64_t span = p.queries + p.keys - 1;
  const bool relative = options.position_bias() == TiledPositionBias::kRelative;
  // Float32 sums; dk and dv per query head, each (b, h) task owning its rows (no races), then
  // summed over each group below.
  auto dq = torch::zeros({p.batch, p.heads, p.queries, d}, f32);
  auto dk = torch::zeros({p.batch, p.heads, p.keys, d}, f32);
  auto dv = torch::zeros({p.batch, p.heads, p.keys, d}, f32);
  auto d_position = relative && span > 0 ? torch::zeros({p.batch, p.heads, span}, torch::kDouble) : torch::Tensor();
  const float* lse_data = lse_c.data_ptr<float>();
  const bool* padding = p.padding.defined() ? p.padding.data_ptr<bool>() : nullptr;
  const float* position = p.position.defined() ? p.position.data_ptr<float>() : nullptr;
  double* d_position_data = d_position.defined() ? d_position.data_ptr<double>() : nullptr;

  if (p.queries > 0 && p.keys > 0) {
    parallel_for(0, p.batch * p.heads, 1, [&](int64_t begin, int64_t end) {
      BackwardHead head;
      const auto block = [&](int64_t rows) { return torch::empty({rows * d}, f32); };
      head.q_buffer = block(kTiledQueryBlock), head.do_buffer = block(kTiledQueryBlock);
      const auto k_buffer = block(kTiledKeyBlock), v_buffer = block(kTiledKeyBlock);
      head.p_buffer = torch::empty({kTiledQueryBlock * kTiledKeyBlock}, f32);
      head.ds_buffer = torch::empty({kTiledQueryBlock * kTiledKeyBlock}, f32);
      if (p.dropout > 0) head.dp_buffer = torch::empty({kTiledQueryBlock * kTiledKeyBlock}, f32);
      if (p.softcap > 0) head.tanh_buffer = torch::empty({kTiledQueryBlock * kTiledKeyBlock}, f32);
      for (int64_t bh = begin; bh < end; ++bh) {
        const int64_t b = bh / p.heads, h = bh % p.heads, hk = h / p.group;
        head.b = b, head.h = h;
        head.qh = qc[b][h], head.doh = doc[b][h], head.dqh = dq[b][h];
        const auto kh = kc[b][hk], vh = vc[b][hk], dkh = dk[b][h], dvh = dv[b][h];
        const auto delta = (head.doh.to(torch::kFloat) * out[b][h].to(torch::kFloat)).sum(-1).contiguous();  // (Tq)
        head.delta = delta.data_ptr<float>();
        head.lse = lse_data + bh * p.queries;
        head.position = position != nullptr ? position + h * span : nullptr;
        head.d_position = d_position_data != nullptr ? d_position_data + bh * span : nullptr;
        head.padding = padding != nullptr ? padding + b * p.keys : nullptr;

        const int64_t j_end = p.key_hi(p.queries - 1);
        for (int64_t j0 = p.key_lo(0); j0 < j_end; j0 += kTiledKeyBlock) {
          const int64_t nk = std::min(kTiledKeyBlock, j_end - j0);
          const int64_t i_begin = p.query_lo(j0), i_end = p.query_hi(j0 + nk - 1);
          if (i_begin >= i_end) continue;
          const auto kt = float_rows(kh, j0, nk, k_buffer), vt = float_rows(vh, j0, nk, v_buffer);
          auto dkt = dkh.narrow(0, j0, nk), dvt = dvh.narrow(0, j0, nk);
          for (int64_t i0 = i_begin; i0 < i_end; i0 += kTiledQueryBlock) {
            backward_tile(p, head, i0, std::min(kTiledQueryBlock, i_end - i0), j0, nk, kt, vt, dkt, dvt);
          }
        }
      }
    });
  }

  TiledAttentionGradients grads;
  const auto dtype = q.scalar_type();
  grads.dq = dq.to(dtype);
  auto sum_group = [&](const torch::Tensor& per_query_head) {
    if (p.group == 1) return per_query_head.to(dtype);
    return per_query_head.view({p.batch, p.kv_heads, p.group, p.keys, d}).sum(2).to(dtype);
  };
  grads.dk = sum_group(dk);
  grads.dv = sum_group(dv);
  if (relative) {
    const auto& table = options.relative_table();
    auto d_table = torch::zeros({table.size(0), p.heads}, f32);
    if (d_position.defined()) {
      d_table.index_add_(0, p.buckets, d_position.sum(0).to(torch::kFloat).t());  // scatter-add by bucket
    }
    grads.relative_table = d_table.to(table.scalar_type());
  }
  return grads;
}

namespace {

class TiledAttentionFunction : public torch::autograd::Function<TiledAttentionFunction> {
 public:
  // `table` is options.relative_table() passed apart so that autograd sees it (an empty
  // placeholder unless kRelative: autograd's bookkeeping needs a defined tensor).
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& q,
                               const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& table,
                               const TiledAttentionOptions& options) {
    auto result = tiled_attention_forward(q, k, v, options);
    ctx->save_for_backward({q, k, v, table, result.out, result.lse});
    auto& saved = ctx->saved_data;
    saved["scale"] = options.scale();
    saved["softcap"] = options.softcap();
    saved["causal"] = options.causal();
    saved["window"] = options.window();
    saved["query_start"] = options.query_start();
    saved["key_start"] = options.key_start();
    saved["key_padding_mask"] = options.key_padding_mask();
    saved["position_bias"] = static_cast<int64_t>(options.position_bias());
    saved["alibi_slopes"] = options.alibi_slopes();
    saved["relative_bidirectional"] = options.relative_bidirectional();
    saved["relative_max_distance"] = options.relative_max_distance();
    saved["dropout"] = options.dropout();
    saved["dropout_seed"] = options.dropout_seed().value_or(0);
    saved["dropout_queries"] = options.dropout_queries();
    saved["dropout_keys"] = options.dropout_keys();
    ctx->mark_non_differentiable({result.lse});
    return result.out;
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grad_outputs) {
    const auto saved_tensors = ctx->get_saved_variables();
    const auto& q = saved_tensors[0];
    const auto& k = saved_tensors[1];
    const auto& v = saved_tensors[2];
    const auto& table = saved_tensors[3];
    const auto& saved = ctx->saved_data;
    auto options = TiledAttentionOptions()
                       .scale(saved.at("scale").toDouble())
                       .softcap(saved.at("softcap").toDouble())
                       .causal(saved.at("causal").toBool())
                       .window(saved.at("window").toInt())
                       .query_start(saved.at("query_start").toInt())
                       .key_start(saved.at("key_start").toInt())
                       .key_padding_mask(saved.at("key_padding_mask").toTensor())
                       .position_bias(static_cast<TiledPositionBias>(saved.at("position_bias").toInt()))
                       .alibi_slopes(saved.at("alibi_slopes").toTensor())
                       .relative_table(table)
                       .relative_bidirectional(saved.at("relative_bidirectional").toBool())
                       .relative_max_distance(saved.at("relative_max_distance").toInt())
                       .dropout(saved.at("dropout").toDouble())
                       .dropout_seed(saved.at("dropout_seed").toInt())
                       .dropout_queries(saved.at("dropout_queries").toInt())
                       .dropout_keys(saved.at("dropout_keys").toInt());
    auto d_out = grad_outputs[0].defined() ? grad_outputs[0] : torch::zeros_like(saved_tensors[4]);
    auto g = tiled_attention_backward(d_out, q, k, v, saved_tensors[4], saved_tensors[5], options);
    return {g.dq, g.dk, g.dv, g.relative_table, torch::Tensor()};
  }
};

}  // namespace

int64_t draw_dropout_seed() {
  auto generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  return static_cast<int64_t>(at::check_generator<at::CPUGeneratorImpl>(generator)->random64() >> 1);
}

torch::Tensor differentiated_table(const TiledAttentionOptions& options) {
  switch (options.position_bias()) {
    case TiledPositionBias::kNone:
    case TiledPositionBias::kAlibi:
      return torch::empty({0});
    case TiledPositionBias::kRelative:
      return options.relative_table();
  }
  return torch::empty({0});
}

torch::Tensor tiled_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                              const TiledAttentionOptions& options) {
  const auto table = differentiated_table(options);
  if (options.dropout() == 0.0 || options.dropout_seed()) return TiledAttentionFunction::apply(q, k, v, table, options);
  // One draw per call from the generator torch::manual_seed sets and checkpoints save.
  return TiledAttentionFunction::apply(q, k, v, table, TiledAttentionOptions(options).dropout_seed(draw_dropout_seed()));
}

}  // namespace zoo
