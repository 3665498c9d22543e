#pragma once
// Ring attention (Liu, Zaharia and Abbeel, 2023): exact attention over a sequence split across N
// ranks, each holding 1/N of the queries, keys and values, with no rank ever holding the whole
// sequence's keys. The key/value blocks travel around the ring (rank r sends to r + 1 and
// receives from r - 1) while each rank computes its queries against the block it holds, with the
// tiled kernel (kernels/tiled_attention.h), the next block's transfer overlapped with that work.
// The partial outputs are merged by their log-sum-exp in float32. The backward sends the blocks
// around again with their float32 dK/dV accumulators, which arrive back at their owners after
// the N-th pass; dQ stays local.
//
// Encoders (bidirectional, with key padding) and a decoder's cross-attention to an encoder's
// keys (queries and keys from two sequences, each cut over the ring) go round the same way.
//
// Causal work is balanced by the zigzag layout: the sequence is cut into 2N chunks and rank r
// holds chunks r and 2N - 1 - r, so every rank holds one early and one late chunk. Positions are
// global: each (query chunk, key chunk) pair runs the tiled kernel at its chunks' absolute
// starts, so masks, ALiBi and T5's buckets are those of the whole sequence, and attention
// dropout draws each weight at its global positions, as one process over the whole sequence
// draws it with the same seed. Pairs a causal mask (or its window) leaves empty are skipped.
//
// The reference is the single process: tiled or math attention over the whole sequence;
// tests/kernels/ring_attention_test.cpp runs 2 and 4 ranks as threads against it.

#include <cstdint>
#include <functional>
#include <memory>

#include <torch/types.h>

#include "kernels/tiled_attention.h"

namespace zoo {

// Point-to-point transfers around a ring of ranks 0..N-1 (train/context_parallel.h: one over
// c10d; the tests: threads).
class RingExchange {
 public:
  virtual ~RingExchange() = default;
  virtual int64_t ranks() const = 0;  // N
  virtual int64_t rank() const = 0;   // this rank's place in the ring
  // Starts sending `send` to rank + 1 (mod N) and receiving rank - 1's into `receive` (the same
  // shape and dtype, contiguous, written only by this transfer); the returned function waits
  // for both. Transfers on one channel arrive in the order they were started; ring attention
  // keeps its blocks on channel 0 and its gradients on channel 1. Neither tensor may be touched
  // before the wait.
  virtual std::function<void()> pass(const torch::Tensor& send, const torch::Tensor& receive, int64_t channel) = 0;
};

// The zigzag layout of a sequence of `tokens` over `ranks`: 2 * ranks chunks of equal length.
// Rank r holds chunk r then chunk 2 * ranks - 1 - r, in that order, as its local tokens.
struct ZigzagLayout {
  int64_t ranks = 1;
  int64_t chunk = 0;  // tokens per chunk: tokens / (2 * ranks)
  // The layout of `tokens` over `ranks`; tokens must be a positive multiple of 2 * ranks (the
  // error names both).
  static ZigzagLayout of(int64_t tokens, int64_t ranks);
  // The global position of the first token of `rank`'s first (which = 0) or second chunk.
  int64_t chunk_start(int64_t rank, int64_t which) const {
    return (which == 0 ? rank : 2 * ranks - 1 - rank) * chunk;
  }
  int64_t local_tokens() const { return 2 * chunk; }
};

// The global positions of `rank`'s local tokens, (2 * chunk) int64.
torch::Tensor zigzag_positions(const ZigzagLayout& layout, int64_t rank);
// `rank`'s local tokens of `x` along `dim` (x.size(dim) tokens in global order): its two chunks,
// concatenated.
torch::Tensor zigzag_split(const torch::Tensor& x, int64_t dim, const ZigzagLayout& layout, int64_t rank);

struct RingAttentionResult {
  torch::Tensor out;  // (B, H, Tlocal, D), the dtype of q
  torch::Tensor lse;  // (B, H, Tlocal) float32, over the whole sequence's keys
};

// q: (B, H, Tq, D), k, v: (B, Hkv, Tk, D): this rank's local tokens in the zigzag layout (Tq =
// 2 * chunk; Tk = Tq for self-attention, or the local keys of another sequence cut the same way
// for a decoder's cross-attention, which is not causal). `terms` as for tiled_attention (scale,
// causal, window, ALiBi's slopes, T5's table and bucketing, dropout with its seed); their
// query_start, key_start and dropout index space must be 0 (the layout sets them). Key padding
// is the whole key sequence's (B, N * Tk) mask in global order: every rank holds the whole batch,
// and each block takes the columns of its chunks. Every rank of the ring must call with the same
// shapes and terms.
RingAttentionResult ring_attention_forward(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                           const TiledAttentionOptions& terms, RingExchange& ring);

// dq for this rank's queries, dk and dv for this rank's keys and values (summed over every
// rank's queries), and T5's table gradient from this rank's queries (the trainer sums it over
// ranks with the other parameter gradients).
TiledAttentionGradients ring_attention_backward(const torch::Tensor& d_out, const torch::Tensor& q,
                                                const torch::Tensor& k, const torch::Tensor& v,
                                                const torch::Tensor& out, const torch::Tensor& lse,
                                                const TiledAttentionOptions& terms, RingExchange& ring);

// The forward as an autograd function (q, k, v and, for T5, terms.relative_table get gradients).
// Every rank's backward must run too, as its forward did: the gradients travel the ring. With
// dropout and no seed, each rank draws one from LibTorch's generator (draw_dropout_seed), and the
// ranks check around the ring that they drew the same (an error naming both ranks otherwise).
torch::Tensor ring_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                             const TiledAttentionOptions& terms, const std::shared_ptr<RingExchange>& ring);

}  // namespace zoo
