#include "interop/hf_model_config.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tokenizers/tokenizer.h"

namespace zoo {
namespace {

using nlohmann::json;

// A JSON value as the file spells it, shortened for messages.
std::string shown(const json& value) {
  const std::string text = value.dump();
  return text.size() > 40 ? text.substr(0, 37) + "..." : text;
}

// Each JSON type a key may hold: nlohmann would turn 2.5 into the integer 2 without a word.
template <typename T>
struct JsonType;
template <>
struct JsonType<int64_t> {
  static bool holds(const json& v) { return v.is_number_integer(); }
  static constexpr const char* kName = "an integer";
};
template <>
struct JsonType<double> {
  static bool holds(const json& v) { return v.is_number(); }
  static constexpr const char* kName = "a number";
};
template <>
struct JsonType<bool> {
  static bool holds(const json& v) { return v.is_boolean(); }
  static constexpr const char* kName = "true or false";
};
template <>
struct JsonType<std::string> {
  static bool holds(const json& v) { return v.is_string(); }
  static constexpr const char* kName = "a string";
};

bool present(const json& object, const char* key) { return object.contains(key) && !object[key].is_null(); }

// object[key] as T; `prefix` names the enclosing object in messages ("rope_scaling.").
template <typename T>
T get(const json& object, const char* key, const std::string& source, const std::string& prefix = "") {
  if (!present(object, key)) throw ConfigError(source + ": missing key '" + prefix + key + "'");
  const json& value = object[key];
  if (!JsonType<T>::holds(value)) {
    throw ConfigError(source + ": key '" + prefix + key + "' must be " + JsonType<T>::kName + ", got " + shown(value));
  }
  return value.get<T>();
}

template <typename T>
T get_or(const json& object, const char* key, T fallback, const std::string& source, const std::string& prefix = "") {
  return present(object, key) ? get<T>(object, key, source, prefix) : fallback;
}

// Integer keys a model type requires, each into its ModelConfig field.
using IntegerKey = std::pair<const char*, int64_t ModelConfig::*>;
void read_integers(const json& hf, std::initializer_list<IntegerKey> keys, ModelConfig& c, const std::string& source) {
  for (const auto& [key, field] : keys) c.*field = get<int64_t>(hf, key, source);
}

std::string architecture(const json& config, const std::string& source) {
  if (config.contains("architectures") && config["architectures"].is_array() && !config["architectures"].empty()) {
    if (!config["architectures"][0].is_string()) throw ConfigError(source + ": architectures[0] must be a string");
    return config["architectures"][0].get<std::string>();
  }
  return "";
}

// Hugging Face's activation names (GPT-2's activation_function, BERT's hidden_act); the first
// name of an activation is the one written on export.
const std::vector<std::pair<std::string, Activation>> kActivations = {
    {"gelu_new", Activation::kGELUTanh}, {"gelu_pytorch_tanh", Activation::kGELUTanh},
    {"gelu", Activation::kGELU}, {"relu", Activation::kReLU}};

Activation activation_from_hf(const std::string& name, const std::string& key, const std::string& source) {
  for (const auto& [n, a] : kActivations)
    if (n == name) return a;
  throw ConfigError(source + ": " + key + " '" + name + "' has no zoo equivalent");
}

// "" when Hugging Face has no name for it.
std::string activation_to_hf(Activation activation) {
  for (const auto& [n, a] : kActivations)
    if (a == activation) return n;
  return "";
}

// The LLaMA family in Hugging Face: one layout (pre-norm RMSNorm, RoPE rotating half against
// half, SwiGLU, grouped-query attention, no biases), model types with a feature each: Mistral a
// sliding window, Qwen2 biases on q, k and v, Qwen3 an RMSNorm over each query and key head
// (and head_dim 128 unless said), Phi-3 fused projections, a partial rotation and LongRoPE. zoo
// builds them all as family gpt. Mixtral (Mistral's layers with a mixture of experts in each) and
// Qwen3-MoE (Qwen3's, with sparse layers by decoder_sparse_step and mlp_only_layers) too.
enum class LlamaType { kLlama, kMistral, kQwen2, kQwen3, kPhi3, kMixtral, kQwen3Moe };

// The model types zoo reads (config.json's model_type).
// zoo: zoo's own layout, for models Hugging Face has no class for (linear attention layers).
enum class HfModelType {
  kGpt2, kBert, kT5, kLlama, kMistral, kQwen2, kQwen3, kPhi3, kMixtral, kQwen3Moe, kGemma2, kGemma3Text, kModernBert,
  kLongformer, kZoo
};

}  // namespace

ZOO_ENUM_NAMES(HfModelType, "model_type", {"gpt2", HfModelType::kGpt2}, {"bert", HfModelType::kBert},
               {"t5", HfModelType::kT5}, {"llama", HfModelType::kLlama}, {"mistral", HfModelType::kMistral},
               {"qwen2", HfModelType::kQwen2}, {"qwen3", HfModelType::kQwen3}, {"phi3", HfModelType::kPhi3},
               {"mixtral", HfModelType::kMixtral}, {"qwen3_moe", HfModelType::kQwen3Moe},
               {"gemma2", HfModelType::kGemma2}, {"gemma3_text", HfModelType::kGemma3Text},
               {"modernbert", HfModelType::kModernBert}, {"longformer", HfModelType::kLongformer},
               {"zoo", HfModelType::kZoo});

ZOO_ENUM_NAMES(LlamaType, "model_type",
               {"llama", LlamaType::kLlama}, {"mistral", LlamaType::kMistral}, {"qwen2", LlamaType::kQwen2},
               {"qwen3", LlamaType::kQwen3}, {"phi3", LlamaType::kPhi3}, {"mixtral", LlamaType::kMixtral},
               {"qwen3_moe", LlamaType::kQwen3Moe});

namespace {

const char* causal_lm_class(LlamaType type) {
  switch (type) {
    case LlamaType::kLlama: return "LlamaForCausalLM";
    case LlamaType::kMistral: return "MistralForCausalLM";
    case LlamaType::kQwen2: return "Qwen2ForCausalLM";
    case LlamaType::kQwen3: return "Qwen3ForCausalLM";
    case LlamaType::kPhi3: return "Phi3ForCausalLM";
    case LlamaType::kMixtral: return "MixtralForCausalLM";
    case LlamaType::kQwen3Moe: return "Qwen3MoeForCausalLM";
  }
  return "";
}

// transformers' default max_position_embeddings (LlamaConfig, MistralConfig, Qwen2Config, Qwen3Config,
// Phi3Config, MixtralConfig, Qwen3MoeConfig).
int64_t default_max_positions(LlamaType type) {
  switch (type) {
    case LlamaType::kLlama: return 2048;
    case LlamaType::kPhi3: return 4096;
    case LlamaType::kMistral:
    case LlamaType::kMixtral: return 4096 * 32;
    case LlamaType::kQwen2:
    case LlamaType::kQwen3:
    case LlamaType::kQwen3Moe: return 32768;
  }
  return 0;
}

// The numbers of rope[key], one per rotated pair (longrope's factors).
std::vector<double> numbers(const json& rope, const char* key, const std::string& source, const std::string& prefix) {
  if (!present(rope, key)) throw ConfigError(source + ": missing key '" + prefix + key + "'");
  const json& list = rope[key];
  std::vector<double> out;
  if (list.is_array()) {
    for (const auto& v : list) {
      if (!v.is_number()) break;
      out.push_back(v.get<double>());
    }
  }
  if (!list.is_array() || out.size() != list.size()) {
    throw ConfigError(source + ": key '" + prefix + key + "' must be a list of numbers, got " + shown(list));
  }
  return out;
}

// The share of each head's features RoPE rotates: partial_rotary_factor, beside rope_theta
// (transformers 5) or at the top (4). Phi-3's alone: LLaMA's modeling rotates whole heads.
void partial_rotary_from_hf(const json& hf, LlamaType type, ModelConfig& c, const std::string& source) {
  const bool v5 = present(hf, "rope_parameters") && hf["rope_parameters"].is_object() &&
                  present(hf["rope_parameters"], "partial_rotary_factor");
  const double fraction = v5 ? get<double>(hf["rope_parameters"], "partial_rotary_factor", source, "rope_parameters.")
                             : get_or<double>(hf, "partial_rotary_factor", 1.0, source);
  const std::string key = v5 ? "rope_parameters.partial_rotary_factor" : "partial_rotary_factor";
  if (fraction == 1.0) return;
  if (type != LlamaType::kPhi3) {
    throw ConfigError(source + ": " + key + " " + shown(json(fraction)) + " is not supported for " + to_string(type) +
                      " (transformers rotates its whole heads; phi3 rotates a part)");
  }
  const int64_t head_dim = c.resolved_head_dim();
  const auto rotated = static_cast<int64_t>(static_cast<double>(head_dim) * fraction);  // Python's int()
  if (!(fraction > 0.0 && fraction < 1.0) || rotated < 2 || rotated % 2 != 0) {
    throw ConfigError(source + ": " + key + " " + shown(json(fraction)) + " rotates " + std::to_string(rotated) +
                      " of head_dim " + std::to_string(head_dim) + " features; zoo needs an even number from 2 up");
  }
  c.rotary_dim = rotated;
}

// RoPE's base and scaling: rope_theta and rope_scaling (transformers 4), or both inside
// rope_parameters (transformers 5). rope_type "default" (or none at all) is unscaled.
void rope_from_hf(const json& hf, LlamaType type, ModelConfig& c, const std::string& source) {
  const bool v5 = present(hf, "rope_parameters");
  const std::string key = v5 ? "rope_parameters" : "rope_scaling";
  const std::string prefix = key + ".";
  c.rope_base = v5 ? get_or<double>(hf[key], "rope_theta", 10000.0, source, prefix)
                   : get_or<double>(hf, "rope_theta", 10000.0, source);
  if (!present(hf, key.c_str())) return;
  const json& rope = hf[key];
  if (!rope.is_object()) throw ConfigError(source + ": key '" + key + "' must be an object or null, got " + shown(rope));
  // Older files say "type", newer ones "rope_type".
  const char* kind_key = rope.contains("type") && !rope.contains("rope_type") ? "type" : "rope_type";
  if (v5 && !rope.contains(kind_key)) return;
  auto kind = get<std::string>(rope, kind_key, source, prefix);
  // Phi3Config reads Phi-3's early names for LongRoPE ("su", "yarn") as longrope, and no other kind.
  if (type == LlamaType::kPhi3) {
    if (kind == "su" || kind == "yarn") kind = "longrope";
    if (kind != "default" && kind != "longrope") {
      throw ConfigError(source + ": " + prefix + kind_key + " '" + kind + "' is not supported for phi3 (default or "
                        "longrope, as transformers' Phi3Config)");
    }
  }
  RopeScaling& s = c.rope_scaling;
  if (kind == "default") {
    s.kind = RopeScalingKind::kNone;
  } else if (kind == "linear") {
    s.kind = RopeScalingKind::kLinear;
    s.factor = get<double>(rope, "factor", source, prefix);
  } else if (kind == "llama3") {
    s.kind = RopeScalingKind::kLlama3;
    s.factor = get<double>(rope, "factor", source, prefix);
    s.low_freq_factor = get<double>(rope, "low_freq_factor", source, prefix);
    s.high_freq_factor = get<double>(rope, "high_freq_factor", source, prefix);
    s.original_max_positions = get<int64_t>(rope, "original_max_position_embeddings", source, prefix);
  } else if (kind == "yarn") {
    // As transformers' _compute_yarn_parameters reads it: the trained context defaults to
    // max_position_embeddings, a null factor is the ratio of the two, and DeepSeek's mscale and
    // mscale_all_dim give the attention factor when it is not said.
    s.kind = RopeScalingKind::kYarn;
    s.original_max_positions = get_or<int64_t>(rope, "original_max_position_embeddings", c.max_positions, source, prefix);
    s.factor = get_or<double>(rope, "factor", static_cast<double>(c.max_positions) /
                                                  static_cast<double>(std::max<int64_t>(s.original_max_positions, 1)),
                              source, prefix);
    s.beta_fast = get_or<double>(rope, "beta_fast", 32.0, source, prefix);
    s.beta_slow = get_or<double>(rope, "beta_slow", 1.0, source, prefix);
    s.truncate = get_or<bool>(rope, "truncate", true, source, prefix);
    s.attention_factor = get_or<double>(rope, "attention_factor", 0.0, source, prefix);
    const double mscale = get_or<double>(rope, "mscale", 0.0, source, prefix);
    const double mscale_all_dim = get_or<double>(rope, "mscale_all_dim", 0.0, source, prefix);
    if (s.attention_factor == 0.0 && mscale != 0.0 && mscale_all_dim != 0.0 && s.factor > 1.0) {
      s.attention_factor = (0.1 * mscale * std::log(s.factor) + 1.0) / (0.1 * mscale_all_dim * std::log(s.factor) + 1.0);
    }
  } else if (kind == "longrope") {
    // As transformers' _compute_longrope_parameters: the trained context is Phi-3's top-level
    // original_max_position_embeddings where the config has one, the factor (for the attention
    // factor alone) the ratio of the contexts unless said.
    s.kind = RopeScalingKind::kLongrope;
    s.original_max_positions =
        type == LlamaType::kPhi3
            ? get_or<int64_t>(hf, "original_max_position_embeddings", 4096, source)
            : get_or<int64_t>(rope, "original_max_position_embeddings", c.max_positions, source, prefix);
    s.factor = get_or<double>(rope, "factor", static_cast<double>(c.max_positions) /
                                                  static_cast<double>(std::max<int64_t>(s.original_max_positions, 1)),
                              source, prefix);
    s.attention_factor = get_or<double>(rope, "attention_factor", 0.0, source, prefix);
    s.short_factor = numbers(rope, "short_factor", source, prefix);
    s.long_factor = numbers(rope, "long_factor", source, prefix);
    // transformers divides by these factors whatever they are; zoo's rule (>= 1) is for the
    // stretch the other kinds apply.
    s.factor = std::max(s.factor, 1.0);
  } else {
    throw ConfigError(source + ": " + prefix + kind_key + " '" + kind +
                      "' is not supported (zoo implements default, linear, llama3, yarn and longrope)");
  }
}

// pad_token_id becomes the model's pad_id; bos_token_id and eos_token_id (an id or, for eos, a
// list of ids) belong to the tokenizer, so they are only checked.
void special_tokens_from_hf(const json& hf, ModelConfig& c, const std::string& source) {
  if (present(hf, "pad_token_id")) {
    const auto pad = get<int64_t>(hf, "pad_token_id", source);
    if (pad < 0 || pad >= c.vocab_size) {
      throw ConfigError(source + ": key 'pad_token_id' (" + std::to_string(pad) +
                        ") must be a token id below vocab_size (" + std::to_string(c.vocab_size) + ")");
    }
    c.pad_id = pad;
  }
  get_or<int64_t>(hf, "bos_token_id", 0, source);
  if (present(hf, "eos_token_id") && hf["eos_token_id"].is_array()) {
    for (const auto& id : hf["eos_token_id"]) {
      if (!id.is_number_integer()) {
        throw ConfigError(source + ": key 'eos_token_id' must be an integer or a list of integers, got " +
                          shown(hf["eos_token_id"]));
      }
    }
  } else {
    get_or<int64_t>(hf, "eos_token_id", 0, source);
  }
}

// Phi-3's own keys: fused projections in its files, a window only where said, one dropout.
void phi3_from_hf(const json& hf, ModelConfig& c, const std::string& source) {
  c.hf_fused_projections = true;
  if (present(hf, "sliding_window")) c.window = get<int64_t>(hf, "sliding_window", source);
  // zoo has one dropout for embeddings and residual branches (and the feed-forward's hidden).
  const double residual = get_or<double>(hf, "resid_pdrop", 0.0, source);
  const double embedding = get_or<double>(hf, "embd_pdrop", 0.0, source);
  if (residual != embedding) {
    throw ConfigError(source + ": resid_pdrop (" + shown(json(residual)) + ") with embd_pdrop (" +
                      shown(json(embedding)) + ") is not supported: zoo has one dropout for both");
  }
  c.dropout = residual;
}

// A sliding window: null or a number of keys, the query's own included; `fallback` when unsaid.
std::optional<int64_t> sliding_window_from_hf(const json& hf, int64_t fallback, const std::string& source) {
  if (!hf.contains("sliding_window")) return fallback;
  if (hf["sliding_window"].is_null()) return std::nullopt;
  return get<int64_t>(hf, "sliding_window", source);
}

// Qwen2's and Qwen3's window: only with use_sliding_window, in every layer or none.
void qwen_window_from_hf(const json& hf, ModelConfig& c, const std::string& source) {
  if (!get_or<bool>(hf, "use_sliding_window", false, source)) return;
  // transformers slides the window in layers max_window_layers and up only; newer files
  // spell that out as layer_types.
  int64_t full = get_or<int64_t>(hf, "max_window_layers", 28, source), sliding = 0;
  if (present(hf, "layer_types")) {
    if (!hf["layer_types"].is_array()) {
      throw ConfigError(source + ": key 'layer_types' must be a list, got " + shown(hf["layer_types"]));
    }
    full = 0;
    for (const auto& kind : hf["layer_types"]) {
      if (kind == "full_attention") ++full;
      else if (kind == "sliding_attention") ++sliding;
      else throw ConfigError(source + ": layer_types holds " + shown(kind) + " (full_attention or sliding_attention)");
    }
  } else {
    full = std::min(std::max<int64_t>(full, 0), c.n_layers);
    sliding = c.n_layers - full;
  }
  if (full > 0 && sliding > 0) {
    throw ConfigError(source + ": use_sliding_window with " + std::to_string(full) + " full and " +
                      std::to_string(sliding) + " sliding layers (max_window_layers, layer_types) is not "
                      "supported: zoo has one window for every layer");
  }
  if (sliding > 0) c.window = sliding_window_from_hf(hf, 4096, source);
}

// The mixture-of-experts keys of Mixtral and Qwen3-MoE, with MixtralConfig's and Qwen3MoeConfig's
// defaults. transformers 5 writes num_experts as num_local_experts for both.
void experts_from_hf(const json& hf, LlamaType type, ModelConfig& c, const std::string& source) {
  const bool mixtral = type == LlamaType::kMixtral;
  const char* count_key = present(hf, "num_local_experts") || mixtral ? "num_local_experts" : "num_experts";
  c.experts = get_or<int64_t>(hf, count_key, mixtral ? 8 : 128, source);
  c.experts_per_token = get_or<int64_t>(hf, "num_experts_per_tok", mixtral ? 2 : 8, source);
  c.router_aux_loss_coef = get_or<double>(hf, "router_aux_loss_coef", 0.001, source);
  if (mixtral) {
    // Noise on the router's input in training, which zoo's router does not draw.
    if (const double jitter = get_or<double>(hf, "router_jitter_noise", 0.0, source); jitter != 0.0) {
      throw ConfigError(source + ": router_jitter_noise " + shown(json(jitter)) +
                        " is not supported (zoo's router takes no noise: 0)");
    }
    return;
  }
  c.expert_d_ff = get_or<int64_t>(hf, "moe_intermediate_size", 768, source);
  c.round_expert_weights = true;  // Qwen3MoeTopKRouter casts them to the activations' dtype
  c.normalize_expert_weights = get_or<bool>(hf, "norm_topk_prob", false, source);
  c.moe_layer_step = get_or<int64_t>(hf, "decoder_sparse_step", 1, source);
  if (present(hf, "mlp_only_layers")) {
    const json& layers = hf["mlp_only_layers"];
    if (!layers.is_array()) throw ConfigError(source + ": key 'mlp_only_layers' must be a list, got " + shown(layers));
    for (const auto& layer : layers) {
      if (!layer.is_number_integer()) {
        throw ConfigError(source + ": key 'mlp_only_layers' must hold layer indices, got " + shown(layers));
      }
      c.dense_layers.push_back(layer.get<int64_t>());
    }
  }
  if (c.experts == 0) {  // Qwen3MoeConfig's way of saying dense
    const auto coef = c.router_aux_loss_coef;
    c.experts_per_token = 2, c.expert_d_ff = 0, c.normalize_expert_weights = true, c.moe_layer_step = 1;
    c.round_expert_weights = false;
    c.dense_layers.clear(), c.router_aux_loss_coef = coef;
  }
}

ModelConfig llama_from_hf(const json& hf, LlamaType type, const std::string& arch, const std::string& source) {
  const std::string type_name = to_string(type);
  if (!arch.empty() && arch != causal_lm_class(type)) {
    throw ConfigError(source + ": architecture '" + arch + "' is not supported for " + type_name + " (" +
                      causal_lm_class(type) + ")");
  }
  ModelConfig c = family_defaults(Family::kGpt);
  c.norm = NormKind::kRMSNorm, c.norm_position = NormPosition::kPre;
  c.position = PositionKind::kRope, c.rope_layout = RopeLayout::kHalf;
  c.activation = Activation::kSwiGLU, c.bias = false, c.init = InitScheme::kNormal, c.dropout = 0.0;
  read_integers(hf, {{"vocab_size", &ModelConfig::vocab_size}, {"hidden_size", &ModelConfig::d_model},
                     {"num_hidden_layers", &ModelConfig::n_layers}, {"num_attention_heads", &ModelConfig::n_heads}},
                c, source);
  c.n_kv_heads = get_or<int64_t>(hf, "num_key_value_heads", c.n_heads, source);
  c.head_dim = get_or<int64_t>(hf, "head_dim", type == LlamaType::kQwen3 ? 128 : 0, source);  // Qwen3Config's default
  if (hf.contains("head_dim") && hf["head_dim"].is_null()) c.head_dim = 0;  // MixtralConfig writes null
  if (c.n_heads > 0 && c.d_model % c.n_heads == 0 && c.head_dim == c.d_model / c.n_heads) c.head_dim = 0;  // the default
  c.d_ff = get<int64_t>(hf, "intermediate_size", source);
  c.max_positions = get_or<int64_t>(hf, "max_position_embeddings", default_max_positions(type), source);
  c.norm_eps = get_or<double>(hf, "rms_norm_eps",
                              type == LlamaType::kPhi3 || type == LlamaType::kMixtral ? 1e-5 : 1e-6, source);
  rope_from_hf(hf, type, c, source);
  partial_rotary_from_hf(hf, type, c, source);
  const auto act = get_or<std::string>(hf, "hidden_act", "silu", source);
  if (act != "silu") {
    throw ConfigError(source + ": hidden_act '" + act + "' is not supported for " + type_name +
                      " (zoo's SwiGLU feed-forward gates with silu)");
  }
  c.tie_embeddings = get_or<bool>(hf, "tie_word_embeddings", false, source);  // each config class's default
  c.attention_dropout = get_or<double>(hf, "attention_dropout", 0.0, source);
  c.init_std = get_or<double>(hf, "initializer_range", 0.02, source);
  special_tokens_from_hf(hf, c, source);
  auto window = [&](int64_t fallback) { return sliding_window_from_hf(hf, fallback, source); };
  switch (type) {
    case LlamaType::kLlama: {
      // zoo biases every projection or none: both flags true, or both false.
      const bool attention_bias = get_or<bool>(hf, "attention_bias", false, source);
      const bool mlp_bias = get_or<bool>(hf, "mlp_bias", false, source);
      if (attention_bias != mlp_bias) {
        throw ConfigError(source + ": attention_bias (" + (attention_bias ? "true" : "false") + ") with mlp_bias (" +
                          (mlp_bias ? "true" : "false") +
                          ") is not supported: zoo has biases on every projection (both true) or none (both false)");
      }
      c.bias = attention_bias;
      break;
    }
    case LlamaType::kMistral: c.window = window(4096); break;
    case LlamaType::kMixtral:
      c.window = window(0);
      if (c.window == 0) c.window = std::nullopt;  // MixtralConfig's default: none
      experts_from_hf(hf, type, c, source);
      break;
    case LlamaType::kPhi3: phi3_from_hf(hf, c, source); break;
    case LlamaType::kQwen2:
    case LlamaType::kQwen3:
    case LlamaType::kQwen3Moe: {
      if (type == LlamaType::kQwen3Moe) experts_from_hf(hf, type, c, source);
      if (type == LlamaType::kQwen2) {
        c.qkv_bias = true;
      } else {
        c.qk_norm = true;
        // Qwen3's attention_bias biases q, k, v and the output, its feed-forward never.
        if (get_or<bool>(hf, "attention_bias", false, source)) {
          throw ConfigError(source + ": attention_bias true is not supported for " + type_name + ": zoo has biases on every "
                            "projection, the feed-forward's included, or on q, k and v alone (qkv_bias)");
        }
      }
      qwen_window_from_hf(hf, c, source);
      break;
    }
  }
  return c;
}

// The LLaMA-family model type a family gpt config with rotary positions exports as, or `none`
// saying why it has none.
LlamaType llama_type_to_hf(const ModelConfig& c, const std::function<void(const std::string&)>& none) {
  if (c.rope_layout != RopeLayout::kHalf) none("Hugging Face's LLaMA rotates half against half (rope_layout half)");
  if (c.norm != NormKind::kRMSNorm || c.norm_position != NormPosition::kPre || c.activation != Activation::kSwiGLU ||
      c.scale_embeddings || !c.scale_attention) {
    none("the LLaMA family is pre-norm RMSNorm with a swiglu feed-forward, unscaled embeddings and scaled attention");
  }
  if (c.bias && c.window) none("Mistral has no biases");
  if (c.qk_norm && (c.bias || c.qkv_bias)) none("Qwen3, the LLaMA family's one with q/k norms, has no biases");
  const bool phi3 = hf_phi3_layout(c);
  if (phi3 && (c.bias || c.qkv_bias || c.qk_norm)) {
    none("Phi-3, the LLaMA family's one with fused projections, a partial rotation or LongRoPE, has no biases "
         "and no q/k norms");
  }
  if (!phi3 && c.rope_scaling.kind == RopeScalingKind::kLongrope) none("longrope is Phi-3's");
  if (phi3 && (c.rope_scaling.kind == RopeScalingKind::kLinear || c.rope_scaling.kind == RopeScalingKind::kLlama3 ||
               c.rope_scaling.kind == RopeScalingKind::kYarn)) {
    none("Phi-3 (fused projections or a partial rotation) scales RoPE by longrope alone");
  }
  const bool moe = c.has_moe_layers();
  if (moe && (phi3 || c.qkv_bias)) none("Hugging Face's mixtures of experts (Mixtral, Qwen3-MoE) have no fused "
                                        "projections, partial rotation or q/k/v biases");
  const bool mixtral_experts = c.resolved_expert_d_ff() == c.d_ff && c.normalize_expert_weights &&
                               c.moe_layer_step == 1 && c.dense_layers.empty();
  if (moe && !c.qk_norm && !mixtral_experts) {
    none("Mixtral's every layer is a mixture of d_ff-wide experts with renormalised weights; sparse steps, dense "
         "layers, other widths and raw weights are Qwen3-MoE's, which has q/k norms (qk_norm)");
  }
  return moe          ? (hf_mixtral_layout(c) ? LlamaType::kMixtral : LlamaType::kQwen3Moe)
         : phi3       ? LlamaType::kPhi3
         : c.qk_norm  ? LlamaType::kQwen3
         : c.qkv_bias ? LlamaType::kQwen2
         : c.window   ? LlamaType::kMistral
                      : LlamaType::kLlama;
}

// config.json's rope_scaling: null unless scaled.
json rope_scaling_to_hf(const ModelConfig& c) {
  json rope_scaling;
  switch (c.rope_scaling.kind) {
    case RopeScalingKind::kNone: break;
    case RopeScalingKind::kLinear: rope_scaling = {{"rope_type", "linear"}, {"factor", c.rope_scaling.factor}}; break;
    case RopeScalingKind::kLlama3:
      rope_scaling = {{"rope_type", "llama3"},
                      {"factor", c.rope_scaling.factor},
                      {"low_freq_factor", c.rope_scaling.low_freq_factor},
                      {"high_freq_factor", c.rope_scaling.high_freq_factor},
                      {"original_max_position_embeddings", c.rope_scaling.original_max_positions}};
      break;
    case RopeScalingKind::kYarn:
      rope_scaling = {{"rope_type", "yarn"},
                      {"factor", c.rope_scaling.factor},
                      {"original_max_position_embeddings", c.rope_scaling.original_max_positions},
                      {"beta_fast", c.rope_scaling.beta_fast},
                      {"beta_slow", c.rope_scaling.beta_slow},
                      {"truncate", c.rope_scaling.truncate}};
      if (c.rope_scaling.attention_factor > 0.0) rope_scaling["attention_factor"] = c.rope_scaling.attention_factor;
      break;
    case RopeScalingKind::kLongrope: {
      const auto& r = c.rope_scaling;
      rope_scaling = {{"rope_type", "longrope"}, {"short_factor", r.short_factor}, {"long_factor", r.long_factor}};
      // transformers takes the factor from the contexts' ratio unless said.
      const double ratio = static_cast<double>(c.max_positions) / static_cast<double>(r.original_max_positions);
      if (r.factor != std::max(ratio, 1.0)) rope_scaling["factor"] = r.factor;
      if (r.attention_factor > 0.0) rope_scaling["attention_factor"] = r.attention_factor;
      break;
    }
  }
  return rope_scaling;
}

// The LLaMA-family config.json of a family gpt config with rotary positions.
json llama_to_hf(const ModelConfig& c, const std::function<void(const std::string&)>& none) {
  const LlamaType type = llama_type_to_hf(c, none);
  const json rope_scaling = rope_scaling_to_hf(c);
  json hf = {{"model_type", to_string(type)}, {"architectures", {causal_lm_class(type)}},
             {"vocab_size", c.vocab_size}, {"hidden_size", c.d_model}, {"intermediate_size", c.d_ff},
             {"num_hidden_layers", c.n_layers}, {"num_attention_heads", c.n_heads},
             {"num_key_value_heads", c.n_kv_heads > 0 ? c.n_kv_heads : c.n_heads}, {"head_dim", c.resolved_head_dim()},
             {"max_position_embeddings", c.max_positions}, {"rms_norm_eps", c.norm_eps}, {"rope_theta", c.rope_base},
             {"rope_scaling", rope_scaling}, {"hidden_act", "silu"}, {"tie_word_embeddings", c.tie_embeddings},
             {"attention_dropout", c.attention_dropout}, {"initializer_range", c.init_std},
             {"pad_token_id", c.pad_id}, {"bos_token_id", SpecialTokens::kBos}, {"eos_token_id", SpecialTokens::kEos},
             {"torch_dtype", "float32"}};
  switch (type) {
    case LlamaType::kLlama:
      hf["attention_bias"] = c.bias;
      hf["mlp_bias"] = c.bias;
      break;
    case LlamaType::kMistral: hf["sliding_window"] = *c.window; break;
    case LlamaType::kMixtral:
      hf["sliding_window"] = c.window ? json(*c.window) : json(nullptr);
      hf["num_local_experts"] = c.experts;
      hf["num_experts_per_tok"] = c.experts_per_token;
      hf["router_aux_loss_coef"] = c.router_aux_loss_coef;
      hf["router_jitter_noise"] = 0.0;
      break;
    case LlamaType::kPhi3: {
      hf["sliding_window"] = c.window ? json(*c.window) : json(nullptr);
      hf["original_max_position_embeddings"] = c.rope_scaling.kind == RopeScalingKind::kLongrope
                                                   ? c.rope_scaling.original_max_positions
                                                   : c.max_positions;
      hf["resid_pdrop"] = hf["embd_pdrop"] = c.dropout;
      if (c.rotary_dim > 0 && c.rotary_dim < c.resolved_head_dim()) {
        // transformers rotates int(head_dim * factor) features: the ratio, nudged up where the
        // product rounds below.
        const auto head_dim = static_cast<double>(c.resolved_head_dim());
        double fraction = static_cast<double>(c.rotary_dim) / head_dim;
        if (static_cast<int64_t>(head_dim * fraction) != c.rotary_dim) fraction = std::nextafter(fraction, 2.0);
        hf["partial_rotary_factor"] = fraction;
      }
      if (c.resolved_head_dim() == c.d_model / c.n_heads) hf.erase("head_dim");
      break;
    }
    case LlamaType::kQwen2:
    case LlamaType::kQwen3:
    case LlamaType::kQwen3Moe:
      if (type != LlamaType::kQwen2) hf["attention_bias"] = false;
      if (type == LlamaType::kQwen3Moe) {
        hf["num_experts"] = c.experts;
        hf["num_experts_per_tok"] = c.experts_per_token;
        hf["moe_intermediate_size"] = c.resolved_expert_d_ff();
        hf["norm_topk_prob"] = c.normalize_expert_weights;
        hf["decoder_sparse_step"] = c.moe_layer_step;
        hf["mlp_only_layers"] = c.dense_layers;
        hf["router_aux_loss_coef"] = c.router_aux_loss_coef;
      }
      hf["use_sliding_window"] = c.window.has_value();
      hf["sliding_window"] = c.window ? json(*c.window) : json(nullptr);
      hf["max_window_layers"] = c.window ? 0 : c.n_layers;  // the window from layer 0, or in none
      break;
  }
  return hf;
}

// Gemma 2 and Gemma 3 (text): the LLaMA family's tensors with a norm after each branch too, and
// (1 + weight) RMSNorms, GeGLU, embeddings times sqrt(d_model), scores over query_pre_attn_scalar,
// sliding and full layers by layer_types; Gemma 2 soft-caps scores and logits, Gemma 3 norms
// queries and keys and gives its sliding layers a RoPE of their own.
enum class GemmaType { kGemma2, kGemma3 };

// Which layers slide: layer_types (full_attention or sliding_attention each), else the model
// type's rule `slides` of a layer, as its config class fills layer_types in.
std::vector<bool> sliding_layers_from_hf(const json& hf, int64_t layers, const std::function<bool(int64_t)>& slides,
                                         const std::string& source) {
  std::vector<bool> sliding;
  if (present(hf, "layer_types")) {
    const json& kinds = hf["layer_types"];
    if (!kinds.is_array() || static_cast<int64_t>(kinds.size()) != layers) {
      throw ConfigError(source + ": key 'layer_types' must list num_hidden_layers (" + std::to_string(layers) +
                        ") kinds, got " + shown(kinds));
    }
    for (const auto& kind : kinds) {
      if (kind != "full_attention" && kind != "sliding_attention") {
        throw ConfigError(source + ": layer_types holds " + shown(kind) + " (full_attention or sliding_attention)");
      }
      sliding.push_back(kind == "sliding_attention");
    }
    return sliding;
  }
  for (int64_t i = 0; i < layers; ++i) sliding.push_back(slides(i));
  return sliding;
}

// Which layers slide: layer_types, else Gemma 2's alternation (sliding first) or Gemma 3's
// sliding_window_pattern (every pattern-th layer full), as their configs fill it in.
std::vector<bool> gemma_sliding_layers(const json& hf, GemmaType type, int64_t layers, const std::string& source) {
  const int64_t pattern = type == GemmaType::kGemma2 ? 2 : get_or<int64_t>(hf, "sliding_window_pattern", 6, source);
  if (pattern < 1) throw ConfigError(source + ": key 'sliding_window_pattern' must be >= 1, got " + std::to_string(pattern));
  return sliding_layers_from_hf(hf, layers, [&](int64_t i) { return (i + 1) % pattern != 0; }, source);
}

// transformers 5's rope_parameters by layer kind (Gemma 3's, ModernBERT's): the full layers' RoPE
// (scaled or not) into c, the sliding layers' base (unscaled) into window_rope_base; each theta
// defaults to the model type's.
void layered_rope_from_hf(const json& rope, ModelConfig& c, double full_theta, double sliding_theta,
                          const std::string& source) {
  for (const char* kind : {"full_attention", "sliding_attention"}) {
    if (present(rope, kind) && !rope[kind].is_object()) {
      throw ConfigError(source + ": key 'rope_parameters." + kind + "' must be an object, got " + shown(rope[kind]));
    }
  }
  json global = {{"max_position_embeddings", c.max_positions},
                 {"rope_parameters", present(rope, "full_attention") ? rope["full_attention"] : json::object()}};
  if (!global["rope_parameters"].contains("rope_theta")) global["rope_parameters"]["rope_theta"] = full_theta;
  rope_from_hf(global, LlamaType::kLlama, c, source + " (rope_parameters.full_attention)");
  ModelConfig local = c;
  local.rope_scaling = RopeScaling{};
  json sliding = {{"max_position_embeddings", c.max_positions},
                  {"rope_parameters", present(rope, "sliding_attention") ? rope["sliding_attention"] : json::object()}};
  if (!sliding["rope_parameters"].contains("rope_theta")) sliding["rope_parameters"]["rope_theta"] = sliding_theta;
  rope_from_hf(sliding, LlamaType::kLlama, local, source + " (rope_parameters.sliding_attention)");
  if (local.rope_scaling.kind != RopeScalingKind::kNone) {
    throw ConfigError(source + ": rope_parameters.sliding_attention scaled by " + to_string(local.rope_scaling.kind) +
                      " is not supported: zoo's sliding layers take a base of their own, unscaled");
  }
  c.window_rope_base = local.rope_base;
}

// Gemma 3's RoPE: the full layers' (rope_parameters.full_attention, or rope_theta and rope_scaling)
// and the sliding layers' base (rope_parameters.sliding_attention, unscaled, or rope_local_base_freq).
void gemma3_rope_from_hf(const json& hf, ModelConfig& c, const std::string& source) {
  const bool v5 = present(hf, "rope_parameters") && hf["rope_parameters"].is_object() &&
                  (hf["rope_parameters"].contains("full_attention") || hf["rope_parameters"].contains("sliding_attention"));
  if (!v5) {
    json global = hf;
    if (!present(hf, "rope_theta") && !present(hf, "rope_parameters")) global["rope_theta"] = 1000000.0;
    rope_from_hf(global, LlamaType::kLlama, c, source);
    c.window_rope_base = get_or<double>(hf, "rope_local_base_freq", 10000.0, source);
    return;
  }
  layered_rope_from_hf(hf["rope_parameters"], c, 1000000.0, 10000.0, source);
}

ModelConfig gemma_from_hf(const json& hf, GemmaType type, const std::string& arch, const std::string& source) {
  const char* expected = type == GemmaType::kGemma2 ? "Gemma2ForCausalLM" : "Gemma3ForCausalLM";
  if (!arch.empty() && arch != expected) {
    throw ConfigError(source + ": architecture '" + arch + "' is not supported (" + expected + ")");
  }
  ModelConfig c = family_defaults(Family::kGpt);
  c.norm = NormKind::kRMSNormPlusOne, c.norm_position = NormPosition::kSandwich;
  c.position = PositionKind::kRope, c.rope_layout = RopeLayout::kHalf;
  c.bias = false, c.init = InitScheme::kNormal, c.dropout = 0.0, c.scale_embeddings = true;
  c.qk_norm = type == GemmaType::kGemma3;
  read_integers(hf, {{"vocab_size", &ModelConfig::vocab_size}, {"hidden_size", &ModelConfig::d_model},
                     {"num_hidden_layers", &ModelConfig::n_layers}, {"num_attention_heads", &ModelConfig::n_heads},
                     {"intermediate_size", &ModelConfig::d_ff}},
                c, source);
  c.n_kv_heads = get_or<int64_t>(hf, "num_key_value_heads", c.n_heads, source);
  c.head_dim = get_or<int64_t>(hf, "head_dim", 256, source);
  if (c.n_heads > 0 && c.d_model % c.n_heads == 0 && c.head_dim == c.d_model / c.n_heads) c.head_dim = 0;
  c.max_positions = get_or<int64_t>(hf, "max_position_embeddings", type == GemmaType::kGemma2 ? 8192 : 131072, source);
  c.norm_eps = get_or<double>(hf, "rms_norm_eps", 1e-6, source);
  const char* act_key = present(hf, "hidden_activation") ? "hidden_activation" : "hidden_act";
  const auto act = get_or<std::string>(hf, act_key, "gelu_pytorch_tanh", source);
  if (act != "gelu_pytorch_tanh" && act != "gelu") {
    throw ConfigError(source + ": " + act_key + " '" + act + "' is not supported (gelu_pytorch_tanh or gelu gating "
                      "zoo's GeGLU)");
  }
  c.activation = act == "gelu" ? Activation::kGeGLU : Activation::kGeGLUTanh;
  if (get_or<bool>(hf, "attention_bias", false, source)) {
    throw ConfigError(source + ": attention_bias true is not supported: zoo's Gemma has no biases");
  }
  if (get_or<bool>(hf, "use_bidirectional_attention", false, source)) {
    throw ConfigError(source + ": use_bidirectional_attention true (an embedding model) is not supported: zoo's "
                      "Gemma is a causal decoder");
  }
  const int64_t scale_dim = get_or<int64_t>(hf, "query_pre_attn_scalar", 256, source);
  if (scale_dim <= 0) throw ConfigError(source + ": key 'query_pre_attn_scalar' must be positive, got " + std::to_string(scale_dim));
  c.attention_scale_dim = scale_dim == c.resolved_head_dim() ? 0 : scale_dim;
  c.attention_softcap = get_or<double>(hf, "attn_logit_softcapping", type == GemmaType::kGemma2 ? 50.0 : 0.0, source);
  c.logit_softcap = get_or<double>(hf, "final_logit_softcapping", type == GemmaType::kGemma2 ? 30.0 : 0.0, source);
  if (hf.contains("attn_logit_softcapping") && hf["attn_logit_softcapping"].is_null()) c.attention_softcap = 0.0;
  if (hf.contains("final_logit_softcapping") && hf["final_logit_softcapping"].is_null()) c.logit_softcap = 0.0;
  if (type == GemmaType::kGemma2) rope_from_hf(hf, LlamaType::kLlama, c, source);
  const auto sliding = gemma_sliding_layers(hf, type, c.n_layers, source);
  const auto window = sliding_window_from_hf(hf, 4096, source);
  const auto count = std::count(sliding.begin(), sliding.end(), true);
  if (window && count > 0) {
    c.window = window;
    for (int64_t i = 0; i < c.n_layers && count < c.n_layers; ++i) {
      if (sliding[static_cast<size_t>(i)]) c.window_layers.push_back(i);
    }
  }
  if (type == GemmaType::kGemma3) {
    gemma3_rope_from_hf(hf, c, source);
    if (!c.window) c.window_rope_base = 0.0;
  }
  c.tie_embeddings = get_or<bool>(hf, "tie_word_embeddings", true, source);
  c.attention_dropout = get_or<double>(hf, "attention_dropout", 0.0, source);
  c.init_std = get_or<double>(hf, "initializer_range", 0.02, source);
  special_tokens_from_hf(hf, c, source);
  return c;
}

// Gemma's config.json of a config in its layout (norm rmsnorm_plus_one, norm_position sandwich),
// or `none` saying why it has none.
json gemma_to_hf(const ModelConfig& c, const std::function<void(const std::string&)>& none) {
  if (c.norm != NormKind::kRMSNormPlusOne || c.norm_position != NormPosition::kSandwich || c.position != PositionKind::kRope ||
      c.rope_layout != RopeLayout::kHalf || !c.scale_embeddings || !c.scale_attention || c.bias || c.qkv_bias ||
      (c.activation != Activation::kGeGLUTanh && c.activation != Activation::kGeGLU)) {
    none("Gemma is sandwich-norm rmsnorm_plus_one with RoPE rotating half against half, a geglu or geglu_tanh "
         "feed-forward, embeddings times sqrt(d_model), scaled attention and no biases");
  }
  if (c.has_moe_layers() || c.hf_fused_projections || c.rotary_dim != 0) {
    none("Gemma has no experts, fused projections or partial rotation");
  }
  const bool gemma3 = c.qk_norm;
  const bool own_local_rope = c.window && c.window_rope_base > 0.0 &&
                              (c.window_rope_base != c.rope_base || c.rope_scaling.kind != RopeScalingKind::kNone);
  if (!gemma3 && own_local_rope) none("Gemma 2 has one RoPE for every layer (Gemma 3's sliding layers have their own)");
  json layer_types = json::array();
  for (int64_t i = 0; i < c.n_layers; ++i) layer_types.push_back(c.window_of(i) ? "sliding_attention" : "full_attention");
  json hf = {{"model_type", gemma3 ? "gemma3_text" : "gemma2"},
             {"architectures", {gemma3 ? "Gemma3ForCausalLM" : "Gemma2ForCausalLM"}},
             {"vocab_size", c.vocab_size}, {"hidden_size", c.d_model}, {"intermediate_size", c.d_ff},
             {"num_hidden_layers", c.n_layers}, {"num_attention_heads", c.n_heads},
             {"num_key_value_heads", c.n_kv_heads > 0 ? c.n_kv_heads : c.n_heads}, {"head_dim", c.resolved_head_dim()},
             {"max_position_embeddings", c.max_positions}, {"rms_norm_eps", c.norm_eps},
             {"hidden_activation", c.activation == Activation::kGeGLU ? "gelu" : "gelu_pytorch_tanh"},
             {"query_pre_attn_scalar", c.attention_scale_dim > 0 ? c.attention_scale_dim : c.resolved_head_dim()},
             {"attn_logit_softcapping", c.attention_softcap > 0.0 ? json(c.attention_softcap) : json(nullptr)},
             {"final_logit_softcapping", c.logit_softcap > 0.0 ? json(c.logit_softcap) : json(nullptr)},
             {"sliding_window", c.window ? json(*c.window) : json(nullptr)}, {"layer_types", layer_types},
             {"tie_word_embeddings", c.tie_embeddings}, {"attention_bias", false},
             {"attention_dropout", c.attention_dropout}, {"initializer_range", c.init_std},
             {"pad_token_id", c.pad_id}, {"bos_token_id", SpecialTokens::kBos}, {"eos_token_id", SpecialTokens::kEos},
             {"torch_dtype", "float32"}};
  json global = {{"rope_type", "default"}, {"rope_theta", c.rope_base}};
  if (const json scaling = rope_scaling_to_hf(c); !scaling.is_null()) global.update(scaling);
  if (!gemma3) {
    hf["rope_parameters"] = global;
  } else {
    const double local_base = c.window_rope_base > 0.0 ? c.window_rope_base : c.rope_base;
    json local = {{"rope_type", "default"}, {"rope_theta", local_base}};
    // Without a base of their own the sliding layers rotate as the full ones, scaling included.
    if (c.window_rope_base == 0.0) local = global;
    hf["rope_parameters"] = {{"full_attention", global}, {"sliding_attention", local}};
  }
  return hf;
}

// ModernBERT's heads, by architecture: what zoo's bert config takes of each.
const std::map<std::string, BertHead> kModernBertHeads = {
    {"", BertHead::kNone}, {"ModernBertModel", BertHead::kNone}, {"ModernBertForMaskedLM", BertHead::kMaskedLM},
    {"ModernBertForSequenceClassification", BertHead::kSequenceClassification},
    {"ModernBertForTokenClassification", BertHead::kTokenClassification}};

// ModernBERT (a bert config: rotary positions, pre-norm without layer 0's attention norm, no
// segments, a gated feed-forward, local layers with a two-sided window of local_attention / 2
// keys to each side, and a head transform before its classifiers).
ModelConfig modernbert_from_hf(const json& hf, const std::string& arch, const std::string& source) {
  const auto head = kModernBertHeads.find(arch);
  if (head == kModernBertHeads.end()) {
    throw ConfigError(source + ": architecture '" + arch + "' is not supported for modernbert (ModernBertModel, "
                      "ModernBertForMaskedLM, ModernBertForSequenceClassification, ModernBertForTokenClassification)");
  }
  ModelConfig c = family_defaults(Family::kBert);
  read_integers(hf, {{"vocab_size", &ModelConfig::vocab_size}, {"hidden_size", &ModelConfig::d_model},
                     {"num_hidden_layers", &ModelConfig::n_layers}, {"num_attention_heads", &ModelConfig::n_heads},
                     {"intermediate_size", &ModelConfig::d_ff}},
                c, source);
  c.max_positions = get_or<int64_t>(hf, "max_position_embeddings", 8192, source);
  c.norm = NormKind::kLayerNorm, c.norm_position = NormPosition::kPre, c.first_attention_norm = false;
  c.norm_eps = get_or<double>(hf, "norm_eps", 1e-5, source);
  c.position = PositionKind::kRope, c.rope_layout = RopeLayout::kHalf, c.type_vocab_size = 0;
  c.bias = get_or<bool>(hf, "attention_bias", false, source);
  for (const char* key : {"mlp_bias", "norm_bias", "classifier_bias"}) {
    if (get_or<bool>(hf, key, false, source) != c.bias) {
      throw ConfigError(source + ": " + key + " differs from attention_bias: zoo's bias covers every linear and norm");
    }
  }
  if (!get_or<bool>(hf, "decoder_bias", true, source)) {
    throw ConfigError(source + ": decoder_bias false is not supported: zoo's masked-LM head has its output bias");
  }
  if (!get_or<bool>(hf, "tie_word_embeddings", true, source)) {
    throw ConfigError(source + ": tie_word_embeddings false is not supported: zoo's masked-LM decoder is the embeddings");
  }
  const auto act = get_or<std::string>(hf, "hidden_activation", "gelu", source);
  const Activation gate = activation_from_hf(act, "hidden_activation", source);
  if (get_or<std::string>(hf, "classifier_activation", "gelu", source) != act) {
    throw ConfigError(source + ": classifier_activation differs from hidden_activation ('" + act +
                      "'): zoo's heads take the feed-forward's");
  }
  switch (gate) {
    case Activation::kGELU: c.activation = Activation::kGeGLU; break;
    case Activation::kGELUTanh: c.activation = Activation::kGeGLUTanh; break;
    case Activation::kReLU:
    case Activation::kSiLU:
    case Activation::kSwiGLU:
    case Activation::kGeGLU:
    case Activation::kGeGLUTanh: throw ConfigError(source + ": hidden_activation '" + act + "' has no zoo GLU (gelu, gelu_new)");
  }
  const int64_t every = get_or<int64_t>(hf, "global_attn_every_n_layers", 3, source);
  if (every < 1) throw ConfigError(source + ": key 'global_attn_every_n_layers' must be >= 1, got " + std::to_string(every));
  const auto sliding = sliding_layers_from_hf(hf, c.n_layers, [&](int64_t i) { return i % every != 0; }, source);
  const int64_t local = get_or<int64_t>(hf, "local_attention", 128, source);
  if (local < 0) throw ConfigError(source + ": key 'local_attention' must be >= 0, got " + std::to_string(local));
  const auto count = std::count(sliding.begin(), sliding.end(), true);
  if (count > 0) {
    c.window = local / 2 + 1;  // |i - j| <= local_attention / 2
    for (int64_t i = 0; i < c.n_layers && count < c.n_layers; ++i) {
      if (sliding[static_cast<size_t>(i)]) c.window_layers.push_back(i);
    }
  }
  if (present(hf, "rope_scaling")) throw ConfigError(source + ": rope_scaling is not supported for modernbert");
  if (present(hf, "rope_parameters")) {
    if (!hf["rope_parameters"].is_object()) {
      throw ConfigError(source + ": key 'rope_parameters' must be an object, got " + shown(hf["rope_parameters"]));
    }
    layered_rope_from_hf(hf["rope_parameters"], c, 160000.0, 10000.0, source);
  } else {
    c.rope_base = get_or<double>(hf, "global_rope_theta", 160000.0, source);
    c.window_rope_base = get_or<double>(hf, "local_rope_theta", 10000.0, source);
  }
  if (!c.window || c.window_rope_base == c.rope_base) c.window_rope_base = 0.0;
  c.dropout = get_or<double>(hf, "mlp_dropout", 0.0, source);
  c.attention_dropout = get_or<double>(hf, "attention_dropout", 0.0, source);
  c.init_std = get_or<double>(hf, "initializer_range", 0.02, source);
  c.pad_id = get_or<int64_t>(hf, "pad_token_id", 0, source);
  c.head = head->second;
  c.pooler = false;
  c.head_transform = c.head == BertHead::kSequenceClassification || c.head == BertHead::kTokenClassification;
  const auto pooling = get_or<std::string>(hf, "classifier_pooling", "cls", source);
  if (pooling != "cls" && pooling != "mean") {
    throw ConfigError(source + ": classifier_pooling '" + pooling + "' is not supported (cls or mean)");
  }
  c.pooling = pooling == "mean" ? Pooling::kMean : Pooling::kCls;
  if (hf.contains("id2label")) c.num_labels = static_cast<int64_t>(hf["id2label"].size());
  c.num_labels = get_or<int64_t>(hf, "num_labels", c.num_labels, source);
  return c;
}

// ModernBERT's config.json of a bert config in its layout (position rope), or `none` saying why it has none.
json modernbert_to_hf(const ModelConfig& c, const std::function<void(const std::string&)>& none) {
  const bool gelu = c.activation == Activation::kGeGLU, gelu_tanh = c.activation == Activation::kGeGLUTanh;
  if (c.norm != NormKind::kLayerNorm || c.norm_position != NormPosition::kPre || c.first_attention_norm ||
      c.type_vocab_size != 0 || (!gelu && !gelu_tanh) || c.rope_layout != RopeLayout::kHalf || c.rotary_dim != 0 ||
      c.rope_scaling.kind != RopeScalingKind::kNone || c.head_dim != 0 || c.scale_embeddings || !c.scale_attention ||
      (c.n_kv_heads != 0 && c.n_kv_heads != c.n_heads) || c.pooler || c.qkv_bias || c.attention_softcap > 0.0 ||
      c.logit_softcap > 0.0 || c.attention_scale_dim > 0) {
    none("ModernBERT is pre-norm LayerNorm without layer 0's attention norm, unscaled RoPE rotating half against half, "
         "no segments (type_vocab_size 0), a geglu or geglu_tanh feed-forward, head_dim = d_model / n_heads, "
         "scaled attention over every head (no soft-capping, no attention_scale_dim), and no pooler");
  }
  const bool classifier = c.head == BertHead::kSequenceClassification || c.head == BertHead::kTokenClassification;
  if (c.head_transform != classifier) none("ModernBERT's classifiers, and only they, read a head transform");
  std::string arch;
  for (const auto& [name, head] : kModernBertHeads) {
    if (head == c.head && !name.empty()) arch = name;
  }
  if (arch.empty()) none("ModernBERT has no head " + to_string(c.head));
  if (c.window && *c.window < 1) none("a window of at least 1");
  json layer_types = json::array();
  for (int64_t i = 0; i < c.n_layers; ++i) layer_types.push_back(c.window_of(i) ? "sliding_attention" : "full_attention");
  const double local_base = c.window_rope_base > 0.0 ? c.window_rope_base : c.rope_base;
  const char* act = gelu ? "gelu" : "gelu_new";
  json hf = {{"model_type", "modernbert"}, {"architectures", {arch}}, {"vocab_size", c.vocab_size},
             {"hidden_size", c.d_model}, {"intermediate_size", c.d_ff}, {"num_hidden_layers", c.n_layers},
             {"num_attention_heads", c.n_heads}, {"max_position_embeddings", c.max_positions}, {"norm_eps", c.norm_eps},
             {"hidden_activation", act}, {"classifier_activation", act}, {"layer_types", layer_types},
             {"local_attention", c.window ? 2 * (*c.window - 1) : 128},
             {"rope_parameters", {{"full_attention", {{"rope_type", "default"}, {"rope_theta", c.rope_base}}},
                                  {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", local_base}}}}},
             {"attention_bias", c.bias}, {"mlp_bias", c.bias}, {"norm_bias", c.bias}, {"classifier_bias", c.bias},
             {"decoder_bias", true}, {"tie_word_embeddings", true}, {"attention_dropout", c.attention_dropout},
             {"mlp_dropout", c.dropout}, {"embedding_dropout", c.dropout}, {"classifier_dropout", c.dropout},
             {"classifier_pooling", c.pooling == Pooling::kMean ? "mean" : "cls"}, {"initializer_range", c.init_std},
             {"pad_token_id", c.pad_id}};
  if (classifier) hf["num_labels"] = c.num_labels;
  return hf;
}

ModelConfig gpt2_from_hf(const json& hf, const std::string& source) {
  ModelConfig c = family_defaults(Family::kGpt);
  read_integers(hf, {{"vocab_size", &ModelConfig::vocab_size}, {"n_embd", &ModelConfig::d_model},
                     {"n_layer", &ModelConfig::n_layers}, {"n_head", &ModelConfig::n_heads},
                     {"n_positions", &ModelConfig::max_positions}}, c, source);
  c.d_ff = get_or<int64_t>(hf, "n_inner", 4 * c.d_model, source);
  c.norm_eps = get_or<double>(hf, "layer_norm_epsilon", 1e-5, source);
  c.activation = activation_from_hf(get_or<std::string>(hf, "activation_function", "gelu_new", source),
                                    "activation_function", source);
  c.dropout = get_or<double>(hf, "resid_pdrop", 0.1, source);
  c.attention_dropout = get_or<double>(hf, "attn_pdrop", 0.1, source);
  c.tie_embeddings = get_or<bool>(hf, "tie_word_embeddings", true, source);
  c.init_std = get_or<double>(hf, "initializer_range", 0.02, source);
  if (get_or<bool>(hf, "scale_attn_by_inverse_layer_idx", false, source) || get_or<bool>(hf, "reorder_and_upcast_attn", false, source)) {
    throw ConfigError(source + ": scale_attn_by_inverse_layer_idx / reorder_and_upcast_attn have no zoo equivalent");
  }
  return c;
}

// Longformer's heads, by architecture, and whether its base model keeps its pooler there
// (LongformerForSequenceClassification's classifier.dense is zoo's pooler).
const std::map<std::string, BertHead>& longformer_heads() {
  static const std::map<std::string, BertHead> heads = {
      {"", BertHead::kNone}, {"LongformerModel", BertHead::kNone}, {"LongformerForMaskedLM", BertHead::kMaskedLM},
      {"LongformerForSequenceClassification", BertHead::kSequenceClassification},
      {"LongformerForTokenClassification", BertHead::kTokenClassification}};
  return heads;
}

// Longformer's config.json of a bert config with attention longformer, or `none` saying why it
// has none.
json longformer_to_hf(const ModelConfig& c, const std::function<void(const std::string&)>& none) {
  if (c.position != PositionKind::kLearned) none("longformer has learned positions");
  if (c.norm != NormKind::kLayerNorm || c.norm_position != NormPosition::kPost) none("longformer is post-norm LayerNorm");
  if (!c.bias || c.head_dim != 0 || c.qkv_bias) none("longformer has biases and head_dim = d_model / n_heads");
  const std::string act = activation_to_hf(c.activation);
  if (act.empty()) none("longformer has no gated feed-forward");
  std::string arch;
  for (const auto& [name, head] : longformer_heads()) {
    if (head == c.head && !name.empty()) arch = name;
  }
  if (arch.empty()) none("longformer has no " + to_string(c.head) + " head");
  const bool pooler = c.head == BertHead::kNone || c.head == BertHead::kSequenceClassification;
  if (c.pooler != pooler) none("transformers' " + arch + (c.pooler ? " has no pooler" : " has a pooler"));
  json windows = json::array();
  for (int64_t layer = 0; layer < c.n_layers; ++layer) windows.push_back(c.longformer_window_of(layer));
  json hf = {{"model_type", "longformer"}, {"architectures", {arch}}, {"vocab_size", c.vocab_size},
             {"hidden_size", c.d_model}, {"num_hidden_layers", c.n_layers}, {"num_attention_heads", c.n_heads},
             {"intermediate_size", c.d_ff}, {"max_position_embeddings", c.max_positions + c.pad_id + 1},
             {"type_vocab_size", c.type_vocab_size}, {"layer_norm_eps", c.norm_eps}, {"hidden_act", act},
             {"hidden_dropout_prob", c.dropout}, {"attention_probs_dropout_prob", c.attention_dropout},
             {"initializer_range", c.init_std}, {"pad_token_id", c.pad_id}, {"attention_window", windows}};
  if (c.head == BertHead::kSequenceClassification || c.head == BertHead::kTokenClassification) {
    hf["num_labels"] = c.num_labels;
  }
  return hf;
}

ModelConfig bert_from_hf(const json& hf, const std::string& arch, const std::string& source) {
  ModelConfig c = family_defaults(Family::kBert);
  read_integers(hf, {{"vocab_size", &ModelConfig::vocab_size}, {"hidden_size", &ModelConfig::d_model},
                     {"num_hidden_layers", &ModelConfig::n_layers},
                     {"num_attention_heads", &ModelConfig::n_heads},
                     {"intermediate_size", &ModelConfig::d_ff},
                     {"max_position_embeddings", &ModelConfig::max_positions}}, c, source);
  c.type_vocab_size = get_or<int64_t>(hf, "type_vocab_size", 2, source);
  c.norm_eps = get_or<double>(hf, "layer_norm_eps", 1e-12, source);
  c.activation = activation_from_hf(get_or<std::string>(hf, "hidden_act", "gelu", source), "hidden_act", source);
  if (get_or<std::string>(hf, "position_embedding_type", "absolute", source) != "absolute") {
    throw ConfigError(source + ": position_embedding_type other than absolute has no zoo equivalent");
  }
  c.dropout = get_or<double>(hf, "hidden_dropout_prob", 0.1, source);
  c.attention_dropout = get_or<double>(hf, "attention_probs_dropout_prob", 0.1, source);
  c.init_std = get_or<double>(hf, "initializer_range", 0.02, source);
  c.pad_id = get_or<int64_t>(hf, "pad_token_id", 0, source);
  const std::map<std::string, BertHead> heads = {
      {"", BertHead::kNone}, {"BertModel", BertHead::kNone}, {"BertForMaskedLM", BertHead::kMaskedLM},
      {"BertForNextSentencePrediction", BertHead::kNextSentence}, {"BertForPreTraining", BertHead::kPretraining},
      {"BertForSequenceClassification", BertHead::kSequenceClassification},
      {"BertForTokenClassification", BertHead::kTokenClassification}};
  auto it = heads.find(arch);
  if (it == heads.end()) throw ConfigError(source + ": architecture '" + arch + "' is not supported for bert");
  c.head = it->second;
  c.pooler = c.head != BertHead::kMaskedLM && c.head != BertHead::kTokenClassification;
  if (hf.contains("id2label")) c.num_labels = static_cast<int64_t>(hf["id2label"].size());
  c.num_labels = get_or<int64_t>(hf, "num_labels", c.num_labels, source);
  return c;
}

// Longformer (transformers' LongformerModel): RoBERTa's embeddings (positions counted from
// pad_token_id + 1: zoo's table is the file's without those first rows) under BERT's post-norm
// encoder; each layer's attention a window of attention_window (one, or one per layer) and global
// tokens with their own q, k, v.
ModelConfig longformer_from_hf(const json& hf, const std::string& arch, const std::string& source) {
  ModelConfig c = family_defaults(Family::kBert);
  read_integers(hf, {{"vocab_size", &ModelConfig::vocab_size}, {"hidden_size", &ModelConfig::d_model},
                     {"num_hidden_layers", &ModelConfig::n_layers},
                     {"num_attention_heads", &ModelConfig::n_heads},
                     {"intermediate_size", &ModelConfig::d_ff}}, c, source);
  const auto it = longformer_heads().find(arch);
  if (it == longformer_heads().end()) {
    throw ConfigError(source + ": architecture '" + arch + "' is not supported for longformer (LongformerModel, "
                      "LongformerForMaskedLM, LongformerForSequenceClassification, LongformerForTokenClassification)");
  }
  c.head = it->second;
  c.pooler = c.head == BertHead::kNone || c.head == BertHead::kSequenceClassification;
  c.pad_id = get_or<int64_t>(hf, "pad_token_id", 1, source);
  const int64_t table = get_or<int64_t>(hf, "max_position_embeddings", 4098, source);
  if (c.pad_id < 0 || table <= c.pad_id + 1) {
    throw ConfigError(source + ": max_position_embeddings (" + std::to_string(table) + ") must exceed pad_token_id + 1 (" +
                      std::to_string(c.pad_id + 1) + "): Longformer's positions start there");
  }
  c.max_positions = table - c.pad_id - 1;
  c.type_vocab_size = get_or<int64_t>(hf, "type_vocab_size", 2, source);
  c.norm_eps = get_or<double>(hf, "layer_norm_eps", 1e-12, source);
  c.activation = activation_from_hf(get_or<std::string>(hf, "hidden_act", "gelu", source), "hidden_act", source);
  c.dropout = get_or<double>(hf, "hidden_dropout_prob", 0.1, source);
  c.attention_dropout = get_or<double>(hf, "attention_probs_dropout_prob", 0.1, source);
  c.init_std = get_or<double>(hf, "initializer_range", 0.02, source);
  c.attention = AttentionKind::kLongformer;
  const json window = hf.contains("attention_window") ? hf.at("attention_window") : json(512);
  c.attention_window.clear();
  for (const auto& w : window.is_array() ? window : json::array({window})) {
    if (!w.is_number_integer()) throw ConfigError(source + ": attention_window holds '" + w.dump() + "', not an integer");
    c.attention_window.push_back(w.get<int64_t>());
  }
  if (hf.contains("id2label")) c.num_labels = static_cast<int64_t>(hf["id2label"].size());
  c.num_labels = get_or<int64_t>(hf, "num_labels", c.num_labels, source);
  return c;
}

ModelConfig t5_from_hf(const json& hf, const std::string& source) {
  ModelConfig c = family_defaults(Family::kT5);
  read_integers(hf, {{"vocab_size", &ModelConfig::vocab_size}, {"d_model", &ModelConfig::d_model},
                     {"d_kv", &ModelConfig::head_dim}, {"d_ff", &ModelConfig::d_ff},
                     {"num_layers", &ModelConfig::n_layers}, {"num_heads", &ModelConfig::n_heads}}, c, source);
  c.encoder_layers = c.n_layers;
  c.decoder_layers = get_or<int64_t>(hf, "num_decoder_layers", c.n_layers, source);
  c.relative_buckets = get_or<int64_t>(hf, "relative_attention_num_buckets", 32, source);
  c.relative_max_distance = get_or<int64_t>(hf, "relative_attention_max_distance", 128, source);
  c.norm_eps = get_or<double>(hf, "layer_norm_epsilon", 1e-6, source);
  const auto ff = get_or<std::string>(hf, "feed_forward_proj", "relu", source);
  if (ff == "relu") {
    c.activation = Activation::kReLU;
  } else if (ff == "gated-gelu") {
    c.activation = Activation::kGeGLUTanh;  // Hugging Face's gated-gelu uses gelu_new
  } else {
    throw ConfigError(source + ": feed_forward_proj '" + ff + "' has no zoo equivalent");
  }
  c.tie_embeddings = get_or<bool>(hf, "tie_word_embeddings", true, source);
  c.dropout = c.attention_dropout = get_or<double>(hf, "dropout_rate", 0.1, source);
  c.pad_id = get_or<int64_t>(hf, "pad_token_id", 0, source);
  c.decoder_start_id = get_or<int64_t>(hf, "decoder_start_token_id", 0, source);
  c.max_positions = std::max<int64_t>(c.max_positions, get_or<int64_t>(hf, "n_positions", 0, source));
  return c;
}

}  // namespace

ModelConfig config_from_hf(const json& hf, const std::string& source) {
  if (!hf.is_object()) throw ConfigError(source + ": expected a JSON object");
  const std::string type_name = get<std::string>(hf, "model_type", source);
  const std::string arch = architecture(hf, source);
  const auto type = find_enum<HfModelType>(type_name);
  if (!type) {
    throw ConfigError(source + ": model_type '" + type_name + "' is not supported (" + enum_names_joined<HfModelType>() + ")");
  }
  ModelConfig c;
  switch (*type) {
    case HfModelType::kGpt2: c = gpt2_from_hf(hf, source); break;
    case HfModelType::kBert: c = bert_from_hf(hf, arch, source); break;
    case HfModelType::kT5: c = t5_from_hf(hf, source); break;
    case HfModelType::kLlama: c = llama_from_hf(hf, LlamaType::kLlama, arch, source); break;
    case HfModelType::kMistral: c = llama_from_hf(hf, LlamaType::kMistral, arch, source); break;
    case HfModelType::kQwen2: c = llama_from_hf(hf, LlamaType::kQwen2, arch, source); break;
    case HfModelType::kQwen3: c = llama_from_hf(hf, LlamaType::kQwen3, arch, source); break;
    case HfModelType::kPhi3: c = llama_from_hf(hf, LlamaType::kPhi3, arch, source); break;
    case HfModelType::kMixtral: c = llama_from_hf(hf, LlamaType::kMixtral, arch, source); break;
    case HfModelType::kQwen3Moe: c = llama_from_hf(hf, LlamaType::kQwen3Moe, arch, source); break;
    case HfModelType::kGemma2: c = gemma_from_hf(hf, GemmaType::kGemma2, arch, source); break;
    case HfModelType::kGemma3Text: c = gemma_from_hf(hf, GemmaType::kGemma3, arch, source); break;
    case HfModelType::kModernBert: c = modernbert_from_hf(hf, arch, source); break;
    case HfModelType::kLongformer: c = longformer_from_hf(hf, arch, source); break;
    case HfModelType::kZoo:
      // zoo's own layout: the whole model config, as `zoo info --config` writes it.
      c = parse_config(get<std::string>(hf, "zoo_config", source), source + ": zoo_config");
      c.validate(source);
      return c;
  }
  c.name = type_name + (arch.empty() ? "" : " (" + arch + ")");
  c.validate(source);
  return c;
}

bool hf_phi3_layout(const ModelConfig& c) {
  return c.family == Family::kGpt && c.position == PositionKind::kRope &&
         (c.hf_fused_projections || (c.rotary_dim > 0 && c.rotary_dim < c.resolved_head_dim()) ||
          c.rope_scaling.kind == RopeScalingKind::kLongrope);
}

bool hf_mixtral_layout(const ModelConfig& c) { return c.has_moe_layers() && !c.qk_norm; }

bool hf_modernbert_layout(const ModelConfig& c) { return c.family == Family::kBert && c.position == PositionKind::kRope; }

bool hf_longformer_layout(const ModelConfig& c) {
  return c.family == Family::kBert && c.attention == AttentionKind::kLongformer;
}

bool uses_zoo_layout(const ModelConfig& c) {
  // transformers' Longformer has no dilation and marks its global tokens by the caller's mask.
  const auto& d = c.attention_dilation;
  const bool dilated = std::any_of(d.begin(), d.end(), [](int64_t v) { return v != 1; });
  return c.has_recurrent_layers() || c.attention == AttentionKind::kLinformer ||
         (hf_longformer_layout(c) && (dilated || c.longformer_global_tokens > 0));
}

json config_to_hf(const ModelConfig& c) {
  auto none = [&](const std::string& what) {
    throw ConfigError("config '" + c.name + "' has no Hugging Face equivalent: " + what);
  };
  if (uses_zoo_layout(c)) {
    // Hugging Face has no class for these: zoo's own layout, the tensors under zoo's names.
    return {{"model_type", "zoo"}, {"architectures", {c.family == Family::kGpt ? "ZooForCausalLM" : "ZooModel"}},
            {"zoo_config", to_yaml(c)},
            {"vocab_size", c.vocab_size}, {"hidden_size", c.d_model}, {"num_hidden_layers", c.n_layers},
            {"num_attention_heads", c.n_heads}};
  }
  if (c.family == Family::kGpt && (c.norm == NormKind::kRMSNormPlusOne || c.norm_position == NormPosition::kSandwich)) {
    return gemma_to_hf(c, none);
  }
  if (hf_modernbert_layout(c)) return modernbert_to_hf(c, none);
  if (hf_longformer_layout(c)) return longformer_to_hf(c, none);
  if (c.attention_softcap > 0.0 || c.logit_softcap > 0.0 || c.attention_scale_dim > 0) {
    none("soft-capping and attention_scale_dim are Gemma's (norm rmsnorm_plus_one, norm_position sandwich)");
  }
  if (!c.window_layers.empty() || c.window_rope_base > 0.0) {
    none("sliding windows in some layers only (window_layers, window_rope_base) are Gemma's");
  }
  if (c.family == Family::kGpt && c.position == PositionKind::kRope) return llama_to_hf(c, none);
  const bool mha = c.n_kv_heads == 0 || c.n_kv_heads == c.n_heads;
  if (!mha) none("grouped-query attention");
  if (c.qkv_bias) none("biases on q, k and v alone (qkv_bias) are Qwen2's");
  if (c.qk_norm) none("norms over each query and key head (qk_norm) are Qwen3's, with rotary positions");
  json hf;
  switch (c.family) {
    case Family::kGpt: {
      if (c.position != PositionKind::kLearned) none("gpt2 has learned positions");
      if (c.norm != NormKind::kLayerNorm || c.norm_position != NormPosition::kPre) none("gpt2 is pre-norm LayerNorm");
      if (!c.bias || c.window || c.head_dim != 0 || c.scale_embeddings || !c.scale_attention) {
        none("gpt2 has biases, full attention, head_dim = d_model / n_heads and scaled attention");
      }
      const std::string act = activation_to_hf(c.activation);
      if (act.empty()) none("gpt2 has no gated feed-forward");
      hf = {{"model_type", "gpt2"}, {"architectures", {"GPT2LMHeadModel"}}, {"vocab_size", c.vocab_size},
            {"n_embd", c.d_model}, {"n_layer", c.n_layers}, {"n_head", c.n_heads}, {"n_inner", c.d_ff},
            {"n_positions", c.max_positions}, {"n_ctx", c.max_positions}, {"layer_norm_epsilon", c.norm_eps},
            {"activation_function", act}, {"resid_pdrop", c.dropout}, {"embd_pdrop", c.dropout},
            {"attn_pdrop", c.attention_dropout}, {"initializer_range", c.init_std},
            {"tie_word_embeddings", c.tie_embeddings}, {"bos_token_id", SpecialTokens::kBos}, {"eos_token_id", SpecialTokens::kEos}};
      break;
    }
    case Family::kBert: {
      if (c.position != PositionKind::kLearned) none("bert has learned positions");
      if (c.norm != NormKind::kLayerNorm || c.norm_position != NormPosition::kPost) none("bert is post-norm LayerNorm");
      if (!c.bias || c.head_dim != 0) none("bert has biases and head_dim = d_model / n_heads");
      const std::string act = activation_to_hf(c.activation);
      if (act.empty()) none("bert has no gated feed-forward");
      const std::map<BertHead, std::string> arch = {
          {BertHead::kNone, "BertModel"}, {BertHead::kMaskedLM, "BertForMaskedLM"},
          {BertHead::kNextSentence, "BertForNextSentencePrediction"}, {BertHead::kPretraining, "BertForPreTraining"},
          {BertHead::kSequenceClassification, "BertForSequenceClassification"},
          {BertHead::kTokenClassification, "BertForTokenClassification"}};
      const bool expected_pooler = c.head != BertHead::kMaskedLM && c.head != BertHead::kTokenClassification;
      if (c.pooler != expected_pooler) none("Hugging Face's " + arch.at(c.head) + (c.pooler ? " has no pooler" : " has a pooler"));
      hf = {{"model_type", "bert"}, {"architectures", {arch.at(c.head)}}, {"vocab_size", c.vocab_size},
            {"hidden_size", c.d_model}, {"num_hidden_layers", c.n_layers}, {"num_attention_heads", c.n_heads},
            {"intermediate_size", c.d_ff}, {"max_position_embeddings", c.max_positions},
            {"type_vocab_size", c.type_vocab_size}, {"layer_norm_eps", c.norm_eps}, {"hidden_act", act},
            {"hidden_dropout_prob", c.dropout}, {"attention_probs_dropout_prob", c.attention_dropout},
            {"initializer_range", c.init_std}, {"pad_token_id", c.pad_id}, {"position_embedding_type", "absolute"}};
      if (c.head == BertHead::kSequenceClassification || c.head == BertHead::kTokenClassification) {
        hf["num_labels"] = c.num_labels;
      }
      break;
    }
    case Family::kT5: {
      if (c.position != PositionKind::kRelative || c.norm != NormKind::kRMSNorm || c.norm_position != NormPosition::kPre ||
          c.bias || c.scale_attention) {
        none("t5 has relative positions, pre-norm RMSNorm, no biases and unscaled attention");
      }
      std::string ff;
      if (c.activation == Activation::kReLU) ff = "relu";
      else if (c.activation == Activation::kGeGLUTanh) ff = "gated-gelu";
      else none("t5's feed-forward is relu or gated-gelu");
      hf = {{"model_type", "t5"}, {"architectures", {"T5ForConditionalGeneration"}}, {"vocab_size", c.vocab_size},
            {"d_model", c.d_model}, {"d_kv", c.resolved_head_dim()}, {"d_ff", c.d_ff},
            {"num_layers", c.resolved_encoder_layers()}, {"num_decoder_layers", c.resolved_decoder_layers()},
            {"num_heads", c.n_heads}, {"relative_attention_num_buckets", c.relative_buckets},
            {"relative_attention_max_distance", c.relative_max_distance}, {"layer_norm_epsilon", c.norm_eps},
            {"feed_forward_proj", ff}, {"tie_word_embeddings", c.tie_embeddings}, {"dropout_rate", c.dropout},
            {"pad_token_id", c.pad_id}, {"eos_token_id", SpecialTokens::kEos}, {"decoder_start_token_id", c.decoder_start_id},
            {"is_encoder_decoder", true}};
      break;
    }
    case Family::kTransformer: none("the original Transformer has no Hugging Face model class");
  }
  return hf;
}

}  // namespace zoo
