#include "interop/hugging_face.h"

#include <filesystem>
#include <set>

#include <torch/torch.h>

#include "core/files.h"
#include "interop/safetensors.h"

namespace zoo {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// One zoo parameter made of Hugging Face tensors: concatenated along rows, each transposed
// first when `transpose` (Conv1D).
struct TensorMap {
  std::string zoo;
  std::vector<std::string> hf;
  bool transpose = false;
};

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
T get_or(const json& config, const char* key, T fallback) {
  if (!config.contains(key) || config[key].is_null()) return fallback;
  return config[key].get<T>();
}

std::string architecture(const json& config) {
  if (config.contains("architectures") && config["architectures"].is_array() && !config["architectures"].empty()) {
    return config["architectures"][0].get<std::string>();
  }
  return "";
}

// The prefix a family's base model sits under in a file with a head ("transformer.", "bert.").
std::string base_prefix(const ModelConfig& c, const std::map<std::string, torch::Tensor>& weights) {
  if (c.family == Family::kGpt) return weights.count("transformer.wte.weight") ? "transformer." : "";
  if (c.family == Family::kBert) return weights.count("bert.embeddings.word_embeddings.weight") ? "bert." : "";
  return "";
}

std::vector<TensorMap> tensor_maps(const ModelConfig& c, const std::string& base) {
  std::vector<TensorMap> m;
  auto add = [&](std::string zoo, std::vector<std::string> hf, bool transpose = false) {
    m.push_back({std::move(zoo), std::move(hf), transpose});
  };
  auto norm = [&](const std::string& zoo, const std::string& hf, bool bias) {
    add(zoo + ".weight", {hf + ".weight"});
    if (bias) add(zoo + ".bias", {hf + ".bias"});
  };
  if (c.family == Family::kGpt) {
    add("token_embedding.weight", {base + "wte.weight"});
    add("positions.learned.embedding.weight", {base + "wpe.weight"});
    for (int64_t i = 0; i < c.n_layers; ++i) {
      const std::string z = "blocks." + std::to_string(i) + ".", h = base + "h." + std::to_string(i) + ".";
      norm(z + "self_attn_norm", h + "ln_1", true);
      add(z + "self_attn.qkv.weight", {h + "attn.c_attn.weight"}, true);
      add(z + "self_attn.qkv.bias", {h + "attn.c_attn.bias"});
      add(z + "self_attn.out.weight", {h + "attn.c_proj.weight"}, true);
      add(z + "self_attn.out.bias", {h + "attn.c_proj.bias"});
      norm(z + "ff_norm", h + "ln_2", true);
      add(z + "ff.up.weight", {h + "mlp.c_fc.weight"}, true);
      add(z + "ff.up.bias", {h + "mlp.c_fc.bias"});
      add(z + "ff.down.weight", {h + "mlp.c_proj.weight"}, true);
      add(z + "ff.down.bias", {h + "mlp.c_proj.bias"});
    }
    norm("final_norm", base + "ln_f", true);
    if (!c.tie_embeddings) add("lm_head.weight", {"lm_head.weight"});
  } else if (c.family == Family::kBert) {
    const std::string e = base + "embeddings.";
    add("token_embedding.weight", {e + "word_embeddings.weight"});
    add("positions.learned.embedding.weight", {e + "position_embeddings.weight"});
    add("token_type_embedding.weight", {e + "token_type_embeddings.weight"});
    norm("embedding_norm", e + "LayerNorm", true);
    for (int64_t i = 0; i < c.n_layers; ++i) {
      const std::string z = "blocks." + std::to_string(i) + ".", h = base + "encoder.layer." + std::to_string(i) + ".";
      const std::string s = h + "attention.self.";
      add(z + "self_attn.qkv.weight", {s + "query.weight", s + "key.weight", s + "value.weight"});
      add(z + "self_attn.qkv.bias", {s + "query.bias", s + "key.bias", s + "value.bias"});
      add(z + "self_attn.out.weight", {h + "attention.output.dense.weight"});
      add(z + "self_attn.out.bias", {h + "attention.output.dense.bias"});
      norm(z + "self_attn_norm", h + "attention.output.LayerNorm", true);
      add(z + "ff.up.weight", {h + "intermediate.dense.weight"});
      add(z + "ff.up.bias", {h + "intermediate.dense.bias"});
      add(z + "ff.down.weight", {h + "output.dense.weight"});
      add(z + "ff.down.bias", {h + "output.dense.bias"});
      norm(z + "ff_norm", h + "output.LayerNorm", true);
    }
    if (c.pooler) {
      add("pooler.weight", {base + "pooler.dense.weight"});
      add("pooler.bias", {base + "pooler.dense.bias"});
    }
    if (c.head == BertHead::kMaskedLM || c.head == BertHead::kPretraining) {
      add("mlm_head.dense.weight", {"cls.predictions.transform.dense.weight"});
      add("mlm_head.dense.bias", {"cls.predictions.transform.dense.bias"});
      norm("mlm_head.norm", "cls.predictions.transform.LayerNorm", true);
      add("mlm_head.bias", {"cls.predictions.bias"});
    }
    if (c.head == BertHead::kNextSentence || c.head == BertHead::kPretraining) {
      add("nsp_head.weight", {"cls.seq_relationship.weight"});
      add("nsp_head.bias", {"cls.seq_relationship.bias"});
    }
    if (c.head == BertHead::kSequenceClassification || c.head == BertHead::kTokenClassification) {
      add("classifier.weight", {"classifier.weight"});
      add("classifier.bias", {"classifier.bias"});
    }
  } else {
    add("token_embedding.weight", {"shared.weight"});
    add("encoder_positions.relative.relative_attention_bias.weight",
        {"encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"});
    add("decoder_positions.relative.relative_attention_bias.weight",
        {"decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"});
    const bool gated = c.activation == Activation::kGeGLUTanh;
    auto feed_forward = [&](const std::string& z, const std::string& h) {
      if (gated) {
        add(z + "ff.gate.weight", {h + "DenseReluDense.wi_0.weight"});
        add(z + "ff.up.weight", {h + "DenseReluDense.wi_1.weight"});
      } else {
        add(z + "ff.up.weight", {h + "DenseReluDense.wi.weight"});
      }
      add(z + "ff.down.weight", {h + "DenseReluDense.wo.weight"});
      add(z + "ff_norm.weight", {h + "layer_norm.weight"});
    };
    for (int64_t i = 0; i < c.resolved_encoder_layers(); ++i) {
      const std::string z = "encoder_blocks." + std::to_string(i) + ".", h = "encoder.block." + std::to_string(i) + ".layer.";
      const std::string a = h + "0.SelfAttention.";
      add(z + "self_attn.qkv.weight", {a + "q.weight", a + "k.weight", a + "v.weight"});
      add(z + "self_attn.out.weight", {a + "o.weight"});
      add(z + "self_attn_norm.weight", {h + "0.layer_norm.weight"});
      feed_forward(z, h + "1.");
    }
    for (int64_t i = 0; i < c.resolved_decoder_layers(); ++i) {
      const std::string z = "decoder_blocks." + std::to_string(i) + ".", h = "decoder.block." + std::to_string(i) + ".layer.";
      const std::string a = h + "0.SelfAttention.", x = h + "1.EncDecAttention.";
      add(z + "self_attn.qkv.weight", {a + "q.weight", a + "k.weight", a + "v.weight"});
      add(z + "self_attn.out.weight", {a + "o.weight"});
      add(z + "self_attn_norm.weight", {h + "0.layer_norm.weight"});
      add(z + "cross_attn.q.weight", {x + "q.weight"});
      add(z + "cross_attn.kv.weight", {x + "k.weight", x + "v.weight"});
      add(z + "cross_attn.out.weight", {x + "o.weight"});
      add(z + "cross_attn_norm.weight", {h + "1.layer_norm.weight"});
      feed_forward(z, h + "2.");
    }
    add("encoder_final_norm.weight", {"encoder.final_layer_norm.weight"});
    add("decoder_final_norm.weight", {"decoder.final_layer_norm.weight"});
    if (!c.tie_embeddings) add("lm_head.weight", {"lm_head.weight"});
  }
  return m;
}

// Extras Hugging Face files carry that a model does not need: tied copies and mask buffers.
bool ignorable(const std::string& name, const ModelConfig& c) {
  auto ends_with = [&](const std::string& suffix) {
    return name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  if (c.family == Family::kGpt) {
    return ends_with(".attn.bias") || ends_with(".attn.masked_bias") || (c.tie_embeddings && name == "lm_head.weight");
  }
  if (c.family == Family::kBert) {
    return ends_with("embeddings.position_ids") || name == "cls.predictions.decoder.weight" ||
           name == "cls.predictions.decoder.bias";
  }
  return name == "encoder.embed_tokens.weight" || name == "decoder.embed_tokens.weight" ||
         (c.tie_embeddings && name == "lm_head.weight");
}

// Older BERT checkpoints name LayerNorm parameters gamma and beta.
const torch::Tensor* find_weight(const std::map<std::string, torch::Tensor>& weights, const std::string& name,
                                 std::string* used) {
  auto it = weights.find(name);
  if (it == weights.end() && name.find("LayerNorm.") != std::string::npos) {
    std::string legacy = name;
    if (legacy.size() > 7 && legacy.compare(legacy.size() - 7, 7, ".weight") == 0) {
      legacy.replace(legacy.size() - 7, 7, ".gamma");
    } else if (legacy.size() > 5 && legacy.compare(legacy.size() - 5, 5, ".bias") == 0) {
      legacy.replace(legacy.size() - 5, 5, ".beta");
    }
    it = weights.find(legacy);
  }
  if (it == weights.end()) return nullptr;
  *used = it->first;
  return &it->second;
}

std::string shape(const torch::Tensor& t) { return c10::str(t.sizes()); }

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
  const std::string arch = architecture(hf);
  ModelConfig c;
  if (type == "gpt2") {
    c = family_defaults(Family::kGpt);
    c.vocab_size = get<int64_t>(hf, "vocab_size", source);
    c.d_model = get<int64_t>(hf, "n_embd", source);
    c.n_layers = get<int64_t>(hf, "n_layer", source);
    c.n_heads = get<int64_t>(hf, "n_head", source);
    c.d_ff = get_or<int64_t>(hf, "n_inner", 4 * c.d_model);
    c.max_positions = get<int64_t>(hf, "n_positions", source);
    c.norm_eps = get_or<double>(hf, "layer_norm_epsilon", 1e-5);
    c.activation = activation_from_hf(get_or<std::string>(hf, "activation_function", "gelu_new"),
                                      "activation_function", source);
    c.dropout = get_or<double>(hf, "resid_pdrop", 0.1);
    c.attention_dropout = get_or<double>(hf, "attn_pdrop", 0.1);
    c.tie_embeddings = get_or<bool>(hf, "tie_word_embeddings", true);
    c.init_std = get_or<double>(hf, "initializer_range", 0.02);
    if (get_or<bool>(hf, "scale_attn_by_inverse_layer_idx", false) || get_or<bool>(hf, "reorder_and_upcast_attn", false)) {
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
    c.type_vocab_size = get_or<int64_t>(hf, "type_vocab_size", 2);
    c.norm_eps = get_or<double>(hf, "layer_norm_eps", 1e-12);
    c.activation = activation_from_hf(get_or<std::string>(hf, "hidden_act", "gelu"), "hidden_act", source);
    if (get_or<std::string>(hf, "position_embedding_type", "absolute") != "absolute") {
      throw ConfigError(source + ": position_embedding_type other than absolute has no zoo equivalent");
    }
    c.dropout = get_or<double>(hf, "hidden_dropout_prob", 0.1);
    c.attention_dropout = get_or<double>(hf, "attention_probs_dropout_prob", 0.1);
    c.init_std = get_or<double>(hf, "initializer_range", 0.02);
    c.pad_id = get_or<int64_t>(hf, "pad_token_id", 0);
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
    c.num_labels = get_or<int64_t>(hf, "num_labels", c.num_labels);
  } else if (type == "t5") {
    c = family_defaults(Family::kT5);
    c.vocab_size = get<int64_t>(hf, "vocab_size", source);
    c.d_model = get<int64_t>(hf, "d_model", source);
    c.head_dim = get<int64_t>(hf, "d_kv", source);
    c.d_ff = get<int64_t>(hf, "d_ff", source);
    c.n_layers = get<int64_t>(hf, "num_layers", source);
    c.encoder_layers = c.n_layers;
    c.decoder_layers = get_or<int64_t>(hf, "num_decoder_layers", c.n_layers);
    c.n_heads = get<int64_t>(hf, "num_heads", source);
    c.relative_buckets = get_or<int64_t>(hf, "relative_attention_num_buckets", 32);
    c.relative_max_distance = get_or<int64_t>(hf, "relative_attention_max_distance", 128);
    c.norm_eps = get_or<double>(hf, "layer_norm_epsilon", 1e-6);
    const auto ff = get_or<std::string>(hf, "feed_forward_proj", "relu");
    if (ff == "relu") {
      c.activation = Activation::kReLU;
    } else if (ff == "gated-gelu") {
      c.activation = Activation::kGeGLUTanh;  // Hugging Face's gated-gelu uses gelu_new
    } else {
      throw ConfigError(source + ": feed_forward_proj '" + ff + "' has no zoo equivalent");
    }
    c.tie_embeddings = get_or<bool>(hf, "tie_word_embeddings", true);
    c.dropout = c.attention_dropout = get_or<double>(hf, "dropout_rate", 0.1);
    c.pad_id = get_or<int64_t>(hf, "pad_token_id", 0);
    c.decoder_start_id = get_or<int64_t>(hf, "decoder_start_token_id", 0);
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
          {"tie_word_embeddings", c.tie_embeddings}, {"bos_token_id", 2}, {"eos_token_id", 3}};
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
          {"pad_token_id", c.pad_id}, {"eos_token_id", 3}, {"decoder_start_token_id", c.decoder_start_id},
          {"is_encoder_decoder", true}};
  } else {
    none("the original Transformer has no Hugging Face model class");
  }
  return hf;
}

std::map<std::string, torch::Tensor> read_hf_weights(const std::string& dir) {
  const fs::path root(dir);
  const fs::path index = root / "model.safetensors.index.json";
  std::vector<std::string> files;
  if (fs::exists(index)) {
    json j;
    try {
      j = json::parse(read_file(index.string()));
    } catch (const json::exception& e) {
      throw std::runtime_error(index.string() + ": malformed JSON (" + e.what() + ")");
    }
    if (!j.contains("weight_map") || !j["weight_map"].is_object()) {
      throw std::runtime_error(index.string() + ": no weight_map");
    }
    std::set<std::string> shards;
    for (const auto& [name, file] : j["weight_map"].items()) {
      if (!file.is_string()) throw std::runtime_error(index.string() + ": weight_map['" + name + "'] is not a file name");
      const std::string f = file.get<std::string>();
      if (f.find('/') != std::string::npos || f == ".." ) {
        throw std::runtime_error(index.string() + ": shard '" + f + "' is not a file in the directory");
      }
      shards.insert(f);
    }
    files.assign(shards.begin(), shards.end());
  } else if (fs::exists(root / "model.safetensors")) {
    files = {"model.safetensors"};
  } else if (fs::exists(root / "pytorch_model.bin")) {
    throw std::runtime_error(dir + ": only pytorch_model.bin (pickle) is there; zoo reads safetensors "
                                   "(convert with transformers' save_pretrained(safe_serialization=True))");
  } else {
    throw std::runtime_error(dir + ": no model.safetensors nor model.safetensors.index.json");
  }
  std::map<std::string, torch::Tensor> weights;
  for (const auto& f : files) {
    for (auto& [name, tensor] : load_safetensors((root / f).string()).tensors) {
      if (!weights.emplace(name, tensor).second) {
        throw std::runtime_error((root / f).string() + ": tensor '" + name + "' appears in two shards");
      }
    }
  }
  return weights;
}

Model import_hf(const std::string& dir, HfImportReport* report) {
  const std::string config_path = (fs::path(dir) / "config.json").string();
  if (!fs::exists(config_path)) throw std::runtime_error(config_path + ": missing (not a Hugging Face model directory?)");
  json hf;
  try {
    hf = json::parse(read_file(config_path));
  } catch (const json::exception& e) {
    throw ConfigError(config_path + ": malformed JSON (" + std::string(e.what()) + ")");
  }
  const ModelConfig config = config_from_hf(hf, config_path);
  const auto weights = read_hf_weights(dir);
  Model model = build_model(config);
  const std::string base = base_prefix(config, weights);
  auto params = model.module()->named_parameters();
  std::set<std::string> used;
  std::vector<std::string> missing;
  torch::NoGradGuard no_grad;
  for (const auto& map : tensor_maps(config, base)) {
    auto* target = params.find(map.zoo);
    TORCH_CHECK(target != nullptr, "import table names no parameter ", map.zoo);
    std::vector<torch::Tensor> parts;
    for (const auto& name : map.hf) {
      std::string found;
      const torch::Tensor* t = find_weight(weights, name, &found);
      if (t == nullptr) {
        missing.push_back(name);
        continue;
      }
      used.insert(found);
      parts.push_back(map.transpose ? t->t() : *t);
    }
    if (parts.size() != map.hf.size()) continue;
    const auto value = parts.size() == 1 ? parts[0] : torch::cat(parts, 0);
    if (value.sizes() != target->sizes()) {
      std::string names;
      for (const auto& n : map.hf) names += (names.empty() ? "" : " + ") + n;
      throw std::runtime_error(dir + ": tensor '" + names + "' has shape " + shape(value) + " but zoo's " + map.zoo +
                               " needs " + shape(*target) + (map.transpose ? " (after transposing Conv1D)" : ""));
    }
    target->copy_(value.to(target->dtype()));
  }
  if (!missing.empty()) {
    std::string names;
    for (size_t i = 0; i < missing.size() && i < 12; ++i) names += (i ? ", " : "") + missing[i];
    if (missing.size() > 12) names += ", ... (" + std::to_string(missing.size()) + " in all)";
    throw std::runtime_error(dir + ": missing tensors the model needs: " + names);
  }
  HfImportReport local;
  for (const auto& [name, t] : weights) {
    if (used.count(name)) continue;
    (ignorable(name, config) ? local.ignored : local.unexpected).push_back(name);
  }
  if (report != nullptr) *report = local;
  return model;
}

void export_hf(const Model& model, const std::string& dir) {
  const json hf = config_to_hf(model.config);
  auto params = model.module()->named_parameters();
  // The base model sits under "transformer." in GPT2LMHeadModel, under "bert." in BERT with a head.
  const auto& c = model.config;
  const std::string base = c.family == Family::kGpt                                  ? "transformer."
                           : c.family == Family::kBert && c.head != BertHead::kNone ? "bert."
                                                                                     : "";
  std::map<std::string, torch::Tensor> out;
  for (const auto& map : tensor_maps(c, base)) {
    const auto* source = params.find(map.zoo);
    TORCH_CHECK(source != nullptr, "export table names no parameter ", map.zoo);
    const auto value = source->detach().to(torch::kCPU, torch::kFloat);
    const auto parts = value.chunk(static_cast<int64_t>(map.hf.size()), 0);
    for (size_t i = 0; i < map.hf.size(); ++i) {
      out[map.hf[i]] = (map.transpose ? parts[i].t() : parts[i]).contiguous();
    }
  }
  // Readers that expect the tied decoder of a BERT masked-LM head find it.
  if (model.config.family == Family::kBert &&
      (model.config.head == BertHead::kMaskedLM || model.config.head == BertHead::kPretraining)) {
    out["cls.predictions.decoder.weight"] = out.at(base + "embeddings.word_embeddings.weight").clone();
    out["cls.predictions.decoder.bias"] = out.at("cls.predictions.bias").clone();
  }
  fs::create_directories(dir);
  save_safetensors((fs::path(dir) / "model.safetensors").string(), out, {{"format", "pt"}});
  write_file_atomically((fs::path(dir) / "config.json").string(), hf.dump(2) + "\n");
}

}  // namespace zoo
