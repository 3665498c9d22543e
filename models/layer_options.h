#pragma once
// The layer options a model config implies: one function per kind of layer, so each rule
// derived from the config (norm kind, eps and bias; attention shape and masks; positions) is
// written once and every model family builds its layers through it.

#include <cstdint>

#include "layers/block.h"
#include "layers/masks.h"
#include "layers/norm.h"
#include "layers/position_encoding.h"
#include "models/config.h"

namespace zoo {

// The options of block `layer` of a stack: causal (decoder) or not, with cross-attention or not.
TransformerBlockOptions block_options(const ModelConfig& config, bool causal, bool cross_attention,
                                      int64_t layer);

// The options of every norm of a model (blocks, final norms, embedding norm, heads).
NormOptions norm_options(const ModelConfig& config);

// What the attention bias of a stack's forward starts from: causal or not, the sliding window
// of causal stacks, and whether the fused kernel may apply a plain causal mask itself (not with
// grouped queries, which the kernel's mask would misalign). The caller adds the lengths, the
// padding mask and the position terms, then builds the bias once for all the stack's layers.
AttentionBiasInputs attention_bias_inputs(const ModelConfig& config, bool causal);

// The options of a stack's position encoding; relative buckets look both ways in encoders.
PositionEncodingOptions position_options(const ModelConfig& config, bool bidirectional);

}  // namespace zoo
