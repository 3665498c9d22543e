#include "interop/hugging_face.h"

#include <filesystem>
#include <set>

#include <torch/torch.h>

#include "core/files.h"
#include "core/outputs.h"
#include "core/strings.h"
#include "interop/safetensors.h"
#include "train/checkpoint.h"

namespace zoo {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// The prefix a family's base model sits under in a file with a head ("transformer.", "bert.").
std::string base_prefix(const ModelConfig& c, const std::map<std::string, torch::Tensor>& weights) {
  switch (c.family) {
    case Family::kGpt: return weights.count("transformer.wte.weight") ? "transformer." : "";
    case Family::kBert:
      if (hf_modernbert_layout(c)) return weights.count("model.embeddings.tok_embeddings.weight") ? "model." : "";
      if (hf_longformer_layout(c)) return weights.count("longformer.embeddings.word_embeddings.weight") ? "longformer." : "";
      return weights.count("bert.embeddings.word_embeddings.weight") ? "bert." : "";
    case Family::kT5:
    case Family::kTransformer: break;
  }
  return "";
}

// The table of one file layout, built entry by entry.
struct TensorMaps {
  std::vector<HfTensorMap> maps;
  void add(std::string zoo, std::vector<std::string> hf, bool transpose = false) {
    maps.push_back({std::move(zoo), std::move(hf), transpose, {}});
  }
  // A weight, and its bias when `bias` (norms, and linears named alike).
  void weights(const std::string& zoo, const std::string& hf, bool bias) {
    add(zoo + ".weight", {hf + ".weight"});
    if (bias) add(zoo + ".bias", {hf + ".bias"});
  }
};

// A mixture of experts of layer prefix `h` ("model.layers.3."): Mixtral's block_sparse_moe.gate
// and experts.E.w1 (gate), w3 (up), w2 (down); Qwen3-MoE's mlp.gate and experts.E.gate_proj,
// up_proj, down_proj. Files transformers 5 wrote from memory hold the fused experts.gate_up_proj
// and experts.down_proj under mlp (Mixtral's renamed).
void experts_tensor_maps(const ModelConfig& c, const std::string& z, const std::string& h, TensorMaps& m) {
  const bool mixtral = hf_mixtral_layout(c);
  const std::string moe = h + (mixtral ? "block_sparse_moe." : "mlp."), fused = h + "mlp.";
  HfTensorMap router{z + "router", {moe + "gate.weight"}}, gate_up{z + "gate_up", {}}, down{z + "down", {}};
  router.whole = fused + "gate.weight";
  gate_up.stacked = down.stacked = true;
  gate_up.whole = fused + "experts.gate_up_proj", down.whole = fused + "experts.down_proj";
  for (int64_t e = 0; e < c.experts; ++e) {
    const std::string x = moe + "experts." + std::to_string(e) + ".";
    gate_up.hf.push_back(x + (mixtral ? "w1" : "gate_proj") + ".weight");
    gate_up.hf.push_back(x + (mixtral ? "w3" : "up_proj") + ".weight");
    down.hf.push_back(x + (mixtral ? "w2" : "down_proj") + ".weight");
  }
  m.maps.push_back(router), m.maps.push_back(gate_up), m.maps.push_back(down);
}

// LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, Gemma2ForCausalLM,
// Gemma3ForCausalLM (a norm after each branch too): separate q/k/v (k and v narrower under
// grouped-query attention) into zoo's fused projection. Phi3ForCausalLM: q/k/v fused as
// zoo's are, gate and up fused where zoo's are apart.
void llama_tensor_maps(const ModelConfig& c, TensorMaps& m) {
  const bool phi3 = hf_phi3_layout(c);
  const int64_t hd = c.resolved_head_dim(), kv_rows = (c.n_kv_heads > 0 ? c.n_kv_heads : c.n_heads) * hd;
  const std::vector<int64_t> qkv_rows = {c.n_heads * hd, kv_rows, kv_rows};
  m.add("token_embedding.weight", {"model.embed_tokens.weight"});
  for (int64_t i = 0; i < c.n_layers; ++i) {
    const std::string z = "blocks." + std::to_string(i) + ".", h = "model.layers." + std::to_string(i) + ".";
    const std::string a = h + "self_attn.";
    m.weights(z + "self_attn_norm", h + "input_layernorm", false);
    auto qkv = [&](const std::string& kind) {
      m.maps.push_back({z + "self_attn.qkv" + kind, {a + "q_proj" + kind, a + "k_proj" + kind, a + "v_proj" + kind},
                        false, qkv_rows});
    };
    if (phi3) {
      m.add(z + "self_attn.qkv.weight", {a + "qkv_proj.weight"});
    } else {
      qkv(".weight");
      if (c.bias || c.qkv_bias) qkv(".bias");
    }
    m.weights(z + "self_attn.out", a + "o_proj", c.bias);
    if (c.qk_norm) m.weights(z + "self_attn.q_norm", a + "q_norm", false), m.weights(z + "self_attn.k_norm", a + "k_norm", false);
    if (c.norm_position == NormPosition::kSandwich) {  // Gemma 2, 3
      m.weights(z + "self_attn_post_norm", h + "post_attention_layernorm", false);
      m.weights(z + "ff_norm", h + "pre_feedforward_layernorm", false);
      m.weights(z + "ff_post_norm", h + "post_feedforward_layernorm", false);
    } else {
      m.weights(z + "ff_norm", h + "post_attention_layernorm", false);
    }
    if (c.is_moe_layer(i)) {
      experts_tensor_maps(c, z + "moe.", h, m);
      continue;
    }
    if (phi3) {
      m.maps.push_back({z + "ff.gate.weight", {h + "mlp.gate_up_proj.weight"}, false, {}, 0, 2});
      m.maps.push_back({z + "ff.up.weight", {h + "mlp.gate_up_proj.weight"}, false, {}, 1, 2});
    } else {
      m.weights(z + "ff.gate", h + "mlp.gate_proj", c.bias);
      m.weights(z + "ff.up", h + "mlp.up_proj", c.bias);
    }
    m.weights(z + "ff.down", h + "mlp.down_proj", c.bias);
  }
  m.weights("final_norm", "model.norm", false);
  if (!c.tie_embeddings) m.add("lm_head.weight", {"lm_head.weight"});
}

void gpt2_tensor_maps(const ModelConfig& c, const std::string& base, TensorMaps& m) {
  m.add("token_embedding.weight", {base + "wte.weight"});
  m.add("positions.learned.embedding.weight", {base + "wpe.weight"});
  for (int64_t i = 0; i < c.n_layers; ++i) {
    const std::string z = "blocks." + std::to_string(i) + ".", h = base + "h." + std::to_string(i) + ".";
    m.weights(z + "self_attn_norm", h + "ln_1", true);
    m.add(z + "self_attn.qkv.weight", {h + "attn.c_attn.weight"}, true);
    m.add(z + "self_attn.qkv.bias", {h + "attn.c_attn.bias"});
    m.add(z + "self_attn.out.weight", {h + "attn.c_proj.weight"}, true);
    m.add(z + "self_attn.out.bias", {h + "attn.c_proj.bias"});
    m.weights(z + "ff_norm", h + "ln_2", true);
    m.add(z + "ff.up.weight", {h + "mlp.c_fc.weight"}, true);
    m.add(z + "ff.up.bias", {h + "mlp.c_fc.bias"});
    m.add(z + "ff.down.weight", {h + "mlp.c_proj.weight"}, true);
    m.add(z + "ff.down.bias", {h + "mlp.c_proj.bias"});
  }
  m.weights("final_norm", base + "ln_f", true);
  if (!c.tie_embeddings) m.add("lm_head.weight", {"lm_head.weight"});
}

// BERT, and Longformer (BERT's names, RoBERTa's position table, global q, k, v, its own heads).
void bert_tensor_maps(const ModelConfig& c, const std::string& base, TensorMaps& m) {
  const bool longformer = hf_longformer_layout(c);
  const std::string e = base + "embeddings.";
  m.add("token_embedding.weight", {e + "word_embeddings.weight"});
  m.add("positions.learned.embedding.weight", {e + "position_embeddings.weight"});
  if (longformer) m.maps.back().skip_rows = c.pad_id + 1;
  m.add("token_type_embedding.weight", {e + "token_type_embeddings.weight"});
  m.weights("embedding_norm", e + "LayerNorm", true);
  for (int64_t i = 0; i < c.n_layers; ++i) {
    const std::string z = "blocks." + std::to_string(i) + ".", h = base + "encoder.layer." + std::to_string(i) + ".";
    const std::string s = h + "attention.self.";
    m.add(z + "self_attn.qkv.weight", {s + "query.weight", s + "key.weight", s + "value.weight"});
    m.add(z + "self_attn.qkv.bias", {s + "query.bias", s + "key.bias", s + "value.bias"});
    if (longformer) {
      m.add(z + "self_attn.qkv_global.weight", {s + "query_global.weight", s + "key_global.weight", s + "value_global.weight"});
      m.add(z + "self_attn.qkv_global.bias", {s + "query_global.bias", s + "key_global.bias", s + "value_global.bias"});
    }
    m.add(z + "self_attn.out.weight", {h + "attention.output.dense.weight"});
    m.add(z + "self_attn.out.bias", {h + "attention.output.dense.bias"});
    m.weights(z + "self_attn_norm", h + "attention.output.LayerNorm", true);
    m.add(z + "ff.up.weight", {h + "intermediate.dense.weight"});
    m.add(z + "ff.up.bias", {h + "intermediate.dense.bias"});
    m.add(z + "ff.down.weight", {h + "output.dense.weight"});
    m.add(z + "ff.down.bias", {h + "output.dense.bias"});
    m.weights(z + "ff_norm", h + "output.LayerNorm", true);
  }
  if (longformer) {
    // LongformerForSequenceClassification: dense, tanh, out_proj over the first token, which is
    // zoo's pooler and classifier; the masked LM's head is RoBERTa's (dense, gelu, layer_norm).
    const bool sequence = c.head == BertHead::kSequenceClassification;
    if (c.pooler) m.weights("pooler", sequence ? "classifier.dense" : base + "pooler.dense", true);
    if (c.head == BertHead::kMaskedLM) {
      m.weights("mlm_head.dense", "lm_head.dense", true);
      m.weights("mlm_head.norm", "lm_head.layer_norm", true);
      m.add("mlm_head.bias", {"lm_head.bias"});
    }
    if (sequence || c.head == BertHead::kTokenClassification) {
      m.weights("classifier", sequence ? "classifier.out_proj" : "classifier", true);
    }
    return;
  }
  if (c.pooler) {
    m.add("pooler.weight", {base + "pooler.dense.weight"});
    m.add("pooler.bias", {base + "pooler.dense.bias"});
  }
  if (c.head == BertHead::kMaskedLM || c.head == BertHead::kPretraining) {
    m.add("mlm_head.dense.weight", {"cls.predictions.transform.dense.weight"});
    m.add("mlm_head.dense.bias", {"cls.predictions.transform.dense.bias"});
    m.weights("mlm_head.norm", "cls.predictions.transform.LayerNorm", true);
    m.add("mlm_head.bias", {"cls.predictions.bias"});
  }
  if (c.head == BertHead::kNextSentence || c.head == BertHead::kPretraining) {
    m.add("nsp_head.weight", {"cls.seq_relationship.weight"});
    m.add("nsp_head.bias", {"cls.seq_relationship.bias"});
  }
  if (c.head == BertHead::kSequenceClassification || c.head == BertHead::kTokenClassification) {
    m.add("classifier.weight", {"classifier.weight"});
    m.add("classifier.bias", {"classifier.bias"});
  }
}

// ModernBERT: Wqkv is zoo's qkv as it is; Wi holds the gated half first (act(input) * gate), so
// zoo's gate then up; layer 0 has no attention norm.
void modernbert_tensor_maps(const ModelConfig& c, const std::string& base, TensorMaps& m) {
  m.add("token_embedding.weight", {base + "embeddings.tok_embeddings.weight"});
  m.weights("embedding_norm", base + "embeddings.norm", c.bias);
  for (int64_t i = 0; i < c.n_layers; ++i) {
    const std::string z = "blocks." + std::to_string(i) + ".", h = base + "layers." + std::to_string(i) + ".";
    if (i > 0 || c.first_attention_norm) m.weights(z + "self_attn_norm", h + "attn_norm", c.bias);
    m.weights(z + "self_attn.qkv", h + "attn.Wqkv", c.bias);
    m.weights(z + "self_attn.out", h + "attn.Wo", c.bias);
    m.weights(z + "ff_norm", h + "mlp_norm", c.bias);
    for (const char* part : {"weight", "bias"}) {
      if (std::string(part) == "bias" && !c.bias) continue;
      m.maps.push_back({z + "ff.gate." + part, {h + "mlp.Wi." + part}, false, {}, 0, 2});
      m.maps.push_back({z + "ff.up." + part, {h + "mlp.Wi." + part}, false, {}, 1, 2});
    }
    m.weights(z + "ff.down", h + "mlp.Wo", c.bias);
  }
  m.weights("final_norm", base + "final_norm", c.bias);
  const std::string transform = c.head_transform ? "head_transform" : "mlm_head";
  if (c.head_transform || c.head == BertHead::kMaskedLM) {
    m.weights(transform + ".dense", "head.dense", c.bias);
    m.weights(transform + ".norm", "head.norm", c.bias);
  }
  if (c.head == BertHead::kMaskedLM) m.add("mlm_head.bias", {"decoder.bias"});
  if (c.head == BertHead::kSequenceClassification || c.head == BertHead::kTokenClassification) {
    m.weights("classifier", "classifier", true);
  }
}

void t5_tensor_maps(const ModelConfig& c, TensorMaps& m) {
  m.add("token_embedding.weight", {"shared.weight"});
  m.add("encoder_positions.relative.relative_attention_bias.weight",
      {"encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"});
  m.add("decoder_positions.relative.relative_attention_bias.weight",
      {"decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"});
  const bool gated = c.activation == Activation::kGeGLUTanh;
  auto feed_forward = [&](const std::string& z, const std::string& h) {
    if (gated) {
      m.add(z + "ff.gate.weight", {h + "DenseReluDense.wi_0.weight"});
      m.add(z + "ff.up.weight", {h + "DenseReluDense.wi_1.weight"});
    } else {
      m.add(z + "ff.up.weight", {h + "DenseReluDense.wi.weight"});
    }
    m.add(z + "ff.down.weight", {h + "DenseReluDense.wo.weight"});
    m.add(z + "ff_norm.weight", {h + "layer_norm.weight"});
  };
  for (int64_t i = 0; i < c.resolved_encoder_layers(); ++i) {
    const std::string z = "encoder_blocks." + std::to_string(i) + ".", h = "encoder.block." + std::to_string(i) + ".layer.";
    const std::string a = h + "0.SelfAttention.";
    m.add(z + "self_attn.qkv.weight", {a + "q.weight", a + "k.weight", a + "v.weight"});
    m.add(z + "self_attn.out.weight", {a + "o.weight"});
    m.add(z + "self_attn_norm.weight", {h + "0.layer_norm.weight"});
    feed_forward(z, h + "1.");
  }
  for (int64_t i = 0; i < c.resolved_decoder_layers(); ++i) {
    const std::string z = "decoder_blocks." + std::to_string(i) + ".", h = "decoder.block." + std::to_string(i) + ".layer.";
    const std::string a = h + "0.SelfAttention.", x = h + "1.EncDecAttention.";
    m.add(z + "self_attn.qkv.weight", {a + "q.weight", a + "k.weight", a + "v.weight"});
    m.add(z + "self_attn.out.weight", {a + "o.weight"});
    m.add(z + "self_attn_norm.weight", {h + "0.layer_norm.weight"});
    m.add(z + "cross_attn.q.weight", {x + "q.weight"});
    m.add(z + "cross_attn.kv.weight", {x + "k.weight", x + "v.weight"});
    m.add(z + "cross_attn.out.weight", {x + "o.weight"});
    m.add(z + "cross_attn_norm.weight", {h + "1.layer_norm.weight"});
    feed_forward(z, h + "2.");
  }
  m.add("encoder_final_norm.weight", {"encoder.final_layer_norm.weight"});
  m.add("decoder_final_norm.weight", {"decoder.final_layer_norm.weight"});
  if (!c.tie_embeddings) m.add("lm_head.weight", {"lm_head.weight"});
}

std::vector<HfTensorMap> tensor_maps(const ModelConfig& c, const std::string& base) {
  TensorMaps m;
  switch (c.family) {
    case Family::kGpt:
      if (c.position == PositionKind::kRope) llama_tensor_maps(c, m);
      else gpt2_tensor_maps(c, base, m);
      break;
    case Family::kBert:
      if (hf_modernbert_layout(c)) modernbert_tensor_maps(c, base, m);
      else bert_tensor_maps(c, base, m);
      break;
    case Family::kT5: t5_tensor_maps(c, m); break;
    case Family::kTransformer: throw std::logic_error("the original Transformer has no Hugging Face layout");
  }
  return m.maps;
}

// Extras Hugging Face files carry that a model does not need: tied copies and mask buffers.
bool ignorable(const std::string& name, const ModelConfig& c) {
  switch (c.family) {
    case Family::kGpt:
      // GPT-2's mask buffers; the inverse frequencies older LLaMA files saved.
      return ends_with(name, ".attn.bias") || ends_with(name, ".attn.masked_bias") ||
             ends_with(name, ".rotary_emb.inv_freq") || (c.tie_embeddings && name == "lm_head.weight");
    case Family::kBert:
      return ends_with(name, "embeddings.position_ids") || name == "cls.predictions.decoder.weight" ||
             (hf_longformer_layout(c) && (name == "lm_head.decoder.weight" || name == "lm_head.decoder.bias")) ||
             name == "cls.predictions.decoder.bias" || (hf_modernbert_layout(c) && name == "decoder.weight");
    case Family::kT5:
    case Family::kTransformer: break;
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
    if (ends_with(legacy, ".weight")) {
      legacy.replace(legacy.size() - 7, 7, ".gamma");
    } else if (ends_with(legacy, ".bias")) {
      legacy.replace(legacy.size() - 5, 5, ".beta");
    }
    it = weights.find(legacy);
  }
  if (it == weights.end()) return nullptr;
  *used = it->first;
  return &it->second;
}

std::string shape(const torch::Tensor& t) { return c10::str(t.sizes()); }

// Every parameter from `weights` by its own name (shapes checked), the buffers where present.
void read_zoo_layout(Model& model, const std::map<std::string, torch::Tensor>& weights, const std::string& dir,
                     HfImportReport* report) {
  torch::NoGradGuard no_grad;
  std::set<std::string> used;
  std::vector<std::string> missing;
  size_t bf16 = 0, read = 0;
  auto take = [&](const std::string& name, torch::Tensor& target, bool required) {
    const auto it = weights.find(name);
    if (it == weights.end()) {
      if (required) missing.push_back(name);
      return;
    }
    if (it->second.sizes() != target.sizes()) {
      throw std::runtime_error(dir + ": tensor '" + name + "' has shape " + shape(it->second) + " but zoo's needs " +
                               shape(target));
    }
    check_finite(it->second, dir + ": tensor '" + name + "'");
    used.insert(name);
    ++read, bf16 += it->second.scalar_type() == torch::kBFloat16;
    target.copy_(it->second.to(target.dtype()));
    release_file_pages(it->second);
  };
  for (auto& p : model.module()->named_parameters()) take(p.key(), p.value(), true);
  for (auto& b : model.module()->named_buffers()) take(b.key(), b.value(), false);
  if (!missing.empty()) throw std::runtime_error(dir + ": missing tensors the model needs: " + join(missing, ", ", 12));
  HfImportReport local;
  local.stored_dtype = read > 0 && bf16 == read ? torch::kBFloat16 : torch::kFloat;
  for (const auto& [name, t] : weights)
    if (!used.count(name)) local.unexpected.push_back(name);
  if (report != nullptr) *report = local;
}

}  // namespace

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

// Copies `value` (a file's tensors as a map takes them) into `target` in blocks of about 16 MB of
// rows, each checked finite (check_finite, naming `what`) and, where it is a plain view of the
// file, given back once copied (release_file_pages): a large tensor of the file (Qwen2-0.5B's
// 545 MB embedding) is never resident whole beside the model's copy.
void copy_from_file(torch::Tensor& target, const torch::Tensor& value, const std::string& what) {
  if (value.dim() == 0 || value.size(0) == 0) {
    check_finite(value, what);
    target.copy_(value);
    return;
  }
  const int64_t rows = value.size(0);
  const int64_t row_bytes = std::max<int64_t>(1, value.numel() / rows * static_cast<int64_t>(value.element_size()));
  const int64_t block = std::max<int64_t>(1, (int64_t{16} << 20) / row_bytes);
  for (int64_t start = 0; start < rows; start += block) {
    const auto part = value.narrow(0, start, std::min(block, rows - start));
    try {
      check_finite(part, what);
    } catch (const std::runtime_error&) {
      check_finite(value, what);  // the message counts the whole tensor's
      throw;
    }
    target.narrow(0, start, part.size(0)).copy_(part);
    if (part.is_contiguous()) release_file_pages(part);
  }
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
  if (uses_zoo_layout(config)) {
    read_zoo_layout(model, weights, dir, report);
    return model;
  }
  const std::string base = base_prefix(config, weights);
  auto params = model.module()->named_parameters();
  std::set<std::string> used;
  std::vector<std::string> missing;
  size_t bf16_parts = 0, parts_read = 0;
  torch::NoGradGuard no_grad;
  for (const auto& map : tensor_maps(config, base)) {
    auto* target = params.find(map.zoo);
    TORCH_CHECK(target != nullptr, "import table names no parameter ", map.zoo);
    std::vector<torch::Tensor> parts;
    if (!map.whole.empty() && weights.count(map.whole) && !weights.count(map.hf.at(0))) {
      const auto& t = weights.at(map.whole);
      used.insert(map.whole);
      ++parts_read, bf16_parts += t.scalar_type() == torch::kBFloat16;
      if (t.sizes() != target->sizes()) {
        throw std::runtime_error(dir + ": tensor '" + map.whole + "' has shape " + shape(t) + " but zoo's " + map.zoo +
                                 " needs " + shape(*target));
      }
      copy_from_file(*target, t, dir + ": tensor '" + map.whole + "'");
      continue;
    }
    std::string found_names;
    for (const auto& name : map.hf) {
      std::string found;
      const torch::Tensor* t = find_weight(weights, name, &found);
      if (t == nullptr) {
        missing.push_back(name);
        continue;
      }
      used.insert(found);
      found_names += (found_names.empty() ? "" : " + ") + found;
      ++parts_read, bf16_parts += t->scalar_type() == torch::kBFloat16;
      parts.push_back(map.transpose ? t->t() : *t);
      if (map.of > 1) {
        if (t->dim() == 0 || t->size(0) % map.of != 0) {
          throw std::runtime_error(dir + ": tensor '" + found + "' has shape " + shape(*t) + ", not " +
                                   std::to_string(map.of) + " equal blocks of rows");
        }
        parts.back() = parts.back().chunk(map.of, 0)[static_cast<size_t>(map.block)];
      }
    }
    if (parts.size() != map.hf.size()) continue;
    auto value = parts.size() == 1 ? parts[0] : torch::cat(parts, 0);
    if (map.skip_rows > 0) {
      if (value.dim() == 0 || value.size(0) <= map.skip_rows) {
        throw std::runtime_error(dir + ": tensor '" + found_names + "' has shape " + shape(value) + ", not more than the " +
                                 std::to_string(map.skip_rows) + " rows before its first position");
      }
      value = value.narrow(0, map.skip_rows, value.size(0) - map.skip_rows);
    }
    if (map.stacked && value.numel() == target->numel()) value = value.view(target->sizes());
    if (value.sizes() != target->sizes()) {
      std::string names;
      for (const auto& n : map.hf) names += (names.empty() ? "" : " + ") + n;
      throw std::runtime_error(dir + ": tensor '" + names + "' has shape " + shape(value) +
                               (map.of > 1 ? " in block " + std::to_string(map.block + 1) + " of " + std::to_string(map.of)
                                           : std::string()) +
                               " but zoo's " + map.zoo + " needs " + shape(*target) +
                               (map.transpose ? " (after transposing Conv1D)" : ""));
    }
    copy_from_file(*target, value, dir + ": tensor '" + found_names + "'");
    for (const auto& part : parts) release_file_pages(part);  // the model holds them now
  }
  if (!missing.empty()) {
    throw std::runtime_error(dir + ": missing tensors the model needs: " + join(missing, ", ", 12));
  }
  HfImportReport local;
  local.stored_dtype = parts_read > 0 && bf16_parts == parts_read ? torch::kBFloat16 : torch::kFloat;
  for (const auto& [name, t] : weights) {
    if (used.count(name)) continue;
    (ignorable(name, config) ? local.ignored : local.unexpected).push_back(name);
  }
  if (report != nullptr) *report = local;
  return model;
}

std::string hf_base_prefix(const ModelConfig& c) {
  // The base model sits under "transformer." in GPT2LMHeadModel, under "bert." in BERT with a head
  // ("model." in ModernBERT's, "longformer." in Longformer's).
  const bool headed_bert = c.family == Family::kBert && c.head != BertHead::kNone;
  return c.family == Family::kGpt ? "transformer."
         : headed_bert ? (hf_modernbert_layout(c) ? "model." : hf_longformer_layout(c) ? "longformer." : "bert.")
                       : "";
}

std::vector<HfTensorMap> hf_tensor_maps(const ModelConfig& c) { return tensor_maps(c, hf_base_prefix(c)); }

void export_hf(const Model& model, const std::string& dir, const Tokenizer* tokenizer, torch::ScalarType dtype) {
  TORCH_CHECK(dtype == torch::kFloat || dtype == torch::kBFloat16, "export_hf writes float32 or bfloat16, not ", dtype);
  json hf = config_to_hf(model.config);
  hf["torch_dtype"] = dtype == torch::kBFloat16 ? "bfloat16" : "float32";
  auto params = model.module()->named_parameters();
  const auto& c = model.config;
  std::map<std::string, torch::Tensor> out;
  if (uses_zoo_layout(c)) {
    for (const auto& p : params) out[p.key()] = p.value().detach().to(torch::kCPU, dtype).contiguous();
    // Buffers drawn at random (performer features) travel too, in float32 whatever `dtype`.
    for (const auto& b : model.module()->named_buffers()) out[b.key()] = b.value().detach().to(torch::kCPU).contiguous();
  }
  std::map<std::string, std::vector<torch::Tensor>> blocks;  // tensors made of several parameters
  for (const auto& map : uses_zoo_layout(c) ? std::vector<HfTensorMap>{} : hf_tensor_maps(c)) {
    const auto* source = params.find(map.zoo);
    TORCH_CHECK(source != nullptr, "export table names no parameter ", map.zoo);
    auto value = source->detach().to(torch::kCPU, dtype);
    if (map.stacked) value = value.flatten(0, 1);  // the experts' rows, one after another
    if (map.skip_rows > 0) value = torch::cat({torch::zeros({map.skip_rows, value.size(1)}, value.options()), value});
    if (map.of > 1) {
      auto& parts = blocks[map.hf.at(0)];
      parts.resize(static_cast<size_t>(map.of));
      parts[static_cast<size_t>(map.block)] = value;
      continue;
    }
    const auto parts = map.rows.empty() ? value.chunk(static_cast<int64_t>(map.hf.size()), 0)
                                        : value.split_with_sizes(map.rows, 0);
    for (size_t i = 0; i < map.hf.size(); ++i) {
      out[map.hf[i]] = (map.transpose ? parts[i].t() : parts[i]).contiguous();
    }
  }
  for (const auto& [name, parts] : blocks) out[name] = torch::cat(parts, 0).contiguous();
  // Readers that expect the tied decoder of a BERT masked-LM head find it.
  if (hf_longformer_layout(c) && !uses_zoo_layout(c) && c.head == BertHead::kMaskedLM) {
    out["lm_head.decoder.weight"] = out.at("longformer.embeddings.word_embeddings.weight").clone();
    out["lm_head.decoder.bias"] = out.at("lm_head.bias").clone();
  } else if (model.config.family == Family::kBert && !hf_modernbert_layout(model.config) && !uses_zoo_layout(c) &&
      (model.config.head == BertHead::kMaskedLM || model.config.head == BertHead::kPretraining)) {
    out["cls.predictions.decoder.weight"] = out.at("bert.embeddings.word_embeddings.weight").clone();
    out["cls.predictions.decoder.bias"] = out.at("cls.predictions.bias").clone();
  }
  write_output_directory(dir, OutputKind::kHuggingFaceDirectory, [&](const std::string& tmp) {
    save_safetensors((fs::path(tmp) / "model.safetensors").string(), out, {{"format", "pt"}});
    if (tokenizer != nullptr) {
      tokenizer->save(tmp);
      const auto& s = tokenizer->special();
      for (const auto& [key, id] : {std::pair<const char*, std::optional<int64_t>>{"bos_token_id", s.bos},
                                    {"eos_token_id", s.eos}, {"pad_token_id", s.pad}}) {
        if (id) hf[key] = *id;
      }
    }
    write_file_atomically((fs::path(tmp) / "config.json").string(), hf.dump(2) + "\n");
  });
}

}  // namespace zoo
