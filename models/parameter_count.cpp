#include "models/parameter_count.h"

namespace zoo {
namespace {

int64_t linear(int64_t in, int64_t out, bool bias) { return in * out + (bias ? out : 0); }

int64_t norm(const ModelConfig& c) {
  switch (c.norm) {
    case NormKind::kLayerNorm: return c.d_model * (c.bias ? 2 : 1);
    case NormKind::kRMSNorm: return c.d_model;
  }
  return 0;
}

int64_t attention(const ModelConfig& c, bool cross) {
  const int64_t hd = c.resolved_head_dim();
  const int64_t q = c.n_heads * hd, kv = (c.n_kv_heads > 0 ? c.n_kv_heads : c.n_heads) * hd;
  // Self-attention projects q, k and v together; cross-attention q apart from k and v.
  // qkv_bias (Qwen2) biases those projections and not the output.
  const bool in_bias = c.bias || c.qkv_bias;
  const int64_t in = cross ? linear(c.d_model, q, in_bias) + linear(c.d_model, 2 * kv, in_bias)
                           : linear(c.d_model, q + 2 * kv, in_bias);
  return in + linear(q, c.d_model, c.bias);
}

int64_t feed_forward(const ModelConfig& c) {
  const int64_t up = linear(c.d_model, c.d_ff, c.bias);
  return up * (is_gated(c.activation) ? 2 : 1) + linear(c.d_ff, c.d_model, c.bias);
}

int64_t blocks(const ModelConfig& c, int64_t layers, bool cross) {
  const int64_t block = norm(c) + attention(c, false) + (cross ? norm(c) + attention(c, true) : 0) + norm(c) +
                        feed_forward(c);
  return layers * block;
}

int64_t positions(const ModelConfig& c) {
  switch (c.position) {
    case PositionKind::kLearned: return c.max_positions * c.d_model;
    case PositionKind::kRelative: return c.relative_buckets * c.n_heads;
    case PositionKind::kNone:
    case PositionKind::kSinusoidal:
    case PositionKind::kRope:
    case PositionKind::kAlibi: return 0;  // tables and slopes are buffers, not parameters
  }
  return 0;
}

}  // namespace

std::vector<std::pair<std::string, int64_t>> parameter_breakdown(const ModelConfig& c) {
  std::vector<std::pair<std::string, int64_t>> rows;
  const bool pre = c.norm_position == NormPosition::kPre;
  const int64_t embedding = c.vocab_size * c.d_model;
  switch (c.family) {
    case Family::kGpt:
      rows = {{"token_embedding", embedding}, {"positions", positions(c)}, {"dropout", 0},
              {"blocks", blocks(c, c.n_layers, false)}};
      if (pre) rows.emplace_back("final_norm", norm(c));
      if (!c.tie_embeddings) rows.emplace_back("lm_head", embedding);
      break;
    case Family::kBert:
      rows = {{"token_embedding", embedding}, {"positions", positions(c)},
              {"token_type_embedding", c.type_vocab_size * c.d_model}, {"embedding_norm", norm(c)},
              {"dropout", 0}, {"blocks", blocks(c, c.n_layers, false)}};
      if (pre) rows.emplace_back("final_norm", norm(c));
      if (c.pooler) rows.emplace_back("pooler", linear(c.d_model, c.d_model, true));
      switch (c.head) {
        case BertHead::kMaskedLM:
        case BertHead::kPretraining:
          // dense + norm + the output bias; the output matrix is the tied token embedding.
          rows.emplace_back("mlm_head", linear(c.d_model, c.d_model, true) + norm(c) + c.vocab_size);
          if (c.head == BertHead::kPretraining) rows.emplace_back("nsp_head", linear(c.d_model, 2, true));
          break;
        case BertHead::kNextSentence: rows.emplace_back("nsp_head", linear(c.d_model, 2, true)); break;
        case BertHead::kSequenceClassification:
        case BertHead::kTokenClassification:
          rows.emplace_back("classifier", linear(c.d_model, c.num_labels, true));
          break;
        case BertHead::kNone: break;
      }
      break;
    case Family::kT5:
    case Family::kTransformer:
      rows = {{"token_embedding", embedding},
              {"encoder_positions", positions(c)},
              {"decoder_positions", positions(c)},
              {"dropout", 0},
              {"encoder_blocks", blocks(c, c.resolved_encoder_layers(), false)},
              {"decoder_blocks", blocks(c, c.resolved_decoder_layers(), true)}};
      if (pre) {
        rows.emplace_back("encoder_final_norm", norm(c));
        rows.emplace_back("decoder_final_norm", norm(c));
      }
      if (!c.tie_embeddings) rows.emplace_back("lm_head", embedding);
      break;
  }
  return rows;
}

int64_t count_parameters(const ModelConfig& config) {
  int64_t total = 0;
  for (const auto& [name, count] : parameter_breakdown(config)) total += count;
  return total;
}

}  // namespace zoo
