#pragma once
// Hugging Face's config.json to and from zoo's ModelConfig, for the architectures zoo maps.
// No LibTorch here: the fuzz target reads config.json files alone.

#include <string>

#include <nlohmann/json.hpp>

#include "models/config.h"

namespace zoo {

// config.json -> ModelConfig. Throws ConfigError naming the file and the key for an unknown
// model_type, a missing key, a value of the wrong type or a setting zoo has no equivalent for.
ModelConfig config_from_hf(const nlohmann::json& config, const std::string& source);

// ModelConfig -> config.json, for configs with a Hugging Face equivalent; otherwise throws
// ConfigError saying which setting has none.
nlohmann::json config_to_hf(const ModelConfig& config);

// Whether the model's Hugging Face files are Phi-3's (Phi3ForCausalLM: q, k, v in one qkv_proj,
// gate and up in one gate_up_proj): imported from them, or rotating part of each head, or
// scaled by longrope, which Hugging Face has for Phi-3 alone. Export's model type and tensor
// table both ask this.
bool hf_phi3_layout(const ModelConfig& config);

// Whether a config's mixture of experts is laid out as Mixtral's (block_sparse_moe.experts.E.w1,
// w3, w2) rather than Qwen3-MoE's (mlp.experts.E.gate_proj, up_proj, down_proj): Qwen3-MoE's
// models norm their query and key heads, Mixtral's do not. Export's model type and tensor table
// both ask this.
bool hf_mixtral_layout(const ModelConfig& config);
// Whether a bert config is ModernBERT's (rotary positions) rather than BERT's.
bool hf_modernbert_layout(const ModelConfig& config);
// Whether a bert config is Longformer's (attention longformer).
bool hf_longformer_layout(const ModelConfig& config);
// Whether Hugging Face has no class for a config (linear attention layers, Linformer, Longformer
// with dilated heads or longformer_global_tokens), which then goes in zoo's own layout:
// config.json's model_type "zoo" with the model config, the tensors under zoo's own names.
// config_to_hf, export and import all ask this.
bool uses_zoo_layout(const ModelConfig& config);

}  // namespace zoo
