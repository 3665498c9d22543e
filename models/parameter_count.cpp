#include "models/parameter_count.h"

#include <algorithm>
#include <cmath>

#include "core/yaml_values.h"

namespace zoo {
namespace {

// Every count is written once, over a number type N: int64_t for the exact counts a valid config
// has, double for the estimates that size checks take of any config (no product overflows).
template <typename N>
N linear(N in, N out, bool bias) { return in * out + (bias ? out : N(0)); }

template <typename N>
N norm(const ModelConfig& c) {
  switch (c.norm) {
    case NormKind::kLayerNorm: return N(c.d_model) * N(c.bias ? 2 : 1);
    case NormKind::kRMSNorm:
    case NormKind::kRMSNormPlusOne: return N(c.d_model);
  }
  return N(0);
}

// The norms of one block: one per branch, two with sandwich norms.
template <typename N>
N block_norms(const ModelConfig& c, bool cross) {
  const N per_branch = N(c.norm_position == NormPosition::kSandwich ? 2 : 1);
  return per_branch * N(cross ? 3 : 2) * norm<N>(c);
}

// Linformer's E and F (k, max_positions): per key/value head, one pair per layer, or one matrix.
template <typename N>
N linformer(const ModelConfig& c) {
  if (c.attention != AttentionKind::kLinformer) return N(0);
  const N matrix = N(c.linformer_k) * N(c.max_length());
  switch (c.linformer_sharing) {
    case LinformerSharing::kPerHead: return N(2) * N(c.n_kv_heads > 0 ? c.n_kv_heads : c.n_heads) * matrix;
    case LinformerSharing::kHeadwise: return N(2) * matrix;
    case LinformerSharing::kKeyValue: return matrix;
  }
  return N(0);
}

template <typename N>
N attention(const ModelConfig& c, bool cross) {
  const N d = N(c.d_model), hd = N(c.resolved_head_dim());
  const N q = N(c.n_heads) * hd, kv = N(c.n_kv_heads > 0 ? c.n_kv_heads : c.n_heads) * hd;
  // Self-attention projects q, k and v together; cross-attention q apart from k and v.
  // qkv_bias (Qwen2) biases those projections and not the output.
  const bool in_bias = c.bias || c.qkv_bias;
  const N in = cross ? linear(d, q, in_bias) + linear(d, N(2) * kv, in_bias) : linear(d, q + N(2) * kv, in_bias);
  const N head_norms = c.qk_norm ? N(2) * hd : N(0);  // qk_norm (Qwen3): a weight of head_dim each, no bias
  // Longformer's global tokens have their own q, k and v projections.
  const N global = !cross && c.attention == AttentionKind::kLongformer ? linear(d, N(3) * q, in_bias) : N(0);
  return in + linear(q, d, c.bias) + head_norms + global + (cross ? N(0) : linformer<N>(c));
}

// The token mixer of decoder layer `layer` (layers/linear_attention.h for the linear kinds).
template <typename N>
N mixer(const ModelConfig& c, int64_t layer) {
  const N d = N(c.d_model);
  switch (c.attention_of(layer)) {
    case AttentionKind::kSoftmax:
    case AttentionKind::kLinformer:
    case AttentionKind::kLongformer: return attention<N>(c, false);
    case AttentionKind::kLinear: {
      // q, k and v of n_heads heads each (the performer features are a buffer).
      const N width = N(c.n_heads) * N(c.resolved_head_dim());
      return N(3) * linear(d, width, c.bias || c.qkv_bias) + linear(width, d, c.bias);
    }
    case AttentionKind::kGatedLinear: {
      // Flash-linear-attention's GLA layer: no biases but the decay gate's.
      const N key = N(c.gla_expand_k * static_cast<double>(c.d_model));
      const N value = N(c.gla_expand_v * static_cast<double>(c.d_model));
      const N rank = N(c.gla_gate_rank);
      return N(2) * linear(d, key, false) + N(2) * linear(d, value, false) +  // q, k; v, the output gate
             linear(d, rank, false) + linear(rank, key, true) +               // the decay's low-rank gate
             value / N(c.n_heads) +                                           // the per-head RMSNorm
             linear(value, d, false);
    }
  }
  return N(0);
}

template <typename N>
N feed_forward(const ModelConfig& c) {
  const N up = linear(N(c.d_model), N(c.d_ff), c.bias);
  return up * N(is_gated(c.activation) ? 2 : 1) + linear(N(c.d_ff), N(c.d_model), c.bias);
}

// A mixture of experts: the router (E, d) and E gated experts of expert_d_ff, no biases.
template <typename N>
N experts(const ModelConfig& c) {
  const N d = N(c.d_model), f = N(c.resolved_expert_d_ff()), e = N(c.experts);
  return e * d + e * N(3) * d * f;
}

template <typename N>
N blocks(const ModelConfig& c, int64_t layers, bool cross) {
  const N block = block_norms<N>(c, cross) + attention<N>(c, false) + (cross ? attention<N>(c, true) : N(0)) +
                  feed_forward<N>(c);
  return N(layers) * block;
}

// A decoder-only stack, each layer with its own token mixer and feed-forward.
template <typename N>
N decoder_blocks(const ModelConfig& c) {
  if (!c.has_recurrent_layers() && !c.has_moe_layers()) return blocks<N>(c, c.n_layers, false);
  N sum = N(0);
  for (int64_t i = 0; i < c.n_layers; ++i) {
    sum += block_norms<N>(c, false) + mixer<N>(c, i) + (c.is_moe_layer(i) ? experts<N>(c) : feed_forward<N>(c));
  }
  return sum;
}

template <typename N>
N positions(const ModelConfig& c) {
  switch (c.position) {
    case PositionKind::kLearned: return N(c.max_positions) * N(c.d_model);
    case PositionKind::kRelative: return N(c.relative_buckets) * N(c.n_heads);
    case PositionKind::kNone:
    case PositionKind::kSinusoidal:
    case PositionKind::kRope:
    case PositionKind::kAlibi: return N(0);  // tables and slopes are buffers, not parameters
  }
  return N(0);
}

template <typename N>
std::vector<std::pair<std::string, N>> breakdown(const ModelConfig& c) {
  std::vector<std::pair<std::string, N>> rows;
  const bool pre = c.norm_position != NormPosition::kPost;  // a final norm
  const N d = N(c.d_model);
  const N embedding = N(c.vocab_size) * d;
  switch (c.family) {
    case Family::kGpt:
      rows = {{"token_embedding", embedding}, {"positions", positions<N>(c)}, {"dropout", N(0)},
              {"blocks", decoder_blocks<N>(c)}};
      if (pre) rows.emplace_back("final_norm", norm<N>(c));
      if (!c.tie_embeddings) rows.emplace_back("lm_head", embedding);
      break;
    case Family::kBert:
      rows = {{"token_embedding", embedding}, {"positions", positions<N>(c)}};
      if (c.type_vocab_size > 0) rows.emplace_back("token_type_embedding", N(c.type_vocab_size) * d);
      rows.emplace_back("embedding_norm", norm<N>(c));
      rows.emplace_back("dropout", N(0));
      rows.emplace_back("blocks", blocks<N>(c, c.n_layers, false) - (c.first_attention_norm ? N(0) : norm<N>(c)));
      if (pre) rows.emplace_back("final_norm", norm<N>(c));
      if (c.pooler) rows.emplace_back("pooler", linear(d, d, true));
      if (c.head_transform) rows.emplace_back("head_transform", linear(d, d, c.bias) + norm<N>(c));
      switch (c.head) {
        case BertHead::kMaskedLM:
        case BertHead::kPretraining:
          // dense + norm + the output bias; the output matrix is the tied token embedding.
          rows.emplace_back("mlm_head", linear(d, d, c.bias) + norm<N>(c) + N(c.vocab_size));
          if (c.head == BertHead::kPretraining) rows.emplace_back("nsp_head", linear(d, N(2), true));
          break;
        case BertHead::kNextSentence: rows.emplace_back("nsp_head", linear(d, N(2), true)); break;
        case BertHead::kSequenceClassification:
        case BertHead::kTokenClassification:
          rows.emplace_back("classifier", linear(d, N(c.num_labels), true));
          break;
        case BertHead::kNone: break;
      }
      break;
    case Family::kT5:
    case Family::kTransformer:
      rows = {{"token_embedding", embedding},
              {"encoder_positions", positions<N>(c)},
              {"decoder_positions", positions<N>(c)},
              {"dropout", N(0)},
              {"encoder_blocks", blocks<N>(c, c.resolved_encoder_layers(), false)},
              {"decoder_blocks", blocks<N>(c, c.resolved_decoder_layers(), true)}};
      if (pre) {
        rows.emplace_back("encoder_final_norm", norm<N>(c));
        rows.emplace_back("decoder_final_norm", norm<N>(c));
      }
      if (!c.tie_embeddings) rows.emplace_back("lm_head", embedding);
      break;
  }
  return rows;
}

template <typename N>
N total(const ModelConfig& c) {
  N sum = N(0);
  for (const auto& row : breakdown<N>(c)) sum += row.second;
  return sum;
}

// The sinusoidal table: a buffer of max_positions x d_model built with the model (the other
// position kinds compute theirs per forward, from the positions in use).
double table_elements(const ModelConfig& c) {
  switch (c.position) {
    case PositionKind::kSinusoidal: return static_cast<double>(c.max_positions) * static_cast<double>(c.d_model);
    case PositionKind::kLearned:
    case PositionKind::kRelative:
    case PositionKind::kNone:
    case PositionKind::kRope:
    case PositionKind::kAlibi: return 0.0;
  }
  return 0.0;
}

}  // namespace

std::vector<std::pair<std::string, int64_t>> parameter_breakdown(const ModelConfig& config) {
  return breakdown<int64_t>(config);
}

int64_t count_parameters(const ModelConfig& config) { return total<int64_t>(config); }

int64_t count_active_parameters(const ModelConfig& config) {
  int64_t idle = 0;  // each sparse layer's experts a token does not go to
  const int64_t expert = 3 * config.d_model * config.resolved_expert_d_ff();
  for (int64_t i = 0; i < config.n_layers; ++i) {
    if (config.is_moe_layer(i)) idle += (config.experts - config.experts_per_token) * expert;
  }
  return count_parameters(config) - idle;
}

double estimate_parameters(const ModelConfig& config) { return total<double>(config); }

double weights_bytes_lower_bound(const ModelConfig& config) {
  return (estimate_parameters(config) + table_elements(config)) * 4.0;  // float32, as built
}

std::string largest_size(const ModelConfig& config) {
  // The key that, were it 1 (a width factor: 0), would shrink the model most: the one that makes
  // it large.
  static constexpr std::pair<const char*, int64_t ModelConfig::*> kSizes[] = {
      {"vocab_size", &ModelConfig::vocab_size},   {"d_model", &ModelConfig::d_model},
      {"n_layers", &ModelConfig::n_layers},       {"encoder_layers", &ModelConfig::encoder_layers},
      {"decoder_layers", &ModelConfig::decoder_layers}, {"n_heads", &ModelConfig::n_heads},
      {"n_kv_heads", &ModelConfig::n_kv_heads},   {"head_dim", &ModelConfig::head_dim},
      {"d_ff", &ModelConfig::d_ff},               {"max_positions", &ModelConfig::max_positions},
      {"type_vocab_size", &ModelConfig::type_vocab_size}, {"relative_buckets", &ModelConfig::relative_buckets},
      {"num_labels", &ModelConfig::num_labels},   {"gla_gate_rank", &ModelConfig::gla_gate_rank}};
  static constexpr std::pair<const char*, double ModelConfig::*> kFactors[] = {
      {"gla_expand_k", &ModelConfig::gla_expand_k}, {"gla_expand_v", &ModelConfig::gla_expand_v}};
  std::string key = "d_model (" + std::to_string(config.d_model) + ")";
  double smallest = weights_bytes_lower_bound(config);
  auto consider = [&](const ModelConfig& shrunk, const std::string& named) {
    const double estimate = weights_bytes_lower_bound(shrunk);
    if (estimate < smallest) smallest = estimate, key = named;
  };
  for (const auto& [name, member] : kSizes) {
    if (config.*member <= 1) continue;
    ModelConfig shrunk = config;
    shrunk.*member = 1;
    consider(shrunk, std::string(name) + " (" + std::to_string(config.*member) + ")");
  }
  for (const auto& [name, member] : kFactors) {
    ModelConfig shrunk = config;
    shrunk.*member = 0.0;
    consider(shrunk, std::string(name) + " (" + yaml::format_double(config.*member) + ")");
  }
  return key;
}

double kv_cache_bytes_lower_bound(const ModelConfig& config, int64_t rows, int64_t positions, int64_t memory_positions,
                                  int64_t element_bytes) {
  const double kv_heads = static_cast<double>(config.n_kv_heads > 0 ? config.n_kv_heads : config.n_heads);
  // Keys and values of one position in one layer, in every row.
  const double per_position =
      2.0 * kv_heads * static_cast<double>(config.resolved_head_dim()) * static_cast<double>(element_bytes) *
      static_cast<double>(rows);
  auto self_of = [&](int64_t layer) {
    const auto window = config.window_of(layer);
    return static_cast<double>(window ? std::min(positions, *window) : positions);
  };
  const auto self = self_of(0);
  double held = 0.0;
  if (config.is_encoder_decoder()) {
    held = static_cast<double>(config.resolved_decoder_layers()) * (self + static_cast<double>(memory_positions));
  } else {
    for (int64_t layer = 0; layer < config.n_layers; ++layer) {
      switch (config.attention_of(layer)) {
        case AttentionKind::kSoftmax:
        case AttentionKind::kLinformer:
        case AttentionKind::kLongformer: held += self_of(layer); break;
        case AttentionKind::kLinear:
        case AttentionKind::kGatedLinear: break;
      }
    }
  }
  return held * per_position;
}

double training_bytes_lower_bound(const ModelConfig& config, bool trains_every_parameter) {
  // The weights; and where every weight trains, its gradient and AdamW's two moments, float32
  // like the master weights. Activations are apart (activation_bytes_lower_bound).
  return weights_bytes_lower_bound(config) + (trains_every_parameter ? estimate_parameters(config) * 12.0 : 0.0);
}

double activation_bytes_lower_bound(const ModelConfig& config, int64_t batch_size, int64_t length) {
  // Backward needs at least each block's input, (batch, length, d_model), kept through the
  // forward, even with activation checkpointing (which keeps only those); taken at 2 bytes, the
  // narrowest type zoo computes in. Attention scores, feed-forward hiddens and logits come on
  // top, so the real figure is several times this.
  const int64_t layers = config.is_encoder_decoder() ? config.resolved_encoder_layers() : config.n_layers;
  return static_cast<double>(batch_size) * static_cast<double>(length) * static_cast<double>(config.d_model) *
         static_cast<double>(layers) * 2.0;
}

}  // namespace zoo
