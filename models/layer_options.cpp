#include "models/layer_options.h"

namespace zoo {

TransformerBlockOptions block_options(const ModelConfig& config, bool causal, bool cross_attention,
                                      int64_t layer) {
  auto attention = AttentionOptions(config.d_model, config.n_heads)
                       .n_kv_heads(config.n_kv_heads)
                       .head_dim(config.head_dim)
                       .bias(config.bias)
                       .qkv_bias(config.qkv_bias)
                       .scaled(config.scale_attention)
                       .causal(causal)
                       .window(causal && config.window ? std::optional<int64_t>(*config.window) : std::nullopt)
                       .dropout(config.attention_dropout)
                       .rope(config.position == PositionKind::kRope)
                       .rope_base(config.rope_base)
                       .rope_layout(config.rope_layout)
                       .rope_scaling(config.rope_scaling);
  auto feed_forward = FeedForwardOptions(config.d_model, config.d_ff)
                          .activation(config.activation)
                          .bias(config.bias)
                          .dropout(config.dropout);
  return TransformerBlockOptions(attention, feed_forward, norm_options(config))
      .cross_attention(cross_attention)
      .norm_position(config.norm_position)
      .dropout(config.dropout)
      .layer_index(layer);
}

RotaryEmbeddingOptions rotary_options(const ModelConfig& config) {
  return RotaryEmbeddingOptions(config.resolved_head_dim())
      .base(config.rope_base)
      .layout(config.rope_layout)
      .scaling(config.rope_scaling);
}

NormOptions norm_options(const ModelConfig& config) {
  return NormOptions(config.d_model).kind(config.norm).eps(config.norm_eps).bias(config.bias);
}

AttentionBias stack_attention_bias(const ModelConfig& config, bool causal, PositionEncodingImpl* positions,
                                   const torch::Tensor& key_padding_mask, int64_t queries, int64_t past,
                                   int64_t keys, const torch::Tensor& like) {
  AttentionBiasInputs in;
  in.queries = queries, in.keys = keys, in.query_start = past;
  in.causal = causal;
  in.window = causal ? config.window.value_or(0) : 0;
  in.key_padding_mask = key_padding_mask;
  if (positions != nullptr) {
    in.position_bias = positions->attention_bias(queries, keys, past, 0, like.device(), like.scalar_type());
  }
  in.kernel_may_mask = config.n_kv_heads == 0 || config.n_kv_heads == config.n_heads;
  return build_attention_bias(in, like.scalar_type(), like.device());
}

PositionEncodingOptions position_options(const ModelConfig& config, bool bidirectional) {
  return PositionEncodingOptions(config.position, config.d_model, config.n_heads, config.max_positions)
      .num_buckets(config.relative_buckets)
      .max_distance(config.relative_max_distance)
      .bidirectional(bidirectional);
}

}  // namespace zoo
