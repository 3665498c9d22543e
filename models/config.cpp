#include "models/config.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include <yaml-cpp/yaml.h>

#include "core/strings.h"
#include "core/yaml_values.h"
#include "models/parameter_count.h"

namespace zoo {
namespace {

using yaml::as_bool;
using yaml::as_double;
using yaml::as_int;
using yaml::as_string;
using yaml::BadValue;
using yaml::scalar_text;
using yaml::where;

using Field = yaml::Field<ModelConfig>;
using yaml::bool_field;
using yaml::double_field;
using yaml::format_double;
using yaml::int_field;

// Any enum, through its one EnumNames table (core/enum_names.h).
template <typename E, typename C = ModelConfig>
yaml::Field<C> enum_field(std::string name, E C::*member, std::string doc, bool required = false) {
  return {name, "one of: " + enum_names_joined<E>(), std::move(doc), required,
          [member](C& c, const YAML::Node& n) {
            try {
              c.*member = from_string<E>(as_string(n));
            } catch (const std::invalid_argument&) {
              throw BadValue{"one of: " + enum_names_joined<E>()};
            }
          },
          [member](const C& c) { return to_string(c.*member); }};
}

// A list of `T` read item by item with `parse` (an item it refuses named by its place) and written
// back with `format`; `what` names the items ("numbers", "layer indices").
template <typename T, typename C>
yaml::Field<C> list_field(std::string name, std::vector<T> C::*member, std::string type, std::string what,
                          std::string doc, T (*parse)(const YAML::Node&), std::string (*format)(T)) {
  return {std::move(name), std::move(type), std::move(doc), false,
          [member, what, parse](C& c, const YAML::Node& n) {
            if (!n.IsSequence()) throw BadValue{"a list of " + what};
            std::vector<T> values;
            for (const auto& item : n) {
              try {
                values.push_back(parse(item));
              } catch (const BadValue&) {
                throw BadValue{"a list of " + what + " (item " + std::to_string(values.size() + 1) + " is '" +
                               scalar_text(item) + "')"};
              }
            }
            c.*member = std::move(values);
          },
          [member, format](const C& c) {
            std::string out = "[";
            for (const T& v : c.*member) out += (out.size() > 1 ? ", " : "") + format(v);
            return out + "]";
          }};
}

// The shortest text that reads back the same double.
std::string exact_number(double v) {
  char text[32];
  const auto end = std::to_chars(text, text + sizeof text, v).ptr;
  return std::string(text, end);
}

double parse_number(const YAML::Node& n) { return as_double(n); }
int64_t parse_index(const YAML::Node& n) { return as_int(n); }
std::string index_text(int64_t v) { return std::to_string(v); }

// A list of numbers, written back exactly.
template <typename C>
yaml::Field<C> number_list_field(std::string name, std::vector<double> C::*member, std::string doc) {
  return list_field<double, C>(std::move(name), member, "list of numbers", "numbers", std::move(doc), parse_number,
                               exact_number);
}

// A list of layer indices (from 0).
Field layer_list_field(std::string name, std::vector<int64_t> ModelConfig::*member, std::string doc) {
  return list_field<int64_t, ModelConfig>(std::move(name), member, "list of integers", "layer indices", std::move(doc),
                                          parse_index, index_text);
}

// A key of the RoPE scaling group, kept in ModelConfig::rope_scaling as the rotary layer takes it.
Field rope_scaling_field(yaml::Field<RopeScaling> f) {
  return {f.name, f.type, f.doc, f.required,
          [set = f.set](ModelConfig& c, const YAML::Node& n) { set(c.rope_scaling, n); },
          [get = f.get](const ModelConfig& c) { return get(c.rope_scaling); }};
}

const std::vector<Field>& fields() {
  static const std::vector<Field> kFields = [] {
    std::vector<Field> f;
    f.push_back(enum_field("family", &ModelConfig::family, "model family; sets the defaults of the other keys", true));
    f.push_back({"name", "string", "label shown by zoo info", false,
                 [](ModelConfig& c, const YAML::Node& n) { c.name = as_string(n); },
                 [](const ModelConfig& c) { return c.name.empty() ? "\"\"" : c.name; }});
    f.push_back(int_field("vocab_size", &ModelConfig::vocab_size, "token vocabulary size", true));
    f.push_back(int_field("d_model", &ModelConfig::d_model, "width of the residual stream", true));
    f.push_back(int_field("n_layers", &ModelConfig::n_layers,
                          "blocks (gpt, bert); default for encoder_layers and decoder_layers"));
    f.push_back(int_field("encoder_layers", &ModelConfig::encoder_layers,
                          "encoder blocks (t5, transformer); 0 = n_layers"));
    f.push_back(int_field("decoder_layers", &ModelConfig::decoder_layers,
                          "decoder blocks (t5, transformer); 0 = n_layers"));
    f.push_back(int_field("n_heads", &ModelConfig::n_heads, "attention (query) heads", true));
    f.push_back(int_field("n_kv_heads", &ModelConfig::n_kv_heads,
                          "key/value heads: 0 = n_heads (MHA), 1 = MQA, a divisor = GQA"));
    f.push_back(int_field("head_dim", &ModelConfig::head_dim,
                          "width of one head; 0 = d_model / n_heads (T5's d_kv)"));
    f.push_back(int_field("d_ff", &ModelConfig::d_ff, "feed-forward hidden width", true));
    f.push_back(int_field("max_positions", &ModelConfig::max_positions,
                          "longest sequence; the table size of learned/sinusoidal positions"));
    f.push_back(int_field("type_vocab_size", &ModelConfig::type_vocab_size,
                          "bert: segment (token type) embeddings; 0 = none"));
    f.push_back(enum_field("norm", &ModelConfig::norm, "normalisation"));
    f.push_back(double_field("norm_eps", &ModelConfig::norm_eps, "epsilon of every norm"));
    f.push_back(enum_field("norm_position", &ModelConfig::norm_position,
                              "pre: x + f(norm(x)); post: norm(x + f(x))"));
    f.push_back(enum_field("position", &ModelConfig::position, "position information"));
    f.push_back(double_field("rope_base", &ModelConfig::rope_base, "rope: frequency base"));
    f.push_back(enum_field("rope_layout", &ModelConfig::rope_layout,
                              "rope: which features are rotated together"));
    f.push_back(rope_scaling_field(enum_field("rope_scaling", &RopeScaling::kind,
                                              "rope: frequency scaling for contexts past the trained one")));
    f.push_back(rope_scaling_field(double_field("rope_scaling_factor", &RopeScaling::factor,
                                                "rope_scaling linear, llama3, yarn, longrope: context stretch factor")));
    f.push_back(rope_scaling_field(double_field(
        "rope_low_freq_factor", &RopeScaling::low_freq_factor,
        "rope_scaling llama3: wavelengths over rope_original_max_positions / this are scaled")));
    f.push_back(rope_scaling_field(double_field(
        "rope_high_freq_factor", &RopeScaling::high_freq_factor,
        "rope_scaling llama3: wavelengths under rope_original_max_positions / this are kept")));
    f.push_back(rope_scaling_field(int_field("rope_original_max_positions", &RopeScaling::original_max_positions,
                                             "rope_scaling llama3, yarn, longrope: the context length trained at")));
    f.push_back(rope_scaling_field(double_field(
        "rope_beta_fast", &RopeScaling::beta_fast,
        "rope_scaling yarn: frequencies turning more often than this in the trained context are kept")));
    f.push_back(rope_scaling_field(double_field(
        "rope_beta_slow", &RopeScaling::beta_slow,
        "rope_scaling yarn: frequencies turning less often than this are divided by the factor")));
    f.push_back(rope_scaling_field(double_field(
        "rope_attention_factor", &RopeScaling::attention_factor,
        "rope_scaling yarn, longrope: cos and sin times this; 0: the paper's (yarn 0.1 ln(factor) + 1, longrope "
        "sqrt(1 + ln(factor) / ln(rope_original_max_positions)))")));
    f.push_back(rope_scaling_field(bool_field("rope_truncate", &RopeScaling::truncate,
                                              "rope_scaling yarn: round the ramp's ends outward")));
    f.push_back(rope_scaling_field(number_list_field(
        "rope_short_factor", &RopeScaling::short_factor,
        "rope_scaling longrope: each rotated pair's frequency divisor within the trained context")));
    f.push_back(rope_scaling_field(number_list_field(
        "rope_long_factor", &RopeScaling::long_factor,
        "rope_scaling longrope: the divisors for a forward reaching past rope_original_max_positions")));
    f.push_back(int_field("rotary_dim", &ModelConfig::rotary_dim,
                          "rope: the features of each head rotated (the first ones; Phi-3's partial_rotary_factor "
                          "x head_dim); 0 = all"));
    f.push_back(int_field("relative_buckets", &ModelConfig::relative_buckets,
                          "relative: number of position buckets"));
    f.push_back(int_field("relative_max_distance", &ModelConfig::relative_max_distance,
                          "relative: distance beyond which buckets stop growing"));
    f.push_back(enum_field("activation", &ModelConfig::activation, "feed-forward activation"));
    f.push_back({"window", "integer or null",
                 "sliding attention window: gpt, a query sees itself and window - 1 keys before; bert, window - 1 "
                 "keys to each side; null = unbounded", false,
                 [](ModelConfig& c, const YAML::Node& n) {
                   if (n.IsNull()) c.window = std::nullopt;
                   else c.window = as_int(n);
                 },
                 [](const ModelConfig& c) {
                   return c.window ? std::to_string(*c.window) : std::string("null");
                 }});
    f.push_back(layer_list_field("window_layers", &ModelConfig::window_layers,
                                 "window: the layers (from 0) it bounds, the others attend to every key (Gemma's "
                                 "sliding_attention layer_types); [] = every layer"));
    f.push_back(double_field("window_rope_base", &ModelConfig::window_rope_base,
                             "window_layers: their RoPE base, without rope_scaling (Gemma 3's rope_local_base_freq); "
                             "0 = rope_base and rope_scaling as the others"));
    f.push_back(int_field("attention_scale_dim", &ModelConfig::attention_scale_dim,
                          "scale_attention: divide scores by sqrt(this) (Gemma's query_pre_attn_scalar); 0 = head_dim"));
    f.push_back(double_field("attention_softcap", &ModelConfig::attention_softcap,
                             "cap * tanh(score / cap) of the scaled attention scores (Gemma 2's "
                             "attn_logit_softcapping); 0 = none"));
    f.push_back(double_field("logit_softcap", &ModelConfig::logit_softcap,
                             "gpt: cap * tanh(logit / cap) of the output logits (Gemma 2's final_logit_softcapping); "
                             "0 = none"));
    f.push_back(enum_field("attention_backend", &ModelConfig::attention_backend,
                           "auto: LibTorch's flash kernel or zoo's tiled one, per call; fused, tiled: always "
                           "that one; math: the explicit (T, T) path"));
    f.push_back(enum_field("attention", &ModelConfig::attention,
                           "gpt: what mixes tokens in every layer: softmax attention, or a recurrent state "
                           "(linear, gated_linear) that decodes in constant time and memory; bert: softmax, "
                           "linformer (keys and values projected along the sequence to linformer_k rows) or "
                           "longformer (a sliding window and global tokens, attention_window)"));
    f.push_back({"attention_layers", "list of: " + enum_names_joined<AttentionKind>(),
                 "gpt: one attention kind per layer (hybrids); [] = attention in every layer", false,
                 [](ModelConfig& c, const YAML::Node& n) {
                   if (!n.IsSequence()) throw BadValue{"a list of: " + enum_names_joined<AttentionKind>()};
                   std::vector<AttentionKind> kinds;
                   for (const auto& item : n) {
                     try {
                       kinds.push_back(from_string<AttentionKind>(as_string(item)));
                     } catch (const std::exception&) {
                       throw BadValue{"a list of: " + enum_names_joined<AttentionKind>() + " (item " +
                                      std::to_string(kinds.size() + 1) + " is '" + scalar_text(item) + "')"};
                     }
                   }
                   c.attention_layers = std::move(kinds);
                 },
                 [](const ModelConfig& c) {
                   std::string out = "[";
                   for (size_t i = 0; i < c.attention_layers.size(); ++i)
                     out += (i ? ", " : "") + to_string(c.attention_layers[i]);
                   return out + "]";
                 }});
    f.push_back(enum_field("feature_map", &ModelConfig::feature_map,
                           "linear attention: phi; performer = positive orthogonal random features (FAVOR+)"));
    f.push_back(bool_field("linear_normalize", &ModelConfig::linear_normalize,
                           "linear attention: divide each output by phi(q) . sum of phi(k)"));
    f.push_back(int_field("performer_features", &ModelConfig::performer_features,
                          "feature_map performer: random features per head"));
    f.push_back(int_field("performer_seed", &ModelConfig::performer_seed,
                          "feature_map performer: seed of the random features (stored with the model)"));
    f.push_back(double_field("gla_expand_k", &ModelConfig::gla_expand_k,
                             "gated_linear: key (and query) width as a multiple of d_model"));
    f.push_back(double_field("gla_expand_v", &ModelConfig::gla_expand_v,
                             "gated_linear: value width as a multiple of d_model"));
    f.push_back(int_field("gla_gate_rank", &ModelConfig::gla_gate_rank,
                          "gated_linear: rank of the decay gate's low-rank projection"));
    f.push_back(double_field("gla_gate_normalizer", &ModelConfig::gla_gate_normalizer,
                             "gated_linear: tau, the decay is sigmoid(x W1 W2 + b)^(1/tau)"));
    f.push_back(int_field("linformer_k", &ModelConfig::linformer_k,
                          "linformer: rows the keys and values are projected to (E, F: (k, max_positions))"));
    f.push_back(enum_field("linformer_sharing", &ModelConfig::linformer_sharing,
                           "linformer: per_head (an E and F per head), headwise (one E and F per layer), "
                           "key_value (one matrix per layer for both)"));
    f.push_back(list_field<int64_t, ModelConfig>(
        "attention_window", &ModelConfig::attention_window, "list of integers", "even window sizes",
        "longformer: the window of each layer, or one for all: w / 2 tokens to each side (transformers' "
        "attention_window)", parse_index, index_text));
    f.push_back(list_field<int64_t, ModelConfig>(
        "attention_dilation", &ModelConfig::attention_dilation, "list of integers", "dilations",
        "longformer: the dilation of each head, or one for all: a window joins every d-th token; [] = 1",
        parse_index, index_text));
    f.push_back(int_field("longformer_global_tokens", &ModelConfig::longformer_global_tokens,
                          "longformer: the first this many tokens attend globally (every token sees them, they see "
                          "every token); 0 = the first token under head sequence_classification, else none"));
    f.push_back(bool_field("bias", &ModelConfig::bias, "biases in linear layers and LayerNorm"));
    f.push_back(bool_field("qkv_bias", &ModelConfig::qkv_bias,
                           "biases on the query, key and value projections only (Qwen2), with bias: false"));
    f.push_back(bool_field("qk_norm", &ModelConfig::qk_norm,
                           "the model's norm over each query and key head, before rotary positions (Qwen3)"));
    f.push_back(bool_field("hf_fused_projections", &ModelConfig::hf_fused_projections,
                           "Hugging Face layout: q, k, v as one qkv_proj and gate, up as one gate_up_proj "
                           "(Phi-3); set by import-hf"));
    f.push_back(int_field("experts", &ModelConfig::experts,
                          "gpt: experts in each mixture-of-experts layer (Mixtral, Qwen3-MoE); 0 = dense"));
    f.push_back(int_field("experts_per_token", &ModelConfig::experts_per_token,
                          "experts: the top k experts each token is routed to"));
    f.push_back(int_field("expert_d_ff", &ModelConfig::expert_d_ff,
                          "experts: each expert's hidden width (Qwen3-MoE's moe_intermediate_size); 0 = d_ff"));
    f.push_back(bool_field("normalize_expert_weights", &ModelConfig::normalize_expert_weights,
                           "experts: divide the top k router probabilities by their sum (norm_topk_prob)"));
    f.push_back(bool_field("round_expert_weights", &ModelConfig::round_expert_weights,
                           "experts: round the routing weights to the activations' dtype before weighting (Qwen3-MoE's "
                           "modeling; false: in float32, as Mixtral's); the same in float32"));
    f.push_back(int_field("moe_layer_step", &ModelConfig::moe_layer_step,
                          "experts: layer i is a mixture when (i + 1) % this == 0 (decoder_sparse_step)"));
    f.push_back(layer_list_field("dense_layers", &ModelConfig::dense_layers,
                                 "experts: layers (from 0) that keep a dense feed-forward of d_ff (mlp_only_layers)"));
    f.push_back(double_field("router_aux_loss_coef", &ModelConfig::router_aux_loss_coef,
                             "experts: training's loss adds this times the routers' load-balancing loss"));
    f.push_back(bool_field("tie_embeddings", &ModelConfig::tie_embeddings,
                           "output head shares the token embedding matrix"));
    f.push_back(bool_field("scale_embeddings", &ModelConfig::scale_embeddings,
                           "multiply token embeddings by sqrt(d_model)"));
    f.push_back(bool_field("scale_attention", &ModelConfig::scale_attention,
                           "divide attention scores by sqrt(head_dim)"));
    f.push_back(bool_field("pooler", &ModelConfig::pooler, "bert: dense + tanh on the pooled tokens"));
    f.push_back(enum_field("pooling", &ModelConfig::pooling,
                           "bert: what a sequence head reads: the first token (cls) or the mean of the real tokens"));
    f.push_back(bool_field("head_transform", &ModelConfig::head_transform,
                           "bert classification heads: dense, activation and norm before the classifier (ModernBERT)"));
    f.push_back(bool_field("first_attention_norm", &ModelConfig::first_attention_norm,
                           "bert, pre-norm: a norm before layer 0's self-attention (ModernBERT has none)"));
    f.push_back(enum_field("head", &ModelConfig::head, "bert: task head"));
    f.push_back(int_field("num_labels", &ModelConfig::num_labels, "classification heads: classes"));
    f.push_back(double_field("dropout", &ModelConfig::dropout,
                             "embeddings, residual branches and feed-forward hidden"));
    f.push_back(double_field("attention_dropout", &ModelConfig::attention_dropout,
                             "attention weights"));
    f.push_back(enum_field("init", &ModelConfig::init, "weight initialisation"));
    f.push_back(double_field("init_std", &ModelConfig::init_std, "normal and gpt2 init: std"));
    f.push_back(int_field("pad_id", &ModelConfig::pad_id, "padding token id"));
    f.push_back(int_field("decoder_start_id", &ModelConfig::decoder_start_id,
                          "t5, transformer: first decoder input"));
    return f;
  }();
  return kFields;
}

const Field* find_field(const std::string& key) { return yaml::find_field(fields(), key); }

std::string unknown_key_message(const std::string& key) { return yaml::unknown_key_message(fields(), key); }

void set_field(ModelConfig& config, const Field& field, const YAML::Node& value, const std::string& location) {
  yaml::set_field<ConfigError>(config, field, value, location);
}

// BERT's heads and the keys only an encoder has.
template <typename Fail>
void validate_bert_heads(const ModelConfig& c, const Fail& fail) {
  const bool bert = c.family == Family::kBert;
  for (const auto& [key, set] : {std::pair<const char*, bool>{"head", c.head != BertHead::kNone},
                                 {"pooling", c.pooling != Pooling::kCls},
                                 {"head_transform", c.head_transform},
                                 {"first_attention_norm", !c.first_attention_norm}}) {
    if (!bert && set) fail(std::string(key) + " applies to family bert, not " + to_string(c.family));
  }
  if ((c.head == BertHead::kNextSentence || c.head == BertHead::kPretraining) && !c.pooler) {
    fail("head " + to_string(c.head) + " reads the pooled output: set pooler: true");
  }
  const bool classifier = c.head == BertHead::kSequenceClassification || c.head == BertHead::kTokenClassification;
  if (c.head == BertHead::kSequenceClassification && !c.pooler && !c.head_transform) {
    fail("head sequence_classification reads the pooled tokens through a pooler or a head_transform: set one");
  }
  if (c.head_transform && !classifier) {
    fail("head_transform applies to heads sequence_classification and token_classification, not " + to_string(c.head));
  }
  if (!c.first_attention_norm && c.norm_position != NormPosition::kPre) {
    fail("first_attention_norm: false applies to norm_position pre");
  }
  if (bert && c.type_vocab_size == 0 && (c.head == BertHead::kPretraining || c.head == BertHead::kNextSentence)) {
    fail("head " + to_string(c.head) + " reads sentence pairs by their token types: type_vocab_size must be positive");
  }
}

// The position kind's and the sliding window's keys.
template <typename Fail>
void validate_positions(const ModelConfig& c, const Fail& fail) {
  if (c.window.has_value()) {
    if (c.family != Family::kGpt && c.family != Family::kBert) {
      fail("window applies to family gpt (causal) and bert (two-sided), not family " + to_string(c.family));
    }
    if (*c.window < 1) fail("window (" + std::to_string(*c.window) + ") must be >= 1");
  }
  for (const int64_t layer : c.window_layers) {
    if (!c.window) fail("window_layers applies to a sliding window: set window");
    if (layer < 0 || layer >= c.n_layers) {
      fail("window_layers holds " + std::to_string(layer) + ", not a layer of n_layers (" + std::to_string(c.n_layers) +
           ")");
    }
  }
  if (c.window_rope_base != 0.0) {
    if (!c.window || c.position != PositionKind::kRope) fail("window_rope_base applies to a window with position rope");
    if (!(c.window_rope_base > 1.0)) fail("window_rope_base (" + format_double(c.window_rope_base) + ") must be > 1");
  }
  if (c.attention_scale_dim < 0 || (c.attention_scale_dim > 0 && !c.scale_attention)) {
    fail("attention_scale_dim (" + std::to_string(c.attention_scale_dim) +
         ") must be positive, with scale_attention, or 0 for the head dimension");
  }
  if (!(c.attention_softcap >= 0.0) || !(c.logit_softcap >= 0.0)) {
    fail("attention_softcap (" + format_double(c.attention_softcap) + ") and logit_softcap (" +
         format_double(c.logit_softcap) + ") must be >= 0 (0: none)");
  }
  if (c.attention_softcap > 0.0 && c.attention_backend == AttentionBackend::kFused) {
    fail("attention_softcap needs zoo's kernels (attention_backend auto, tiled or math): LibTorch's fused kernel "
         "does not soft-cap");
  }
  if (c.norm_position == NormPosition::kSandwich && c.family != Family::kGpt) {
    fail("norm_position sandwich applies to decoder-only models (family gpt), not family " + to_string(c.family));
  }
  if (c.logit_softcap > 0.0 && c.family != Family::kGpt) {
    fail("logit_softcap applies to decoder-only models (family gpt), not family " + to_string(c.family));
  }
  if (c.position == PositionKind::kRope) {
    if (c.resolved_head_dim() % 2 != 0) {
      fail("position rope needs an even head dimension, got " + std::to_string(c.resolved_head_dim()));
    }
    if (!(c.rope_base > 1.0)) fail("rope_base (" + format_double(c.rope_base) + ") must be > 1");
    const int64_t rotated = c.rotary_dim > 0 ? c.rotary_dim : c.resolved_head_dim();
    if (c.rotary_dim < 0 || rotated % 2 != 0 || rotated > c.resolved_head_dim()) {
      fail("rotary_dim (" + std::to_string(c.rotary_dim) + ") must be even and at most the head dimension (" +
           std::to_string(c.resolved_head_dim()) + "), or 0 for all of it");
    }
    if (c.rope_scaling.kind == RopeScalingKind::kLongrope &&
        static_cast<int64_t>(c.rope_scaling.short_factor.size()) != rotated / 2) {
      fail("rope_short_factor and rope_long_factor hold " + std::to_string(c.rope_scaling.short_factor.size()) +
           " factors; rope_scaling longrope needs one per rotated pair (" + std::to_string(rotated / 2) + ")");
    }
  } else if (c.rotary_dim != 0) {
    fail("rotary_dim applies to position rope, not " + to_string(c.position));
  } else if (c.rope_scaling.kind != RopeScalingKind::kNone) {
    fail("rope_scaling " + to_string(c.rope_scaling.kind) + " applies to position rope, not " + to_string(c.position));
  }
  if (const auto problem = rope_scaling_problem(c.rope_scaling); !problem.empty()) fail(problem);
  if (c.position == PositionKind::kSinusoidal && c.d_model % 2 != 0) {
    fail("position sinusoidal needs an even d_model, got " + std::to_string(c.d_model));
  }
  if (c.position == PositionKind::kRelative) {
    if (c.relative_buckets < 4 || c.relative_buckets % 2 != 0) {
      fail("relative_buckets (" + std::to_string(c.relative_buckets) + ") must be even and >= 4");
    }
    if (c.relative_max_distance <= c.relative_buckets / 4) {
      fail("relative_max_distance (" + std::to_string(c.relative_max_distance) +
           ") must exceed relative_buckets / 4 (" + std::to_string(c.relative_buckets / 4) + ")");
    }
  }
}

// Longformer's keys (kernels/longformer_attention.h) and what it cannot take.
template <typename Fail>
void validate_longformer(const ModelConfig& c, const Fail& fail) {
  if (c.family == Family::kGpt) {
    fail("attention longformer's global tokens see every token, future ones included: a decoder's causal "
         "self-attention (family gpt) cannot take it; it applies to encoders (family bert)");
  }
  if (c.family != Family::kBert) fail("attention longformer applies to encoders (family bert), not family " + to_string(c.family));
  const auto sized = [&](const std::vector<int64_t>& values, int64_t n, const std::string& key, const std::string& per) {
    if (values.size() > 1 && static_cast<int64_t>(values.size()) != n) {
      fail(key + " has " + std::to_string(values.size()) + " values: one, or one per " + per + " (" + std::to_string(n) + ")");
    }
  };
  if (c.attention_window.empty()) fail("attention_window: longformer needs a window (one, or one per layer)");
  sized(c.attention_window, c.n_layers, "attention_window", "layer");
  for (const int64_t w : c.attention_window) {
    if (w < 2 || w % 2 != 0) {
      fail("attention_window values must be even and >= 2 (w / 2 tokens to each side), got " + std::to_string(w));
    }
  }
  sized(c.attention_dilation, c.n_heads, "attention_dilation", "head");
  for (const int64_t d : c.attention_dilation) {
    if (d < 1) fail("attention_dilation values must be >= 1, got " + std::to_string(d));
  }
  if (c.window.has_value()) fail("window: longformer has its own (attention_window)");
  if (c.position == PositionKind::kAlibi || c.position == PositionKind::kRelative || c.position == PositionKind::kRope) {
    fail("position " + to_string(c.position) + ": longformer takes learned, sinusoidal or none (its global "
         "projections take no position term)");
  }
  if (c.n_kv_heads > 0 && c.n_kv_heads != c.n_heads) {
    fail("n_kv_heads (" + std::to_string(c.n_kv_heads) + "): longformer has one key head per query head (n_heads " +
         std::to_string(c.n_heads) + ")");
  }
  if (c.attention_softcap > 0.0) fail("attention_softcap: longformer has no soft-capping");
  if (c.longformer_global_tokens < 0 || c.longformer_global_tokens > c.max_length()) {
    fail("longformer_global_tokens (" + std::to_string(c.longformer_global_tokens) + ") must be in [0, max_positions (" +
         std::to_string(c.max_length()) + ")]");
  }
}

// The attention kinds and the keys of the linear kinds (layers/linear_attention.h).
template <typename Fail>
void validate_attention_kinds(const ModelConfig& c, const Fail& fail) {
  if (!c.attention_layers.empty() && c.family != Family::kGpt) {
    fail("attention_layers applies to decoder-only models (family gpt), not family " + to_string(c.family));
  }
  const bool linformer = c.attention == AttentionKind::kLinformer ||
                         std::find(c.attention_layers.begin(), c.attention_layers.end(), AttentionKind::kLinformer) !=
                             c.attention_layers.end();
  if (linformer) {
    if (c.family == Family::kGpt) {
      fail("attention linformer projects keys along the sequence, which mixes future positions into every key: a "
           "decoder's causal self-attention (family gpt) cannot take it; it applies to encoders (family bert)");
    }
    if (c.family != Family::kBert) {
      fail("attention linformer applies to encoders (family bert), not family " + to_string(c.family));
    }
    if (c.linformer_k < 1 || c.linformer_k > c.max_length()) {
      fail("linformer_k (" + std::to_string(c.linformer_k) + ") must be in [1, max_positions (" +
           std::to_string(c.max_length()) + ")]: its projections take at most max_positions tokens");
    }
    if (c.window.has_value()) fail("window bounds keys by position, and linformer's projected keys have none");
    if (c.position == PositionKind::kAlibi || c.position == PositionKind::kRelative) {
      fail("position " + to_string(c.position) + " adds a term per (query, key) token pair, and linformer's keys are "
           "projected rows: use learned, sinusoidal, rope or none");
    }
    if (c.attention_softcap > 0.0) fail("attention_softcap: linformer's fused kernel has no soft-capping");
  } else if (c.attention == AttentionKind::kLongformer) {
    validate_longformer(c, fail);
  } else if (c.attention != AttentionKind::kSoftmax && c.family != Family::kGpt) {
    fail("attention " + to_string(c.attention) + " applies to decoder-only models (family gpt), not family " +
         to_string(c.family));
  }
  if (!c.attention_layers.empty() && static_cast<int64_t>(c.attention_layers.size()) != c.n_layers) {
    fail("attention_layers lists " + std::to_string(c.attention_layers.size()) + " kinds for n_layers (" +
         std::to_string(c.n_layers) + ") layers");
  }
  if (!c.has_recurrent_layers()) return;
  bool any_softmax = false, any_linear_kind = false, any_gated = false;
  for (int64_t i = 0; i < c.n_layers; ++i) {
    any_softmax = any_softmax || c.attention_of(i) == AttentionKind::kSoftmax;
    any_linear_kind = any_linear_kind || c.attention_of(i) == AttentionKind::kLinear;
    any_gated = any_gated || c.attention_of(i) == AttentionKind::kGatedLinear;
  }
  if (!any_softmax) {
    // These act inside softmax attention only; linear layers order tokens by their recurrence.
    const std::string none = "this model has no softmax attention layer (attention: " +
                             (c.attention_layers.empty() ? to_string(c.attention) : std::string("attention_layers")) + ")";
    switch (c.position) {
      case PositionKind::kRope:
      case PositionKind::kAlibi:
      case PositionKind::kRelative:
        fail("position " + to_string(c.position) + " acts inside softmax attention and " + none +
             ": use learned, sinusoidal or none");
        break;
      case PositionKind::kNone:
      case PositionKind::kLearned:
      case PositionKind::kSinusoidal:
        break;
    }
    if (c.window.has_value()) fail("window bounds softmax attention and " + none);
    if (c.n_kv_heads > 0 && c.n_kv_heads != c.n_heads) fail("n_kv_heads groups softmax attention's keys and " + none);
  }
  if (any_linear_kind) {
    if (c.feature_map == FeatureMap::kPerformer) {
      if (c.performer_features < 1 || c.performer_features > 65536) {
        fail("performer_features (" + std::to_string(c.performer_features) + ") must be in [1, 65536]");
      }
      if (!c.linear_normalize) {
        fail("feature_map performer needs linear_normalize: true (its features approximate softmax's "
             "numerator and denominator together)");
      }
    }
  }
  if (any_gated) {
    auto width = [&](const char* key, double expand) {
      // In doubles: a width past 64 bits (gla_expand_k 1e300) is left to the size check below,
      // which names it.
      const double w = expand * static_cast<double>(c.d_model);
      if (!(expand > 0.0) || w != std::floor(w) || std::fmod(w, static_cast<double>(c.n_heads)) != 0.0) {
        fail(std::string(key) + " (" + format_double(expand) + ") times d_model (" + std::to_string(c.d_model) +
             ") must be a whole multiple of n_heads (" + std::to_string(c.n_heads) + ")");
      }
    };
    width("gla_expand_k", c.gla_expand_k);
    width("gla_expand_v", c.gla_expand_v);
    if (c.gla_gate_rank < 1) fail("gla_gate_rank (" + std::to_string(c.gla_gate_rank) + ") must be positive");
    if (!(c.gla_gate_normalizer > 0.0)) {
      fail("gla_gate_normalizer (" + format_double(c.gla_gate_normalizer) + ") must be positive");
    }
  }
}

// The mixture-of-experts keys (layers/mixture_of_experts.h).
template <typename Fail>
void validate_experts(const ModelConfig& c, const Fail& fail) {
  const bool defaults = c.experts_per_token == 2 && c.expert_d_ff == 0 && c.normalize_expert_weights &&
                        !c.round_expert_weights && c.moe_layer_step == 1 && c.dense_layers.empty();
  if (c.experts == 0) {
    if (!defaults) fail("experts_per_token, expert_d_ff, normalize_expert_weights, round_expert_weights, moe_layer_step "
                        "and dense_layers apply to a mixture of experts: set experts");
    return;
  }
  if (c.family != Family::kGpt) fail("experts applies to decoder-only models (family gpt), not family " + to_string(c.family));
  if (c.experts < 2) fail("experts (" + std::to_string(c.experts) + ") must be 0 (dense) or at least 2");
  if (c.experts_per_token < 1 || c.experts_per_token > c.experts) {
    fail("experts_per_token (" + std::to_string(c.experts_per_token) + ") must be in [1, experts (" +
         std::to_string(c.experts) + ")]");
  }
  if (c.expert_d_ff < 0) fail("expert_d_ff (" + std::to_string(c.expert_d_ff) + ") must be >= 0");
  if (!is_gated(c.activation)) {
    fail("experts are gated feed-forwards (swiglu, geglu, geglu_tanh), not activation " + to_string(c.activation));
  }
  if (c.bias) fail("experts have no biases (Mixtral, Qwen3-MoE): set bias: false");
  if (c.moe_layer_step < 1) fail("moe_layer_step (" + std::to_string(c.moe_layer_step) + ") must be >= 1");
  for (const int64_t layer : c.dense_layers) {
    if (layer < 0 || layer >= c.n_layers) {
      fail("dense_layers holds " + std::to_string(layer) + ", not a layer of n_layers (" + std::to_string(c.n_layers) +
           ")");
    }
  }
  if (!(c.router_aux_loss_coef >= 0.0)) {
    fail("router_aux_loss_coef (" + format_double(c.router_aux_loss_coef) + ") must be >= 0");
  }
}

}  // namespace

void set_sequence_classifier_pooling(ModelConfig& c) {
  if (c.pooler || c.head_transform) return;
  if (c.norm_position == NormPosition::kPre) c.head_transform = true;
  else c.pooler = true;
}

std::optional<int64_t> ModelConfig::window_of(int64_t layer) const {
  if (!window || window_layers.empty()) return window;
  const bool listed = std::find(window_layers.begin(), window_layers.end(), layer) != window_layers.end();
  return listed ? window : std::nullopt;
}

bool ModelConfig::is_moe_layer(int64_t layer) const {
  return experts > 0 && (layer + 1) % moe_layer_step == 0 &&
         std::find(dense_layers.begin(), dense_layers.end(), layer) == dense_layers.end();
}

bool ModelConfig::has_recurrent_layers() const {
  if (attention_layers.empty()) return is_recurrent(attention);
  return std::any_of(attention_layers.begin(), attention_layers.end(), is_recurrent);
}

ModelConfig family_defaults(Family family) {
  ModelConfig c;
  c.family = family;
  switch (family) {
    case Family::kGpt:  // GPT-2
      c.norm = NormKind::kLayerNorm, c.norm_eps = 1e-5, c.norm_position = NormPosition::kPre;
      c.position = PositionKind::kLearned, c.activation = Activation::kGELUTanh;
      c.init = InitScheme::kGpt2, c.max_positions = 1024;
      break;
    case Family::kBert:  // BERT (Devlin et al.)
      c.norm = NormKind::kLayerNorm, c.norm_eps = 1e-12, c.norm_position = NormPosition::kPost;
      c.position = PositionKind::kLearned, c.activation = Activation::kGELU;
      c.init = InitScheme::kNormal, c.max_positions = 512;
      break;
    case Family::kT5:  // T5 v1.0
      c.norm = NormKind::kRMSNorm, c.norm_eps = 1e-6, c.norm_position = NormPosition::kPre;
      c.position = PositionKind::kRelative, c.activation = Activation::kReLU;
      c.bias = false, c.scale_attention = false, c.init = InitScheme::kT5, c.max_positions = 512;
      break;
    case Family::kTransformer:  // Vaswani et al., base
      c.norm = NormKind::kLayerNorm, c.norm_eps = 1e-5, c.norm_position = NormPosition::kPost;
      c.position = PositionKind::kSinusoidal, c.activation = Activation::kReLU;
      c.scale_embeddings = true, c.attention_dropout = 0.0;
      c.init = InitScheme::kXavier, c.max_positions = 1024;
      break;
  }
  return c;
}

void ModelConfig::validate(const std::string& source) const {
  auto fail = [&](const std::string& message) { throw ConfigError(source + ": " + message); };
  auto positive = [&](const char* key, int64_t v) {
    if (v <= 0) fail(std::string(key) + " (" + std::to_string(v) + ") must be positive");
  };
  auto fraction = [&](const char* key, double v) {
    if (!(v >= 0.0 && v < 1.0)) fail(std::string(key) + " (" + format_double(v) + ") must be in [0, 1)");
  };
  const std::string fam = to_string(family);
  positive("vocab_size", vocab_size);
  positive("d_model", d_model);
  positive("n_heads", n_heads);
  positive("d_ff", d_ff);
  for (const auto& [key, value] : {std::pair<const char*, int64_t>{"n_layers", n_layers},
                                   {"encoder_layers", encoder_layers},
                                   {"decoder_layers", decoder_layers}}) {
    if (value < 0) fail(std::string(key) + " (" + std::to_string(value) + ") must not be negative");
  }
  if (is_encoder_decoder()) {
    if (resolved_encoder_layers() <= 0 || resolved_decoder_layers() <= 0) {
      fail("encoder_layers (" + std::to_string(encoder_layers) + ") and decoder_layers (" +
           std::to_string(decoder_layers) + ") must be positive (or set n_layers) for family " + fam);
    }
  } else {
    positive("n_layers", n_layers);
    if (encoder_layers != 0 || decoder_layers != 0) {
      fail("encoder_layers / decoder_layers apply to encoder-decoders, not family " + fam +
           " (use n_layers)");
    }
  }
  if (n_kv_heads < 0) fail("n_kv_heads (" + std::to_string(n_kv_heads) + ") must be >= 0");
  if (n_kv_heads > 0 && n_heads % n_kv_heads != 0) {
    fail("n_kv_heads (" + std::to_string(n_kv_heads) + ") must divide n_heads (" +
         std::to_string(n_heads) + ")");
  }
  if (head_dim < 0) fail("head_dim (" + std::to_string(head_dim) + ") must be >= 0");
  if (head_dim == 0 && d_model % n_heads != 0) {
    fail("n_heads (" + std::to_string(n_heads) + ") must divide d_model (" +
         std::to_string(d_model) + "), or set head_dim");
  }
  positive("max_positions", max_positions);
  if (!(norm_eps > 0.0)) fail("norm_eps (" + format_double(norm_eps) + ") must be positive");
  fraction("dropout", dropout);
  fraction("attention_dropout", attention_dropout);
  validate_positions(*this, fail);
  if (hf_fused_projections && (family != Family::kGpt || position != PositionKind::kRope)) {
    fail("hf_fused_projections (Phi-3's qkv_proj and gate_up_proj) is for family gpt with position rope");
  }
  if (qk_norm && family != Family::kGpt) fail("qk_norm (Qwen3's norms over query and key heads) is for family gpt");
  if (qk_norm && has_recurrent_layers()) {
    fail("qk_norm normalises softmax attention's query and key heads; attention_layers has linear layers");
  }
  if (qkv_bias && bias) {
    fail("qkv_bias adds query/key/value biases to a model without biases; bias: true has them already");
  }
  if (type_vocab_size < 0) fail("type_vocab_size (" + std::to_string(type_vocab_size) + ") must be >= 0 (0: none)");
  validate_bert_heads(*this, fail);
  validate_attention_kinds(*this, fail);
  validate_experts(*this, fail);
  positive("num_labels", num_labels);
  if (!(init_std > 0.0)) fail("init_std (" + format_double(init_std) + ") must be positive");
  if (pad_id < 0 || pad_id >= vocab_size) {
    fail("pad_id (" + std::to_string(pad_id) + ") must be a token id below vocab_size (" +
         std::to_string(vocab_size) + ")");
  }
  if (decoder_start_id < 0 || decoder_start_id >= vocab_size) {
    fail("decoder_start_id (" + std::to_string(decoder_start_id) +
         ") must be a token id below vocab_size (" + std::to_string(vocab_size) + ")");
  }
  // Every count and tensor size of the model is a 64-bit integer (LibTorch's too): a config whose
  // weights cannot be counted in one is refused here, naming the size that makes it so, before
  // a product overflows. 2^62 bytes is far beyond any machine; `zoo info` describes anything less.
  constexpr double kMaxWeightsBytes = 4611686018427387904.0;  // 2^62
  if (const double bytes = weights_bytes_lower_bound(*this); !(bytes < kMaxWeightsBytes)) {
    fail(largest_size(*this) + ": the model would hold " +
         approximately(estimate_parameters(*this)) + " parameters (" + approximately(bytes) +
         " bytes in float32), more than 64-bit sizes can count");
  }
}

ModelConfig config_from_yaml(const YAML::Node& node, const std::string& source) {
  if (!node.IsMap()) {
    throw ConfigError(where(source, node) + ": expected a mapping of config keys, got " +
                      (node.IsNull() ? "an empty document" : scalar_text(node)));
  }
  const YAML::Node family_node = node["family"];
  if (!family_node) {
    throw ConfigError(source + ": missing required key 'family' (one of: " + enum_names_joined<Family>() + ")");
  }
  ModelConfig probe;
  set_field(probe, *find_field("family"), family_node, where(source, family_node));
  ModelConfig config = family_defaults(probe.family);
  std::vector<std::string> seen;
  for (const auto& entry : node) {
    const std::string key = entry.first.Scalar();
    const Field* field = find_field(key);
    if (field == nullptr) throw ConfigError(where(source, entry.first) + ": " + unknown_key_message(key));
    if (std::find(seen.begin(), seen.end(), key) != seen.end()) {
      throw ConfigError(where(source, entry.first) + ": key '" + key + "' appears twice");
    }
    seen.push_back(key);
    set_field(config, *field, entry.second, where(source, entry.second));
  }
  for (const auto& f : fields()) {
    if (f.required && std::find(seen.begin(), seen.end(), f.name) == seen.end()) {
      throw ConfigError(source + ": missing required key '" + f.name + "' (" + f.type + ": " +
                        f.doc + ")");
    }
  }
  config.validate(source);
  return config;
}

ModelConfig parse_config(const std::string& yaml, const std::string& source) {
  YAML::Node node;
  try {
    node = YAML::Load(yaml);
  } catch (const YAML::Exception& e) {
    throw ConfigError(source + ":" + std::to_string(e.mark.line + 1) + ": malformed YAML: " + e.msg);
  }
  return config_from_yaml(node, source);
}

ModelConfig load_config(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw ConfigError(path + ": cannot open config file");
  std::stringstream buffer;
  buffer << in.rdbuf();
  if (buffer.str().find_first_not_of(" \t\r\n") == std::string::npos) {
    throw ConfigError(path + ": config file is empty");
  }
  return parse_config(buffer.str(), path);
}

namespace {

void set_override(ModelConfig& config, const std::string& assignment, const std::string& source) {
  const auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0) {
    throw ConfigError(source + ": expected key=value, got '" + assignment + "'");
  }
  const std::string key = assignment.substr(0, eq);
  const Field* field = find_field(key);
  if (field == nullptr) throw ConfigError(source + ": " + unknown_key_message(key));
  YAML::Node value;
  try {
    value = YAML::Load(assignment.substr(eq + 1));
  } catch (const YAML::Exception& e) {
    throw ConfigError(source + ": " + key + ": malformed value: " + e.msg);
  }
  if (key == "family") {
    throw ConfigError(source + ": family cannot be overridden (it sets every default)");
  }
  set_field(config, *field, value, source);
}

}  // namespace

void apply_override(ModelConfig& config, const std::string& assignment, const std::string& source) {
  set_override(config, assignment, source);
  config.validate(source);
}

void apply_overrides(ModelConfig& config, const std::vector<std::string>& assignments, const std::string& source) {
  for (const auto& a : assignments) set_override(config, a, source + " '" + a + "'");
  config.validate(source + (assignments.size() == 1 ? " '" + assignments[0] + "'" : "s"));
}

std::string to_yaml(const ModelConfig& config) {
  std::string out;
  for (const auto& f : fields()) out += f.name + ": " + f.get(config) + "\n";
  return out;
}

std::string schema_documentation() {
  std::ostringstream s;
  s << "Model config keys (YAML). Defaults per family: bert / gpt / t5 / transformer.\n\n";
  const ModelConfig d[] = {family_defaults(Family::kBert), family_defaults(Family::kGpt),
                           family_defaults(Family::kT5), family_defaults(Family::kTransformer)};
  for (const auto& f : fields()) {
    s << f.name << " (" << f.type << (f.required ? ", required" : "") << ")\n    " << f.doc << "\n";
    if (f.required || f.name == "family") continue;
    std::string defaults = f.get(d[0]);
    bool same = true;
    for (const auto& c : d) same = same && f.get(c) == defaults;
    if (!same) defaults = f.get(d[0]) + " / " + f.get(d[1]) + " / " + f.get(d[2]) + " / " + f.get(d[3]);
    s << "    default: " << defaults << "\n";
  }
  return s.str();
}

std::string find_config(const std::string& name_or_path) {
  namespace fs = std::filesystem;
  if (fs::is_regular_file(name_or_path)) return name_or_path;
  std::vector<fs::path> dirs;
  if (const char* env = std::getenv("ZOO_CONFIG_DIR")) dirs.emplace_back(env);
  dirs.emplace_back("configs");
#ifdef ZOO_SOURCE_CONFIG_DIR
  dirs.emplace_back(ZOO_SOURCE_CONFIG_DIR);
#endif
#ifdef ZOO_INSTALL_CONFIG_DIR
  dirs.emplace_back(ZOO_INSTALL_CONFIG_DIR);
#endif
  const std::string file = name_or_path.size() > 5 &&
                                   name_or_path.compare(name_or_path.size() - 5, 5, ".yaml") == 0
                               ? name_or_path
                               : name_or_path + ".yaml";
  std::vector<std::string> available;
  for (const auto& dir : dirs) {
    if (fs::is_regular_file(dir / file)) return (dir / file).string();
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      if (e.path().extension() == ".yaml") available.push_back(e.path().stem().string());
    }
  }
  std::sort(available.begin(), available.end());
  available.erase(std::unique(available.begin(), available.end()), available.end());
  throw ConfigError("no config '" + name_or_path + "': not a file, and not a named config (" +
                    (available.empty() ? std::string("none found") : "available: " + join(available)) + ")");
}

std::string context_parallel_refusal(const ModelConfig& config) {
  switch (config.family) {
    case Family::kGpt:
    case Family::kT5:
    case Family::kTransformer:
      break;
    case Family::kBert:
      switch (config.head) {
        case BertHead::kMaskedLM:
        case BertHead::kPretraining:
          break;
        case BertHead::kNone:
        case BertHead::kNextSentence:
        case BertHead::kSequenceClassification:
        case BertHead::kTokenClassification:
          return "ring attention trains bert's masked LM (model.head mlm, or pretraining without sentence_pairs), "
                 "not head " + to_string(config.head);
      }
      break;
  }
  if (config.has_recurrent_layers()) {
    return "ring attention splits softmax attention; this model has linear or gated_linear layers (model.attention)";
  }
  if (config.attention == AttentionKind::kLongformer) {
    return "longformer's global tokens see the whole sequence, which ring attention splits across ranks (model.attention)";
  }
  if (config.attention == AttentionKind::kLinformer) {
    return "linformer projects the whole sequence's keys, which ring attention splits across ranks (model.attention)";
  }
  if (config.family == Family::kBert && config.window) {
    return "ring attention bounds causal windows only, not an encoder's two-sided one (model.window)";
  }
  if (config.attention_softcap > 0.0 || config.has_mixed_windows()) {
    return "ring attention takes one window for every layer and no soft-capping (model.attention_softcap, "
           "model.window_layers)";
  }
  switch (config.attention_backend) {
    case AttentionBackend::kAuto:
    case AttentionBackend::kTiled:
      return "";
    case AttentionBackend::kFused:
    case AttentionBackend::kMath:
      return "model.attention_backend (" + to_string(config.attention_backend) +
             ") must be auto or tiled: ring attention runs zoo's tiled kernel on each block";
  }
  return "";
}

}  // namespace zoo
