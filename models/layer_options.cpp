#include "models/layer_options.h"

#include <stdexcept>
#include <vector>

#include "kernels/f32_rows_dot.h"

namespace zoo {

TransformerBlockOptions block_options(const ModelConfig& config, bool causal, bool cross_attention,
                                      int64_t layer) {
  auto attention = AttentionOptions(config.d_model, config.n_heads)
                       .n_kv_heads(config.n_kv_heads)
                       .head_dim(config.head_dim)
                       .bias(config.bias)
                       .qkv_bias(config.qkv_bias)
                       .qk_norm(config.qk_norm ? std::optional<NormOptions>(NormOptions(config.resolved_head_dim())
                                                                                .kind(config.norm)
                                                                                .eps(config.norm_eps)
                                                                                .bias(false))
                                               : std::nullopt)
                       .scaled(config.scale_attention)
                       .scale_dim(config.attention_scale_dim)
                       .softcap(config.attention_softcap)
                       .causal(causal)
                       .window(config.window_of(layer))
                       .dropout(config.attention_dropout)
                       .rope(config.position == PositionKind::kRope)
                       .rope_base(config.rope_base)
                       .rope_layout(config.rope_layout)
                       .rope_scaling(config.rope_scaling)
                       .rotary_dim(config.rotary_dim)
                       .backend(config.attention_backend);
  if (config.attention_of(layer) == AttentionKind::kLinformer && !causal && !cross_attention) {
    attention.linformer_k(config.linformer_k).linformer_length(config.max_length()).linformer_sharing(config.linformer_sharing);
  }
  if (config.attention_of(layer) == AttentionKind::kLongformer && !causal && !cross_attention) {
    attention.longformer_window(config.longformer_window_of(layer) / 2).longformer_dilation(config.longformer_dilation_of_heads());
  }
  if (config.window_rope_base > 0.0 && config.window_of(layer)) {
    attention.rope_base(config.window_rope_base).rope_scaling(RopeScaling{});  // Gemma 3's and ModernBERT's local layers
  }
  auto feed_forward = FeedForwardOptions(config.d_model, config.d_ff)
                          .activation(config.activation)
                          .bias(config.bias)
                          .dropout(config.dropout);
  auto options = TransformerBlockOptions(attention, feed_forward, norm_options(config))
                     .cross_attention(cross_attention)
                     .norm_position(config.norm_position)
                     .dropout(config.dropout)
                     .layer_index(layer)
                     .attention_norm(layer > 0 || config.first_attention_norm);
  if (causal && !cross_attention && config.family == Family::kGpt) {
    options.linear_attention(linear_attention_options(config, layer));
    if (config.is_moe_layer(layer)) {
      options.mixture_of_experts(MixtureOfExpertsOptions(config.d_model, config.resolved_expert_d_ff(), config.experts,
                                                         config.experts_per_token)
                                     .activation(config.activation)
                                     .normalize_top_k(config.normalize_expert_weights)
                                     .round_weights(config.round_expert_weights));
    }
  }
  return options;
}

std::optional<LinearAttentionOptions> linear_attention_options(const ModelConfig& config, int64_t layer) {
  const AttentionKind kind = config.attention_of(layer);
  switch (kind) {
    case AttentionKind::kSoftmax:
    case AttentionKind::kLinformer:
    case AttentionKind::kLongformer: return std::nullopt;
    case AttentionKind::kLinear:
      return LinearAttentionOptions(config.d_model, config.n_heads, kind)
          .head_dim(config.head_dim)
          .bias(config.bias)
          .qkv_bias(config.qkv_bias)
          .feature_map(config.feature_map)
          .normalize(config.linear_normalize)
          .performer_features(config.performer_features)
          // Each layer draws its own features.
          .performer_seed(config.performer_seed + layer);
    case AttentionKind::kGatedLinear:
      return LinearAttentionOptions(config.d_model, config.n_heads, kind)
          .key_dim(static_cast<int64_t>(config.gla_expand_k * static_cast<double>(config.d_model)))
          .value_dim(static_cast<int64_t>(config.gla_expand_v * static_cast<double>(config.d_model)))
          .gate_rank(config.gla_gate_rank)
          .gate_normalizer(config.gla_gate_normalizer)
          .norm_eps(config.norm_eps);
  }
  return std::nullopt;
}

RotaryEmbeddingOptions rotary_options(const ModelConfig& config) {
  return RotaryEmbeddingOptions(config.resolved_head_dim())
      .rotary_dim(config.rotary_dim)
      .base(config.rope_base)
      .layout(config.rope_layout)
      .scaling(config.rope_scaling);
}

NormOptions norm_options(const ModelConfig& config) {
  return NormOptions(config.d_model).kind(config.norm).eps(config.norm_eps).bias(config.bias);
}

AttentionCall stack_attention_call(const ModelConfig& config, bool causal, bool with_positions, bool key_padding,
                                   int64_t queries, int64_t past, int64_t keys, bool training, bool cpu,
                                   bool float_or_bf16) {
  AttentionCall call;
  call.backend = config.attention_backend;
  call.cpu = cpu, call.float_or_bf16 = float_or_bf16;
  call.float32_decode_kernel = cpu_runs_f32_rows_dot();
  auto position = AttentionPositionTerm::kNone;
  if (with_positions && config.position == PositionKind::kAlibi) position = AttentionPositionTerm::kAlibi;
  if (with_positions && config.position == PositionKind::kRelative) position = AttentionPositionTerm::kRelative;
  set_mask_facts(call, queries, past, keys, causal, config.window.value_or(0), key_padding, position);
  call.grouped = config.n_kv_heads != 0 && config.n_kv_heads != config.n_heads;
  call.dropout = training ? config.attention_dropout : 0.0;
  call.softcap = config.attention_softcap > 0.0;
  return call;
}

std::string describe_attention_paths(const ModelConfig& config) {
  // An encoder's Linformer and Longformer layers run their own kernels, whatever the call.
  switch (config.attention) {
    case AttentionKind::kLinformer:
      return "attention path: linformer (kernels/linformer_attention.h): LibTorch's fused kernel over the " +
             std::to_string(config.linformer_k) + " projected rows, padded keys zeroed before the projection\n";
    case AttentionKind::kLongformer:
      return "attention path: longformer (kernels/longformer_attention.h): the window on zoo's tiled kernel (CPU, "
             "float32 or bfloat16; elsewhere the explicit (T, T) reference), global and padded keys as its key mask, "
             "the global keys' columns merged by log-sum-exp, the global tokens' rows beside\n";
    case AttentionKind::kSoftmax:
    case AttentionKind::kLinear:
    case AttentionKind::kGatedLinear: break;
  }
  struct Stack {
    const char* name;
    bool causal, positions;
  };
  std::vector<Stack> stacks;
  switch (config.family) {
    case Family::kGpt: stacks = {{"decoder", true, true}}; break;
    case Family::kBert: stacks = {{"encoder", false, true}}; break;
    case Family::kT5:
    case Family::kTransformer:
      stacks = {{"encoder", false, true}, {"decoder", true, true}, {"cross", false, false}};
      break;
  }
  const int64_t t = config.max_length();
  std::string text = "attention paths (CPU, float32 or bfloat16, T = " + std::to_string(t) +
                     ", attention_backend: " + to_string(config.attention_backend) + "):\n";
  for (const auto& stack : stacks) {
    struct Call {
      const char* name;
      bool padding, training;
      int64_t queries;
    };
    std::vector<Call> calls = {{"training step", false, true, t}, {"training step, padded", true, true, t},
                               {"inference, padded", true, false, t}};
    if (stack.causal && !config.is_encoder_decoder()) calls.push_back({"decoding step", true, false, 1});
    if (stack.causal && config.is_encoder_decoder()) calls.push_back({"decoding step", false, false, 1});
    for (const auto& call : calls) {
      // Decoder self-attention in an encoder-decoder has no padding mask of its own.
      if (call.padding && stack.causal && config.is_encoder_decoder()) continue;
      const int64_t past = call.queries == 1 ? t - 1 : 0;
      const auto facts = stack_attention_call(config, stack.causal, stack.positions, call.padding, call.queries, past,
                                              stack.causal ? past + call.queries : t, call.training, true, true);
      std::string line;
      try {
        line = describe(choose_attention_path(facts));
      } catch (const std::invalid_argument& e) {
        line = e.what();
      }
      text += "  " + std::string(stack.name) + ", " + call.name + ": " + line + "\n";
    }
  }
  return text;
}

namespace {

AttentionBias stack_bias(const ModelConfig& config, bool causal, PositionEncodingImpl* positions,
                         const torch::Tensor& key_padding_mask, int64_t queries, int64_t past, int64_t keys,
                         const torch::Tensor& like, bool training, const std::shared_ptr<RingExchange>& ring,
                         bool unbounded) {
  if (ring) {
    const std::string refusal = context_parallel_refusal(config);
    TORCH_CHECK(refusal.empty(), "context parallelism: ", refusal);
  }
  AttentionCall call;
  call.backend = config.attention_backend;
  call.grouped = config.n_kv_heads != 0 && config.n_kv_heads != config.n_heads;
  call.dropout = training ? config.attention_dropout : 0.0;
  call.softcap = config.attention_softcap > 0.0;
  AttentionMasks masks;
  masks.queries = queries, masks.query_start = past, masks.keys = keys;
  masks.causal = causal, masks.window = unbounded ? 0 : config.window.value_or(0);
  masks.key_padding_mask = key_padding_mask;
  masks.positions = positions;
  masks.ring = ring;
  return build_attention_bias(call, masks, like);
}

}  // namespace

AttentionBias stack_attention_bias(const ModelConfig& config, bool causal, PositionEncodingImpl* positions,
                                   const torch::Tensor& key_padding_mask, int64_t queries, int64_t past,
                                   int64_t keys, const torch::Tensor& like, bool training,
                                   const std::shared_ptr<RingExchange>& ring) {
  return stack_bias(config, causal, positions, key_padding_mask, queries, past, keys, like, training, ring, false);
}

StackBiases stack_attention_biases(const ModelConfig& config, bool causal, PositionEncodingImpl* positions,
                                   const torch::Tensor& key_padding_mask, int64_t queries, int64_t past,
                                   int64_t keys, const torch::Tensor& like, bool training,
                                   const std::shared_ptr<RingExchange>& ring) {
  StackBiases biases;
  biases.config = &config;
  biases.mixed = config.has_mixed_windows();
  biases.windowed = stack_bias(config, causal, positions, key_padding_mask, queries, past, keys, like, training, ring, false);
  if (biases.mixed) {
    biases.unbounded = stack_bias(config, causal, positions, key_padding_mask, queries, past, keys, like, training, ring, true);
  }
  return biases;
}

PositionEncodingOptions position_options(const ModelConfig& config, bool bidirectional) {
  return PositionEncodingOptions(config.position, config.d_model, config.n_heads, config.max_positions)
      .num_buckets(config.relative_buckets)
      .max_distance(config.relative_max_distance)
      .bidirectional(bidirectional);
}

}  // namespace zoo
