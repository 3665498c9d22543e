#include "interop/hf_model_config.h"

#include <string>
#include <utility>
#include <vector>

#include "text/tokenizer.h"

namespace zoo {
namespace {

using nlohmann::json;

template <typename T>
T get(const json& config, const char* key, const std::string& source) {
  if (!config.contains(key) || config[key].is_null()) {
    throw ConfigError(source + ": missing key '" + key + "'");
  }
  try {
    return config[key].get<T>();
  } catch (const json::exception&) {
    throw ConfigError(source + ": key '" + std::string(key) + "' has the wrong type");
  }
}

template <typename T>
T get_or(const json& config, const char* key, T fallback, const std::string& source) {
  if (!config.contains(key) || config[key].is_null()) return fallback;
  return get<T>(config, key, source);
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

}  // namespace

ModelConfig config_from_hf(const json& hf, const std::string& source) {
  if (!hf.is_object()) throw ConfigError(source + ": expected a JSON object");
  const std::string type = get<std::string>(hf, "model_type", source);
  const std::string arch = architecture(hf, source);
  ModelConfig c;
  if (type == "gpt2") {
    c = family_defaults(Family::kGpt);
    c.vocab_size = get<int64_t>(hf, "vocab_size", source);
    c.d_model = get<int64_t>(hf, "n_embd", source);
    c.n_layers = get<int64_t>(hf, "n_layer", source);
    c.n_heads = get<int64_t>(hf, "n_head", source);
    c.d_ff = get_or<int64_t>(hf, "n_inner", 4 * c.d_model, source);
    c.max_positions = get<int64_t>(hf, "n_positions", source);
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
  } else if (type == "bert") {
    c = family_defaults(Family::kBert);
    c.vocab_size = get<int64_t>(hf, "vocab_size", source);
    c.d_model = get<int64_t>(hf, "hidden_size", source);
    c.n_layers = get<int64_t>(hf, "num_hidden_layers", source);
    c.n_heads = get<int64_t>(hf, "num_attention_heads", source);
    c.d_ff = get<int64_t>(hf, "intermediate_size", source);
    c.max_positions = get<int64_t>(hf, "max_position_embeddings", source);
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
  } else if (type == "t5") {
    c = family_defaults(Family::kT5);
    c.vocab_size = get<int64_t>(hf, "vocab_size", source);
    c.d_model = get<int64_t>(hf, "d_model", source);
    c.head_dim = get<int64_t>(hf, "d_kv", source);
    c.d_ff = get<int64_t>(hf, "d_ff", source);
    c.n_layers = get<int64_t>(hf, "num_layers", source);
    c.encoder_layers = c.n_layers;
    c.decoder_layers = get_or<int64_t>(hf, "num_decoder_layers", c.n_layers, source);
    c.n_heads = get<int64_t>(hf, "num_heads", source);
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
    if (hf.contains("n_positions")) c.max_positions = std::max<int64_t>(c.max_positions, hf["n_positions"].get<int64_t>());
  } else {
    throw ConfigError(source + ": model_type '" + type + "' is not supported (gpt2, bert, t5)");
  }
  c.name = type + (arch.empty() ? "" : " (" + arch + ")");
  c.validate(source);
  return c;
}

json config_to_hf(const ModelConfig& c) {
  auto none = [&](const std::string& what) {
    throw ConfigError("config '" + c.name + "' has no Hugging Face equivalent: " + what);
  };
  const bool mha = c.n_kv_heads == 0 || c.n_kv_heads == c.n_heads;
  if (!mha) none("grouped-query attention");
  json hf;
  if (c.family == Family::kGpt) {
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
  } else if (c.family == Family::kBert) {
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
  } else if (c.family == Family::kT5) {
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
  } else {
    none("the original Transformer has no Hugging Face model class");
  }
  return hf;
}

}  // namespace zoo
