#pragma once
// What a stack hands each of its attention layers, built once per forward: the path every call
// of the stack takes (chosen once, by choose_attention_path, layers/attention_path.h) and what
// that path reads. The math, LibTorch and decoding paths read one additive tensor (the causal
// and sliding-window masks, the key padding mask and the position terms folded together,
// kernels/masks.h); the tiled and ring paths read the terms' parameters (causal, window,
// positions, key padding, ALiBi's slopes, T5's table), from which the kernel makes each tile's
// bias, so no (T, K) tensor exists. Each layer takes the last columns, those of the keys it holds
// (a sliding-window cache may have dropped the first), and sets the scale and start of its keys.

#include <cstdint>
#include <memory>

#include <torch/types.h>

#include "kernels/masks.h"
#include "kernels/ring_attention.h"
#include "kernels/tiled_attention.h"
#include "layers/attention_path.h"

namespace zoo {

class PositionEncodingImpl;

struct AttentionBias {
  AttentionChoice choice;      // the path and why (math unless built)
  torch::Tensor additive;      // math, libtorch, decode: undefined when nothing is added
  bool kernel_causal = false;  // libtorch: the causal mask is left to the kernel (nothing else applies)
  TiledAttentionOptions terms;            // tiled and ring
  std::shared_ptr<RingExchange> ring;     // ring: this rank's zigzag tokens (kernels/ring_attention.h)
  // (B, T) nonzero at the real tokens among this call's queries, or undefined (all real): what
  // recurrent layers (layers/linear_attention.h) read, which take no (T, K) mask.
  torch::Tensor token_mask;
  // (B, T) nonzero at the tokens Longformer's layers attend globally, or undefined (none).
  torch::Tensor global_mask;
};

// The masks and position terms of one stack's forward.
struct AttentionMasks {
  int64_t queries = 0;      // T new tokens, at positions query_start..
  int64_t query_start = 0;  // the tokens before them in the cache
  int64_t keys = 0;         // K keys from position 0: query_start + T for self-attention, S for cross
  bool causal = false;
  int64_t window = 0;              // sliding window (two-sided without causal); 0 = unbounded
  torch::Tensor key_padding_mask;  // (B, >= K) true at real tokens (ring: the whole sequence's)
  PositionEncodingImpl* positions = nullptr;  // ALiBi's or T5's terms: parameters or a tensor
  torch::Tensor position_bias;     // or an additive tensor (..., T, >= K) the caller built
  std::shared_ptr<RingExchange> ring;  // context parallelism
};

// Chooses the path of `call` (whose backend, grouping, dropout and need_weights the caller set)
// with the facts of `masks` and of `like` (the stack's input: device, the dtype its projections
// compute in, autocast's where it is on, and whether autograd records), then builds what the
// path reads, in `like`'s dtype and device. Shapes are checked and named.
AttentionBias build_attention_bias(AttentionCall call, const AttentionMasks& masks, const torch::Tensor& like);

}  // namespace zoo
