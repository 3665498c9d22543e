#pragma once
// The layer options a model config implies: one function per kind of layer, so each rule
// derived from the config (norm kind, eps and bias; attention shape and masks; positions) is
// written once and every model family builds its layers through it.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "layers/attention_bias.h"
#include "layers/attention_path.h"
#include "layers/block.h"
#include "layers/norm.h"
#include "layers/position_encoding.h"
#include "layers/rotary.h"
#include "models/config.h"

namespace zoo {

// The options of block `layer` of a stack: causal (decoder) or not, with cross-attention or not.
TransformerBlockOptions block_options(const ModelConfig& config, bool causal, bool cross_attention,
                                      int64_t layer);

// The linear or gated linear attention of decoder layer `layer`, or none where it is softmax.
std::optional<LinearAttentionOptions> linear_attention_options(const ModelConfig& config, int64_t layer);

// The options of every norm of a model (blocks, final norms, embedding norm, heads).
// The RoPE of a config's attention (head size, base, layout, scaling): the tables the export stores.
RotaryEmbeddingOptions rotary_options(const ModelConfig& config);
NormOptions norm_options(const ModelConfig& config);

// The facts that choose one stack's attention path (layers/attention_path.h): `queries` new
// tokens after `past` cached ones against `keys` keys from position 0; causal (with the
// config's sliding window) or not; with a key padding mask or not; with the config's position
// term or not (cross-attention has none); dropout only in training.
AttentionCall stack_attention_call(const ModelConfig& config, bool causal, bool with_positions, bool key_padding,
                                   int64_t queries, int64_t past, int64_t keys, bool training, bool cpu,
                                   bool float_or_bf16);

// zoo info's lines: for each attention of `config` (a decoder's, an encoder's, cross-attention)
// and each kind of call (a training step of max_length tokens, the same padded, a padded batch
// at inference, a decoding step), the path on the CPU and why the others were refused.
std::string describe_attention_paths(const ModelConfig& config);

// The attention bias of one stack's forward, built once for all its layers
// (build_attention_bias, layers/attention_bias.h): `queries` new tokens after `past` cached ones
// against `keys` keys from position 0, causal (with the config's sliding window) or not, the key
// padding mask (B, keys) when given, the position terms of `positions` when given, dropout only
// in training, in `like`'s dtype and device. With `ring` (context parallelism, which the config
// must allow: context_parallel_refusal, models/config.h), every layer runs ring attention with
// the terms at the global positions of the zigzag layout and the keys' padding of the whole
// sequence in global order.
AttentionBias stack_attention_bias(const ModelConfig& config, bool causal, PositionEncodingImpl* positions,
                                   const torch::Tensor& key_padding_mask, int64_t queries, int64_t past,
                                   int64_t keys, const torch::Tensor& like, bool training,
                                   const std::shared_ptr<RingExchange>& ring = nullptr);

// A self-attention stack's biases: stack_attention_bias's for every layer, and where window_layers
// leaves some layers without the window (Gemma's and ModernBERT's global layers), a second one
// without it for those; of(layer) is the one a layer takes.
struct StackBiases {
  AttentionBias windowed, unbounded;
  bool mixed = false;
  const ModelConfig* config = nullptr;
  const AttentionBias& of(int64_t layer) const { return mixed && !config->window_of(layer) ? unbounded : windowed; }
};
StackBiases stack_attention_biases(const ModelConfig& config, bool causal, PositionEncodingImpl* positions,
                                   const torch::Tensor& key_padding_mask, int64_t queries, int64_t past,
                                   int64_t keys, const torch::Tensor& like, bool training,
                                   const std::shared_ptr<RingExchange>& ring = nullptr);

// The options of a stack's position encoding; relative buckets look both ways in encoders.
PositionEncodingOptions position_options(const ModelConfig& config, bool bidirectional);

}  // namespace zoo
