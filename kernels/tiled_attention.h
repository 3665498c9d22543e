#pragma once
// Exact attention computed tile by tile on the CPU (FlashAttention, Dao et al. 2022; its
// backward as in FlashAttention-2, Dao 2023): softmax(softcap(q k^T * scale) + bias) v with an online
// softmax, keeping only the per-row log-sum-exp besides the output, so that no (Tq, Tk) tensor
// exists in the forward or the backward. The bias terms (causal and sliding-window masks, key
// padding, ALiBi, T5's relative position bias) are made inside each tile from their parameters,
// and tiles the masks leave empty are never visited: a window w costs O(T * w).
//
// The plain reference is the explicit math path (kernels/masks.h, layers/position_bias.h,
// softmax in float32, two matmuls); tests/kernels/tiled_attention_test.cpp compares the two.
// Attention dropout is drawn inside each tile from a counter-based hash of (seed, batch, head,
// query, key), so the backward redraws the forward's mask without storing it, and one seed
// (taken from LibTorch's CPU generator, whose state checkpoints and recomputation restore)
// fixes every mask; tiled_dropout_keep_mask is that mask as a tensor, for the reference. Weights
// are indexed by their absolute positions, so a block of a longer sequence (ring attention's)
// draws what one call over the whole sequence draws for it.

#include <cstdint>
#include <optional>

#include <torch/arg.h>
#include <torch/types.h>

namespace zoo {

// Tile sizes. A 64 x 128 float32 score tile is 32 KiB: with the query block (64 x D), the key
// and value tiles (128 x D) and the output accumulator it stays in a core's L2 for D <= 128,
// 128 keys amortise the per-tile cost (two matmul calls, the row bookkeeping) over 2 * 64 * 128 *
// D multiply-adds, and 64 queries keep B * H * Tq / 64 tasks for the threads and a fine grain
// for skipping tiles above the causal diagonal or outside a window.
constexpr int64_t kTiledQueryBlock = 64;
constexpr int64_t kTiledKeyBlock = 128;

// The position term added to the scaled scores, both functions of (key - query) only.
enum class TiledPositionBias {
  kNone,
  kAlibi,     // -slope_h * |query - key| (layers/position_bias.h's AlibiBias, encoders included)
  kRelative,  // T5: table[bucket(key - query), h] (kernels/masks.h's relative_position_bucket)
};

struct TiledAttentionOptions {
  // 0 means 1 / sqrt(D).
  TORCH_ARG(double, scale) = 0.0;
  // cap * tanh(scale q.k / cap) in place of the scaled score, before the position term and the masks
  // (Gemma 2's soft-capping); 0 = none.
  TORCH_ARG(double, softcap) = 0.0;
  // key <= query, at absolute positions: queries at query_start.., keys at key_start.. (a
  // decoder reading a cache has query_start = cached length, key_start = 0, or more once a
  // sliding-window cache has dropped its first keys).
  TORCH_ARG(bool, causal) = false;
  // With causal: also key > query - window (Mistral's sliding window); without: |key - query| <
  // window (ModernBERT's local layers, kernels/masks.h's band_mask); 0 = unbounded.
  TORCH_ARG(int64_t, window) = 0;
  TORCH_ARG(int64_t, query_start) = 0;
  TORCH_ARG(int64_t, key_start) = 0;
  // (B, Tk), true (non-zero) at real tokens, as kernels/masks.h; undefined = no padding.
  TORCH_ARG(torch::Tensor, key_padding_mask);
  TORCH_ARG(TiledPositionBias, position_bias) = TiledPositionBias::kNone;
  // kAlibi: (H) slopes, not differentiated.
  TORCH_ARG(torch::Tensor, alibi_slopes);
  // kRelative: the (num_buckets, H) table, differentiated by tiled_attention, and its bucketing.
  TORCH_ARG(torch::Tensor, relative_table);
  TORCH_ARG(bool, relative_bidirectional) = true;
  TORCH_ARG(int64_t, relative_max_distance) = 128;
  // The probability of zeroing a weight (kept ones are scaled by 1 / (1 - p)), and the seed of
  // its mask; unset, tiled_attention draws one from LibTorch's default CPU generator.
  TORCH_ARG(double, dropout) = 0.0;
  TORCH_ARG(std::optional<int64_t>, dropout_seed);
  // The index space of the dropout mask, (B, H, dropout_queries, dropout_keys): weight (query i,
  // key j) of this call is (query_start + i, key_start + j) there. 0: query_start + Tq and
  // key_start + Tk, the call's own; ring attention gives every block the whole sequence's.
  TORCH_ARG(int64_t, dropout_queries) = 0;
  TORCH_ARG(int64_t, dropout_keys) = 0;
};

struct TiledAttentionResult {
  torch::Tensor out;  // (B, H, Tq, D), the dtype of q
  torch::Tensor lse;  // (B, H, Tq) float32 log-sum-exp of each row; -inf where every key is masked
};

struct TiledAttentionGradients {
  torch::Tensor dq;              // (B, H, Tq, D)
  torch::Tensor dk;              // (B, Hkv, Tk, D), summed over the query heads of each group
  torch::Tensor dv;              // (B, Hkv, Tk, D)
  torch::Tensor relative_table;  // (num_buckets, H) for kRelative, else undefined
};

// q: (B, H, Tq, D); k, v: (B, Hkv, Tk, D) with H a multiple of Hkv (query head h reads key head
// h / (H / Hkv), without copies). float32, or bfloat16 with float32 accumulation. A row whose
// keys are all masked gives 0 (and gradients 0), not NaN.
TiledAttentionResult tiled_attention_forward(const torch::Tensor& q, const torch::Tensor& k,
                                             const torch::Tensor& v, const TiledAttentionOptions& options);

// The gradients given d_out (B, H, Tq, D) and the forward's out and lse; each tile's
// probabilities are recomputed from lse. Parallel over (batch, query head), each task owning its
// rows of float32 dq and of per-query-head dk, dv (summed over each group at the end: no locks),
// so grouped or bf16 inputs cost 2 * B * H * Tk * D floats more; T5 adds B * H * (Tq + Tk - 1)
// doubles, the table's gradient by key - query before the scatter by bucket.
TiledAttentionGradients tiled_attention_backward(const torch::Tensor& d_out, const torch::Tensor& q,
                                                 const torch::Tensor& k, const torch::Tensor& v,
                                                 const torch::Tensor& out, const torch::Tensor& lse,
                                                 const TiledAttentionOptions& options);

// The dropout mask of `seed` as a (B, H, Tq, Tk) bool tensor, true where a weight is kept: the
// kernel draws the same values tile by tile. For tests, and for the math path they compare with.
torch::Tensor tiled_dropout_keep_mask(int64_t seed, double dropout, int64_t batch, int64_t heads, int64_t queries,
                                      int64_t keys);

// One dropout seed from LibTorch's default CPU generator (which torch::manual_seed sets and
// checkpoints save): what tiled_attention and ring_attention draw per call without one.
int64_t draw_dropout_seed();

// What autograd must see of `options`' position term: T5's table for kRelative, else an empty
// placeholder (its bookkeeping needs a defined tensor).
torch::Tensor differentiated_table(const TiledAttentionOptions& options);

// The forward as an autograd function: loss.backward() reaches q, k, v and, for kRelative,
// options.relative_table. Returns out (B, H, Tq, D).
torch::Tensor tiled_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                              const TiledAttentionOptions& options);

}  // namespace zoo
