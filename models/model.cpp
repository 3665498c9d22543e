#include "models/model.h"

#include <set>
#include <sstream>

#include <torch/torch.h>

#include "core/runtime.h"
#include "core/strings.h"
#include "models/layer_options.h"
#include "models/parameter_count.h"

namespace zoo {
namespace {

// zoo info's lines for linear and gated linear layers (layers/linear_attention.h): which layers,
// their shapes, and the state each keeps in place of a KV cache.
std::string describe_recurrent_layers(const ModelConfig& c) {
  std::ostringstream s;
  s << "token mixing:";
  if (c.attention_layers.empty()) {
    s << " " << to_string(c.attention) << " in every layer";
  } else {
    for (int64_t i = 0; i < c.n_layers; ++i) s << (i ? ", " : " ") << i << " " << to_string(c.attention_of(i));
  }
  s << "\n";
  for (const AttentionKind kind : {AttentionKind::kLinear, AttentionKind::kGatedLinear}) {
    int64_t first = -1;
    for (int64_t i = c.n_layers - 1; i >= 0; --i)
      if (c.attention_of(i) == kind) first = i;
    if (first < 0) continue;
    const auto o = *linear_attention_options(c, first);
    const int64_t dk = kind == AttentionKind::kLinear && c.feature_map == FeatureMap::kPerformer
                           ? c.performer_features : o.head_k();
    const int64_t dv = o.head_v() + (kind == AttentionKind::kLinear && c.linear_normalize ? 1 : 0);
    s << "  " << to_string(kind) << ": " << c.n_heads << " heads, ";
    if (kind == AttentionKind::kLinear) {
      s << "feature map " << to_string(c.feature_map) << (c.linear_normalize ? ", normalised" : ", unnormalised");
    } else {
      s << "key width " << o.key_dim() << ", value width " << o.value_dim() << ", decay gate of rank "
        << c.gla_gate_rank << " (tau " << c.gla_gate_normalizer << ")";
    }
    s << "; decoding state " << c.n_heads << " x " << dk << " x " << dv << " per layer and sequence, whatever the "
      << "context\n";
  }
  return s.str();
}

}  // namespace


std::shared_ptr<torch::nn::Module> Model::module() const {
  if (gpt) return gpt.ptr();
  if (bert) return bert.ptr();
  return seq2seq.ptr();
}

void Model::set_activation_checkpointing(bool on) {
  switch (config.family) {
    case Family::kGpt: gpt->activation_checkpointing = on; break;
    case Family::kBert: bert->activation_checkpointing = on; break;
    case Family::kT5:
    case Family::kTransformer: seq2seq->activation_checkpointing = on; break;
  }
}

void check_fits_in_memory(const ModelConfig& config, int64_t memory) {
  const double bytes = weights_bytes_lower_bound(config);
  if (memory > 0 && bytes > static_cast<double>(memory)) {
    throw ConfigError((config.name.empty() ? to_string(config.family) : config.name) + ": " + largest_size(config) + ": " +
                      std::to_string(count_parameters(config)) + " parameters need " + describe_bytes(bytes) +
                      " in float32 for the weights alone, more than this machine's " +
                      describe_bytes(static_cast<double>(memory)) + " of memory");
  }
}

Model build_model(const ModelConfig& config) {
  config.validate();
  check_fits_in_memory(config, physical_memory_bytes());
  Model m;
  m.config = config;
  switch (config.family) {
    case Family::kGpt:
      m.gpt = GPT(config);
      break;
    case Family::kBert:
      m.bert = Bert(config);
      break;
    case Family::kT5:
    case Family::kTransformer:
      m.seq2seq = EncoderDecoder(config);
      break;
  }
  return m;
}

QuantizeSummary quantize_model(Model& model, const WeightQuantization& quantization) {
  if (model.quantization) {
    throw std::invalid_argument("the model's weights are quantized already (" + model.quantization->describe() + ")");
  }
  const auto summary = quantize_model_weights(*model.module(), quantization);
  model.quantization = quantization;
  return summary;
}

Model dequantized_model(const Model& model) {
  Model plain = build_model(model.config);
  if (model.lora) attach_lora(plain, model.lora->config);  // QLoRA: the adapters come along
  copy_dequantized(*model.module(), *plain.module());
  plain.lora = model.lora;
  return plain;
}

int64_t count_parameters(const torch::nn::Module& module) {
  std::set<const void*> seen;
  int64_t n = 0;
  for (const auto& p : module.parameters()) {
    if (seen.insert(p.unsafeGetTensorImpl()).second) n += p.numel();
  }
  return n;
}

std::vector<std::pair<std::string, int64_t>> parameter_breakdown(const torch::nn::Module& module) {
  std::vector<std::pair<std::string, int64_t>> rows;
  int64_t own = 0;
  for (const auto& p : module.named_parameters(/*recurse=*/false)) own += p.value().numel();
  if (own > 0) rows.emplace_back("(own)", own);
  for (const auto& child : module.named_children()) {
    rows.emplace_back(child.key(), count_parameters(*child.value()));
  }
  return rows;
}

std::string describe(const ModelConfig& c) {
  std::ostringstream s;
  s << "family: " << to_string(c.family);
  if (!c.name.empty()) s << " (" << c.name << ")";
  s << "\n";
  if (c.is_encoder_decoder()) {
    s << "layers: " << c.resolved_encoder_layers() << " encoder + " << c.resolved_decoder_layers()
      << " decoder\n";
  } else {
    s << "layers: " << c.n_layers << (c.family == Family::kGpt ? " (causal decoder)\n" : " (encoder)\n");
  }
  const int64_t kv = c.n_kv_heads > 0 ? c.n_kv_heads : c.n_heads;
  s << "d_model: " << c.d_model << ", d_ff: " << c.d_ff << ", vocab_size: " << c.vocab_size
    << ", max_positions: " << c.max_positions << "\n";
  s << "attention: " << c.n_heads << " heads of " << c.resolved_head_dim() << ", " << kv
    << " key/value heads (" << (kv == c.n_heads ? "MHA" : kv == 1 ? "MQA" : "GQA") << ")";
  if (c.window) {
    s << (c.family == Family::kGpt ? ", sliding window " : ", two-sided window ") << *c.window;
    if (c.has_mixed_windows()) s << " in " << c.window_layers.size() << " of " << c.n_layers << " layers";
    if (c.window_rope_base > 0.0) s << " (RoPE base " << c.window_rope_base << ")";
  }
  if (!c.scale_attention) s << ", unscaled";
  if (c.attention_scale_dim > 0) s << ", scaled by 1/sqrt(" << c.attention_scale_dim << ")";
  if (c.attention_softcap > 0.0) s << ", scores soft-capped at " << c.attention_softcap;
  s << "\n";
  if (c.has_recurrent_layers()) s << describe_recurrent_layers(c);
  if (c.attention == AttentionKind::kLinformer) {
    s << "token mixing: linformer in every layer: keys and values projected along the sequence to " << c.linformer_k
      << " rows by " << to_string(c.linformer_sharing) << " E, F of " << c.max_length()
      << " columns (time and memory O(T x " << c.linformer_k << "), not O(T^2)); padded tokens zeroed before\n";
  }
  if (c.attention == AttentionKind::kLongformer) {
    s << "token mixing: longformer in every layer: a window of attention_window [";
    for (size_t i = 0; i < c.attention_window.size(); ++i) s << (i ? ", " : "") << c.attention_window[i];
    s << "] (w / 2 tokens to each side)";
    if (!c.attention_dilation.empty()) {
      s << ", dilation [";
      for (size_t i = 0; i < c.attention_dilation.size(); ++i) s << (i ? ", " : "") << c.attention_dilation[i];
      s << "]";
    }
    s << ", and global tokens with their own q, k, v (time and memory O(T x (w + globals)), not O(T^2))";
    if (c.head == BertHead::kSequenceClassification) s << "; the first token is global, as transformers' classifier";
    s << "\n";
  }
  if (c.has_moe_layers()) {
    int64_t sparse = 0;
    for (int64_t i = 0; i < c.n_layers; ++i) sparse += c.is_moe_layer(i);
    s << "mixture of experts: " << sparse << " of " << c.n_layers << " layers, " << c.experts << " experts of d_ff "
      << c.resolved_expert_d_ff() << ", top " << c.experts_per_token
      << (c.normalize_expert_weights ? " (renormalised)" : " (raw probabilities)") << ", router loss x"
      << c.router_aux_loss_coef << "\n";
  }
  s << "norm: " << to_string(c.norm) << " (" << to_string(c.norm_position) << "-norm, eps "
    << c.norm_eps << "), position: " << to_string(c.position);
  if (c.rope_scaling.kind != RopeScalingKind::kNone) {
    s << " (" << to_string(c.rope_scaling.kind) << " scaling x" << c.rope_scaling.factor << ")";
  }
  if (c.position == PositionKind::kRope && c.rotary_dim > 0 && c.rotary_dim < c.resolved_head_dim()) {
    s << " on " << c.rotary_dim << " of " << c.resolved_head_dim() << " features";
  }
  s << ", activation: " << to_string(c.activation) << ", bias: " << (c.bias ? "yes" : c.qkv_bias ? "q/k/v only" : "no")
    << (c.qk_norm ? ", q/k norms" : "") << ", head: " << (c.tie_embeddings ? "tied" : "untied");
  if (c.logit_softcap > 0.0) s << ", logits soft-capped at " << c.logit_softcap;
  s << "\n";
  return s.str();
}

}  // namespace zoo
