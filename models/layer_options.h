#pragma once
// The layer options a model config implies: one function per kind of layer, so each rule
// derived from the config (norm kind, eps and bias; attention shape and masks; positions) is
// written once and every model family builds its layers through it.

#include <cstdint>

#include "kernels/masks.h"
#include "layers/block.h"
#include "layers/norm.h"
#include "layers/position_encoding.h"
#include "layers/rotary.h"
#include "models/config.h"

namespace zoo {

// The options of block `layer` of a stack: causal (decoder) or not, with cross-attention or not.
TransformerBlockOptions block_options(const ModelConfig& config, bool causal, bool cross_attention,
                                      int64_t layer);

// The options of every norm of a model (blocks, final norms, embedding norm, heads).
// The RoPE of a config's attention (head size, base, layout, scaling): the tables the export stores.
RotaryEmbeddingOptions rotary_options(const ModelConfig& config);
NormOptions norm_options(const ModelConfig& config);

// The attention bias of one stack's forward, built once for all its layers: `queries` new
// tokens after `past` cached ones against `keys` keys from position 0; causal (with the config's
// sliding window) or not; the key padding mask (B, keys) when given; the position terms of
// `positions` when given (none for cross-attention). The fused kernel may apply a plain causal
// mask itself, but not with grouped queries, which its mask would misalign. In `like`'s dtype
// and device.
AttentionBias stack_attention_bias(const ModelConfig& config, bool causal, PositionEncodingImpl* positions,
                                   const torch::Tensor& key_padding_mask, int64_t queries, int64_t past,
                                   int64_t keys, const torch::Tensor& like);

// The options of a stack's position encoding; relative buckets look both ways in encoders.
PositionEncodingOptions position_options(const ModelConfig& config, bool bidirectional);

}  // namespace zoo
